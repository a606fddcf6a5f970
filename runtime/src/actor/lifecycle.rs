//! The process's lifecycle as it is published to every request: its phase and its current
//! generation.

use crate::proto::ids::Generation;

/// Lifecycle phase of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Built, not serving yet.
    Starting,
    /// Admitting new requests.
    Serving,
    /// Stopping: new requests get 503 with `Retry-After`; in-flight ones finish, then every
    /// stream ends with a `retry` hint.
    Draining,
    /// Every session stopped (`Supervisor::mark_stopped`); the ledger is being flushed.
    Stopped,
}

/// The published lifecycle: the phase and the current generation, with when it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Lifecycle {
    /// The phase.
    pub phase: Phase,
    /// The current generation.
    pub generation: Generation,
    /// When the phase or the generation last changed (ms since the epoch).
    pub since_ms: u64,
}
