use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::proto::jsonrpc::ErrorObject;

/// Standard tool annotations (hints, not guarantees).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// Human-readable title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Repeating a call with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// A tool's listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// Unique name (`[A-Za-z0-9_.-]`, 1-64 characters).
    pub name: String,
    /// Display title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does (conformance requires it non-empty).
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
    /// JSON Schema of `structuredContent`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Behaviour hints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// The argument (a string property of the input schema) that is the call's idempotency
    /// key, for a write tool; `_meta["io.mcp-host/idempotencyKey"]` wins when both are sent.
    /// Not listed.
    #[serde(skip)]
    pub idempotency_key_argument: Option<String>,
    /// Whether a 2026-07-28 call may, or must, run as a task (the tasks extension). Not
    /// listed (2026-07-28 has no field for it).
    #[serde(skip)]
    pub task_support: crate::proto::task::TaskSupport,
    /// The tool changes state handles ([`ToolContext::handles`](crate::tools::ToolContext::handles)):
    /// while the ledger cannot commit, its calls are refused (503) before it runs. Not listed.
    #[serde(skip)]
    pub keeps_state: bool,
}

impl ToolSpec {
    /// A spec with a name, description and input schema.
    #[must_use]
    pub fn new(name: &str, description: &str, input_schema: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema,
            output_schema: None,
            annotations: None,
            idempotency_key_argument: None,
            task_support: crate::proto::task::TaskSupport::Forbidden,
            keeps_state: false,
        }
    }

    /// Declare that the tool creates, changes or destroys state handles: while the ledger
    /// cannot commit, its calls are refused with 503 before it runs instead of failing
    /// halfway. (Reads of handles need nothing new and keep working.)
    #[must_use]
    pub fn keeps_state(mut self) -> ToolSpec {
        self.keeps_state = true;
        self
    }

    /// Let 2026-07-28 calls of this tool run as tasks when the client supports them
    /// ([`TaskSupport::Optional`](crate::proto::task::TaskSupport::Optional)), or make them
    /// need it ([`TaskSupport::Required`](crate::proto::task::TaskSupport::Required)).
    #[must_use]
    pub fn task_support(mut self, support: crate::proto::task::TaskSupport) -> ToolSpec {
        self.task_support = support;
        self
    }

    /// Declare the argument that carries the call's idempotency key (see
    /// [`crate::tools::IDEMPOTENCY_KEY_META`]). The catalog refuses a read-only tool or an
    /// argument the schema does not declare as a string.
    #[must_use]
    pub fn idempotency_key_argument(mut self, name: &str) -> ToolSpec {
        self.idempotency_key_argument = Some(name.into());
        self
    }

    /// Whether the tool is a write tool (not annotated `readOnlyHint: true`): its calls can
    /// carry an idempotency key.
    #[must_use]
    pub fn is_write(&self) -> bool {
        self.annotations.as_ref().and_then(|a| a.read_only_hint) != Some(true)
    }

    /// Whether the tool is annotated `idempotentHint: true`.
    #[must_use]
    pub fn is_idempotent(&self) -> bool {
        self.annotations.as_ref().and_then(|a| a.idempotent_hint) == Some(true)
    }

    /// What the door of a `tools/call` needs to know of this tool.
    #[must_use]
    pub(crate) fn traits(&self) -> crate::proto::route::ToolTraits<'_> {
        crate::proto::route::ToolTraits {
            name: &self.name,
            write: self.is_write(),
            idempotent: self.is_idempotent(),
            keeps_state: self.keeps_state,
            key_argument: self.idempotency_key_argument.as_deref(),
        }
    }

    /// Set the annotations.
    #[must_use]
    pub fn annotations(mut self, a: ToolAnnotations) -> ToolSpec {
        self.annotations = Some(a);
        self
    }
}

/// Contents of a resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ResourceContents {
    /// Text.
    Text {
        /// URI.
        uri: String,
        /// MIME type.
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// The text.
        text: String,
    },
    /// Binary, base64-encoded.
    Blob {
        /// URI.
        uri: String,
        /// MIME type.
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Base64 data.
        blob: String,
    },
}

impl ResourceContents {
    /// Text contents.
    #[must_use]
    pub fn text(uri: &str, mime_type: &str, text: impl Into<String>) -> ResourceContents {
        ResourceContents::Text {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            text: text.into(),
        }
    }

    /// Binary contents (already base64).
    #[must_use]
    pub fn blob(uri: &str, mime_type: &str, blob_base64: impl Into<String>) -> ResourceContents {
        ResourceContents::Blob {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            blob: blob_base64.into(),
        }
    }
}

/// A content block of a tool result or prompt message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (base64).
    Image {
        /// Base64 data.
        data: String,
        /// MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio (base64).
    Audio {
        /// Base64 data.
        data: String,
        /// MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// An embedded resource.
    Resource {
        /// The contents.
        resource: ResourceContents,
    },
    /// A link to a resource.
    ResourceLink {
        /// URI.
        uri: String,
        /// Name.
        name: String,
        /// MIME type.
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

impl Content {
    /// A text block.
    #[must_use]
    pub fn text(t: impl Into<String>) -> Content {
        Content::Text { text: t.into() }
    }
}

/// The result of `tools/call`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    /// Content blocks.
    pub content: Vec<Content>,
    /// Structured output (an object in the legacy era).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// The tool failed; `content` says why.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub is_error: bool,
}

impl CallToolResult {
    /// A successful result with one text block.
    #[must_use]
    pub fn text(t: impl Into<String>) -> CallToolResult {
        CallToolResult { content: vec![Content::text(t)], ..CallToolResult::default() }
    }

    /// A successful result with structured output `value`, and its JSON text as the one
    /// content block (for clients that read only `content`).
    #[must_use]
    pub fn structured(value: Value) -> CallToolResult {
        CallToolResult {
            content: vec![Content::text(value.to_string())],
            structured_content: Some(value),
            is_error: false,
        }
    }

    /// A successful result with these blocks.
    #[must_use]
    pub fn content(content: Vec<Content>) -> CallToolResult {
        CallToolResult { content, ..CallToolResult::default() }
    }

    /// A failed result (`isError: true`) with one text block.
    #[must_use]
    pub fn error(t: impl Into<String>) -> CallToolResult {
        CallToolResult { content: vec![Content::text(t)], structured_content: None, is_error: true }
    }
}

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// The tool failed; becomes a result with `isError: true`.
    #[error("{0}")]
    Failed(String),
    /// A protocol-level error (JSON-RPC error response).
    #[error("{}", .0.message)]
    Protocol(ErrorObject),
}

/// A resource's listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSpec {
    /// URI.
    pub uri: String,
    /// Name.
    pub name: String,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// A resource template's listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplateSpec {
    /// RFC 6570 level-1 template.
    pub uri_template: String,
    /// Name.
    pub name: String,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// A prompt argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptArgument {
    /// Name.
    pub name: String,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Must be supplied.
    #[serde(default)]
    pub required: bool,
}

/// A prompt's listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptSpec {
    /// Name.
    pub name: String,
    /// Description (conformance requires it non-empty).
    pub description: String,
    /// Arguments.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub arguments: Vec<PromptArgument>,
}

/// A prompt message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// Content.
    pub content: Content,
}

/// The result of `prompts/get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GetPromptResult {
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Messages.
    pub messages: Vec<PromptMessage>,
}
