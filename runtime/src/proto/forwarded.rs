//! Who the client is behind a trusted proxy (sans-IO): the address ranges trusted to say
//! (`security.trust_forwarded_for`, [`Cidr`]), and the rule that reads a client address out
//! of `Forwarded` (RFC 7239) or `X-Forwarded-For` ([`client_addr`]).
//!
//! The rule:
//! - Headers are read only when the TCP peer is inside a trusted range; from any other peer
//!   they are ignored (anyone can send them).
//! - `Forwarded` decides when present (its `for=` parameters); otherwise `X-Forwarded-For`.
//!   Several lines of one header are one list, in order.
//! - The list is walked from the right (the hop the peer itself added): while the address
//!   reached so far is trusted, the hop to its left is who connected to it. The first address
//!   that is not trusted is the client; when every hop is trusted, the left-most is.
//! - A hop that is no address (`unknown`, an obfuscated `_identifier`, an element without
//!   `for=`, garbage) met on that walk, a `Forwarded` line that breaks RFC 7239's syntax, or
//!   more than [`MAX_HOPS`] trusted hops: the header says nothing usable and the peer's
//!   address is the client's.
//!
//! Bounds: one left-to-right pass over each header (linear in its bytes, whatever it holds),
//! the last [`MAX_HOPS`] hops kept (a fixed array), a hop longer than [`MAX_NODE_BYTES`] read
//! as no address. Addresses come out canonical (IPv4-mapped IPv6 as IPv4); ports are dropped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Most hops examined from the right of a forwarding header. A chain of more trusted proxies
/// than this is not believed (the peer's address is used).
pub const MAX_HOPS: usize = 32;

/// A hop's node longer than this is no address (`"[" 39 "]:" 5` is 47 bytes).
pub const MAX_NODE_BYTES: usize = 64;

/// An address range, `10.0.0.0/8` or `2001:db8::/32`; an address alone is its `/32` or
/// `/128`. Written with its host bits clear (`10.0.0.1/8` is refused: say `/32` or
/// `10.0.0.0/8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

/// Why a string is not a [`Cidr`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an address range (CIDR) such as 10.0.0.0/8 or 2001:db8::/32: {1}")]
pub struct CidrError(String, &'static str);

impl std::str::FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let bad = |why| CidrError(s.chars().take(64).collect(), why);
        let (addr, len) = match s.trim().split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s.trim(), None),
        };
        let net: IpAddr = addr.parse().map_err(|_| bad("the address does not parse"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) if !l.is_empty() && l.len() <= 3 && l.bytes().all(|b| b.is_ascii_digit()) => {
                l.parse::<u8>().map_err(|_| bad("the prefix length does not parse"))?
            }
            Some(_) => return Err(bad("the prefix length is not a number")),
        };
        if len > max {
            return Err(bad(if max == 32 {
                "an IPv4 prefix is at most /32"
            } else {
                "an IPv6 prefix is at most /128"
            }));
        }
        let cidr = Cidr { net, len };
        if cidr.masked(net) != net {
            return Err(bad("host bits are set after the prefix"));
        }
        Ok(cidr)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

impl TryFrom<String> for Cidr {
    type Error = CidrError;

    fn try_from(s: String) -> Result<Cidr, CidrError> {
        s.parse()
    }
}

impl From<Cidr> for String {
    fn from(c: Cidr) -> String {
        c.to_string()
    }
}

impl serde::Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Cidr, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Cidr {
    /// `ip` with the bits after this range's prefix cleared (`ip` of this range's family).
    fn masked(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(v4) => IpAddr::V4(
                (u32::from(v4) & u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0))
                    .into(),
            ),
            IpAddr::V6(v6) => IpAddr::V6(
                (u128::from(v6) & u128::MAX.checked_shl(128 - u32::from(self.len)).unwrap_or(0))
                    .into(),
            ),
        }
    }

    /// Whether `ip` (canonical: IPv4-mapped IPv6 counts as IPv4) is in this range.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.net.is_ipv4() && self.masked(ip) == self.net
    }
}

/// Whether `ip` is inside any of `trusted`.
#[must_use]
pub fn is_trusted(ip: IpAddr, trusted: &[Cidr]) -> bool {
    trusted.iter().any(|c| c.contains(ip))
}

/// One hop of a forwarding header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    Addr(IpAddr),
    /// `unknown`, an obfuscated identifier, no `for=`, anything that is no address.
    Opaque,
}

/// The last [`MAX_HOPS`] hops of a header and how many it had.
struct Hops {
    ring: [Hop; MAX_HOPS],
    total: usize,
}

impl Hops {
    fn new() -> Hops {
        Hops { ring: [Hop::Opaque; MAX_HOPS], total: 0 }
    }

    fn push(&mut self, hop: Hop) {
        self.ring[self.total % MAX_HOPS] = hop;
        self.total += 1;
    }

    /// The kept hops, right-most first.
    fn right_to_left(&self) -> impl Iterator<Item = Hop> + '_ {
        (0..self.total.min(MAX_HOPS)).map(move |i| self.ring[(self.total - 1 - i) % MAX_HOPS])
    }
}

