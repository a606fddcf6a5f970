//! What the supervisor admits at the tool-call door and for recorded streams, and whether the
//! ledger takes durable work now.

use serde_json::Value;

use crate::actor::env::ToolDoor;
use crate::actor::lifecycle::Phase;
use crate::proto::error::{Overload, Rejection};

use super::Supervisor;

impl Supervisor {
    /// Whether the ledger outlives the process (SQLite).
    #[must_use]
    pub fn ledger_durable(&self) -> bool {
        self.stream_env.ledger.ledger.durable
    }

    /// Refuse a request (503) while this host's lease on a shared ledger may have lapsed
    /// ([`crate::ledger::Ledger::lease_lapsed`]): a process paused past it reads the requests
    /// queued meanwhile before it finds the lease gone and stops, and must not answer them
    /// from sessions another host may have taken over.
    ///
    /// # Errors
    /// [`Overload::LeaseLapsed`].
    pub(crate) fn lease_holds(&self) -> Result<(), Rejection> {
        if self.stream_env.ledger.ledger.lease_lapsed() {
            return Err(Rejection::Overloaded(Overload::LeaseLapsed));
        }
        Ok(())
    }

    /// Refuse new durable work (503 naming the ledger) while the ledger cannot take it: its
    /// store refuses commits, or more than `ledger.queue_max_bytes` wait for its writer.
    ///
    /// # Errors
    /// [`Overload::LedgerFailing`], [`Overload::LedgerBacklog`].
    pub fn ledger_accepts(&self) -> Result<(), Rejection> {
        match self.stream_env.ledger.writer.refusal() {
            None => Ok(()),
            Some(crate::ledger::LedgerState::Failing) => {
                Err(Rejection::Overloaded(Overload::LedgerFailing))
            }
            Some(_) => Err(Rejection::Overloaded(Overload::LedgerBacklog)),
        }
    }

    /// Whether the process is ready for new work: serving, and its ledger can commit
    /// (`GET /readyz`).
    #[must_use]
    pub fn ready(&self) -> bool {
        self.phase() == Phase::Serving
            && !self.stream_env.ledger.writer.is_failing()
            && !self.stream_env.ledger.ledger.lease_lapsed()
    }

    /// The door of a request of `method` with `params` of a caller (`owner`), in either era,
    /// before anything runs: for a `tools/call`, its idempotency key and what its stream is
    /// for; refused when it needs a new durable record the ledger cannot take now (a keyed
    /// call's receipt, a tool that keeps state handles), or when a keyed call's caller keeps
    /// as many receipts as it may (429; 503 when every caller together does). A keyed call
    /// gets its place among its caller's receipts ([`ToolDoor::place`]).
    ///
    /// # Errors
    /// As [`Supervisor::ledger_accepts`]; the receipt bounds' refusals.
    pub(crate) fn admit_tool_call(
        &self,
        method: &str,
        params: Option<&Value>,
        owner: &crate::ledger::Caller,
    ) -> Result<ToolDoor, Rejection> {
        // Only a tools/call names a tool (no lookup for any other method).
        let tool = (method == "tools/call")
            .then(|| params.and_then(|p| p.get("name")).and_then(Value::as_str))
            .flatten()
            .and_then(|n| self.catalog.tool(n));
        let class = match tool {
            Some(tool) => crate::proto::route::classify_call(&tool.spec().traits(), params),
            None => crate::proto::route::CallClass::read_only(),
        };
        if class.needs_ledger {
            self.ledger_accepts()?;
        }
        let place = if class.keyed() { Some(self.receipts.admit(owner)?) } else { None };
        Ok(ToolDoor { call: class.key, purpose: class.purpose, place })
    }

    /// The door of a stream that will be recorded (resumable or shadow) for `purpose`: on a
    /// durable ledger it needs the ledger when it is a write's, the standalone GET stream
    /// (`standalone`: recorded for its whole life), or when every event waits for its commit
    /// before it goes out (`sync`). A read's POST stream does not: it is usually answered in
    /// its first write, and its events past the writer's queue bound leave a hole a resume
    /// reports, as ever.
    ///
    /// # Errors
    /// As [`Supervisor::ledger_accepts`].
    pub(crate) fn admit_recorded_stream(
        &self,
        purpose: crate::proto::rollout::StreamPurpose,
        standalone: bool,
    ) -> Result<(), Rejection> {
        let write = matches!(purpose, crate::proto::rollout::StreamPurpose::Write { .. });
        if self.ledger_durable()
            && (write
                || standalone
                || self.cfg.ledger.durability == crate::ledger::Durability::Sync)
        {
            self.ledger_accepts()?;
        }
        Ok(())
    }
}
