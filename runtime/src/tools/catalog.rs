use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{
    BoxFuture, CallToolResult, Changes, Prompt, Resource, ResourceTemplate, Tool, ToolContext,
    ToolError, ToolSpec, validate_arguments,
};
use crate::proto::ids::FastMap;
use crate::proto::jsonrpc::{ErrorObject, Reply, code};
use crate::proto::stateless::listen::{ListKind, Offered};
use crate::proto::version::ProtocolVersion;

/// `serverInfo` of the `initialize` result.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Optional instructions for the model.
    pub instructions: Option<String>,
}

impl ServerInfo {
    /// `name` and `version`, without instructions.
    #[must_use]
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> ServerInfo {
        ServerInfo { name: name.into(), version: version.into(), instructions: None }
    }
}

/// Why a catalog could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// A tool name outside 1-64 characters of `[A-Za-z0-9_./-]`.
    #[error("invalid tool name {0:?} (1-64 characters of [A-Za-z0-9_./-])")]
    InvalidToolName(String),
    /// Two tools with one name.
    #[error("duplicate tool {0:?}")]
    DuplicateTool(String),
    /// Two prompts with one name.
    #[error("duplicate prompt {0:?}")]
    DuplicatePrompt(String),
    /// Two resources with one URI.
    #[error("duplicate resource {0:?}")]
    DuplicateResource(String),
    /// A tool's `x-mcp-header` annotations are invalid (2026-07-28 clients would drop it).
    #[error("tool {tool:?}: {why}")]
    InvalidHeaderAnnotation {
        /// The tool.
        tool: String,
        /// What is wrong.
        why: String,
    },
    /// A tool's idempotency-key argument on a read-only tool, or not a string property of
    /// its input schema.
    #[error("tool {tool:?}: idempotency key argument {argument:?} {why}")]
    InvalidIdempotencyKey {
        /// The tool.
        tool: String,
        /// The argument.
        argument: String,
        /// What is wrong.
        why: &'static str,
    },
}

pub use crate::proto::receipt::{IDEMPOTENCY_KEY_MAX_BYTES, IDEMPOTENCY_KEY_META, IdempotentCall};

/// The outcome of dispatching a request to the catalog.
pub enum Dispatch {
    /// Answered at once.
    Ready(Result<Reply, ErrorObject>),
    /// Needs to run.
    Pending(BoxFuture<Result<Reply, ErrorObject>>),
}

impl std::fmt::Debug for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dispatch::Ready(r) => f.debug_tuple("Ready").field(r).finish(),
            Dispatch::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}

/// Builds a [`Catalog`].
#[derive(Default)]
pub struct CatalogBuilder {
    tools: Vec<Arc<dyn Tool>>,
    resources: Vec<Arc<dyn Resource>>,
    templates: Vec<Arc<dyn ResourceTemplate>>,
    prompts: Vec<Arc<dyn Prompt>>,
    /// What the catalog's handlers may announce to `subscriptions/listen` streams.
    offered: Offered,
}

impl CatalogBuilder {
    /// Declare that `kind`'s list may change while the server runs (a handler announces it
    /// with [`ToolContext::list_changed`]): 2026-07-28 clients are told `listChanged: true`
    /// and may hear of it on `subscriptions/listen`.
    #[must_use]
    pub fn announces_list_changes(mut self, kind: ListKind) -> Self {
        self.offered.lists[kind as usize] = true;
        self
    }

    /// Declare that resources may change while the server runs (a handler announces it with
    /// [`ToolContext::resource_updated`]): 2026-07-28 clients are told `subscribe: true` and
    /// may subscribe to URIs on `subscriptions/listen`.
    #[must_use]
    pub fn announces_resource_updates(mut self) -> Self {
        self.offered.resource_updates = true;
        self
    }

    /// Add a tool.
    #[must_use]
    pub fn tool(mut self, t: impl Tool) -> Self {
        self.tools.push(Arc::new(t));
        self
    }

    /// Add a resource.
    #[must_use]
    pub fn resource(mut self, r: impl Resource) -> Self {
        self.resources.push(Arc::new(r));
        self
    }

