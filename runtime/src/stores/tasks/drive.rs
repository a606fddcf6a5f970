//! A task's run in the background: its handler to its end, or the end a cancellation, a
//! drain or its expiry puts to it, recorded.

use std::future::Future;
use std::sync::Arc;

use super::{Run, Tasks};
use crate::proto::jsonrpc::{ErrorObject, Reply};
use crate::tools::BoxFuture;

/// Run a task's `handler` to its end, unless it is cancelled (`tasks/cancel` recorded that),
/// `ended` resolves first (the drain's or rollback's grace period is over: it is interrupted),
/// or it reaches `tasks.ttl_secs` (then it expires). A handler that panics leaves its task
/// `failed`. `memory` (the request's charge: its handler holds the arguments) is given back
/// with the handler; `in_flight` (what a drain waits for) once the end is recorded, or the
/// ledger failed to record it for `ledger.commit_wait_ms` (it stays running in `Tasks` then).
pub(crate) async fn drive<M, G>(
    tasks: Arc<Tasks>,
    run: Arc<Run>,
    mut handler: BoxFuture<Result<Reply, ErrorObject>>,
    ended: impl Future<Output = ()>,
    memory: M,
    in_flight: G,
) {
    // Given back in this order however the run ends (a panic or a dropped run included): the
    // memory first, what a drain waits for last.
    let mut held = Held { memory: Some(memory), in_flight: Some(in_flight) };
    let mut unfinished = Unfinished(Some((Arc::clone(&tasks), Arc::clone(&run))));
    let outcome = tokio::select! {
        r = &mut handler => Some(r),
        // `tasks/cancel` (or the interruption or expiry below) recorded the end already; a
        // tool that cancelled its own token did not: its task is failed, not left working.
        () = run.cancellation().cancelled() => {
            tasks.abandon(&run).await;
            None
        }
        () = ended => {
            tasks.interrupt(&run).await;
            None
        }
        () = tokio::time::sleep(tasks.time_left(&run)) => {
            tasks.expire(&run).await;
            None
        }
    };
    // The tool's future goes first (its token has fired when it did not finish).
    drop(handler);
    held.memory = None;
    if let Some(r) = outcome {
        // As a value: the task keeps it.
        tasks.finish(&run, r.and_then(Reply::into_value)).await;
    }
    unfinished.0 = None;
    held.in_flight = None;
}

/// What a task's run holds for its request; fields drop in their order.
struct Held<M, G> {
    memory: Option<M>,
    in_flight: Option<G>,
}

/// A task's run that did not reach its end (its handler panicked, or the runtime dropped
/// it): the task is recorded `failed` rather than left `working` until it expires.
struct Unfinished(Option<(Arc<Tasks>, Arc<Run>)>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some((tasks, run)) = self.0.take().filter(|(_, run)| !run.is_final()) {
            actix_rt::spawn(async move { tasks.abandon(&run).await });
        }
    }
}