/// The client's address: `peer`'s, unless `peer` is in `trusted` and the forwarding headers
/// (each line's raw bytes, in order: `forwarded` the `Forwarded` lines, `x_forwarded_for`
/// the `X-Forwarded-For` ones) name one by the rule in the module docs.
#[must_use]
pub fn client_addr(
    peer: IpAddr,
    trusted: &[Cidr],
    forwarded: &[&[u8]],
    x_forwarded_for: &[&[u8]],
) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(peer, trusted) {
        return peer;
    }
    let mut hops = Hops::new();
    if forwarded.is_empty() {
        for line in x_forwarded_for {
            xff_hops(line, &mut hops);
        }
    } else {
        for line in forwarded {
            if forwarded_hops(line, &mut hops).is_err() {
                return peer;
            }
        }
    }
    let mut current = peer;
    let mut examined = 0;
    for hop in hops.right_to_left() {
        if !is_trusted(current, trusted) {
            return current;
        }
        examined += 1;
        match hop {
            Hop::Addr(a) => current = a,
            Hop::Opaque => return peer,
        }
    }
    if is_trusted(current, trusted) && hops.total > examined {
        // Every hop examined was a trusted proxy and there are more: too long a chain.
        return peer;
    }
    current
}

/// The hops of one `X-Forwarded-For` line: comma-separated nodes, empty ones skipped.
fn xff_hops(line: &[u8], hops: &mut Hops) {
    for node in line.split(|&b| b == b',') {
        let node = node.trim_ascii();
        if !node.is_empty() {
            hops.push(node_hop(node));
        }
    }
}

/// RFC 7230 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The line breaks RFC 7239's syntax.
#[derive(Debug)]
struct Malformed;

/// The hops of one `Forwarded` line (`forwarded-element *( OWS "," OWS forwarded-element )`,
/// each `forwarded-pair *( ";" forwarded-pair )`, a pair `token "=" ( token / quoted-string )`):
/// one per element, its `for=` node, or no address when it has none.
fn forwarded_hops(line: &[u8], hops: &mut Hops) -> Result<(), Malformed> {
    let mut i = 0;
    let ows = |i: &mut usize| {
        while *i < line.len() && matches!(line[*i], b' ' | b'\t') {
            *i += 1;
        }
    };
    loop {
        ows(&mut i);
        if i == line.len() {
            return Ok(());
        }
        if line[i] == b',' {
            // An empty list element.
            i += 1;
            continue;
        }
        let mut node: Option<Hop> = None;
        loop {
            ows(&mut i);
            let name_at = i;
            while i < line.len() && is_tchar(line[i]) {
                i += 1;
            }
            let name = &line[name_at..i];
            if name.is_empty() || line.get(i) != Some(&b'=') {
                return Err(Malformed);
            }
            i += 1;
            let value = if line.get(i) == Some(&b'"') {
                i += 1;
                let at = i;
                loop {
                    match line.get(i) {
                        None => return Err(Malformed),
                        Some(b'"') => break,
                        Some(b'\\') => i += 2,
                        Some(_) => i += 1,
                    }
                }
                let v = line.get(at..i).ok_or(Malformed)?;
                i += 1;
                v
            } else {
                let at = i;
                while i < line.len() && is_tchar(line[i]) {
                    i += 1;
                }
                if at == i {
                    return Err(Malformed);
                }
                &line[at..i]
            };
            if name.eq_ignore_ascii_case(b"for") {
                if node.is_some() {
                    // "Each parameter MUST NOT occur more than once per forwarded-element."
                    return Err(Malformed);
                }
                // A quoted-pair in a node has no business there.
                node = Some(if value.contains(&b'\\') { Hop::Opaque } else { node_hop(value) });
            }
            ows(&mut i);
            match line.get(i) {
                Some(b';') => i += 1,
                Some(b',') => {
                    i += 1;
                    break;
                }
                None => break,
                Some(_) => return Err(Malformed),
            }
        }
        hops.push(node.unwrap_or(Hop::Opaque));
    }
}

/// An address with an optional port (`192.0.2.1`, `192.0.2.1:4711`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`, and a bare `2001:db8::1` as `X-Forwarded-For` writes it), else no
/// address.
fn node_hop(node: &[u8]) -> Hop {
    if node.len() > MAX_NODE_BYTES {
        return Hop::Opaque;
    }
    let Ok(s) = std::str::from_utf8(node) else { return Hop::Opaque };
    let port_ok = |p: &str| {
        (!p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u16>().is_ok())
            || p.strip_prefix('_').is_some_and(|o| {
                !o.is_empty()
                    && o.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
            })
    };
    let addr = if let Some(rest) = s.strip_prefix('[') {
        rest.split_once(']')
            .filter(|(_, after)| after.is_empty() || after.strip_prefix(':').is_some_and(port_ok))
            .and_then(|(ip, _)| ip.parse::<Ipv6Addr>().ok())
            .map(IpAddr::V6)
    } else if let Ok(ip) = s.parse::<IpAddr>() {
        Some(ip)
    } else {
        s.rsplit_once(':')
            .filter(|(_, p)| port_ok(p))
            .and_then(|(ip, _)| ip.parse::<Ipv4Addr>().ok())
            .map(IpAddr::V4)
    };
    addr.map_or(Hop::Opaque, |a| Hop::Addr(a.to_canonical()))
}

#[cfg(test)]
mod tests;
