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
pub mod bucket;
pub mod caller;
pub mod digest;
pub mod error;
pub mod event_id;
pub mod forwarded;
pub mod handle;
pub mod ids;
pub mod jsonrpc;
pub mod limits;
pub mod mcp;
pub mod modern;
pub mod receipt;
pub mod replay;
pub mod rollout;
pub mod route;
pub mod schema;
pub mod session;
pub mod stream;
pub mod task;
pub mod usage;
pub mod version;

pub use ids::{Generation, JsonRpcId, Seq, SessionId, StreamId, Tick};
