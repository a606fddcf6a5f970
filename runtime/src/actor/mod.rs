//! Thin actors that drive the sans-IO state machines and do the I/O.
//!
//! - [`Supervisor`]: generations ([`Generations`]: the reloadable settings, counted),
//!   registry, limits, quotas, memory budget, counters, the published [`Lifecycle`]; creates
//!   sessions. Sessions and streams reach their generation through [`GenCount`], not the
//!   supervisor.
//! - [`SessionActor`]: one per session; owns the session core, runs requests, routes
//!   server-to-client requests and their answers, keeps one timer (its core's deadlines, the
//!   retention ends of the streams it keeps as data, and when it stops reading their
//!   bodies' queued ends).
//! - [`StreamActor`]: an SSE stream's actor; owns the stream core (and its replay window), the
//!   attached connection's write queue and its charge on the memory budget. A resumable stream
//!   answered in its first write (durability not `sync`) has none until a resume wakes it: its
//!   session keeps it as data (`dormant.rs`).
//!
//! Edges: HTTP -> session takes a place in the session's [`Inbox`] (`sessions.mailbox`
//! requests' messages waiting; full = 503) and then `do_send`s: the place is the bound
//! (actix's `try_send` would park the one address every request shares, refusing the next
//! requests for it); messages relayed from other hosts take a place the same way (full:
//! dropped and counted, `mcp_bus_relays_dropped_total`). Session -> stream uses
//! `try_send` for server-to-client requests (a full stream fails the tool's request at once)
//! and for a request's final response (when the stream's mailbox is full it is sent with an
//! awaited `send` spawned in the session's context: never dropped, never blocking), and
//! `do_send` only for control messages (stop, drain, close); tools -> stream use `send` (backpressure on the
//! tool only), also for notifications that go to the GET stream. Stream -> connection is a bounded queue with
//! `try_send`: a full queue detaches the slow reader, who resumes from the window. Children
//! (streams, connection bodies) report to their session through one shared `Recipient` with
//! `do_send`, one message per state change, so no report is ever lost while the session
//! lives; the one exception, the end of a kept stream's body that returned every frame, is
//! queued for a busy session's next request (`links::DormantEnds`), read by its timer at
//! the latest. No actor awaits another's I/O.

mod body;
mod budget;
mod dormant;
mod durable;
mod env;
mod follow;
mod generations;
mod lifecycle;
pub(crate) mod links;
pub(crate) mod queue;
mod registry;
mod session;
mod stream;
mod supervisor;
mod watch;

pub(crate) use body::SseBody;
pub(crate) use env::ToolDoor;
pub(crate) use generations::{Counted, GenCount, GenStatus};
pub use generations::{GenOrigin, GenSettings};
pub(crate) use registry::{InboxTicket, QuotaKey};
pub(crate) use session::{Delete, JsonReply, OpenGet, Post, PostOutcome, Resume, SessionHandle};
pub(crate) use stream::{STREAM_MAILBOX, StreamActor};
pub use supervisor::{Lifecycle, Phase, Supervisor};
