//! The shells' clock: milliseconds since the Unix epoch, as the sans-IO core's [`Tick`],
//! read once from the wall clock at start and advanced monotonically from there (so ticks
//! recorded in the ledger mean the same after a restart, and a clock step while running
//! moves nothing). Built on `tokio::time::Instant`, so tests with paused time control it.

use tokio::time::Instant;

use crate::proto::ids::Tick;

/// Wall-clock-anchored monotonic ticks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
    origin_ms: u64,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        let origin_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Clock { origin: Instant::now(), origin_ms }
    }

    pub(crate) fn now(&self) -> Tick {
        Tick(self.origin_ms + self.origin.elapsed().as_millis() as u64)
    }
}
