//! Sans-IO protocol core.
//!
//! Owns every protocol decision: JSON-RPC classification, version negotiation, admission of
//! HTTP requests (the one front door), the session and stream state machines, the replay
//! window, the event-id (cursor) codec and the one error table.
//!
//! Invariants: nothing here performs I/O, spawns, sleeps or reads a clock. Time arrives as a
//! [`Tick`] argument; outputs are returned values. `scripts/check-sans-io.sh` (run by the
//! test command) fails the build if this folder imports an async runtime.

pub mod admission;
pub(crate) mod bucket;
pub(crate) mod caller;
pub(crate) mod deadlines;
pub(crate) mod digest;
pub(crate) mod error;
pub mod event_id;
pub mod forwarded;
pub mod handle;
pub mod ids;
pub mod jsonrpc;
pub mod limits;
pub mod mcp;
pub mod oauth;
pub(crate) mod receipt;
pub mod replay;
pub mod rollout;
pub(crate) mod route;
pub(crate) mod schema;
pub(crate) mod session;
pub(crate) mod stateless;
pub(crate) mod stream;
pub mod task;
pub(crate) mod usage;
pub mod version;

pub use ids::{Generation, JsonRpcId, Seq, SessionId, StreamId, Tick};