    /// Add a resource template.
    #[must_use]
    pub fn template(mut self, t: impl ResourceTemplate) -> Self {
        self.templates.push(Arc::new(t));
        self
    }

    /// Add a prompt.
    #[must_use]
    pub fn prompt(mut self, p: impl Prompt) -> Self {
        self.prompts.push(Arc::new(p));
        self
    }

    /// Merge another builder (a tool pack) into this one.
    #[must_use]
    pub fn merge(mut self, other: CatalogBuilder) -> Self {
        self.tools.extend(other.tools);
        self.resources.extend(other.resources);
        self.templates.extend(other.templates);
        self.prompts.extend(other.prompts);
        for (mine, theirs) in self.offered.lists.iter_mut().zip(other.offered.lists) {
            *mine |= theirs;
        }
        self.offered.resource_updates |= other.offered.resource_updates;
        self
    }

    /// Finish. Later entries with a duplicate name or URI are refused.
    ///
    /// # Errors
    /// [`CatalogError`] naming a duplicate tool, prompt or resource, or an invalid tool name.
    pub fn build(self, info: ServerInfo) -> Result<Catalog, CatalogError> {
        let mut tool_index = FastMap::default();
        let mut header_params = FastMap::default();
        for (i, t) in self.tools.iter().enumerate() {
            let name = &t.spec().name;
            if name.is_empty()
                || name.len() > 64
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-/".contains(&b))
            {
                return Err(CatalogError::InvalidToolName(name.clone()));
            }
            if tool_index.insert(name.clone(), i).is_some() {
                return Err(CatalogError::DuplicateTool(name.clone()));
            }
            check_idempotency_key(t.spec())?;
            let params = crate::proto::stateless::headers::params_of(&t.spec().input_schema)
                .map_err(|why| CatalogError::InvalidHeaderAnnotation { tool: name.clone(), why })?;
            if !params.is_empty() {
                header_params.insert(name.clone(), params);
            }
        }
        let mut prompt_index = FastMap::default();
        for (i, p) in self.prompts.iter().enumerate() {
            if prompt_index.insert(p.spec().name.clone(), i).is_some() {
                return Err(CatalogError::DuplicatePrompt(p.spec().name.clone()));
            }
        }
        let mut resource_index = FastMap::default();
        for (i, r) in self.resources.iter().enumerate() {
            if resource_index.insert(r.spec().uri.clone(), i).is_some() {
                return Err(CatalogError::DuplicateResource(r.spec().uri.clone()));
            }
        }
        let tools_list = json!({"tools": self.tools.iter().map(|t| t.spec()).collect::<Vec<_>>()});
        let prompts_list =
            json!({"prompts": self.prompts.iter().map(|p| p.spec()).collect::<Vec<_>>()});
        let resources_list =
            json!({"resources": self.resources.iter().map(|r| r.spec()).collect::<Vec<_>>()});
        let templates_list = json!({"resourceTemplates": self.templates.iter().map(|t| t.spec()).collect::<Vec<_>>()});
        let mut caps = Map::new();
        if !self.tools.is_empty() {
            caps.insert("tools".into(), json!({"listChanged": false}));
        }
        if !self.resources.is_empty() || !self.templates.is_empty() {
            caps.insert("resources".into(), json!({"subscribe": true, "listChanged": false}));
        }
        if !self.prompts.is_empty() {
            caps.insert("prompts".into(), json!({"listChanged": false}));
        }
        caps.insert("logging".into(), json!({}));
        caps.insert("completions".into(), json!({}));
        let capabilities = Value::Object(caps);
        let tasks = self
            .tools
            .iter()
            .any(|t| t.spec().task_support != crate::proto::task::TaskSupport::Forbidden);
        let modern_capabilities =
            crate::proto::stateless::modern_capabilities(&capabilities, &self.offered, tasks);
        let server_info = json!({"name": info.name, "version": info.version});
        // Each version's `initialize` result as text: a handshake's reply writes it as it is.
        let initialize_texts = crate::proto::version::SUPPORTED.map(|v| {
            let r = crate::proto::mcp::initialize_result(
                v,
                &capabilities,
                &server_info,
                info.instructions.as_deref(),
            );
            (v, serde_json::to_vec(&r).expect("a JSON value always serializes").into())
        });
        Ok(Catalog {
            server_info,
            instructions: info.instructions,
            initialize_texts,
            capabilities,
            modern_capabilities,
            tools: self.tools,
            tool_index,
            header_params,
            resources: self.resources,
            resource_index,
            templates: self.templates,
            prompts: self.prompts,
            prompt_index,
            lists_text: [&tools_list, &prompts_list, &resources_list, &templates_list]
                .map(|l| Reply::of(l).shared()),
            lists: [tools_list, prompts_list, resources_list, templates_list],
            changes: Arc::new(Changes::new(self.offered)),
            handles: std::sync::OnceLock::new(),
        })
    }
}

