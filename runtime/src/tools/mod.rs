//! Tools, resources and prompts: the traits an application implements, the wire shapes of
//! their results, the catalog that lists and dispatches them, and the per-call context.
//!
//! The catalog is immutable once built (lists never vary per session or connection).

mod catalog;
mod changes;
mod context;
mod helpers;
mod types;
pub(crate) mod unwind;

pub use crate::proto::schema::validate_arguments;
pub use crate::proto::stateless::listen::ListKind;
pub(crate) use catalog::LIST_METHODS;
pub use catalog::{
    Catalog, CatalogBuilder, CatalogError, Dispatch, IDEMPOTENCY_KEY_MAX_BYTES,
    IDEMPOTENCY_KEY_META, IdempotentCall, ServerInfo, match_template, resource_not_found,
};
pub(crate) use changes::Relay;
pub use changes::{ChangeFeed, Changes, UPDATE_QUEUE};
pub use context::{ToolContext, ToolOutbound};
pub use helpers::{
    AsyncPrompt, AsyncResource, FnPrompt, FnTemplate, FnTool, StaticResource, prompt_async_fn,
    prompt_fn, resource_async_fn, template_fn, tool_fn,
};
pub use types::*;

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};

use crate::proto::jsonrpc::ErrorObject;

/// A boxed, sendable future: what tool, resource and prompt handlers return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A tool. Implementations are shared across sessions and threads.
pub trait Tool: Send + Sync + 'static {
    /// Name, description, input schema and annotations.
    fn spec(&self) -> &ToolSpec;

    /// Run the tool. `args` has already been checked against the input schema (see
    /// [`validate_arguments`] for the supported subset). Returning `Err` produces a result
    /// with `isError: true` (the model can correct itself); use
    /// [`ToolError::Protocol`] only for protocol errors.
    fn call(&self, args: Value, cx: ToolContext) -> BoxFuture<Result<CallToolResult, ToolError>>;
}

/// A resource with a fixed URI.
pub trait Resource: Send + Sync + 'static {
    /// URI, name, MIME type.
    fn spec(&self) -> &ResourceSpec;
    /// Read the contents. `cx` is the request's context: a resource may ask the client
    /// ([`ToolContext::input`]) like a tool.
    fn read(&self, cx: ToolContext) -> BoxFuture<Result<Vec<ResourceContents>, ErrorObject>>;
}

/// A family of resources named by an RFC 6570 level-1 URI template (`{var}` segments).
pub trait ResourceTemplate: Send + Sync + 'static {
    /// Template, name, MIME type.
    fn spec(&self) -> &ResourceTemplateSpec;
    /// Read the resource `uri`, whose template variables are `vars`; `cx` as for
    /// [`Resource::read`].
    fn read(
        &self,
        uri: &str,
        vars: &Map<String, Value>,
        cx: ToolContext,
    ) -> BoxFuture<Result<Vec<ResourceContents>, ErrorObject>>;
}

/// A prompt.
pub trait Prompt: Send + Sync + 'static {
    /// Name, description, arguments.
    fn spec(&self) -> &PromptSpec;
    /// Render the prompt. Required arguments are checked before this is called. `cx` is the
    /// request's context: a prompt may ask the client ([`ToolContext::input`]) like a tool.
    fn get(
        &self,
        args: Map<String, Value>,
        cx: ToolContext,
    ) -> BoxFuture<Result<GetPromptResult, ErrorObject>>;
}
