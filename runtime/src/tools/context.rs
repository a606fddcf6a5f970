use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::BoxFuture;
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{ErrorObject, code, encode_notification};
use crate::proto::mcp::{LogLevel, method};

/// Where a running request's related messages go. Implemented by the actor layer; tools see
/// only [`ToolContext`].
pub trait ToolOutbound: Send + Sync + 'static {
    /// Send a notification related to the request (on its stream when it has one).
    fn notify(&self, json: Bytes) -> BoxFuture<()>;
    /// Send a server-to-client request related to the request and wait for the answer.
    fn request(&self, method: &str, params: Value) -> BoxFuture<Result<Value, ErrorObject>>;
    /// SEP-1699: end the current connection of the request's stream without ending the
    /// stream; the client resumes with GET + `Last-Event-ID`.
    fn close_for_polling(&self) -> BoxFuture<()>;
    /// Whether the request is a modern (2026-07-28) one: a capability the client did not
    /// declare is then `-32021` with `requiredCapabilities` (HTTP 400), not `-32601`.
    fn modern(&self) -> bool {
        false
    }
    /// A server-to-client request under the key `key`: in the legacy era sent at once (the key
    /// is not used); in the modern era the key names it in the `input_required` result's
    /// `inputRequests` and in the retry's `inputResponses`.
    fn input(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> BoxFuture<Result<Value, ErrorObject>> {
        let _ = key;
        self.request(method, params)
    }
    /// Go on as a task (see [`ToolContext::continue_as_task`]); a no-op where tasks do not apply.
    fn continue_as_task(&self) -> BoxFuture<()> {
        Box::pin(async {})
    }
}

/// Everything a running tool may use: progress, logging, cancellation and server-to-client
/// requests. Cheap to clone.
#[derive(Clone)]
pub struct ToolContext {
    request_id: JsonRpcId,
    progress_token: Option<Value>,
    cancel: CancellationToken,
    log_level: Option<LogLevel>,
    client_capabilities: Arc<Value>,
    principal: Option<Arc<str>>,
    /// Whose state handles it sees (see [`ToolContext::with_owner`]).
    owner: Option<Arc<str>>,
    /// The legacy session it runs in, by its names (see [`ToolContext::with_session`]).
    session: Option<Arc<[Arc<str>]>>,
    out: Arc<dyn ToolOutbound>,
    /// Log notifications are sent at all (a modern request without a `logLevel` gets none).
    logs: bool,
    /// Where list changes and resource updates are announced (set by the catalog).
    changes: Option<Arc<super::Changes>>,
    /// The state handle store (set by the catalog of a supervisor).
    handles: Option<Arc<crate::stores::handles::Handles>>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext").field("request_id", &self.request_id).finish_non_exhaustive()
    }
}

impl ToolContext {
    /// Built by the session for each request.
    #[must_use]
    pub fn new(
        request_id: JsonRpcId,
        progress_token: Option<Value>,
        cancel: CancellationToken,
        log_level: Option<LogLevel>,
        client_capabilities: Arc<Value>,
        principal: Option<Arc<str>>,
        out: Arc<dyn ToolOutbound>,
    ) -> ToolContext {
        let owner = principal.clone();
        ToolContext {
            request_id,
            progress_token,
            cancel,
            log_level,
            client_capabilities,
            principal,
            owner,
            session: None,
            out,
            logs: true,
            changes: None,
            handles: None,
        }
    }

    /// Whose state handles the tool sees: the principal, or without authentication the
    /// caller's address as the quotas count it (set by the server; the principal by default).
    #[must_use]
    pub fn with_owner(mut self, owner: Option<Arc<str>>) -> ToolContext {
        self.owner = owner;
        self
    }

    /// The legacy session the request runs in, by its ledger names (HMACs of its id: the
    /// current key's first, then each previous key's), never its id; not set outside a
    /// session. Handles created here record it, and without authentication a list shows
    /// only those (set by the session).
    #[must_use]
    pub fn with_session(mut self, names: Arc<[Arc<str>]>) -> ToolContext {
        self.session = Some(names);
        self
    }

