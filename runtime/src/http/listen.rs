//! `subscriptions/listen` over HTTP (2026-07-28, SPEC.md §3.7): one SSE stream per
//! subscription, fed by a task of its own. The rules (acknowledgement first, the honoured
//! filter, `subscriptionId` on every frame, coalescing, the completion result) are
//! [`Subscription`]'s; this module moves its frames to the connection and feeds it the
//! catalog's changes and the lifecycle.
//!
//! Bounds: a place among `modern.listen_max` and the caller's `modern.listen_per_caller`,
//! held by the task; a queue of [`FRAME_QUEUE`] frames to the connection (a reader that stops
//! reading stalls only its own task, whose list changes coalesce meanwhile and whose missed
//! resource updates become "read every subscribed URI again"); a reader that has not taken a
//! frame for two keep-alive periods is dropped (the stream ends without a completion: the
//! client may reconnect). The task ends when the client closes the stream (the queue's
//! receiver is dropped with the response body), and on a drain or stop, after the completion
//! result.

use std::sync::Arc;

use actix_web::HttpResponse;
use bytes::Bytes;
use tokio::sync::{broadcast, watch};

use crate::actor::queue::{QueueRx, QueueTx, write_queue};
use crate::actor::{Lifecycle, Phase, QuotaKey, Supervisor};
use crate::proto::admission::ReplyMode;
use crate::proto::error::Rejection;
use crate::proto::ids::JsonRpcId;
use crate::proto::stateless::ModernError;
use crate::proto::stateless::listen::{Filter, FilterLimits, Subscription};
use crate::stats::{ListenPlace, RuntimeStats};
use crate::tools::ChangeFeed;

/// Frames waiting for a listen stream's connection.
const FRAME_QUEUE: usize = 16;

/// Open a subscription for the admitted modern request `id`.
///
/// # Errors
/// 406 for a client that does not accept SSE; `-32602` for a malformed filter; 503 / 429 when
/// the server's or the caller's listen places are taken; 503 while draining. Each echoes `id`.
pub(super) fn open(
    sup: &Arc<Supervisor>,
    caller: QuotaKey,
    id: JsonRpcId,
    params: Option<&serde_json::Value>,
    reply: ReplyMode,
) -> Result<HttpResponse, Rejection> {
    if reply == ReplyMode::Json {
        return Err(Rejection::NotAcceptable.with_id(&id));
    }
    let cfg = sup.config();
    let limits = FilterLimits {
        max_uris: cfg.modern.listen_max_uris,
        max_uri_bytes: cfg.limits.uri_max_bytes,
    };
    let filter = Filter::parse(params, limits).map_err(|why| Rejection::Modern {
        error: ModernError::InvalidInput(why),
        id: Some(id.clone()),
    })?;
    let place = sup
        .stats()
        .listen_enter(caller, cfg.modern.listen_max, cfg.modern.listen_per_caller)
        .map_err(|r| r.with_id(&id))?;
    let catalog = sup.catalog();
    let changes = catalog.changes();
    let honoured = filter.honoured(&changes.offered(), |uri| catalog.has_resource(uri));
    let mut feed = changes.feed();
    let now = *feed.lists.borrow_and_update();
    let sub = Subscription::new(id, honoured, now, catalog.server_info().clone());
    let (tx, rx) = write_queue(FRAME_QUEUE);
    let keepalive = std::time::Duration::from_millis(cfg.sse.keepalive_ms);
    actix_rt::spawn(run(sub, feed, sup.lifecycle(), tx, keepalive, Arc::clone(sup.stats()), place));
    Ok(super::sse_streaming(Frames(rx)))
}

fn stopping(l: &Lifecycle) -> bool {
    matches!(l.phase, Phase::Draining | Phase::Stopped)
}

/// Queue `frame` for the connection; `false` when the client is gone or has not read for
/// `stall` (then the stream ends).
async fn send(tx: &QueueTx, frame: Bytes, stall: std::time::Duration) -> bool {
    matches!(tokio::time::timeout(stall, tx.send(frame)).await, Ok(Ok(())))
}

/// Drive one subscription until its client closes the stream or the server ends it.
async fn run(
    mut sub: Subscription,
    mut feed: ChangeFeed,
    mut life: watch::Receiver<Lifecycle>,
    tx: QueueTx,
    keepalive: std::time::Duration,
    stats: Arc<RuntimeStats>,
    _place: ListenPlace,
) {
    let stall = keepalive.saturating_mul(2).max(std::time::Duration::from_secs(1));
    if stopping(&life.borrow_and_update()) {
        sub.handle_end();
    }
    loop {
        while let Some(frame) = sub.poll_frame() {
            if !send(&tx, crate::sse::data_frame(&frame), stall).await {
                return;
            }
        }
        if sub.is_finished() {
            stats.listen_completed();
            return;
        }
        tokio::select! {
            biased;
            () = tx.closed() => return,
            r = feed.lists.changed() => match r {
                Ok(()) => sub.handle_lists(*feed.lists.borrow_and_update()),
                // The catalog is gone: the server is going away.
                Err(_) => sub.handle_end(),
            },
            r = feed.updates.recv() => match r {
                Ok(uri) => sub.handle_updated(&uri),
                Err(broadcast::error::RecvError::Lagged(_)) => sub.handle_missed_updates(),
                Err(broadcast::error::RecvError::Closed) => sub.handle_end(),
            },
            // After the changes that came before it: they are sent ahead of the completion.
            r = life.changed() => {
                if r.is_err() || stopping(&life.borrow_and_update()) {
                    sub.handle_end();
                }
            }
            () = tokio::time::sleep(keepalive) => {
                if !send(&tx, Bytes::from_static(crate::sse::COMMENT_KEEPALIVE), stall).await {
                    return;
                }
            }
        }
    }
}

/// The response body: the frames the task queues, until it ends (the queue closes).
struct Frames(QueueRx);

impl futures_core::Stream for Frames {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|f| f.map(Ok))
    }
}