/// The immutable set of tools, resources and prompts a server offers.
pub struct Catalog {
    server_info: Value,
    instructions: Option<String>,
    /// The `initialize` result of each legacy version, as text.
    initialize_texts: [(ProtocolVersion, Box<[u8]>); crate::proto::version::SUPPORTED.len()],
    capabilities: Value,
    /// The capabilities of `server/discover` (2026-07-28).
    modern_capabilities: Value,
    tools: Vec<Arc<dyn Tool>>,
    tool_index: FastMap<String, usize>,
    /// Each tool's `x-mcp-header` parameters (2026-07-28 `Mcp-Param-*`), when it has any.
    header_params: FastMap<String, Vec<crate::proto::stateless::headers::HeaderParam>>,
    resources: Vec<Arc<dyn Resource>>,
    resource_index: FastMap<String, usize>,
    templates: Vec<Arc<dyn ResourceTemplate>>,
    prompts: Vec<Arc<dyn Prompt>>,
    prompt_index: FastMap<String, usize>,
    /// The results of [`LIST_METHODS`], in that order.
    lists: [Value; 4],
    /// The same as text: what a list request is answered with (shared: a reply is a count
    /// on the text, not a copy of it nor of the values' maps and strings).
    lists_text: [Reply; 4],
    /// Announcements of list changes and resource updates.
    changes: Arc<Changes>,
    /// The state handle store, once a supervisor serves the catalog (it lives in the ledger).
    handles: std::sync::OnceLock<Arc<crate::stores::handles::Handles>>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("tools", &self.tools.len())
            .field("prompts", &self.prompts.len())
            .finish_non_exhaustive()
    }
}

fn check_idempotency_key(spec: &ToolSpec) -> Result<(), CatalogError> {
    let Some(arg) = &spec.idempotency_key_argument else { return Ok(()) };
    let bad = |why| {
        Err(CatalogError::InvalidIdempotencyKey {
            tool: spec.name.clone(),
            argument: arg.clone(),
            why,
        })
    };
    if !spec.is_write() {
        return bad("is declared on a read-only tool (readOnlyHint: true)");
    }
    match spec.input_schema.get("properties").and_then(|p| p.get(arg)).and_then(|p| p.get("type")) {
        Some(Value::String(t)) if t == "string" => Ok(()),
        _ => bad("is not a string property of the input schema"),
    }
}

/// The legacy era's "resource not found" error (`-32002`, with `data.uri`).
#[must_use]
pub fn resource_not_found(uri: &str) -> ErrorObject {
    ErrorObject::new(code::RESOURCE_NOT_FOUND, "Resource not found").with_data(json!({"uri": uri}))
}

fn invalid_params(msg: impl Into<String>) -> ErrorObject {
    ErrorObject::new(code::INVALID_PARAMS, msg)
}

fn str_param<'a>(params: Option<&'a Value>, key: &str) -> Result<&'a str, ErrorObject> {
    params
        .and_then(|p| p.get(key))
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params(format!("missing string parameter {key:?}")))
}

/// The list methods, in the order of a catalog's `lists`.
pub(crate) const LIST_METHODS: [&str; 4] =
    ["tools/list", "prompts/list", "resources/list", "resources/templates/list"];

