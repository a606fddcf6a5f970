//! Whom a request counts as, for its quotas and as the owner of what it keeps.

use std::net::IpAddr;
use std::sync::Arc;

/// Whom a quota counts: the authenticated principal, or the remote address when
/// authentication is off.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum QuotaKey {
    /// A bearer-token principal.
    Principal(Arc<str>),
    /// A remote address (authentication off).
    Address(IpAddr),
    /// Neither is known (in-process tests).
    Unknown,
}

impl QuotaKey {
    /// Whose state handles and tasks a request's tool sees: the principal, or without
    /// authentication the remote address as the quotas count it (`ip:` and the address, or
    /// its IPv6 prefix); `None` when neither is known (in-process callers).
    #[must_use]
    pub fn owner(&self) -> Option<Arc<str>> {
        match self {
            QuotaKey::Principal(p) => Some(Arc::clone(p)),
            QuotaKey::Address(ip) => Some(format!("ip:{ip}").into()),
            QuotaKey::Unknown => None,
        }
    }
}
