//! The stores the ledger keeps for callers, each a shell around its sans-IO rules in `proto`
//! and its records in the ledger, bounded per caller and in total (`proto::usage`):
//!
//! - [`receipts`]: idempotency receipts — one execution per key of a write tool's call, its
//!   outcome replayed to a retry (rules in `proto::receipt`);
//! - [`handles`]: explicit state handles a tool keeps for its caller (`proto::handle`);
//! - [`tasks`]: 2026-07-28 tasks, their runs and their records (`proto::task`).

pub mod handles;
pub mod receipts;
pub mod tasks;