/// Where `method`'s list is in [`LIST_METHODS`] (`None`: not a list method), or the refusal
/// of its cursor.
fn list_index(method: &str, params: Option<&Value>) -> Option<Result<usize, ErrorObject>> {
    let i = LIST_METHODS.iter().position(|m| *m == method)?;
    Some(no_cursor(params).map(|()| i))
}

/// We never issue pagination cursors (every list fits one page), so any cursor is invalid.
fn no_cursor(params: Option<&Value>) -> Result<(), ErrorObject> {
    match params.and_then(|p| p.get("cursor")) {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(invalid_params("invalid pagination cursor")),
    }
}

/// Match an RFC 6570 level-1 template (`{var}` expansions, each matching a non-empty run
/// without `/`) against a URI.
#[must_use]
pub fn match_template(template: &str, uri: &str) -> Option<Map<String, Value>> {
    let mut vars = Map::new();
    let mut rest_t = template;
    let mut rest_u = uri;
    while !rest_t.is_empty() {
        if let Some(after_brace) = rest_t.strip_prefix('{') {
            let end = after_brace.find('}')?;
            let name = &after_brace[..end];
            rest_t = &after_brace[end + 1..];
            let next_lit_end = rest_t.find('{').unwrap_or(rest_t.len());
            let lit = &rest_t[..next_lit_end];
            let stop = if lit.is_empty() {
                rest_u.find('/').unwrap_or(rest_u.len())
            } else {
                rest_u.find(lit)?
            };
            let value = &rest_u[..stop];
            if value.is_empty() || value.contains('/') {
                return None;
            }
            vars.insert(name.to_owned(), Value::from(value));
            rest_u = &rest_u[stop..];
        } else {
            let lit_end = rest_t.find('{').unwrap_or(rest_t.len());
            rest_u = rest_u.strip_prefix(&rest_t[..lit_end])?;
            rest_t = &rest_t[lit_end..];
        }
    }
    rest_u.is_empty().then_some(vars)
}

impl Catalog {
    /// Start building.
    #[must_use]
    pub fn builder() -> CatalogBuilder {
        CatalogBuilder::default()
    }

    /// `serverInfo`.
    #[must_use]
    pub fn server_info(&self) -> &Value {
        &self.server_info
    }

    /// Instructions for the model.
    #[must_use]
    pub fn instructions(&self) -> Option<&str> {
        self.instructions.as_deref()
    }

    /// The `initialize` result for a session of `version`, as JSON text (its `capabilities`,
    /// `serverInfo` and `instructions` are this catalog's): made once, when it was built.
    #[must_use]
    pub fn initialize_result_text(&self, version: ProtocolVersion) -> &[u8] {
        let (_, text) = self
            .initialize_texts
            .iter()
            .find(|(v, _)| *v == version)
            .expect("every legacy version has its result");
        text
    }

    /// `ServerCapabilities` of the legacy `initialize` result.
    #[must_use]
    pub fn capabilities(&self) -> &Value {
        &self.capabilities
    }

    /// `ServerCapabilities` of the 2026-07-28 `server/discover` result (see
    /// [`crate::proto::stateless::modern_capabilities`]).
    #[must_use]
    pub fn modern_capabilities(&self) -> &Value {
        &self.modern_capabilities
    }

    /// Where list changes and resource updates are announced (to `subscriptions/listen`
    /// streams); handlers reach it through their [`ToolContext`].
    #[must_use]
    pub fn changes(&self) -> &Arc<Changes> {
        &self.changes
    }

    /// Give handlers the state handle store (done once, by the supervisor that serves the
    /// catalog; a second store is ignored).
    pub fn attach_handles(&self, handles: Arc<crate::stores::handles::Handles>) {
        let _ = self.handles.set(handles);
    }

    /// The context a handler gets: `cx` with the catalog's change announcements and handle
    /// store.
    fn context(&self, cx: impl FnOnce() -> ToolContext) -> ToolContext {
        let cx = cx().with_changes(Arc::clone(&self.changes));
        match self.handles.get() {
            Some(h) => cx.with_handles(Arc::clone(h)),
            None => cx,
        }
    }

