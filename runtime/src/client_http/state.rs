//! The client itself ([`McpClient`]) and the state it keeps between calls: the session, the
//! acceptance point, the reconnect budget, the counters, and what a 2026-07-28 server told it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use serde_json::Value;

use super::types::{ClientConfig, ClientStats, ResumeSample, ServerRequestHandler};
use crate::client::accept::Acceptor;
use crate::client::budget::ReconnectBudget;
use crate::client::journal::{Journal, MemoryJournal};
use crate::proto::stateless::headers::HeaderParam;
use crate::proto::version::ProtocolVersion;

/// A resilient MCP client over Streamable HTTP (legacy era).
pub struct McpClient<J: Journal = MemoryJournal> {
    pub(super) http: awc::Client,
    pub(super) cfg: ClientConfig,
    pub(super) inner: Rc<RefCell<Inner<J>>>,
    /// Serializes handshakes so concurrent 404s cause exactly one.
    pub(super) handshake: Rc<tokio::sync::Mutex<()>>,
    pub(super) clock: crate::clock::Clock,
    pub(super) handler: Option<ServerRequestHandler>,
}

pub(super) struct Inner<J: Journal> {
    pub(super) acceptor: Acceptor<J>,
    pub(super) session_id: String,
    pub(super) version: ProtocolVersion,
    pub(super) generation: u32,
    pub(super) budget: ReconnectBudget,
    pub(super) next_id: i64,
    pub(super) stats: ClientStats,
    /// Accepted notifications with the id of the event that carried them.
    pub(super) notifications: Vec<(Option<String>, Value)>,
    pub(super) jitter_state: u64,
    /// The session answered 404: the next request starts a new one first, and nothing is
    /// sent with the dead id again.
    pub(super) session_dead: bool,
    pub(super) resume_samples: Vec<ResumeSample>,
    /// The server speaks 2026-07-28 (discovered): requests go the stateless way.
    pub(super) modern: Option<ModernState>,
}

/// What a client that discovered a 2026-07-28 server keeps.
#[derive(Debug, Default)]
pub(super) struct ModernState {
    /// The server's capabilities (from `server/discover`).
    pub(super) capabilities: Value,
    /// Each tool's `x-mcp-header` parameters, from the last `tools/list` seen.
    pub(super) tool_headers: HashMap<String, Vec<HeaderParam>>,
}
