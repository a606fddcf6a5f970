//! Tasks across a key rotation.

use super::*;

const OLD: &[u8] = &[0xab; 16];
const NEW: &[u8] = &[0xcd; 16];

fn settings() -> TaskSettings {
    TaskSettings {
        ttl_ms: 3_600_000,
        poll_ms: 1_000,
        max_per_caller: 4,
        max_kept_per_caller: 16,
        max_result_bytes: 1 << 20,
        bytes_per_caller: 1 << 30,
        bytes_total: 1 << 32,
    }
}

#[tokio::test]
async fn tasks_recorded_before_a_key_rotation_are_found_and_read_after_it() {
    let dir = mcp_devtools::TempDir::new("tasks-rotation");
    let alice: Option<Arc<str>> = Some("alice".into());
    let (done, running) = {
        let l = Ledger::sqlite_for_tests(&dir, OLD, &[]);
        let t = Tasks::new(&l, settings());
        let done = t
            .create(t.reserve(alice.clone()).unwrap(), "job", CancellationToken::new())
            .await
            .unwrap();
        t.finish(&done, Ok(json!({"content": [{"type": "text", "text": "done"}]}))).await;
        // Left working: its process is gone (as after a kill).
        let running = t
            .create(t.reserve(alice.clone()).unwrap(), "job", CancellationToken::new())
            .await
            .unwrap();
        l.writer.barrier().await.unwrap();
        (done.id().to_owned(), running.id().to_owned())
    };
    let l = Ledger::sqlite_for_tests(&dir, NEW, &[OLD]);
    let t = Tasks::new(&l, settings());
    let v = t.get(alice.as_deref(), &done).await.unwrap();
    assert_eq!(
        (v.status, v.result.unwrap()["content"][0]["text"].clone()),
        (TaskStatus::Completed, json!("done"))
    );
    assert_eq!(
        t.get(Some("bob"), &done).await,
        Err(TaskError::NotFound),
        "still bound to its caller"
    );
    let v = t.get(alice.as_deref(), &running).await.unwrap();
    assert_eq!(v.status, TaskStatus::Failed, "interrupted, recorded where it was found");
    l.writer.barrier().await.unwrap();
    assert_eq!(t.get(alice.as_deref(), &running).await.unwrap().status_message, v.status_message);
    drop((t, l));
    let l = Ledger::sqlite_for_tests(&dir, NEW, &[]);
    assert_eq!(
        Tasks::new(&l, settings()).get(alice.as_deref(), &done).await,
        Err(TaskError::NotFound),
        "without the previous key listed"
    );
}

#[tokio::test]
async fn kept_tasks_are_bounded_by_bytes_per_caller_and_in_total() {
    let l = Ledger::memory(&crate::config::RuntimeConfig::default());
    let t = Tasks::new(
        &l,
        TaskSettings {
            max_per_caller: 4,
            max_kept_per_caller: 1000,
            bytes_per_caller: 64 << 10,
            bytes_total: 100 << 10,
            ..settings()
        },
    );
    let result = json!({"content": [{"type": "text", "text": "z".repeat(10 << 10)}]});
    // Tasks of `owner` until one is refused: (results kept, results not kept, why refused).
    let keep = |owner: &'static str| {
        let (t, result) = (&t, result.clone());
        async move {
            let (mut kept, mut not_kept) = (0, 0);
            loop {
                match t.reserve(Some(owner.into())) {
                    Ok(slot) => {
                        let run = t.create(slot, "job", CancellationToken::new()).await.unwrap();
                        t.finish(&run, Ok(result.clone())).await;
                        let v = t.get(Some(owner), run.id()).await.unwrap();
                        if v.result.as_ref().is_some_and(|r| r["isError"] == true) {
                            not_kept += 1
                        } else {
                            kept += 1
                        }
                        assert!(kept + not_kept < 200, "never bounded");
                    }
                    Err(no_room) => return (kept, not_kept, no_room),
                }
            }
        }
    };
    let (alice, alice_not_kept, why) = keep("alice").await;
    assert!(matches!(why, NoRoom::Kept { retry_after_s } if retry_after_s > 3000), "{why:?}");
    assert_eq!(alice, 6, "64 KiB keeps six results of 10 KiB with their records");
    assert!(
        alice_not_kept > 0,
        "past the bound a task's result is not kept, then its place is refused"
    );
    assert!(
        t.kept(Some("alice")).0.1 <= 64 << 10,
        "never past the bound: {:?}",
        t.kept(Some("alice"))
    );
    let (bob, _, why) = keep("bob").await;
    assert!(matches!(why, NoRoom::Full { .. } | NoRoom::Kept { .. }), "{why:?}");
    assert!(bob >= 2, "bob keeps what is left of the total: {bob}");
    assert!(
        t.kept(None).1.1 <= 100 << 10,
        "every caller together never past the total: {:?}",
        t.kept(None)
    );
}

