//! Thin actors that drive the sans-IO state machines and do the I/O.
//!
//! - [`Supervisor`]: generation, registry, limits, lifecycle phase; creates sessions.
//! - [`SessionActor`]: one per session; owns the session core, runs requests, routes
//!   server-to-client requests and their answers.
//! - [`StreamActor`]: one per SSE stream; owns the stream core (and its replay window) and
//!   the attached connection's write queue.
//!
//! Edges: HTTP -> session uses `try_send` (full mailbox = 503). Session -> stream uses
//! `do_send` only for a request's final response (at most one per stream, bounded by the
//! in-flight limit) and control messages; tools -> stream use `send` (backpressure on the
//! tool only). Stream -> connection is a bounded queue with `try_send`: a full queue detaches
//! the slow reader, who resumes from the window. No actor awaits another's I/O.

mod body;
mod registry;
mod session;
mod stream;
mod supervisor;

pub use body::SseBody;
pub use registry::{Registry, SessionHandle};
pub use session::{Delete, OpenGet, Post, PostOutcome, Resume, SessionActor};
pub use stream::StreamActor;
pub use supervisor::{Phase, Supervisor};
