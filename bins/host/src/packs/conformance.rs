//! The `conformance` pack: exactly the tools, resources and prompts the official MCP
//! conformance suite exercises (shared/CONFORMANCE.md §3).

use std::time::Duration;

use mcp_runtime::proto::jsonrpc::ErrorObject;
use mcp_runtime::proto::mcp::LogLevel;
use mcp_runtime::proto::task::TaskSupport;
use mcp_runtime::tools::{
    CallToolResult, CatalogBuilder, Content, GetPromptResult, ListKind, PromptArgument,
    PromptMessage, PromptSpec, ResourceContents, ResourceSpec, ResourceTemplateSpec,
    StaticResource, ToolError, ToolSpec, prompt_fn, template_fn, tool_fn,
};
use serde_json::{Value, json};

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

fn empty_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

fn image() -> Content {
    Content::Image { data: PNG.into(), mime_type: "image/png".into() }
}

fn text_arg(args: &Value, key: &str) -> String {
    args.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// Ask the client to elicit with `schema` and describe the outcome.
async fn elicit(
    cx: &mcp_runtime::tools::ToolContext,
    message: &str,
    schema: Value,
    prefix: &str,
) -> Result<CallToolResult, ToolError> {
    let r = cx
        .request("elicitation/create", json!({"message": message, "requestedSchema": schema}))
        .await
        .map_err(ToolError::Protocol)?;
    let action = r.get("action").and_then(Value::as_str).unwrap_or("unknown");
    let content = r.get("content").cloned().unwrap_or(Value::Null);
    Ok(CallToolResult::text(format!("{prefix}: action={action}, content={content}")))
}

fn tools(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(tool_fn(ToolSpec::new("test_simple_text", "Returns a simple text response.", empty_schema()), |_, _| async {
        Ok(CallToolResult::text("This is a simple text response for testing."))
    }))
    .tool(tool_fn(ToolSpec::new("test_image_content", "Returns a 1x1 PNG image.", empty_schema()), |_, _| async {
        Ok(CallToolResult::content(vec![image()]))
    }))
    .tool(tool_fn(ToolSpec::new("test_audio_content", "Returns a short WAV clip.", empty_schema()), |_, _| async {
        Ok(CallToolResult::content(vec![Content::Audio { data: WAV.into(), mime_type: "audio/wav".into() }]))
    }))
    .tool(tool_fn(ToolSpec::new("test_embedded_resource", "Returns an embedded text resource.", empty_schema()), |_, _| async {
        Ok(CallToolResult::content(vec![Content::Resource {
            resource: ResourceContents::text("test://embedded-resource", "text/plain", "This is an embedded resource content."),
        }]))
    }))
    .tool(tool_fn(ToolSpec::new("test_multiple_content_types", "Returns text, image and resource content.", empty_schema()), |_, _| async {
        Ok(CallToolResult::content(vec![
            Content::text("Multiple content types test:"),
            image(),
            Content::Resource { resource: ResourceContents::text("test://mixed-content-resource", "application/json", r#"{"test":"data","value":123}"#) },
        ]))
    }))
    .tool(tool_fn(ToolSpec::new("test_tool_with_logging", "Sends three log messages while running.", empty_schema()), |_, cx| async move {
        for (i, msg) in ["Tool execution started", "Tool processing data", "Tool execution completed"].iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            cx.log(LogLevel::Info, None, json!(msg)).await;
        }
        Ok(CallToolResult::text("Tool with logging executed successfully"))
    }))
    .tool(tool_fn(ToolSpec::new("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100.", empty_schema()), |_, cx| async move {
        for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            cx.progress(p, Some(100.0), Some(&format!("Completed step {p} of 100"))).await;
        }
        let token = cx.progress_token().map(|t| t.as_str().map_or_else(|| t.to_string(), str::to_owned)).unwrap_or_default();
        Ok(CallToolResult::text(token))
    }))
    .tool(tool_fn(ToolSpec::new("test_error_handling", "Always fails with a tool error.", empty_schema()), |_, _| async {
        Err(ToolError::Failed("This tool intentionally returns an error for testing".into()))
    }))
    // The 2026-07-28 `server-stateless` fixtures.
    .tool(tool_fn(ToolSpec::new("test_missing_capability", "Asks the client's model for a completion (needs the sampling capability).", empty_schema()), |_, cx| async move {
        let r = cx
            .request("sampling/createMessage", json!({"messages":[{"role":"user","content":{"type":"text","text":"Say hello"}}],"maxTokens":10}))
            .await
            .map_err(ToolError::Protocol)?;
        Ok(CallToolResult::text(format!("sampled: {}", r.pointer("/content/text").and_then(Value::as_str).unwrap_or_default())))
    }))
    .tool(tool_fn(ToolSpec::new("test_streaming_elicitation", "Asks the user to confirm (elicitation), never with a request on its response stream.", empty_schema()), |_, cx| async move {
        elicit(&cx, "Please confirm", json!({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}), "Confirmation").await
    }))
    .tool(tool_fn(ToolSpec::new("test_logging_tool", "Logs one message at info level and answers.", empty_schema()), |_, cx| async move {
        cx.log(LogLevel::Info, None, json!("test_logging_tool ran")).await;
        Ok(CallToolResult::text("logged"))
    }))
    .merge(input_required_tools())
    .merge(listen_tools())
    .merge(schema_tools())
    .merge(task_tools())
    .tool(tool_fn(
        ToolSpec::new(
            "test_sampling",
            "Asks the client's model to complete a prompt.",
            json!({"type":"object","properties":{"prompt":{"type":"string","description":"The prompt"}},"required":["prompt"]}),
        ),
        |args, cx| async move {
            let prompt = text_arg(&args, "prompt");
            let r = cx
                .request("sampling/createMessage", json!({"messages":[{"role":"user","content":{"type":"text","text":prompt}}],"maxTokens":100}))
                .await
                .map_err(ToolError::Protocol)?;
            let text = r.pointer("/content/text").and_then(Value::as_str).unwrap_or_default();
            Ok(CallToolResult::text(format!("LLM response: {text}")))
        },
    ))
    .tool(tool_fn(
        ToolSpec::new(
            "test_elicitation",
            "Asks the user for a username and email.",
            json!({"type":"object","properties":{"message":{"type":"string","description":"The message to show"}},"required":["message"]}),
        ),
        |args, cx| async move {
            let schema = json!({"type":"object","properties":{
                "username":{"type":"string","description":"User's response"},
                "email":{"type":"string","description":"User's email address"}},
                "required":["username","email"]});
            elicit(&cx, &text_arg(&args, "message"), schema, "User response").await
        },
    ))
    .tool(tool_fn(ToolSpec::new("test_elicitation_sep1034_defaults", "Elicits fields that have default values (SEP-1034).", empty_schema()), |_, cx| async move {
        let schema = json!({"type":"object","properties":{
            "name":{"type":"string","default":"John Doe"},
            "age":{"type":"integer","default":30},
            "score":{"type":"number","default":95.5},
            "status":{"type":"string","enum":["active","inactive","pending"],"default":"active"},
            "verified":{"type":"boolean","default":true}},
            "required":[]});
        elicit(&cx, "Please review and update the form fields with defaults", schema, "Elicitation completed").await
    }))
    .tool(tool_fn(ToolSpec::new("test_elicitation_sep1330_enums", "Elicits enum fields of every SEP-1330 shape.", empty_schema()), |_, cx| async move {
        let schema = json!({"type":"object","properties":{
            "untitledSingle":{"type":"string","enum":["option1","option2","option3"]},
            "titledSingle":{"type":"string","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},
            "legacyEnum":{"type":"string","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},
            "untitledMulti":{"type":"array","minItems":1,"maxItems":3,"items":{"type":"string","enum":["option1","option2","option3"]}},
            "titledMulti":{"type":"array","minItems":1,"maxItems":3,"items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}},
            "required":[]});
        elicit(&cx, "Please select options", schema, "Elicitation completed").await
    }))
    .tool(tool_fn(
        ToolSpec::new("test_reconnection", "Closes its SSE stream after the priming event, then answers on the resumed stream (SEP-1699).", empty_schema()),
        |_, cx| async move {
            cx.close_stream_for_polling().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(CallToolResult::text(
                "Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.",
            ))
        },
    ))
}

/// The client's answer to an elicitation, its accepted `content.<field>` as text.
fn accepted(answer: &Value, field: &str) -> String {
    answer
        .pointer(&format!("/content/{field}"))
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
        .unwrap_or_default()
}

fn elicit_params(message: &str, field: &str, kind: &str) -> Value {
    json!({"message": message, "requestedSchema": {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}})
}

fn sampling_params(text: &str, max_tokens: u32) -> Value {
    json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens})
}

fn sampled(answer: &Value) -> String {
    answer.pointer("/content/text").and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// The 2026-07-28 multi-round-trip fixtures (`input-required-result-*`): each asks through
/// `ToolContext::input`, which in a legacy session is a server-to-client request and in the
/// modern era an `input_required` round trip under the key given here.
fn input_required_tools() -> CatalogBuilder {
    let p = |e: mcp_runtime::proto::jsonrpc::ErrorObject| ToolError::Protocol(e);
    CatalogBuilder::default()
        .tool(tool_fn(ToolSpec::new("test_input_required_result_elicitation", "Asks the user's name (elicitation, key user_name) and greets them.", empty_schema()), move |_, cx| async move {
            let a = cx.input("user_name", "elicitation/create", elicit_params("What is your name?", "name", "string")).await.map_err(p)?;
            Ok(CallToolResult::text(format!("Hello, {}!", accepted(&a, "name"))))
        }))
        .tool(tool_fn(ToolSpec::new("test_input_required_result_sampling", "Asks the client's model a question (sampling, key capital_question).", empty_schema()), move |_, cx| async move {
            let a = cx.input("capital_question", "sampling/createMessage", sampling_params("What is the capital of France?", 100)).await.map_err(p)?;
            Ok(CallToolResult::text(format!("The model said: {}", sampled(&a))))
        }))
        .tool(tool_fn(ToolSpec::new("test_input_required_result_list_roots", "Asks the client for its roots (key client_roots).", empty_schema()), move |_, cx| async move {
            let a = cx.input("client_roots", "roots/list", json!({})).await.map_err(p)?;
            let n = a.get("roots").and_then(Value::as_array).map_or(0, Vec::len);
            Ok(CallToolResult::text(format!("The client has {n} root(s)")))
        }))
        .tool(tool_fn(ToolSpec::new("test_input_required_result_request_state", "Asks for a confirmation (key confirm); the answer survives in requestState.", empty_schema()), move |_, cx| async move {
            let a = cx.input("confirm", "elicitation/create", elicit_params("Please confirm", "ok", "boolean")).await.map_err(p)?;
            Ok(CallToolResult::text(format!("state-ok: confirmed={}", accepted(&a, "ok"))))
        }))
        .tool(tool_fn(ToolSpec::new("test_input_required_result_multiple_inputs", "Asks three questions at once: a name, a greeting from the model, the client's roots.", empty_schema()), move |_, cx| async move {
            let (name, greeting, roots) = tokio::join!(
                cx.input("user_name", "elicitation/create", elicit_params("What is your name?", "name", "string")),
                cx.input("greeting", "sampling/createMessage", sampling_params("Generate a greeting", 50)),
                cx.input("client_roots", "roots/list", json!({})),
            );
            let (name, greeting, roots) = (name.map_err(p)?, greeting.map_err(p)?, roots.map_err(p)?);
            let n = roots.get("roots").and_then(Value::as_array).map_or(0, Vec::len);
            Ok(CallToolResult::text(format!("{} {}, with {n} root(s)", sampled(&greeting), accepted(&name, "name"))))
        }))
        .tool(tool_fn(ToolSpec::new("test_input_required_result_multi_round", "Asks two questions one after the other (keys step1, step2).", empty_schema()), move |_, cx| async move {
            let name = cx.input("step1", "elicitation/create", elicit_params("Step 1: What is your name?", "name", "string")).await.map_err(p)?;
            let color = cx.input("step2", "elicitation/create", elicit_params("Step 2: What is your favorite color?", "color", "string")).await.map_err(p)?;
            Ok(CallToolResult::text(format!("{} likes {}", accepted(&name, "name"), accepted(&color, "color"))))
        }))
        .tool(tool_fn(ToolSpec::new("test_input_required_result_tampered_state", "Asks for a confirmation (key confirm); an altered requestState is refused.", empty_schema()), move |_, cx| async move {
            let a = cx.input("confirm", "elicitation/create", elicit_params("Please confirm", "ok", "boolean")).await.map_err(p)?;
            Ok(CallToolResult::text(format!("confirmed={}", accepted(&a, "ok"))))
        }))
        .tool(tool_fn(ToolSpec::new("test_input_required_result_capabilities", "Asks only through the capabilities the client declared: elicitation if it can, else sampling.", empty_schema()), move |_, cx| async move {
            if cx.client_has("elicitation") {
                let a = cx.input("user_input", "elicitation/create", elicit_params("What should I use?", "value", "string")).await.map_err(p)?;
                return Ok(CallToolResult::text(format!("elicited {}", accepted(&a, "value"))));
            }
            let a = cx.input("sample_input", "sampling/createMessage", sampling_params("What should I use?", 50)).await.map_err(p)?;
            Ok(CallToolResult::text(format!("sampled {}", sampled(&a))))
        }))
}

/// The 2026-07-28 `subscriptions/listen` fixtures (`server-stateless`): each announces that a
/// list changed, to every listen stream that opted into it. The catalog declares that these
/// lists (and the watched resource) may change, so `server/discover` says `listChanged`.
fn listen_tools() -> CatalogBuilder {
    CatalogBuilder::default()
        .announces_list_changes(ListKind::Tools)
        .announces_list_changes(ListKind::Prompts)
        .announces_resource_updates()
        .tool(tool_fn(ToolSpec::new("test_trigger_tool_change", "Announces that the tools list changed (to subscriptions/listen streams that asked).", empty_schema()), |_, cx| async move {
            cx.list_changed(ListKind::Tools);
            Ok(CallToolResult::text("Mutation triggered"))
        }))
        .tool(tool_fn(ToolSpec::new("test_trigger_prompt_change", "Announces that the prompts list changed (to subscriptions/listen streams that asked).", empty_schema()), |_, cx| async move {
            cx.list_changed(ListKind::Prompts);
            Ok(CallToolResult::text("Mutation triggered"))
        }))
        .tool(tool_fn(
            ToolSpec::new(
                "test_trigger_resource_update",
                "Announces that a resource changed (to subscriptions/listen streams subscribed to it).",
                json!({"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}),
            ),
            |args, cx| async move {
                let uri = text_arg(&args, "uri");
                cx.resource_updated(&uri);
                Ok(CallToolResult::text(format!("Updated {uri}")))
            },
        ))
}

/// The tasks extension's fixtures (`tasks-*` scenarios): tools that may or must run as tasks
/// (their support is the runtime's, not listed), finish, fail, fail with a protocol error,
/// ask inside a task, or ask before becoming one.
fn task_tools() -> CatalogBuilder {
    let obj = |props: Value| json!({"type": "object", "properties": props});
    let p = |e: mcp_runtime::proto::jsonrpc::ErrorObject| ToolError::Protocol(e);
    let confirm =
        |filename: &str| elicit_params(&format!("Delete {filename}?"), "confirm", "boolean");
    CatalogBuilder::default()
        .tool(tool_fn(ToolSpec::new("greet", "Greets someone by name (never a task).", obj(json!({"name": {"type": "string"}}))), |args, _| async move {
            Ok(CallToolResult::text(format!("Hello, {}!", text_arg(&args, "name"))))
        }))
        .tool(tool_fn(
            ToolSpec::new(
                "slow_compute",
                "Computes for `seconds` seconds and `millis` milliseconds (a task when the client supports them and it takes any time).",
                obj(json!({"seconds": {"type": "integer", "minimum": 0, "maximum": 600}, "millis": {"type": "integer", "minimum": 0, "maximum": 999}, "label": {"type": "string"}})),
            )
            .task_support(TaskSupport::Optional),
            |args, cx| async move {
                let seconds = args.get("seconds").and_then(Value::as_u64).unwrap_or(0);
                let millis = args.get("millis").and_then(Value::as_u64).unwrap_or(0);
                let label = text_arg(&args, "label");
                if seconds > 0 || millis > 0 {
                    cx.continue_as_task().await;
                    // Dropped (stopped) at once when the task is cancelled.
                    tokio::time::sleep(Duration::from_millis(seconds * 1000 + millis)).await;
                }
                Ok(CallToolResult::text(format!("{label}: computed in {seconds} s")))
            },
        ))
        .tool(tool_fn(ToolSpec::new("failing_job", "Fails with a tool error after a moment (needs a task).", obj(json!({}))).task_support(TaskSupport::Required), |_, _| async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Err::<CallToolResult, _>(ToolError::Failed("the job failed (as this fixture always does)".into()))
        }))
        .tool(tool_fn(ToolSpec::new("protocol_error_job", "Ends with a protocol error after a moment (needs a task).", obj(json!({}))).task_support(TaskSupport::Required), |_, _| async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Err::<CallToolResult, _>(ToolError::Protocol(ErrorObject::new(-32603, "the job hit a protocol error (as this fixture always does)")))
        }))
        .tool(tool_fn(
            ToolSpec::new("confirm_delete", "Asks the user to confirm deleting a file, inside its task when it runs as one.", obj(json!({"filename": {"type": "string"}}))).task_support(TaskSupport::Optional),
            move |args, cx| async move {
                let filename = text_arg(&args, "filename");
                cx.continue_as_task().await;
                let a = cx.input("confirm", "elicitation/create", confirm(&filename)).await.map_err(p)?;
                let yes = a["action"] == "accept" && a["content"]["confirm"] == true;
                Ok(CallToolResult::text(if yes { format!("Deleted {filename}") } else { format!("Kept {filename}") }))
            },
        ))
        .tool(tool_fn(
            ToolSpec::new("multi_input", "Asks two questions at once (a name and a confirmation), inside its task when it runs as one.", obj(json!({}))).task_support(TaskSupport::Optional),
            move |_, cx| async move {
                cx.continue_as_task().await;
                let (name, ok) = tokio::join!(
                    cx.input("name", "elicitation/create", elicit_params("What is your name?", "name", "string")),
                    cx.input("confirm", "elicitation/create", elicit_params("Go ahead?", "confirm", "boolean")),
                );
                let (name, ok) = (name.map_err(p)?, ok.map_err(p)?);
                Ok(CallToolResult::text(format!("{} confirmed={}", accepted(&name, "name"), accepted(&ok, "confirm"))))
            },
        ))
        .tool(tool_fn(
            ToolSpec::new("test_tool_with_task", "Asks the user's name (a multi-round-trip round of the call), then greets them in a task (needs one).", obj(json!({}))).task_support(TaskSupport::Required),
            move |_, cx| async move {
                let a = cx.input("user_name", "elicitation/create", elicit_params("What is your name?", "name", "string")).await.map_err(p)?;
                cx.continue_as_task().await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok(CallToolResult::text(format!("Hello, {}!", accepted(&a, "name"))))
            },
        ))
}

/// Fixtures of the schema scenarios: a tool whose argument is mirrored into a header
/// (`http-custom-header-server-validation`, 2026-07-28 `Mcp-Param-Region`; it must be the first
/// annotated tool listed, and accept any string), and a tool whose input schema uses JSON
/// Schema 2020-12 keywords that must be listed verbatim (`json-schema-2020-12`).
fn schema_tools() -> CatalogBuilder {
    let header_schema = json!({"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}, "query": {"type": "string"}}, "required": ["region"]});
    let schema_2020_12 = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    });
    CatalogBuilder::default()
        .tool(tool_fn(ToolSpec::new("test_header_param", "Echoes its region argument, which 2026-07-28 clients mirror in the Mcp-Param-Region header.", header_schema), |args, _| async move {
            Ok(CallToolResult::text(format!("region={}", text_arg(&args, "region"))))
        }))
        .tool(tool_fn(ToolSpec::new("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", schema_2020_12), |args, _| async move {
            Ok(CallToolResult::text(format!("Received: {args}")))
        }))
}

fn resources(b: CatalogBuilder) -> CatalogBuilder {
    let spec = |uri: &str, name: &str, mime: &str| ResourceSpec {
        uri: uri.into(),
        name: name.into(),
        description: Some(format!("Test resource {name}")),
        mime_type: Some(mime.into()),
    };
    b.resource(StaticResource::new(
        spec("test://static-text", "static-text", "text/plain"),
        vec![ResourceContents::text(
            "test://static-text",
            "text/plain",
            "This is the content of the static text resource.",
        )],
    ))
    .resource(StaticResource::new(
        spec("test://static-binary", "static-binary", "image/png"),
        vec![ResourceContents::blob("test://static-binary", "image/png", PNG)],
    ))
    .resource(StaticResource::new(
        spec("test://watched-resource", "watched-resource", "text/plain"),
        vec![ResourceContents::text(
            "test://watched-resource",
            "text/plain",
            "Watched resource content",
        )],
    ))
    .template(template_fn(
        ResourceTemplateSpec {
            uri_template: "test://template/{id}/data".into(),
            name: "template".into(),
            description: Some("Data for an id".into()),
            mime_type: Some("application/json".into()),
        },
        |uri, vars| {
            let id = vars.get("id").and_then(Value::as_str).unwrap_or_default();
            let text =
                json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
                    .to_string();
            Ok(vec![ResourceContents::text(uri, "application/json", text)])
        },
    ))
}

fn user(content: Content) -> PromptMessage {
    PromptMessage { role: "user".into(), content }
}

fn arg(name: &str, description: &str) -> PromptArgument {
    PromptArgument { name: name.into(), description: Some(description.into()), required: true }
}

fn prompts(b: CatalogBuilder) -> CatalogBuilder {
    let spec = |name: &str, description: &str, arguments| PromptSpec {
        name: name.into(),
        description: description.into(),
        arguments,
    };
    let ok = |messages| -> Result<GetPromptResult, ErrorObject> {
        Ok(GetPromptResult { description: None, messages })
    };
    b.prompt(prompt_fn(
        spec("test_simple_prompt", "A simple prompt without arguments", vec![]),
        move |_| ok(vec![user(Content::text("This is a simple prompt for testing."))]),
    ))
    .prompt(prompt_fn(
        spec(
            "test_prompt_with_arguments",
            "A prompt with two required arguments",
            vec![arg("arg1", "First argument"), arg("arg2", "Second argument")],
        ),
        move |a| {
            let get = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
            ok(vec![user(Content::text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                get("arg1"),
                get("arg2")
            )))])
        },
    ))
    .prompt(prompt_fn(
        spec(
            "test_prompt_with_embedded_resource",
            "A prompt that embeds a resource",
            vec![arg("resourceUri", "URI of the resource to embed")],
        ),
        move |a| {
            let uri = a.get("resourceUri").and_then(Value::as_str).unwrap_or_default();
            ok(vec![
                user(Content::Resource {
                    resource: ResourceContents::text(
                        uri,
                        "text/plain",
                        "Embedded resource content for testing.",
                    ),
                }),
                user(Content::text("Please process the embedded resource above.")),
            ])
        },
    ))
    .prompt(prompt_fn(
        spec("test_prompt_with_image", "A prompt that includes an image", vec![]),
        move |_| ok(vec![user(image()), user(Content::text("Please analyze the image above."))]),
    ))
    .prompt(mcp_runtime::tools::prompt_async_fn(
        spec(
            "test_input_required_result_prompt",
            "Asks the user for context (elicitation, key user_context) before rendering",
            vec![],
        ),
        move |_, cx| async move {
            let a = cx
                .input(
                    "user_context",
                    "elicitation/create",
                    elicit_params("What context should the prompt use?", "context", "string"),
                )
                .await?;
            Ok(GetPromptResult {
                description: None,
                messages: vec![user(Content::text(format!(
                    "Use this context: {}",
                    accepted(&a, "context")
                )))],
            })
        },
    ))
}

pub(crate) fn pack() -> CatalogBuilder {
    prompts(resources(tools(CatalogBuilder::default())))
}