    /// A tool's spec by name.
    #[must_use]
    pub fn tool(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tool_index.get(name).map(|&i| &self.tools[i])
    }

    /// The `Mcp-Param-*` parameters a tool's input schema annotates (empty for most tools).
    #[must_use]
    pub fn header_params(&self, tool: &str) -> &[crate::proto::stateless::headers::HeaderParam] {
        self.header_params.get(tool).map_or(&[], Vec::as_slice)
    }

    /// Whether `uri` names a listed resource or matches a template.
    #[must_use]
    pub fn has_resource(&self, uri: &str) -> bool {
        self.resource_index.contains_key(uri)
            || self.templates.iter().any(|t| match_template(&t.spec().uri_template, uri).is_some())
    }

    /// Whether a `tools/call` names a write tool (one not annotated `readOnlyHint: true`).
    /// Unknown tools are not writes (dispatch refuses them).
    #[must_use]
    pub fn is_write_call(&self, params: Option<&Value>) -> bool {
        params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .and_then(|n| self.tool(n))
            .is_some_and(|t| t.spec().is_write())
    }

    /// The idempotency key of a `tools/call`: `None` for other tools than write tools, for
    /// unknown tools (dispatch answers those) and for calls without a key.
    ///
    /// # Errors
    /// `-32602` for a key that is not a string of 1 to [`IDEMPOTENCY_KEY_MAX_BYTES`] bytes.
    pub fn idempotent_call(
        &self,
        params: Option<&Value>,
    ) -> Result<Option<IdempotentCall>, ErrorObject> {
        match params.and_then(|p| p.get("name")).and_then(Value::as_str).and_then(|n| self.tool(n))
        {
            Some(tool) => crate::proto::route::classify_call(&tool.spec().traits(), params).key,
            None => Ok(None),
        }
    }

    /// The result of a list method (`tools/list`, `prompts/list`, `resources/list`,
    /// `resources/templates/list`): the same value on every call, in catalog order. `None` for
    /// another method.
    #[must_use]
    pub fn list(&self, method: &str, params: Option<&Value>) -> Option<Result<Value, ErrorObject>> {
        self.list_ref(method, params).map(|r| r.cloned())
    }

    /// [`Catalog::list`], borrowed (for a filter, which makes its own value).
    pub(crate) fn list_ref(
        &self,
        method: &str,
        params: Option<&Value>,
    ) -> Option<Result<&Value, ErrorObject>> {
        Some(list_index(method, params)?.map(|i| &self.lists[i]))
    }

    /// [`Catalog::list`] as the reply sent: the list's shared text.
    fn list_reply(
        &self,
        method: &str,
        params: Option<&Value>,
    ) -> Option<Result<Reply, ErrorObject>> {
        Some(list_index(method, params)?.map(|i| self.lists_text[i].clone()))
    }

    /// Dispatch a catalog method. `cx` is called only for `tools/call`, `prompts/get` and
    /// `resources/read`. A handler that panics (making its future, or in any poll of it) ends
    /// only this call, answered `-32603` (see [`super::unwind`]).
    pub fn dispatch(
        &self,
        method: &str,
        params: Option<&Value>,
        cx: impl FnOnce() -> ToolContext,
    ) -> Dispatch {
        match super::unwind::catch(|| self.dispatch_with(method, params, cx, Polls::Caught)) {
            Ok(d) => d,
            Err(p) => Dispatch::Ready(Err(p.to_error_object())),
        }
    }

    /// [`Catalog::dispatch`] with a handler's panic left to unwind.
    #[cfg(test)]
    pub(crate) fn dispatch_uncaught(
        &self,
        method: &str,
        params: Option<&Value>,
        cx: impl FnOnce() -> ToolContext,
    ) -> Dispatch {
        self.dispatch_with(method, params, cx, Polls::Uncaught)
    }

