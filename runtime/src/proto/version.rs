//! Protocol versions of the legacy (session) era and their transport-relevant differences.

/// A legacy-era protocol version this server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// 2025-03-26: Streamable HTTP introduced, JSON-RPC batches allowed, no version header.
    V2025_03_26,
    /// 2025-06-18: batches removed, `MCP-Protocol-Version` header.
    V2025_06_18,
    /// 2025-11-25: priming events, `retry`, server-initiated close (SEP-1699).
    V2025_11_25,
}

/// Every supported legacy version, newest first.
pub const SUPPORTED: [ProtocolVersion; 3] =
    [ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_06_18, ProtocolVersion::V2025_03_26];

impl ProtocolVersion {
    /// The newest version; offered when a client asks for one we do not speak.
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// The version assumed when a request carries no header and no session says otherwise.
    pub const ASSUMED_WITHOUT_HEADER: ProtocolVersion = ProtocolVersion::V2025_03_26;

    /// Parse a version string exactly as written on the wire.
    #[must_use]
    pub fn parse(s: &str) -> Option<ProtocolVersion> {
        match s {
            "2025-03-26" => Some(ProtocolVersion::V2025_03_26),
            "2025-06-18" => Some(ProtocolVersion::V2025_06_18),
            "2025-11-25" => Some(ProtocolVersion::V2025_11_25),
            _ => None,
        }
    }

    /// The wire spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
        }
    }

    /// Version negotiation: echo the client's version when supported, else offer the latest.
    #[must_use]
    pub fn negotiate(requested: Option<&str>) -> ProtocolVersion {
        requested.and_then(ProtocolVersion::parse).unwrap_or(ProtocolVersion::LATEST)
    }

    /// Whether SSE streams start with a priming event and carry `retry` (SEP-1699). Decided
    /// from the session's negotiated version, never from a per-request header.
    #[must_use]
    pub fn primes_streams(self) -> bool {
        self >= ProtocolVersion::V2025_11_25
    }

    /// Whether a POST body may be a JSON-RPC batch (array).
    #[must_use]
    pub fn allows_batches(self) -> bool {
        self == ProtocolVersion::V2025_03_26
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_supported_and_offers_latest_otherwise() {
        assert_eq!(ProtocolVersion::negotiate(Some("2025-06-18")), ProtocolVersion::V2025_06_18);
        assert_eq!(ProtocolVersion::negotiate(Some("2024-11-05")), ProtocolVersion::LATEST);
        assert_eq!(ProtocolVersion::negotiate(Some("garbage")), ProtocolVersion::LATEST);
        assert_eq!(ProtocolVersion::negotiate(None), ProtocolVersion::LATEST);
    }

    #[test]
    fn only_2025_11_25_primes_and_only_2025_03_26_batches() {
        for v in SUPPORTED {
            assert_eq!(v.primes_streams(), v == ProtocolVersion::V2025_11_25);
            assert_eq!(v.allows_batches(), v == ProtocolVersion::V2025_03_26);
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(v));
        }
    }
}
