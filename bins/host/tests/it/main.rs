//! The host binary's integration tests (each starts the real `mcp-host`): one test binary
//! (one link instead of one per file), a module per topic.

mod common;

mod basket;
mod faults;
mod graceful_stop;
mod ledger_files;
mod ledger_full;
mod oauth;
mod redis;
mod restart;
mod rotation;
mod shared;
mod stalled_reader;
mod stateless;
mod supervisor;
mod tasks;
