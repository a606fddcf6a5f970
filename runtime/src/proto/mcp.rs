//! Legacy-era MCP message vocabulary the core needs: method names, log levels and the
//! `initialize` exchange.

use serde_json::{Value, json};

use super::version::ProtocolVersion;

/// Method names used by the transport and the built-in handlers.
pub mod method {
    /// Handshake.
    pub const INITIALIZE: &str = "initialize";
    /// Handshake completion.
    pub const INITIALIZED: &str = "notifications/initialized";
    /// Liveness.
    pub const PING: &str = "ping";
    /// Cancel a request.
    pub const CANCELLED: &str = "notifications/cancelled";
    /// Progress of a request.
    pub const PROGRESS: &str = "notifications/progress";
    /// Log message.
    pub const MESSAGE: &str = "notifications/message";
    /// Set the minimum log level.
    pub const SET_LEVEL: &str = "logging/setLevel";

    /// Methods a request span names as they are; any other is `"other"` (the name comes from
    /// the client: it is not written to logs as it is).
    const KNOWN: [&str; 14] = [
        INITIALIZE,
        PING,
        SET_LEVEL,
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "sampling/createMessage",
    ];

    /// The method as a request span names it.
    #[must_use]
    pub fn span_name(method: &str) -> &'static str {
        KNOWN.iter().find(|m| **m == method).copied().unwrap_or("other")
    }
}

/// RFC 5424 severities, as MCP logging uses them (ordered from least to most severe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// debug
    Debug,
    /// info
    Info,
    /// notice
    Notice,
    /// warning
    Warning,
    /// error
    Error,
    /// critical
    Critical,
    /// alert
    Alert,
    /// emergency
    Emergency,
}

impl LogLevel {
    /// Parse the wire spelling.
    #[must_use]
    pub fn parse(s: &str) -> Option<LogLevel> {
        Some(match s {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            "critical" => LogLevel::Critical,
            "alert" => LogLevel::Alert,
            "emergency" => LogLevel::Emergency,
            _ => return None,
        })
    }

    /// The wire spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

/// What the client said in `initialize`.
#[derive(Debug, Clone, PartialEq)]
pub struct InitializeRequest {
    /// The version the client asked for, if any.
    pub requested_version: Option<String>,
    /// The client's capabilities object (`{}` when absent).
    pub capabilities: Value,
    /// `clientInfo`, as sent.
    pub client_info: Value,
}

impl InitializeRequest {
    /// Read the params leniently: a missing field becomes empty; the version is negotiated.
    /// The values are taken out of `params`, not copied.
    #[must_use]
    pub fn from_params(params: Option<Value>) -> InitializeRequest {
        let mut m = match params {
            Some(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        InitializeRequest {
            requested_version: match m.remove("protocolVersion") {
                Some(Value::String(v)) => Some(v),
                _ => None,
            },
            capabilities: m.remove("capabilities").unwrap_or_else(|| json!({})),
            client_info: m.remove("clientInfo").unwrap_or_else(|| json!({})),
        }
    }

    /// Whether the client declared a capability (top-level key of `capabilities`).
    #[must_use]
    pub fn has_capability(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(|v| !v.is_null())
    }
}

/// The `InitializeResult` body.
#[must_use]
pub fn initialize_result(
    version: ProtocolVersion,
    capabilities: &Value,
    server_info: &Value,
    instructions: Option<&str>,
) -> Value {
    let mut r = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities,
        "serverInfo": server_info,
    });
    if let Some(i) = instructions {
        r["instructions"] = Value::from(i);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_order_by_severity_and_round_trip() {
        assert!(LogLevel::Debug < LogLevel::Info && LogLevel::Alert < LogLevel::Emergency);
        for s in ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"] {
            assert_eq!(LogLevel::parse(s).unwrap().as_str(), s);
        }
        assert_eq!(LogLevel::parse("verbose"), None);
    }

    #[test]
    fn initialize_params_are_read_leniently() {
        let r = InitializeRequest::from_params(Some(
            json!({"protocolVersion":"2025-06-18","capabilities":{"sampling":{}}}),
        ));
        assert_eq!(r.requested_version.as_deref(), Some("2025-06-18"));
        assert!(r.has_capability("sampling"));
        assert!(!r.has_capability("elicitation"));
        assert_eq!(InitializeRequest::from_params(None).capabilities, json!({}));
    }
}
