//! The store across a key rotation, and unsealing that verifies what it decodes.

use serde_json::json;

use super::*;

const OLD: &[u8] = &[0xab; 16];
const NEW: &[u8] = &[0xcd; 16];

fn basket() -> HandleKind {
    HandleKind::new("bsk", "basket", "create_basket", 1800, 1024, 8)
}

fn sorted(mut v: Vec<(String, Value)>) -> Vec<(String, Value)> {
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn stored(l: &Ledger, name: &str) -> Option<Bytes> {
    l.writer.store().get(&codec::handle_key(name), l.clock.now().0).unwrap()
}

#[tokio::test]
async fn handles_made_before_a_key_rotation_are_found_listed_and_moved_by_their_next_write() {
    let dir = mcp_devtools::TempDir::new("handles-rotation");
    let k = basket();
    let alice = Some("alice");
    let (h1, h2) = {
        let l = Ledger::sqlite_for_tests(&dir, OLD, &[]);
        let hs = Handles::new(&l);
        (
            hs.create(&k, alice, None, json!({"n": 1})).await.unwrap(),
            hs.create(&k, alice, None, json!({"n": 2})).await.unwrap(),
        )
    };
    let l = Ledger::sqlite_for_tests(&dir, NEW, &[OLD]);
    let hs = Handles::new(&l);
    let before = sorted(vec![(h1.clone(), json!({"n": 1})), (h2.clone(), json!({"n": 2}))]);
    assert_eq!(
        sorted(hs.list(&k, alice, ListScope::All).await.unwrap()),
        before,
        "the same handles, not what another key unseals"
    );
    assert!(
        matches!(hs.get(&k, Some("bob"), &h1).await, Err(HandleError::NotFound(_))),
        "still bound to its caller"
    );

    // A use moves h1, an update moves h2: each under its current name only.
    assert_eq!(hs.get(&k, alice, &h1).await.unwrap(), json!({"n": 1}));
    hs.update(&k, alice, &h2, |v| {
        v["n"] = json!(3);
        Ok(())
    })
    .await
    .unwrap();
    l.writer.barrier().await.unwrap();
    for h in [&h1, &h2] {
        assert!(
            stored(&l, &hs.id(h)).is_some()
                && stored(&l, &ledger_name(&hs.previous[0].0, h)).is_none(),
            "{h} moved"
        );
    }
    let after = sorted(vec![(h1.clone(), json!({"n": 1})), (h2.clone(), json!({"n": 3}))]);
    assert_eq!(
        sorted(hs.list(&k, alice, ListScope::All).await.unwrap()),
        after,
        "listed once each"
    );
    drop((hs, l));

    // Moved: found with the new key alone.
    let l = Ledger::sqlite_for_tests(&dir, NEW, &[]);
    let hs = Handles::new(&l);
    assert_eq!(sorted(hs.list(&k, alice, ListScope::All).await.unwrap()), after);
    hs.destroy(&k, alice, &h1).await.unwrap();
    assert!(matches!(hs.get(&k, alice, &h1).await, Err(HandleError::NotFound(_))));
}

#[tokio::test]
async fn a_handle_not_yet_moved_is_destroyed_under_its_previous_name() {
    let dir = mcp_devtools::TempDir::new("handles-rotation-destroy");
    let k = basket();
    let h = {
        let l = Ledger::sqlite_for_tests(&dir, OLD, &[]);
        Handles::new(&l).create(&k, None, None, json!({})).await.unwrap()
    };
    let l = Ledger::sqlite_for_tests(&dir, NEW, &[OLD]);
    let hs = Handles::new(&l);
    hs.destroy(&k, None, &h).await.unwrap();
    assert!(matches!(hs.get(&k, None, &h).await, Err(HandleError::NotFound(_))));
    assert!(hs.list(&k, None, ListScope::All).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_listed_record_whose_unsealed_handle_does_not_name_it_is_skipped() {
    let dir = mcp_devtools::TempDir::new("handles-unseal");
    let k = basket();
    let l = Ledger::sqlite_for_tests(&dir, OLD, &[]);
    let hs = Handles::new(&l);
    let h = hs.create(&k, None, None, json!({"n": 1})).await.unwrap();
    // The same record under another name: its seal unseals to a handle that name is not the
    // HMAC of, under any key.
    let other = "00".repeat(16);
    let expires_ms = l.clock.now().0 + 3_600_000;
    let copy = vec![
        Op::Put {
            key: codec::handle_key(&other),
            value: stored(&l, &hs.id(&h)).unwrap(),
            expires_ms,
        },
        Op::IndexAdd {
            index: codec::handles_index(k.prefix, None),
            member: other,
            score: expires_ms,
            expires_ms,
        },
    ];
    l.writer.submit_acked(copy).await.unwrap();
    assert_eq!(hs.list(&k, None, ListScope::All).await.unwrap(), vec![(h, json!({"n": 1}))]);
}
