//! Closure-backed implementations of the traits, for tools and prompts that need no state of
//! their own.

use std::future::Future;

use serde_json::{Map, Value};

use super::{
    BoxFuture, CallToolResult, GetPromptResult, Prompt, PromptSpec, Resource, ResourceContents,
    ResourceSpec, ResourceTemplate, ResourceTemplateSpec, Tool, ToolContext, ToolError, ToolSpec,
};
use crate::proto::jsonrpc::ErrorObject;

/// A tool whose behaviour is a closure.
pub struct FnTool<F> {
    spec: ToolSpec,
    f: F,
}

/// Make a tool from a spec and an async closure.
pub fn tool_fn<F, Fut>(spec: ToolSpec, f: F) -> FnTool<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<CallToolResult, ToolError>> + Send + 'static,
{
    FnTool { spec, f }
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<CallToolResult, ToolError>> + Send + 'static,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value, cx: ToolContext) -> BoxFuture<Result<CallToolResult, ToolError>> {
        Box::pin((self.f)(args, cx))
    }
}

/// A resource with fixed contents.
pub struct StaticResource {
    spec: ResourceSpec,
    contents: Vec<ResourceContents>,
}

impl StaticResource {
    /// A resource that always reads as `contents`.
    #[must_use]
    pub fn new(spec: ResourceSpec, contents: Vec<ResourceContents>) -> StaticResource {
        StaticResource { spec, contents }
    }
}

impl Resource for StaticResource {
    fn spec(&self) -> &ResourceSpec {
        &self.spec
    }

    fn read(&self, _: ToolContext) -> BoxFuture<Result<Vec<ResourceContents>, ErrorObject>> {
        let c = self.contents.clone();
        Box::pin(async move { Ok(c) })
    }
}

/// A resource whose reads are an async closure of the request's context (it may ask the
/// client with [`ToolContext::input`]).
pub struct AsyncResource<F> {
    spec: ResourceSpec,
    f: F,
}

/// Make a resource from a spec and an async closure of its [`ToolContext`].
pub fn resource_async_fn<F, Fut>(spec: ResourceSpec, f: F) -> AsyncResource<F>
where
    F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Vec<ResourceContents>, ErrorObject>> + Send + 'static,
{
    AsyncResource { spec, f }
}

impl<F, Fut> Resource for AsyncResource<F>
where
    F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Vec<ResourceContents>, ErrorObject>> + Send + 'static,
{
    fn spec(&self) -> &ResourceSpec {
        &self.spec
    }

    fn read(&self, cx: ToolContext) -> BoxFuture<Result<Vec<ResourceContents>, ErrorObject>> {
        Box::pin((self.f)(cx))
    }
}

/// A resource template whose reads are a closure of `(uri, vars)`.
pub struct FnTemplate<F> {
    spec: ResourceTemplateSpec,
    f: F,
}

/// Make a template from a spec and a synchronous closure.
pub fn template_fn<F>(spec: ResourceTemplateSpec, f: F) -> FnTemplate<F>
where
    F: Fn(&str, &Map<String, Value>) -> Result<Vec<ResourceContents>, ErrorObject>
        + Send
        + Sync
        + 'static,
{
    FnTemplate { spec, f }
}

impl<F> ResourceTemplate for FnTemplate<F>
where
    F: Fn(&str, &Map<String, Value>) -> Result<Vec<ResourceContents>, ErrorObject>
        + Send
        + Sync
        + 'static,
{
    fn spec(&self) -> &ResourceTemplateSpec {
        &self.spec
    }

    fn read(
        &self,
        uri: &str,
        vars: &Map<String, Value>,
        _: ToolContext,
    ) -> BoxFuture<Result<Vec<ResourceContents>, ErrorObject>> {
        let r = (self.f)(uri, vars);
        Box::pin(async move { r })
    }
}

/// A prompt rendered by a synchronous closure.
pub struct FnPrompt<F> {
    spec: PromptSpec,
    f: F,
}

/// Make a prompt from a spec and a closure over its arguments.
pub fn prompt_fn<F>(spec: PromptSpec, f: F) -> FnPrompt<F>
where
    F: Fn(&Map<String, Value>) -> Result<GetPromptResult, ErrorObject> + Send + Sync + 'static,
{
    FnPrompt { spec, f }
}

impl<F> Prompt for FnPrompt<F>
where
    F: Fn(&Map<String, Value>) -> Result<GetPromptResult, ErrorObject> + Send + Sync + 'static,
{
    fn spec(&self) -> &PromptSpec {
        &self.spec
    }

    fn get(
        &self,
        args: Map<String, Value>,
        _cx: ToolContext,
    ) -> BoxFuture<Result<GetPromptResult, ErrorObject>> {
        let r = (self.f)(&args);
        Box::pin(async move { r })
    }
}

/// A prompt rendered by an async closure that gets the request's [`ToolContext`] (to ask the
/// client with [`ToolContext::input`] before rendering).
pub struct AsyncPrompt<F> {
    spec: PromptSpec,
    f: F,
}

/// Make a prompt from a spec and an async closure over its arguments and context.
pub fn prompt_async_fn<F, Fut>(spec: PromptSpec, f: F) -> AsyncPrompt<F>
where
    F: Fn(Map<String, Value>, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<GetPromptResult, ErrorObject>> + Send + 'static,
{
    AsyncPrompt { spec, f }
}

impl<F, Fut> Prompt for AsyncPrompt<F>
where
    F: Fn(Map<String, Value>, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<GetPromptResult, ErrorObject>> + Send + 'static,
{
    fn spec(&self) -> &PromptSpec {
        &self.spec
    }

    fn get(
        &self,
        args: Map<String, Value>,
        cx: ToolContext,
    ) -> BoxFuture<Result<GetPromptResult, ErrorObject>> {
        Box::pin((self.f)(args, cx))
    }
}
