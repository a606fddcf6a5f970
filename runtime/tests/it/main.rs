//! The runtime's integration tests, through the real actix service: one test binary (one
//! link instead of one per file), a module per topic.

mod common;

mod accounting;
mod anonymous;
mod bounds;
#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
mod client_modern;
mod dormant;
mod fair_shares;
mod front_door;
mod handles;
mod hibernate;
mod ledger_bounds;
mod ledger_crash;
mod ledger_health;
mod lifecycle;
mod listen;
mod panics;
mod receipts;
mod resume;
mod rollout;
mod server;
mod slow_store;
mod stateless;
mod status_codes;
mod tasks;
