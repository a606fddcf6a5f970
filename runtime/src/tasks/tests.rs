//! Tasks across a key rotation.

use super::*;

const OLD: &[u8] = &[0xab; 16];
const NEW: &[u8] = &[0xcd; 16];

fn settings() -> TaskSettings {
    TaskSettings { ttl_ms: 3_600_000, poll_ms: 1_000, max_per_caller: 4, max_kept_per_caller: 16, max_result_bytes: 1 << 20, bytes_per_caller: 1 << 30, bytes_total: 1 << 32 }
}

#[tokio::test]
async fn tasks_recorded_before_a_key_rotation_are_found_and_read_after_it() {
    let dir = mcp_devtools::TempDir::new("tasks-rotation");
    let alice: Option<Arc<str>> = Some("alice".into());
    let (done, running) = {
        let l = Ledger::sqlite_for_tests(&dir, OLD, &[]);
        let t = Tasks::new(&l, settings());
        let done = t.create(t.reserve(alice.clone()).unwrap(), "job", CancellationToken::new()).await.unwrap();
        t.finish(&done, Ok(json!({"content": [{"type": "text", "text": "done"}]}))).await;
        // Left working: its process is gone (as after a kill).
        let running = t.create(t.reserve(alice.clone()).unwrap(), "job", CancellationToken::new()).await.unwrap();
        l.writer.barrier().await.unwrap();
        (done.id().to_owned(), running.id().to_owned())
    };
    let l = Ledger::sqlite_for_tests(&dir, NEW, &[OLD]);
    let t = Tasks::new(&l, settings());
    let v = t.get(alice.as_deref(), &done).await.unwrap();
    assert_eq!((v.status, v.result.unwrap()["content"][0]["text"].clone()), (TaskStatus::Completed, json!("done")));
    assert_eq!(t.get(Some("bob"), &done).await, Err(TaskError::NotFound), "still bound to its caller");
    let v = t.get(alice.as_deref(), &running).await.unwrap();
    assert_eq!(v.status, TaskStatus::Failed, "interrupted, recorded where it was found");
    l.writer.barrier().await.unwrap();
    assert_eq!(t.get(alice.as_deref(), &running).await.unwrap().status_message, v.status_message);
    drop((t, l));
    let l = Ledger::sqlite_for_tests(&dir, NEW, &[]);
    assert_eq!(Tasks::new(&l, settings()).get(alice.as_deref(), &done).await, Err(TaskError::NotFound), "without the previous key listed");
}

#[tokio::test]
async fn kept_tasks_are_bounded_by_bytes_per_caller_and_in_total() {
    let l = Ledger::memory(&crate::config::RuntimeConfig::default());
    let t = Tasks::new(&l, TaskSettings { max_per_caller: 4, max_kept_per_caller: 1000, bytes_per_caller: 64 << 10, bytes_total: 100 << 10, ..settings() });
    let result = json!({"content": [{"type": "text", "text": "z".repeat(10 << 10)}]});
    let keep = |owner: &'static str| {
        let (t, result) = (&t, result.clone());
        async move {
            let mut kept = 0;
            loop {
                match t.reserve(Some(owner.into())) {
                    Ok(slot) => {
                        let run = t.create(slot, "job", CancellationToken::new()).await.unwrap();
                        t.finish(&run, Ok(result.clone())).await;
                        kept += 1;
                        assert!(kept < 100, "never bounded");
                    }
                    Err(no_room) => return (kept, no_room),
                }
            }
        }
    };
    let (alice, why) = keep("alice").await;
    assert!(matches!(why, NoRoom::Kept { retry_after_s } if retry_after_s > 3000), "{why:?}");
    assert!((6..=7).contains(&alice), "64 KiB keeps six or seven results of 10 KiB: {alice}");
    let (bob, why) = keep("bob").await;
    assert!(matches!(why, NoRoom::Full { .. }), "the total is reached before bob's share: {why:?}");
    assert!(bob >= 2 && alice + bob <= 11, "{alice} + {bob}");
    assert_eq!(t.kept(Some("alice")).0.0, alice as u64);
}
