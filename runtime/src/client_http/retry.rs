//! Retry and pacing: the re-issue policy of one request ([`Reissue`], shared by both eras),
//! the refusals that say when to come back (429/503 and their `Retry-After`), and the client's
//! pacing glue: jitter, the re-issue window, waits on the reconnect budget.

use std::time::Duration;

use super::state::McpClient;
use super::types::{ClientError, Failure};
use crate::client::journal::Journal;
use crate::proto::ids::Tick;

/// The re-issue policy of one request, shared by both eras: an outcome-unknown failure of an
/// idempotent request is re-issued (after a pause that doubles from [`REISSUE_BASE_MS`]) for
/// as long as the request has been failing for less than
/// [`ClientConfig::reissue_window_ms`]; a refusal (429/503) is waited out likewise; anything
/// else, and any failure of a request that is not idempotent, ends it.
///
/// [`ClientConfig::reissue_window_ms`]: super::ClientConfig::reissue_window_ms
#[derive(Default)]
pub(super) struct Reissue {
    count: u32,
    /// When the request first failed.
    since: Option<tokio::time::Instant>,
}

impl Reissue {
    /// The request failed (now, if it had not before): its window starts.
    pub(super) fn failed(&mut self) {
        self.since.get_or_insert_with(tokio::time::Instant::now);
    }

    /// After `failure`: `Ok` to send the request again (the pause and the reconnect budget
    /// already waited), else the error that ends it.
    pub(super) async fn after<J: Journal>(
        &mut self,
        c: &McpClient<J>,
        failure: Failure,
        idempotent: bool,
        method: &str,
    ) -> Result<(), ClientError> {
        let first_failure = *self.since.get_or_insert_with(tokio::time::Instant::now);
        let why = match failure {
            Failure::Final(e) => return Err(e),
            Failure::Gone(_) => "the session ended (404)".to_owned(),
            Failure::Unknown(e) => {
                // The server may be restarting (connection refused, -32009, -32010): give it time.
                if idempotent && !c.window_over(first_failure) {
                    tokio::time::sleep(Duration::from_millis(c.cfg.backoff.delay_ms(
                        Some(REISSUE_BASE_MS),
                        self.count,
                        c.jitter(),
                    )))
                    .await;
                }
                e.to_string()
            }
            Failure::Busy(e, delay) => {
                // Refused, not run: a request not marked idempotent gets the refusal itself.
                if !idempotent {
                    return Err(e);
                }
                // One that kept failing for the whole window is lost (below), with its history.
                if !c.window_over(first_failure) {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                e.to_string()
            }
        };
        if !idempotent || c.window_over(first_failure) {
            c.inner.borrow_mut().stats.lost += 1;
            let how = if idempotent {
                format!(
                    "still failing {} ms after its first failure ({} re-issues)",
                    first_failure.elapsed().as_millis(),
                    self.count
                )
            } else {
                "not idempotent".to_owned()
            };
            return Err(ClientError::Lost(method.to_owned(), format!("{why}; {how}")));
        }
        self.count += 1;
        c.inner.borrow_mut().stats.reissued += 1;
        // Re-issues draw on the same budget as reconnects: a fault cannot become a storm.
        c.wait_for_budget().await;
        Ok(())
    }
}

/// `Retry-After` in ms (delta-seconds form, capped at 5 minutes).
pub(super) fn retry_after_ms_of(headers: &awc::http::header::HeaderMap) -> Option<u64> {
    headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| s.min(300) * 1000)
}

/// First pause before re-issuing a request whose outcome is unknown (doubling, with jitter,
/// up to the backoff's maximum), so a restarting server is given time rather than the whole
/// re-issue allowance spent in a few milliseconds.
const REISSUE_BASE_MS: u64 = 50;

/// The error for a non-success status: [`ClientError::Unavailable`] for 429/503.
pub(super) fn status_error(
    status: u16,
    headers: &awc::http::header::HeaderMap,
    body: String,
) -> ClientError {
    if status == 429 || status == 503 {
        ClientError::Unavailable { status, retry_after_ms: retry_after_ms_of(headers), body }
    } else {
        ClientError::Http(status, body)
    }
}

impl<J: Journal> McpClient<J> {
    pub(super) fn now(&self) -> Tick {
        self.clock.now()
    }

    pub(super) fn jitter(&self) -> f64 {
        // xorshift64*: pacing jitter needs no cryptographic quality.
        let mut i = self.inner.borrow_mut();
        let mut x = i.jitter_state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        i.jitter_state = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Whether [`ClientConfig::reissue_window_ms`] has passed since `since`.
    ///
    /// [`ClientConfig::reissue_window_ms`]: super::ClientConfig::reissue_window_ms
    pub(super) fn window_over(&self, since: tokio::time::Instant) -> bool {
        since.elapsed() >= Duration::from_millis(self.cfg.reissue_window_ms)
    }

    pub(super) async fn wait_for_budget(&self) {
        loop {
            let now = self.now();
            let ready = {
                let mut i = self.inner.borrow_mut();
                if i.budget.try_take(now) {
                    return;
                }
                i.stats.budget_waits += 1;
                i.budget.ready_at(now)
            };
            tokio::time::sleep(Duration::from_millis(ready.0.saturating_sub(now.0).max(1))).await;
        }
    }
}
