//! The state handle store (SEP-2567) on a real ledger: handles that cannot be guessed, bound
//! to their caller (another caller's handle reads exactly like an unknown one), expiring when
//! idle with an error that names the handle and the way back, atomic updates, and the bounds.

use std::collections::HashSet;
use std::sync::Arc;

use mcp_runtime::config::RuntimeConfig;
use mcp_runtime::ledger::Ledger;
use mcp_runtime::proto::handle::HandleKind;
use mcp_runtime::stores::handles::{HandleError, Handles, ListScope};
use serde_json::{Value, json};

fn store() -> Handles {
    Handles::new(&Ledger::memory(&RuntimeConfig::default()))
}

fn basket(ttl_secs: u64) -> HandleKind {
    HandleKind::new("bsk", "basket", "create_basket", ttl_secs, 1024, 5)
}

fn not_found(e: Result<Value, HandleError>) -> String {
    match e {
        Err(HandleError::NotFound(text)) => text,
        other => panic!("expected not found, got {other:?}"),
    }
}

#[tokio::test]
async fn handles_are_random_prefixed_and_never_repeat() {
    let s = store();
    let k = HandleKind::new("bsk", "basket", "create_basket", 60, 1024, 1000);
    let mut seen = HashSet::new();
    for _ in 0..500 {
        let h = s.create(&k, None, None, json!({})).await.unwrap();
        assert!(k.is_shaped(&h), "{h}");
        assert_eq!(h.len(), "bsk_".len() + 24, "144 random bits in 24 URL-safe characters");
        assert!(seen.insert(h), "no handle twice");
    }
    // 500 handles of 144 random bits: any two sharing their first 8 random characters (48 bits)
    // would already be a one-in-a-billion event.
    let prefixes: HashSet<String> = seen.iter().map(|h| h[4..12].to_owned()).collect();
    assert_eq!(prefixes.len(), 500);
}

