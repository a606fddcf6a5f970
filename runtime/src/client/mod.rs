//! The resilient client's sans-IO core (both eras).
//!
//! - [`accept`]: the one acceptance point, [`accept::Acceptor::accept_stream_event`], which
//!   checks session, protocol version, caller, stream, cursor order, JSON-RPC correlation and
//!   a content digest, then records the inbox receipt and the dispatch in one journal step.
//! - [`journal`]: the inbox/outbox behind a trait ([`journal::Journal`]): in memory, and
//!   [`durable::SqliteJournal`] so a restarted client neither loses nor re-dispatches.
//! - [`modern`]: what a 2026-07-28 request carries (`_meta`, mirrored headers), how discovery
//!   tells the era, and how an `input_required` result becomes the next round.
//! - [`budget`]: retry pacing: the server's `retry`, jittered backoff, and one global
//!   reconnect budget (token bucket) so an outage cannot become a reconnect storm.
//!
//! No network I/O and no clock: time arrives as [`Tick`](crate::proto::Tick), randomness as an
//! argument; the only file I/O is the SQLite journal's. The HTTP driver that uses it comes
//! with `mcp-load`.

pub mod accept;
pub mod budget;
#[cfg(feature = "sqlite")]
pub mod durable;
pub mod journal;
pub mod stateless;