    /// Dispatch a catalog method, a handler that waits wrapped as `polls` says.
    fn dispatch_with(
        &self,
        method: &str,
        params: Option<&Value>,
        cx: impl FnOnce() -> ToolContext,
        polls: Polls,
    ) -> Dispatch {
        use Dispatch::Ready;
        if let Some(r) = self.list_reply(method, params) {
            return Ready(r);
        }
        match method {
            "tools/call" => self.call_tool(params, cx, Reply::of, polls),
            "resources/read" => self.read_resource(params, cx, polls),
            "prompts/get" => self.get_prompt(params, cx, polls),
            "completion/complete" => Ready(Ok(
                json!({"completion": {"values": [], "total": 0, "hasMore": false}}).into(),
            )),
            _ => Ready(Err(ErrorObject::new(
                code::METHOD_NOT_FOUND,
                format!("Method not found: {method}"),
            ))),
        }
    }

    /// A `tools/call` whose result is kept (a receipt's): made a value at once, not text to
    /// be read back. A handler's panic unwinds to the caller, which must catch it (receipts
    /// do: a panicked call's outcome is unknown, not an error to replay).
    pub(crate) fn call_tool_kept(
        &self,
        params: Option<&Value>,
        cx: impl FnOnce() -> ToolContext,
    ) -> Dispatch {
        let value = |r: &CallToolResult| {
            // A `CallToolResult`'s maps have string keys: it always makes a value.
            Reply::Value(serde_json::to_value(r).expect("a tool result makes a JSON value"))
        };
        self.call_tool(params, cx, value, Polls::Uncaught)
    }

    /// A `tools/call`, its result made into a reply by `reply`.
    fn call_tool(
        &self,
        params: Option<&Value>,
        cx: impl FnOnce() -> ToolContext,
        reply: fn(&CallToolResult) -> Reply,
        polls: Polls,
    ) -> Dispatch {
        let name = match str_param(params, "name") {
            Ok(n) => n,
            Err(e) => return Dispatch::Ready(Err(e)),
        };
        let Some(tool) = self.tool(name) else {
            return Dispatch::Ready(Err(invalid_params(format!("Unknown tool: {name}"))));
        };
        let args = match params.and_then(|p| p.get("arguments")) {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(a @ Value::Object(_)) => a.clone(),
            Some(_) => return Dispatch::Ready(Err(invalid_params("arguments must be an object"))),
        };
        if let Err(msg) = validate_arguments(&tool.spec().input_schema, &args) {
            return Dispatch::Ready(Ok(reply(&CallToolResult::error(format!(
                "Invalid arguments: {msg}"
            )))));
        }
        let fut = tool.call(args, self.context(cx));
        polls.pending(fut, move |r| match r {
            Ok(r) => Ok(reply(&r)),
            Err(ToolError::Failed(msg)) => Ok(reply(&CallToolResult::error(msg))),
            Err(ToolError::Protocol(e)) => Err(e),
        })
    }

    fn read_resource(
        &self,
        params: Option<&Value>,
        cx: impl FnOnce() -> ToolContext,
        polls: Polls,
    ) -> Dispatch {
        let uri = match str_param(params, "uri") {
            Ok(u) => u.to_owned(),
            Err(e) => return Dispatch::Ready(Err(e)),
        };
        let cx = || self.context(cx);
        let fut = if let Some(&i) = self.resource_index.get(&uri) {
            self.resources[i].read(cx())
        } else if let Some((t, vars)) = self
            .templates
            .iter()
            .find_map(|t| match_template(&t.spec().uri_template, &uri).map(|v| (t, v)))
        {
            t.read(&uri, &vars, cx())
        } else {
            return Dispatch::Ready(Err(resource_not_found(&uri)));
        };
        /// A `resources/read` result.
        #[derive(serde::Serialize)]
        struct Read<T> {
            contents: T,
        }
        polls.pending(fut, |r| r.map(|contents| Reply::of(&Read { contents })))
    }