#[tokio::test]
async fn another_callers_handle_reads_exactly_like_an_unknown_one() {
    let s = store();
    let k = basket(60);
    let h = s.create(&k, Some("alice"), None, json!({"items": ["shoes"]})).await.unwrap();
    assert_eq!(s.get(&k, Some("alice"), &h).await.unwrap(), json!({"items": ["shoes"]}));
    let foreign = not_found(s.get(&k, Some("bob"), &h).await);
    let unknown_handle = k.mint(&[7; 18]);
    let unknown = not_found(s.get(&k, Some("bob"), &unknown_handle).await);
    assert_eq!(
        foreign,
        unknown.replace(&unknown_handle, &h),
        "same words, only the handle differs"
    );
    assert!(matches!(
        s.update(&k, Some("bob"), &h, |_| Ok::<_, String>(())).await,
        Err(HandleError::NotFound(_))
    ));
    assert!(matches!(s.destroy(&k, Some("bob"), &h).await, Err(HandleError::NotFound(_))));
    assert!(
        matches!(s.destroy(&k, None, &h).await, Err(HandleError::NotFound(_))),
        "no caller is not alice either"
    );
    assert!(s.list(&k, Some("bob"), ListScope::All).await.unwrap().is_empty());
    assert_eq!(
        s.list(&k, Some("alice"), ListScope::All).await.unwrap(),
        vec![(h.clone(), json!({"items": ["shoes"]}))],
        "the owner's list gives the handle back"
    );
    // A handle of another kind, or no handle at all, is unknown too.
    let cart = HandleKind::new("cart", "cart", "create_cart", 60, 1024, 5);
    assert!(matches!(s.get(&cart, Some("alice"), &h).await, Err(HandleError::NotFound(_))));
    assert!(matches!(
        s.get(&k, Some("alice"), "bsk_../../etc").await,
        Err(HandleError::NotFound(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn an_idle_handle_expires_and_its_error_names_it_and_the_way_back() {
    let ledger = Ledger::memory(&RuntimeConfig::default());
    let s = Handles::new(&ledger);
    let k = basket(30);
    let used = s.create(&k, None, None, json!(1)).await.unwrap();
    let idle = s.create(&k, None, None, json!(2)).await.unwrap();
    for _ in 0..3 {
        tokio::time::advance(std::time::Duration::from_secs(20)).await;
        // Each use moves the expiry: 60 s after creation, the used one lives on.
        assert_eq!(s.get(&k, None, &used).await.unwrap(), json!(1));
        // The use is recorded in the background: wait until it is committed.
        ledger.writer.barrier().await.unwrap();
    }
    let text = not_found(s.get(&k, None, &idle).await);
    assert!(text.contains(&format!("{idle:?}")), "names the handle: {text}");
    assert!(
        text.contains("30 seconds") && text.contains("Call create_basket"),
        "says why and how to recover: {text}"
    );
    assert_eq!(
        s.list(&k, None, ListScope::All).await.unwrap().len(),
        1,
        "the expired one is not listed"
    );
}

#[tokio::test]
async fn concurrent_updates_of_one_handle_lose_nothing() {
    let s = Arc::new(store());
    let k = Arc::new(basket(60));
    let h = s.create(&k, None, None, json!({"items": []})).await.unwrap();
    let adds = (0..50).map(|i| {
        let (s, k, h) = (Arc::clone(&s), Arc::clone(&k), h.clone());
        tokio::spawn(async move {
            s.update(&k, None, &h, |v| {
                v["items"].as_array_mut().ok_or("not a list")?.push(json!(i));
                Ok::<_, String>(())
            })
            .await
        })
    });
    for a in adds.collect::<Vec<_>>() {
        a.await.unwrap().unwrap();
    }
    let items = s.get(&k, None, &h).await.unwrap()["items"].as_array().unwrap().len();
    assert_eq!(items, 50, "every add kept");
}

#[tokio::test]
async fn size_and_count_bounds_and_a_refused_change_leave_everything_as_it_was() {
    let s = store();
    let k = basket(60);
    assert!(
        matches!(s.create(&k, None, None, json!("x".repeat(2000))).await, Err(HandleError::TooLarge(t)) if t.contains("1024"))
    );
    let h = s.create(&k, None, None, json!("small")).await.unwrap();
    assert!(matches!(
        s.update(&k, None, &h, |v| {
            *v = json!("y".repeat(2000));
            Ok::<_, String>(())
        })
        .await,
        Err(HandleError::TooLarge(_))
    ));
    assert!(
        matches!(s.update(&k, None, &h, |v| { *v = json!("changed"); Err::<(), _>("no".to_owned()) }).await, Err(HandleError::Refused(r)) if r == "no")
    );
    assert_eq!(s.get(&k, None, &h).await.unwrap(), json!("small"), "neither change was kept");
    for _ in 0..4 {
        s.create(&k, None, None, json!({})).await.unwrap();
    }
    match s.create(&k, None, None, json!({})).await {
        Err(HandleError::TooMany(t)) => assert!(t.contains("5 baskets"), "{t}"),
        other => panic!("the sixth basket: {other:?}"),
    }
    assert!(
        s.create(&k, Some("someone else"), None, json!({})).await.is_ok(),
        "the bound is per caller"
    );
    s.destroy(&k, None, &h).await.unwrap();
    assert!(s.create(&k, None, None, json!({})).await.is_ok(), "a destroyed one frees its place");
    assert!(matches!(s.get(&k, None, &h).await, Err(HandleError::NotFound(_))), "and is unknown");
}

/// Reads racing updates and a destroy of one handle: a read records the use (it rewrites the
/// record), and that write must never put back an older value or a destroyed handle.
#[tokio::test(start_paused = true)]
async fn reads_racing_updates_and_a_destroy_never_put_an_older_value_or_the_handle_back() {
    let ledger = Ledger::memory(&RuntimeConfig::default());
    let s = Arc::new(Handles::new(&ledger));
    let k = Arc::new(basket(60));
    let h = s.create(&k, None, None, json!({"items": []})).await.unwrap();
    for i in 0..20 {
        // Later than the last recorded use by more than the touch slack: each read records
        // its use.
        tokio::time::advance(std::time::Duration::from_secs(2)).await;
        let (s1, k1, h1) = (Arc::clone(&s), Arc::clone(&k), h.clone());
        let add = tokio::spawn(async move {
            s1.update(&k1, None, &h1, |v| {
                v["items"].as_array_mut().ok_or("not a list")?.push(json!(i));
                Ok::<_, String>(())
            })
            .await
        });
        let (s2, k2, h2) = (Arc::clone(&s), Arc::clone(&k), h.clone());
        let read = tokio::spawn(async move { s2.get(&k2, None, &h2).await });
        add.await.unwrap().unwrap();
        read.await.unwrap().unwrap();
        ledger.writer.barrier().await.unwrap();
    }
    let items = s.get(&k, None, &h).await.unwrap()["items"].as_array().unwrap().len();
    assert_eq!(items, 20, "no read put an older value back");

    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    let (s1, k1, h1) = (Arc::clone(&s), Arc::clone(&k), h.clone());
    let destroy = tokio::spawn(async move { s1.destroy(&k1, None, &h1).await });
    let reads: Vec<_> = (0..5)
        .map(|_| {
            let (s2, k2, h2) = (Arc::clone(&s), Arc::clone(&k), h.clone());
            tokio::spawn(async move { s2.get(&k2, None, &h2).await })
        })
        .collect();
    destroy.await.unwrap().unwrap();
    for r in reads {
        let _ = r.await.unwrap();
    }
    ledger.writer.barrier().await.unwrap();
    assert!(
        matches!(s.get(&k, None, &h).await, Err(HandleError::NotFound(_))),
        "the destroyed handle stays gone"
    );
    assert!(s.list(&k, None, ListScope::All).await.unwrap().is_empty(), "and is not listed");
}

#[tokio::test(start_paused = true)]
async fn a_read_soon_after_a_use_is_not_recorded_and_the_handle_never_expires_early() {
    let ledger = Ledger::memory(&RuntimeConfig::default());
    let s = Handles::new(&ledger);
    let k = basket(8);
    assert_eq!(k.touch_slack_ms(), 1000);
    let h = s.create(&k, None, None, json!(1)).await.unwrap();
    ledger.writer.barrier().await.unwrap();
    let committed = ledger.writer.snapshot().ops;
    // Within the slack of the last recorded use: a read writes nothing.
    tokio::time::advance(std::time::Duration::from_millis(500)).await;
    s.get(&k, None, &h).await.unwrap();
    ledger.writer.barrier().await.unwrap();
    assert_eq!(ledger.writer.snapshot().ops, committed, "a read this soon is not a write");
    // 8 s after the last recorded use (the creation), though the read at 0.5 s was not
    // recorded: still there.
    tokio::time::advance(std::time::Duration::from_millis(7_600)).await;
    assert_eq!(
        s.get(&k, None, &h).await.unwrap(),
        json!(1),
        "never sooner than its TTL after a use"
    );
}

#[tokio::test]
async fn a_list_shows_an_authenticated_caller_all_an_anonymous_one_its_sessions_and_outside_a_session_nothing()
 {
    let s = store();
    let k = basket(60);
    let (one, two, before_rotation): (Arc<str>, Arc<str>, Arc<str>) =
        ("1".repeat(32).into(), "2".repeat(32).into(), "0".repeat(32).into());
    let h1 = s.create(&k, None, Some(&one), json!(1)).await.unwrap();
    let h2 = s.create(&k, None, Some(&two), json!(2)).await.unwrap();
    let old = s.create(&k, None, Some(&before_rotation), json!(0)).await.unwrap();
    let outside = s.create(&k, None, None, json!(3)).await.unwrap();
    let listed = |v: Vec<(String, Value)>| {
        let mut ids: Vec<String> = v.into_iter().map(|(h, _)| h).collect();
        ids.sort();
        ids
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(
        listed(s.list(&k, None, ListScope::Session(&[Arc::clone(&one)])).await.unwrap()),
        vec![h1.clone()]
    );
    assert_eq!(
        listed(
            s.list(&k, None, ListScope::Session(&[Arc::clone(&two), Arc::clone(&before_rotation)]))
                .await
                .unwrap()
        ),
        sorted(vec![h2.clone(), old.clone()]),
        "its names under previous keys too"
    );
    assert!(s.list(&k, None, ListScope::Nothing).await.unwrap().is_empty());
    assert_eq!(
        listed(s.list(&k, None, ListScope::All).await.unwrap()),
        sorted(vec![h1.clone(), h2.clone(), old, outside.clone()])
    );
    // Every handle is still usable by id, whichever session made it.
    for (h, v) in [(&h1, 1), (&h2, 2), (&outside, 3)] {
        assert_eq!(s.get(&k, None, h).await.unwrap(), json!(v));
    }
}
