//! `mcp-runtime`: an MCP Streamable HTTP server runtime, both eras on one endpoint (sessions:
//! 2025-03-26, 2025-06-18, 2025-11-25; stateless: 2026-07-28).
//!
//! Layout:
//! - [`proto`]: sans-IO protocol core (admission, JSON-RPC, state machines, replay window,
//!   cursor codec, the error table). No async runtime, no clock.
//! - [`sse`]: SSE frame encoder and WHATWG decoder (pure).
//! - [`tools`]: tool, resource and prompt traits, the registry and the tool context.
//! - [`actor`]: actix actors (supervisor, session, stream) that drive the state machines.
//! - [`http`]: the actix-web `/mcp` endpoint and the one `ResponseError`.
//! - `pipeline`: runs an admitted request in either era (context, receipt, first poll, where
//!   its notifications and questions go).
//! - [`stores`]: idempotency receipts, state handles and tasks, kept in the ledger.
//! - [`ledger`]: durable records of sessions, streams and receipts (trait, codec, SQLite and
//!   memory stores, the group-commit writer).
//! - [`stats`]: the counters and histograms the server keeps (atomics; `/metrics` encodes
//!   them).
//! - `client`: the resilient client's sans-IO core (acceptance point, journal, pacing);
//!   feature `client`.
//! - `client_http`: the resilient client's HTTP driver (awc); feature `client`.
//! - [`server`]: the facade — [`Server::builder`], serve, graceful stop.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub use server::Server;

pub mod actor;
pub mod auth;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "client")]
pub mod client_http;
mod clock;
pub mod config;
pub mod http;
pub mod ledger;
mod pipeline;
pub mod proto;
mod rng;
pub mod server;
pub mod sse;
pub mod stats;
pub mod stores;
pub mod tools;