    fn get_prompt(
        &self,
        params: Option<&Value>,
        cx: impl FnOnce() -> ToolContext,
        polls: Polls,
    ) -> Dispatch {
        let name = match str_param(params, "name") {
            Ok(n) => n,
            Err(e) => return Dispatch::Ready(Err(e)),
        };
        let Some(&i) = self.prompt_index.get(name) else {
            return Dispatch::Ready(Err(invalid_params(format!("Unknown prompt: {name}"))));
        };
        let prompt = &self.prompts[i];
        let args = match params.and_then(|p| p.get("arguments")) {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Dispatch::Ready(Err(invalid_params("arguments must be an object"))),
        };
        for a in prompt.spec().arguments.iter().filter(|a| a.required) {
            if !args.contains_key(&a.name) {
                return Dispatch::Ready(Err(invalid_params(format!(
                    "missing required argument {:?}",
                    a.name
                ))));
            }
        }
        let fut = prompt.get(args, self.context(cx));
        polls.pending(fut, |r| r.map(|r| Reply::of(&r)))
    }
}

/// How a handler that waits is polled: each poll's panic caught ([`Catalog::dispatch`]), or
/// left to unwind to the caller's own catch (a receipt's run, `dispatch_uncaught`).
#[derive(Debug, Clone, Copy)]
enum Polls {
    Caught,
    Uncaught,
}

