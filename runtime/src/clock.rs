//! The shells' clock: milliseconds since an origin, as the sans-IO core's [`Tick`]. Built on
//! `tokio::time::Instant`, so tests with paused time control it.

use tokio::time::Instant;

use crate::proto::ids::Tick;

/// Ticks since the clock was made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock(Instant::now())
    }

    pub(crate) fn now(&self) -> Tick {
        Tick(self.0.elapsed().as_millis() as u64)
    }
}