/// A task's outcome (finished, or cancelled) is shown only once its record is committed: a
/// kill before the commit would read it back as interrupted, so a `tasks/get` meanwhile
/// answers the state before it.
#[tokio::test]
async fn an_outcome_is_shown_only_once_its_record_is_committed() {
    use std::sync::atomic::Ordering;
    let store = Arc::new(crate::ledger::faulty::Refusing::default());
    let l = Ledger::on_store(
        Arc::clone(&store) as Arc<dyn crate::ledger::Store>,
        &crate::config::RuntimeConfig::default(),
    )
    .unwrap();
    let t = Arc::new(Tasks::new(&l, settings()));
    let alice: Option<Arc<str>> = Some("alice".into());
    let mut runs = Vec::new();
    for _ in 0..2 {
        let run = t.create(t.reserve(alice.clone()).unwrap(), "job", CancellationToken::new());
        runs.push(run.await.unwrap());
    }
    let (finished, cancelled) = (Arc::clone(&runs[0]), runs[1].id().to_owned());
    let stall = store.stall();
    let tried = store.attempts.load(Ordering::Relaxed);
    let ending = {
        let (t, a) = (Arc::clone(&t), alice.clone());
        tokio::spawn(async move {
            t.finish(&finished, Ok(json!({"content": []}))).await;
            t.cancel(a.as_deref(), &cancelled).await
        })
    };
    // The finish's record is being written (the store holds it).
    crate::ledger::faulty::settle_until(|| store.attempts.load(Ordering::Relaxed) > tried).await;
    assert!(store.attempts.load(Ordering::Relaxed) > tried, "the finish's record was submitted");
    let v = t.get(alice.as_deref(), runs[0].id()).await.unwrap();
    assert_eq!(v.status, TaskStatus::Working, "not yet committed: {v:?}");
    assert!(v.result.is_none());
    // A cancel now is not acknowledged before the outcome it leaves as it is is recorded.
    let late_cancel = {
        let (t, a, id) = (Arc::clone(&t), alice.clone(), runs[0].id().to_owned());
        tokio::spawn(async move { t.cancel(a.as_deref(), &id).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!late_cancel.is_finished(), "acknowledged before the outcome was recorded");
    stall.release();
    late_cancel.await.unwrap().unwrap();
    ending.await.unwrap().unwrap();
    let v = t.get(alice.as_deref(), runs[0].id()).await.unwrap();
    assert_eq!(v.status, TaskStatus::Completed);
    assert_eq!(t.get(alice.as_deref(), runs[1].id()).await.unwrap().status, TaskStatus::Cancelled);
    // Cancelled while its record is held: shown as working until it commits.
    let run = t.create(t.reserve(alice.clone()).unwrap(), "job", CancellationToken::new());
    let run = run.await.unwrap();
    let stall = store.stall();
    let tried = store.attempts.load(Ordering::Relaxed);
    let cancelling = {
        let (t, a, id) = (Arc::clone(&t), alice.clone(), run.id().to_owned());
        tokio::spawn(async move { t.cancel(a.as_deref(), &id).await })
    };
    crate::ledger::faulty::settle_until(|| store.attempts.load(Ordering::Relaxed) > tried).await;
    assert!(run.is_final(), "the cancellation took effect at once");
    let v = t.get(alice.as_deref(), run.id()).await.unwrap();
    assert_eq!(v.status, TaskStatus::Working, "not yet committed: {v:?}");
    stall.release();
    cancelling.await.unwrap().unwrap();
    assert_eq!(t.get(alice.as_deref(), run.id()).await.unwrap().status, TaskStatus::Cancelled);
}

/// A finished task whose record the ledger cannot take yet stays running here (shown as it
/// was) until it can: never answered as interrupted, then as completed once the ledger heals;
/// a cancel meanwhile is not acknowledged as if the task had ended.
#[tokio::test]
async fn a_task_whose_outcome_the_ledger_cannot_record_yet_stays_running_until_it_can() {
    use std::sync::atomic::Ordering;
    let store = Arc::new(crate::ledger::faulty::Refusing::default());
    let mut cfg = crate::config::RuntimeConfig::default();
    cfg.ledger.commit_wait_ms = 200;
    let l = Ledger::on_store(Arc::clone(&store) as Arc<dyn crate::ledger::Store>, &cfg).unwrap();
    let t = Tasks::new(&l, settings());
    let alice: Option<Arc<str>> = Some("alice".into());
    let run = t.create(t.reserve(alice.clone()).unwrap(), "job", CancellationToken::new());
    let run = run.await.unwrap();
    store.full.store(true, Ordering::Release);
    // Gives up waiting after the commit wait; the record stays queued.
    t.finish(&run, Ok(json!({"content": []}))).await;
    let v = t.get(alice.as_deref(), run.id()).await.unwrap();
    assert_eq!(v.status, TaskStatus::Working, "{v:?}");
    assert_eq!(
        t.cancel(alice.as_deref(), run.id()).await,
        Err(TaskError::Unavailable),
        "its end is not recorded yet"
    );
    store.full.store(false, Ordering::Release);
    let mut seen = Vec::new();
    for _ in 0..400 {
        let v = t.get(alice.as_deref(), run.id()).await.unwrap();
        seen.push(v.status);
        if v.status.is_final() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(seen.last(), Some(&TaskStatus::Completed), "{seen:?}");
    assert!(seen[..seen.len() - 1].iter().all(|s| *s == TaskStatus::Working), "{seen:?}");
    assert_eq!(t.cancel(alice.as_deref(), run.id()).await, Ok(()), "ended: left as it is");
}

#[tokio::test]
async fn a_result_too_deep_to_read_back_is_not_kept_and_its_task_read_after_a_restart() {
    let dir = mcp_devtools::TempDir::new("tasks-deep");
    let alice: Option<Arc<str>> = Some("alice".into());
    let deep = crate::proto::jsonrpc::nested_arrays(crate::ledger::codec::KEPT_DEPTH_MAX);
    let id = {
        let l = Ledger::sqlite_for_tests(&dir, OLD, &[]);
        let t = Tasks::new(&l, settings());
        let run = t
            .create(t.reserve(alice.clone()).unwrap(), "job", CancellationToken::new())
            .await
            .unwrap();
        t.finish(&run, Ok(json!({"structuredContent": deep}))).await;
        l.writer.barrier().await.unwrap();
        run.id().to_owned()
    };
    // Read back from its record (kept, it could not be: past serde_json's depth).
    let l = Ledger::sqlite_for_tests(&dir, OLD, &[]);
    let v = Tasks::new(&l, settings()).get(alice.as_deref(), &id).await.unwrap();
    assert_eq!(v.status, TaskStatus::Completed);
    let result = v.result.unwrap();
    assert_eq!(result["isError"], json!(true));
    assert!(result["content"][0]["text"].as_str().unwrap().contains("levels deep"), "{result}");
}
