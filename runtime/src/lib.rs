//! `mcp-runtime`: an MCP Streamable HTTP server runtime (legacy session era: 2025-03-26,
//! 2025-06-18, 2025-11-25).
//!
//! Layout:
//! - [`proto`]: sans-IO protocol core (admission, JSON-RPC, state machines, replay window,
//!   cursor codec, the error table). No async runtime, no clock.
//! - [`sse`]: SSE frame encoder and WHATWG decoder (pure).
//! - [`tools`]: tool, resource and prompt traits, the registry and the tool context.
//! - [`actor`]: actix actors (supervisor, session, stream) that drive the state machines.
//! - [`http`]: the actix-web `/mcp` endpoint and the one `ResponseError`.
//! - [`ledger`]: durable records of sessions, streams and receipts (trait, codec, SQLite and
//!   memory stores, the group-commit writer).
//! - [`metrics`]: Prometheus text encoding of the supervisor's figures.
//! - `client`: the resilient client's sans-IO core (acceptance point, journal, pacing);
//!   feature `client`.
//! - `client_http`: the resilient client's HTTP driver (awc); feature `client`.
//! - [`server`]: the facade — [`Server::builder`], serve, graceful stop.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub use server::Server;

pub mod actor;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "client")]
pub mod client_http;
mod clock;
pub mod config;
pub mod handles;
pub mod http;
pub mod ledger;
pub mod metrics;
mod pipeline;
pub mod proto;
mod rng;
pub mod server;
pub mod sse;
pub mod tasks;
pub mod tools;
