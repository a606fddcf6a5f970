//! What a session needs of the process that owns it, and nothing more: the clock and the
//! lifecycle phase, the configuration and the catalog, the doors of the stores, and where its
//! last writes go. The supervisor implements it; a session never names the supervisor.

use std::sync::Arc;

use serde_json::Value;

use super::generations::Generations;
use super::lifecycle::Phase;
use super::stream::StreamEnv;
use crate::config::RuntimeConfig;
use crate::proto::error::Rejection;
use crate::proto::ids::Tick;
use crate::proto::rollout::StreamPurpose;
use crate::stats::RuntimeStats;
use crate::stores::receipts::Receipts;
use crate::tools::Catalog;

/// What the door decided for a request ([`SessionEnv::admit_tool_call`]).
pub(crate) struct ToolDoor {
    /// A `tools/call`'s idempotency key (`Ok(None)`: none, or not a call of a write tool).
    pub(crate) call:
        Result<Option<crate::tools::IdempotentCall>, crate::proto::jsonrpc::ErrorObject>,
    /// What its stream, if it gets one, is for.
    pub(crate) purpose: crate::proto::rollout::StreamPurpose,
    /// A keyed call's place among its caller's receipts.
    pub(crate) place: Option<crate::ledger::Reservation>,
}

/// Why a session's last writes are on their way to the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// It ended (DELETE, expiry): not to be revived.
    Ended,
    /// It parked: a revive reads its record once these writes are committed.
    Parked,
}

/// The process as a session sees it (see the module doc).
pub(crate) trait SessionEnv: Send + Sync + 'static {
    /// Now, by the process's clock.
    fn now(&self) -> Tick;
    /// The lifecycle phase.
    fn phase(&self) -> Phase;
    /// The configuration.
    fn config(&self) -> &Arc<RuntimeConfig>;
    /// The catalog.
    fn catalog(&self) -> &Arc<Catalog>;
    /// The counters.
    fn stats(&self) -> &Arc<RuntimeStats>;
    /// What every stream shares.
    fn stream_env(&self) -> &Arc<StreamEnv>;
    /// The server's cursor key (a session's signer is derived from it).
    fn cursor_key(&self) -> &Arc<crate::proto::event_id::CursorKey>;
    /// The generations.
    fn generations(&self) -> &Arc<Generations>;
    /// The idempotency receipts.
    fn receipts(&self) -> &Arc<Receipts>;
    /// The door of a request: a `tools/call`'s key, what its stream is for, its place among
    /// its caller's receipts; the refusals before anything runs.
    ///
    /// # Errors
    /// The refusal.
    fn admit_tool_call(
        &self,
        method: &str,
        params: Option<&Value>,
        owner: &crate::ledger::Caller,
    ) -> Result<ToolDoor, Rejection>;
    /// Whether a stream recorded for `purpose` may open now.
    ///
    /// # Errors
    /// The refusal (the ledger cannot take the durable record it needs).
    fn admit_recorded_stream(
        &self,
        purpose: StreamPurpose,
        standalone: bool,
    ) -> Result<(), Rejection>;
    /// A session's last writes (`why` it ended), committed before a revive reads its record.
    fn settle(&self, hmac: &Arc<str>, why: Settle, ops: Vec<crate::ledger::Op>);
    /// A session hibernated (the registry keeps it): something must wake it at its deadline.
    /// Called on an actix arbiter.
    fn hibernated(&self);
}
