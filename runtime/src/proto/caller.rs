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
            QuotaKey::Address(IpAddr::V4(v4)) => Some(ipv4_owner(*v4)),
            QuotaKey::Address(ip) => Some(format!("ip:{ip}").into()),
            QuotaKey::Unknown => None,
        }
    }
}

/// `ip:` and the dotted address, as `format!("ip:{ip}")` writes it, without the formatting
/// machinery and its growing `String` (every 2026-07-28 request names its owner; this was
/// 3 % of such a request's instructions).
fn ipv4_owner(ip: std::net::Ipv4Addr) -> Arc<str> {
    let mut buf = [0u8; 18]; // "ip:" and at most "255.255.255.255"
    buf[..3].copy_from_slice(b"ip:");
    let mut n = 3;
    for (i, o) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            buf[n] = b'.';
            n += 1;
        }
        if o >= 100 {
            buf[n] = b'0' + o / 100;
            n += 1;
        }
        if o >= 10 {
            buf[n] = b'0' + o / 10 % 10;
            n += 1;
        }
        buf[n] = b'0' + o % 10;
        n += 1;
    }
    // Only ASCII was written.
    Arc::from(std::str::from_utf8(&buf[..n]).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn an_address_owner_is_written_as_the_standard_formatter_writes_it() {
        // Owners are stored with what they keep (tasks, handles): the text must not change.
        let v4s = [
            Ipv4Addr::new(0, 0, 0, 0),
            Ipv4Addr::new(127, 0, 0, 1),
            Ipv4Addr::new(255, 255, 255, 255),
            Ipv4Addr::new(10, 0, 100, 9),
            Ipv4Addr::new(192, 168, 10, 99),
            Ipv4Addr::new(1, 20, 200, 100),
        ];
        let every_octet = (0..=255u8).map(|o| Ipv4Addr::new(o, 255 - o, o / 3, o % 10));
        for ip in v4s.into_iter().chain(every_octet) {
            let owner = QuotaKey::Address(IpAddr::V4(ip)).owner().unwrap();
            assert_eq!(&*owner, format!("ip:{ip}"));
        }
        let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
        assert_eq!(&*QuotaKey::Address(v6).owner().unwrap(), "ip:2001:db8::1");
        assert_eq!(&*QuotaKey::Principal("alice".into()).owner().unwrap(), "alice");
        assert_eq!(QuotaKey::Unknown.owner(), None);
    }
}
