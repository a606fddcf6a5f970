//! Runtime configuration: one typed tree with defaults, validated once at start.

use crate::proto::admission::AdmitPolicy;

/// Default replay window: events per stream.
pub const DEFAULT_REPLAY_MAX_EVENTS: usize = 1024;
/// Default replay window: bytes per stream.
pub const DEFAULT_REPLAY_MAX_BYTES: usize = 1 << 20;
/// Default SSE `retry` hint.
pub const DEFAULT_RETRY_MS: u64 = 1_000;
/// Default idle session lifetime (30 minutes).
pub const DEFAULT_SESSION_IDLE_TTL_MS: u64 = 30 * 60 * 1_000;

/// Everything the runtime needs to know. Field docs give unit, default and trade-off.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Origin/Host/auth/body-size policy of the front door.
    pub admit: AdmitPolicy,
    /// Replay window per stream, in events. Default 1024. Larger = longer disconnects
    /// survive, more memory per stream.
    pub replay_max_events: usize,
    /// Replay window per stream, in bytes of encoded frames. Default 1 MiB. The newest event
    /// is always kept even when larger.
    pub replay_max_bytes: usize,
    /// SSE `retry` hint sent with priming events and before server-initiated closes, in ms.
    /// Default 1000. `None` sends no `retry` field.
    pub retry_ms: Option<u64>,
    /// Send SEP-1699 priming events on streams of sessions negotiated at >= 2025-11-25.
    /// Default true; turn off only for intermediaries that reject empty events.
    pub prime_streams: bool,
    /// A session with no request and no attached stream for this long expires (ms).
    /// Default 30 min.
    pub session_idle_ttl_ms: u64,
    /// Most live sessions; more are refused with 503. Default 10 000.
    pub max_sessions: usize,
    /// Most requests in flight per session; more are refused with 503. Default 256.
    pub max_in_flight_per_session: usize,
    /// Most closed streams a session keeps for late resumes (oldest evicted first; a resume
    /// of an evicted stream gets 410). Default 64.
    pub max_retained_streams_per_session: usize,
    /// How long a closed stream whose final response was fully handed to its connection
    /// stays resumable (ms). Default 10 s.
    pub retention_after_delivery_ms: u64,
    /// How long a closed stream whose final response never reached a connection stays
    /// resumable (ms). Default 5 min.
    pub retention_undelivered_ms: u64,
    /// Idle SSE connections get a comment line this often (ms). Default 15 s.
    pub keepalive_ms: u64,
    /// Frames queued for one SSE connection before it counts as a slow reader and is
    /// detached (it can resume). Default 256.
    pub write_queue_frames: usize,
    /// Session actor mailbox capacity; a full mailbox answers 503. Default 1024.
    pub session_mailbox: usize,
    /// Generation (config epoch) tagged into session ids and cursors. Default 1.
    pub generation: u32,
    /// Secret for cursor MACs. Default: 32 random bytes per process start (cursors do not
    /// survive a restart, and neither do sessions yet).
    pub cursor_secret: Option<Vec<u8>>,
}

impl Default for RuntimeConfig {
    fn default() -> RuntimeConfig {
        RuntimeConfig {
            admit: AdmitPolicy::default(),
            replay_max_events: DEFAULT_REPLAY_MAX_EVENTS,
            replay_max_bytes: DEFAULT_REPLAY_MAX_BYTES,
            retry_ms: Some(DEFAULT_RETRY_MS),
            prime_streams: true,
            session_idle_ttl_ms: DEFAULT_SESSION_IDLE_TTL_MS,
            max_sessions: 10_000,
            max_in_flight_per_session: 256,
            max_retained_streams_per_session: 64,
            retention_after_delivery_ms: 10_000,
            retention_undelivered_ms: 300_000,
            keepalive_ms: 15_000,
            write_queue_frames: 256,
            session_mailbox: 1024,
            generation: 1,
            cursor_secret: None,
        }
    }
}

/// A configuration value out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

impl RuntimeConfig {
    /// Check ranges.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first field out of range.
    pub fn validate(self) -> Result<RuntimeConfig, ConfigError> {
        let positive = [
            ("replay_max_events", self.replay_max_events as u64),
            ("replay_max_bytes", self.replay_max_bytes as u64),
            ("session_idle_ttl_ms", self.session_idle_ttl_ms),
            ("max_sessions", self.max_sessions as u64),
            ("max_in_flight_per_session", self.max_in_flight_per_session as u64),
            ("keepalive_ms", self.keepalive_ms),
            ("write_queue_frames", self.write_queue_frames as u64),
            ("session_mailbox", self.session_mailbox as u64),
            ("max_body_bytes", self.admit.max_body_bytes as u64),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError(format!("{name} must be greater than 0")));
        }
        if self.cursor_secret.as_ref().is_some_and(|s| s.len() < 16) {
            return Err(ConfigError("cursor_secret must be at least 16 bytes".into()));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_zero_limits_do_not() {
        assert!(RuntimeConfig::default().validate().is_ok());
        let bad = RuntimeConfig { replay_max_events: 0, ..RuntimeConfig::default() };
        assert!(bad.validate().unwrap_err().0.contains("replay_max_events"));
        let short = RuntimeConfig { cursor_secret: Some(vec![1; 4]), ..RuntimeConfig::default() };
        assert!(short.validate().is_err());
    }
}