    /// Announce changes through `changes` (the catalog sets this before a handler runs).
    #[must_use]
    pub fn with_changes(mut self, changes: Arc<super::Changes>) -> ToolContext {
        self.changes = Some(changes);
        self
    }

    /// Use the state handle store `handles` (the catalog sets this before a handler runs).
    #[must_use]
    pub fn with_handles(mut self, handles: Arc<crate::stores::handles::Handles>) -> ToolContext {
        self.handles = Some(handles);
        self
    }

    /// This caller's handles of `kind` (SEP-2567): create, read, update atomically, destroy
    /// and list them, typed with serde (a list without authentication shows only what this
    /// legacy session created, and nothing outside one: see
    /// [`HandleScope::list`](crate::stores::handles::HandleScope::list)); each use is checked against the caller, and every
    /// refusal is a tool error whose text names the handle and the way to recover. Use `?`
    /// into a [`ToolError`](super::ToolError).
    ///
    /// # Errors
    /// [`HandleError::Unavailable`](crate::stores::handles::HandleError::Unavailable) when the
    /// context has no store (a catalog not served by a supervisor).
    pub fn handles<'a>(
        &'a self,
        kind: &'a crate::proto::handle::HandleKind,
    ) -> Result<crate::stores::handles::HandleScope<'a>, crate::stores::handles::HandleError> {
        let store =
            self.handles.as_deref().ok_or(crate::stores::handles::HandleError::Unavailable)?;
        Ok(crate::stores::handles::HandleScope {
            store,
            kind,
            principal: self.owner.as_deref(),
            session: self.session.as_deref(),
            authenticated: self.principal.is_some(),
        })
    }

    /// Announce that a list changed (the tool added or removed something it lists): every
    /// `subscriptions/listen` stream that opted into that list is told. Returns whether it
    /// was announced: the catalog must declare it with
    /// [`CatalogBuilder::announces_list_changes`](super::CatalogBuilder::announces_list_changes).
    /// Not sent to legacy sessions (their capabilities say `listChanged: false`).
    pub fn list_changed(&self, kind: super::ListKind) -> bool {
        self.changes.as_ref().is_some_and(|c| c.list_changed(kind))
    }

    /// Announce that resource `uri` changed: every `subscriptions/listen` stream subscribed
    /// to it is told. Returns whether it was announced: the catalog must declare
    /// [`CatalogBuilder::announces_resource_updates`](super::CatalogBuilder::announces_resource_updates).
    pub fn resource_updated(&self, uri: &str) -> bool {
        self.changes.as_ref().is_some_and(|c| c.resource_updated(uri))
    }

    /// No log notifications at all for this request (a modern request that asked for no
    /// `logLevel`: SPEC.md §3.5).
    #[must_use]
    pub fn without_logs(mut self) -> ToolContext {
        self.logs = false;
        self
    }

    /// The authenticated caller (bearer principal), `None` when authentication is off.
    #[must_use]
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The JSON-RPC id of the request being served.
    #[must_use]
    pub fn request_id(&self) -> &JsonRpcId {
        &self.request_id
    }

    /// The request's `_meta.progressToken`, type preserved.
    #[must_use]
    pub fn progress_token(&self) -> Option<&Value> {
        self.progress_token.as_ref()
    }

    /// Cancelled by `notifications/cancelled` or session end. The tool's future is dropped
    /// right after this fires; watch it only to stop work spawned elsewhere.
    #[must_use]
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Report progress; a no-op when the request carried no progress token. `progress` must
    /// increase from call to call. Await it: a send begun after the handler answered (a
    /// future spawned but not polled before) finds the request's stream closed and is
    /// dropped.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else { return };
        let mut p = json!({"progressToken": token, "progress": progress});
        if let Some(t) = total {
            p["total"] = json!(t);
        }
        if let Some(m) = message {
            p["message"] = json!(m);
        }
        self.out.notify(encode_notification(method::PROGRESS, Some(&p))).await;
    }

    /// Send a log message, unless the client set a higher minimum level. Await it, as
    /// [`ToolContext::progress`].
    pub async fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if !self.logs || self.log_level.is_some_and(|min| level < min) {
            return;
        }
        let mut p = json!({"level": level.as_str(), "data": data});
        if let Some(l) = logger {
            p["logger"] = json!(l);
        }
        self.out.notify(encode_notification(method::MESSAGE, Some(&p))).await;
    }

    /// Whether the client declared a top-level capability (`sampling`, `elicitation`, ...).
    #[must_use]
    pub fn client_has(&self, capability: &str) -> bool {
        self.client_capabilities.get(capability).is_some_and(|v| !v.is_null())
    }

    /// Send a server-to-client request (e.g. `sampling/createMessage`, `elicitation/create`)
    /// on this request's stream and wait for the client's answer.
    ///
    /// # Errors
    /// The client's JSON-RPC error; `-32601` when the client lacks the capability the method
    /// needs; `-32008` when the client does not answer within
    /// `sessions.client_request_timeout_secs` (the client is sent `notifications/cancelled`);
    /// an error when the session ends first.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ErrorObject> {
        self.check_capability(method)?;
        self.out.request(method, params).await
    }

    /// [`Self::request`] under a key of the tool's choosing: the same in the legacy era; in
    /// the modern era (2026-07-28) the key names the question in the `input_required` result
    /// and its answer in the client's retry (`inputResponses`). A tool that asks is run again
    /// from its start on each round, with the answers so far, until it no longer asks: what it
    /// does before asking must be safe to repeat.
    ///
    /// # Errors
    /// As [`Self::request`]; in the modern era also `-32602` for an answer of the wrong shape.
    pub async fn input(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, ErrorObject> {
        self.check_capability(method)?;
        self.out.input(key, method, params).await
    }

    fn check_capability(&self, method: &str) -> Result<(), ErrorObject> {
        let needs = match method {
            "sampling/createMessage" => Some("sampling"),
            "elicitation/create" => Some("elicitation"),
            "roots/list" => Some("roots"),
            _ => None,
        };
        if let Some(cap) = needs
            && !self.client_has(cap)
        {
            if self.out.modern() {
                return Err(ErrorObject::new(code::MISSING_CLIENT_CAPABILITY, format!("this tool needs the client capability {cap:?}, which the request did not declare"))
                    .with_data(json!({"requiredCapabilities": {cap: {}}})));
            }
            return Err(ErrorObject::new(
                code::METHOD_NOT_FOUND,
                format!("client did not declare the {cap} capability"),
            ));
        }
        Ok(())
    }

    /// Go on as a task from here (the 2026-07-28 tasks extension): when the tool may run as
    /// one ([`ToolSpec::task_support`](super::ToolSpec::task_support)) and the request
    /// declared the extension, the call is answered at once with its task and the rest of the
    /// tool runs in the background, its questions ([`Self::input`]) becoming the task's input
    /// requests answered with `tasks/update`. Call it before asking what should be asked in
    /// the task; questions asked before it are multi-round-trip rounds of the call itself.
    /// Elsewhere (a legacy session, a client without the extension, a tool that may not) it
    /// returns at once and changes nothing. A tool that may run as a task also becomes one
    /// when it waits on anything before its first question.
    pub async fn continue_as_task(&self) {
        self.out.continue_as_task().await;
    }

    /// SEP-1699 polling: close the current connection of this request's stream; the client
    /// reconnects with `Last-Event-ID` after the `retry` delay and gets everything it missed.
    pub async fn close_stream_for_polling(&self) {
        self.out.close_for_polling().await;
    }
}