impl Polls {
    /// The handler's future `fut`, its outcome made the call's by `answer`, in one box: the
    /// catch of its panics wraps the handler's own box in the same future, rather than
    /// boxing the answer's step and then the catch around it (two allocations a call).
    fn pending<T: 'static>(
        self,
        fut: BoxFuture<T>,
        answer: impl FnOnce(T) -> Result<Reply, ErrorObject> + Send + 'static,
    ) -> Dispatch {
        match self {
            Polls::Caught => Dispatch::Pending(Box::pin(async move {
                // Its answer's step is caught too: the call ends as for a panic in a poll.
                let answered = super::unwind::CatchUnwind::new(fut)
                    .await
                    .and_then(|r| super::unwind::catch(|| answer(r)));
                answered.unwrap_or_else(|p| Err(p.to_error_object()))
            })),
            Polls::Uncaught => Dispatch::Pending(Box::pin(async move { answer(fut.await) })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolAnnotations;

    #[test]
    fn each_versions_initialize_result_is_made_once_as_the_result_it_states() {
        let info = ServerInfo {
            name: "n".into(),
            version: "1".into(),
            instructions: Some("say \"hi\"".into()),
        };
        let c = Catalog::builder().build(info).unwrap();
        for v in crate::proto::version::SUPPORTED {
            let text: Value = serde_json::from_slice(c.initialize_result_text(v)).unwrap();
            let made = crate::proto::mcp::initialize_result(
                v,
                c.capabilities(),
                c.server_info(),
                c.instructions(),
            );
            assert_eq!(text, made, "{v:?}");
            assert_eq!(text["protocolVersion"], v.as_str());
            assert_eq!(text["instructions"], "say \"hi\"");
        }
    }

    #[test]
    fn template_matching() {
        let m = match_template("test://template/{id}/data", "test://template/123/data").unwrap();
        assert_eq!(m["id"], "123");
        assert!(match_template("test://template/{id}/data", "test://template//data").is_none());
        assert!(match_template("test://template/{id}/data", "test://template/1/2/data").is_none());
        assert!(match_template("a/{x}", "a/b").is_some());
        assert!(match_template("a/{x}", "a/b/c").is_none());
    }

    #[test]
    fn a_list_is_answered_with_its_text_and_equals_its_value() {
        let spec = ToolSpec::new("t", "a tool", json!({"type": "object"}));
        let c = keyed(spec).unwrap();
        for method in LIST_METHODS {
            let Dispatch::Ready(Ok(reply)) = c.dispatch_uncaught(method, None, || unreachable!())
            else {
                panic!("{method} answers at once")
            };
            assert!(matches!(reply, Reply::Raw(_)), "{method}");
            assert!(reply == c.list(method, None).unwrap().unwrap(), "{method}");
        }
        assert!(
            c.list_reply("tools/list", None).unwrap().unwrap()
                == json!({"tools": [c.tool("t").unwrap().spec()]})
        );
        // Every reply sends the one text made with the catalog, not a copy of it.
        let text = |r: &Reply| match r {
            Reply::Raw(t) => t.get().as_ptr(),
            Reply::Value(_) => panic!("a list is sent as text"),
        };
        let reply = || c.list_reply("tools/list", None).unwrap().unwrap();
        let (a, b) = (reply(), reply());
        assert_eq!(text(&a), text(&b), "shared, not copied");
        let cursor = json!({"cursor": "x"});
        let Dispatch::Ready(Err(e)) =
            c.dispatch_uncaught("tools/list", Some(&cursor), || unreachable!())
        else {
            panic!("a cursor is refused")
        };
        assert_eq!(e.code, code::INVALID_PARAMS);
    }

    fn keyed(spec: ToolSpec) -> Result<Catalog, CatalogError> {
        Catalog::builder()
            .tool(crate::tools::tool_fn(spec, |_, _| async { Ok(CallToolResult::text("x")) }))
            .build(ServerInfo { name: "t".into(), version: "0".into(), instructions: None })
    }

    #[test]
    fn an_idempotency_key_argument_must_be_a_string_property_of_a_write_tool() {
        let schema =
            json!({"type":"object","properties":{"key":{"type":"string"},"n":{"type":"integer"}}});
        let write = ToolAnnotations { read_only_hint: Some(false), ..Default::default() };
        assert!(
            keyed(
                ToolSpec::new("w", "d", schema.clone())
                    .annotations(write.clone())
                    .idempotency_key_argument("key")
            )
            .is_ok()
        );
        for (spec, why) in [
            (
                ToolSpec::new("w", "d", schema.clone())
                    .annotations(write.clone())
                    .idempotency_key_argument("n"),
                "not a string",
            ),
            (
                ToolSpec::new("w", "d", schema.clone())
                    .annotations(write)
                    .idempotency_key_argument("missing"),
                "not a string",
            ),
            (
                ToolSpec::new("w", "d", schema)
                    .annotations(ToolAnnotations {
                        read_only_hint: Some(true),
                        ..Default::default()
                    })
                    .idempotency_key_argument("key"),
                "read-only",
            ),
        ] {
            let e = keyed(spec).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("\"w\""), "{e}");
        }
    }

    #[test]
    fn an_invalid_x_mcp_header_annotation_is_a_build_error_naming_the_tool() {
        let bad = json!({"type":"object","properties":{"n":{"type":"number","x-mcp-header":"N"}}});
        let e = keyed(ToolSpec::new("priced", "d", bad)).unwrap_err();
        assert!(
            matches!(&e, CatalogError::InvalidHeaderAnnotation { tool, .. } if tool == "priced"),
            "{e}"
        );
        let good = json!({"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}});
        let c = keyed(ToolSpec::new("w", "d", good)).unwrap();
        assert_eq!(c.header_params("w")[0].name, "Region");
        assert!(c.header_params("other").is_empty());
    }

    #[test]
    fn the_key_comes_from_meta_first_then_from_the_declared_argument() {
        let schema = json!({"type":"object","properties":{"key":{"type":"string"}}});
        let c = keyed(ToolSpec::new("w", "d", schema).idempotency_key_argument("key")).unwrap();
        let call = |p: Value| c.idempotent_call(Some(&p)).unwrap().map(|k| k.key);
        assert_eq!(call(json!({"name": "w", "arguments": {"key": "a"}})), Some("a".into()));
        assert_eq!(
            call(
                json!({"name": "w", "arguments": {"key": "a"}, "_meta": {IDEMPOTENCY_KEY_META: "m"}})
            ),
            Some("m".into())
        );
        assert_eq!(call(json!({"name": "w", "arguments": {}})), None);
        assert_eq!(call(json!({"name": "unknown", "_meta": {IDEMPOTENCY_KEY_META: "m"}})), None);
        assert!(c.idempotent_call(Some(&json!({"name": "w", "arguments": {"key": 5}}))).is_err());
    }
}
