//! The OAuth 2.1 resource server, sans-IO: what the MCP authorization specification asks of an
//! HTTP MCP server, decided without I/O or a clock (the shell, `crate::auth`, fetches the
//! documents and passes the time in).
//!
//! - [`parse_jwt`] / [`Unverified::verify`] / [`check_claims`]: a JWT access token (RFC 9068)
//!   checked against its issuer's JWKS ([`KeySet`]): RS256, ES256 and EdDSA only, each bound
//!   to its key type (never `none`, never an HMAC); `iss` exact; `aud` must name this server's
//!   resource (RFC 8707: no token meant for another resource is taken); `exp` / `nbf` within
//!   a leeway.
//! - [`grant_from_introspection`]: an opaque token's RFC 7662 answer, held to the same rules.
//! - [`AsMetadata`]: an authorization server's RFC 8414 / OpenID metadata, whose `issuer` must
//!   be the configured one.
//! - [`prm_document`], [`prm_url`]: Protected Resource Metadata (RFC 9728).
//! - [`challenge`]: the `WWW-Authenticate` value of a 401 or a 403.
//! - [`ScopeTable`]: which scopes a method (and a tool, resource or prompt) needs.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::{Value, json};

/// Most keys of a JWKS that are kept (the rest are ignored): a bound on what one document
/// costs to hold and to search.
pub const MAX_JWKS_KEYS: usize = 64;
/// Longest token looked at; longer is refused before any decoding.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a token was not accepted. Every one is a 401 `invalid_token` to the caller, except
/// [`TokenError::UnknownKid`] (which first asks the shell to refresh the issuer's keys).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a compact JWS of three base64url parts with JSON header and claims.
    #[error("not a well-formed JWT")]
    Malformed,
    /// `alg` is not RS256, ES256 or EdDSA (`none` and HMAC among them), or the header has a
    /// `crit` extension.
    #[error("signature algorithm not accepted: {0}")]
    Algorithm(String),
    /// No key of the issuer's JWKS has this `kid` (or fits the algorithm).
    #[error("no key of the issuer has kid {0:?}")]
    UnknownKid(Option<String>),
    /// The signature does not verify.
    #[error("signature does not verify")]
    Signature,
    /// `iss` missing or not a configured issuer.
    #[error("issuer not accepted")]
    Issuer,
    /// `aud` does not name this resource.
    #[error("audience is not this resource")]
    Audience,
    /// `exp` missing or passed.
    #[error("expired")]
    Expired,
    /// `nbf` in the future.
    #[error("not yet valid")]
    NotYetValid,
    /// Neither `sub` nor `client_id`.
    #[error("no subject")]
    NoSubject,
    /// Introspection said `active: false`.
    #[error("not active")]
    Inactive,
    /// `typ` is not `at+jwt` (RFC 9068 §4: an ID token or another JWT is not an access token).
    #[error("not an access token (typ {0:?})")]
    Type(Option<String>),
    /// No `kid`, and the issuer has several keys of the algorithm's type.
    #[error("no kid, and several keys could have signed it")]
    NoKid,
}

/// The signature algorithms accepted, each bound to one key type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256, RSA keys of 2048 to 8192 bits.
    Rs256,
    /// ECDSA on P-256 with SHA-256 (`r || s`).
    Es256,
    /// Ed25519.
    EdDsa,
}

impl Alg {
    fn parse(s: &str) -> Option<Alg> {
        match s {
            "RS256" => Some(Alg::Rs256),
            "ES256" => Some(Alg::Es256),
            "EdDSA" | "Ed25519" => Some(Alg::EdDsa),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
enum KeyMaterial {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// Uncompressed SEC1 point `04 || x || y`.
    P256(Vec<u8>),
    Ed25519(Vec<u8>),
}

impl KeyMaterial {
    fn alg(&self) -> Alg {
        match self {
            KeyMaterial::Rsa { .. } => Alg::Rs256,
            KeyMaterial::P256(_) => Alg::Es256,
            KeyMaterial::Ed25519(_) => Alg::EdDsa,
        }
    }

    fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        use ring::signature as sig;
        match self {
            KeyMaterial::Rsa { n, e } => sig::RsaPublicKeyComponents { n, e }
                .verify(&sig::RSA_PKCS1_2048_8192_SHA256, message, signature)
                .is_ok(),
            KeyMaterial::P256(point) => {
                sig::UnparsedPublicKey::new(&sig::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
            KeyMaterial::Ed25519(x) => {
                sig::UnparsedPublicKey::new(&sig::ED25519, x).verify(message, signature).is_ok()
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Key {
    kid: Option<String>,
    material: KeyMaterial,
}

/// The signing keys of one issuer, from its JWKS: the RSA, P-256 and Ed25519 keys meant for
/// signatures (a key with `use` other than `sig`, or an `alg` other than its type's, is left
/// out), at most [`MAX_JWKS_KEYS`].
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    keys: Vec<Key>,
}

#[derive(Deserialize)]
struct RawJwks {
    keys: Vec<RawJwk>,
}

#[derive(Deserialize)]
struct RawJwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default, rename = "use")]
    use_: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

fn b64(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')).ok()
}

impl KeySet {
    /// Read a JWKS document. Keys of other types or uses are skipped, not refused (a JWKS
    /// often carries encryption keys too).
    ///
    /// # Errors
    /// When the document is not a JWKS at all.
    pub fn parse(doc: &[u8]) -> Result<KeySet, String> {
        let raw: RawJwks = serde_json::from_slice(doc).map_err(|e| format!("not a JWKS: {e}"))?;
        let mut keys = Vec::new();
        for k in raw.keys {
            if keys.len() == MAX_JWKS_KEYS {
                break;
            }
            if k.use_.as_deref().is_some_and(|u| u != "sig") {
                continue;
            }
            let material = match (k.kty.as_str(), k.crv.as_deref()) {
                ("RSA", _) => match (k.n.as_deref().and_then(b64), k.e.as_deref().and_then(b64)) {
                    (Some(n), Some(e)) => KeyMaterial::Rsa { n, e },
                    _ => continue,
                },
                ("EC", Some("P-256")) => {
                    match (k.x.as_deref().and_then(b64), k.y.as_deref().and_then(b64)) {
                        (Some(x), Some(y)) if x.len() == 32 && y.len() == 32 => {
                            let mut p = Vec::with_capacity(65);
                            p.push(4);
                            p.extend_from_slice(&x);
                            p.extend_from_slice(&y);
                            KeyMaterial::P256(p)
                        }
                        _ => continue,
                    }
                }
                ("OKP", Some("Ed25519")) => match k.x.as_deref().and_then(b64) {
                    Some(x) if x.len() == 32 => KeyMaterial::Ed25519(x),
                    _ => continue,
                },
                _ => continue,
            };
            if let Some(alg) = k.alg.as_deref()
                && Alg::parse(alg) != Some(material.alg())
            {
                continue;
            }
            keys.push(Key { kid: k.kid, material });
        }
        Ok(KeySet { keys })
    }

    /// How many keys were kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// No key was kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a key has this `kid` (never for a token without one).
    #[must_use]
    pub fn has_kid(&self, kid: Option<&str>) -> bool {
        kid.is_some() && self.keys.iter().any(|k| k.kid.as_deref() == kid)
    }
}

#[derive(Debug, Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    typ: Option<String>,
    #[serde(default)]
    crit: Option<Value>,
}

/// A string or a list of strings (`aud`, `scp`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            OneOrMany::One(s) => (Some(s.as_str()), &[][..]),
            OneOrMany::Many(v) => (None, v.as_slice()),
        };
        one.into_iter().chain(many.iter().map(String::as_str))
    }
}

/// The claims (or introspection fields) the rules read; others are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
struct Claims {
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    aud: Option<OneOrMany>,
    #[serde(default)]
    exp: Option<f64>,
    #[serde(default)]
    nbf: Option<f64>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<OneOrMany>,
    #[serde(default)]
    active: Option<bool>,
}

/// A JWT whose parts were decoded and whose signature is not yet checked.
#[derive(Debug)]
pub struct Unverified<'t> {
    alg: Alg,
    kid: Option<String>,
    typ: Option<String>,
    claims: Claims,
    signing_input: &'t str,
    signature: Vec<u8>,
}

/// Whether a token has the shape of a JWS (three base64url parts whose first is a JSON
/// header with `alg`); anything else is an opaque token (introspection's).
#[must_use]
pub fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let (Some(h), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    b64(h).and_then(|h| serde_json::from_slice::<Header>(&h).ok()).is_some()
}

/// Decode a compact JWS: header, claims and signature; refuse an algorithm other than RS256,
/// ES256 and EdDSA, and any `crit` extension, before any key is looked at.
///
/// # Errors
/// [`TokenError::Malformed`] or [`TokenError::Algorithm`].
pub fn parse_jwt(token: &str) -> Result<Unverified<'_>, TokenError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::Malformed);
    }
    let (signing_input, sig) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
    let (h, c) = signing_input.split_once('.').ok_or(TokenError::Malformed)?;
    let header: Header = serde_json::from_slice(&b64(h).ok_or(TokenError::Malformed)?)
        .map_err(|_| TokenError::Malformed)?;
    if header.crit.is_some() {
        return Err(TokenError::Algorithm(format!("{} with crit", header.alg)));
    }
    let alg = Alg::parse(&header.alg).ok_or_else(|| TokenError::Algorithm(header.alg.clone()))?;
    let claims: Claims = serde_json::from_slice(&b64(c).ok_or(TokenError::Malformed)?)
        .map_err(|_| TokenError::Malformed)?;
    let signature = b64(sig).ok_or(TokenError::Malformed)?;
    Ok(Unverified { alg, kid: header.kid, typ: header.typ, claims, signing_input, signature })
}

/// The `iss` a JWT-shaped token claims, read without judging anything else: which
/// authorization server the token says it comes from (where to send it, if anywhere).
#[must_use]
pub fn peek_issuer(token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN_BYTES {
        return None;
    }
    let claims = token.split('.').nth(1)?;
    serde_json::from_slice::<Claims>(&b64(claims)?).ok()?.iss
}

impl Unverified<'_> {
    /// Check the signature with the issuer's keys: the key with the header's `kid` (any key
    /// of the algorithm's type when the header has none), whose type must be the algorithm's.
    ///
    /// # Errors
    /// [`TokenError::UnknownKid`] when no key fits (the shell may refresh the keys once),
    /// [`TokenError::Signature`] when the one that fits does not verify.
    pub fn verify(&self, keys: &KeySet) -> Result<(), TokenError> {
        let mut fitting = keys
            .keys
            .iter()
            .filter(|k| k.material.alg() == self.alg && (self.kid.is_none() || k.kid == self.kid));
        let first = fitting.next().ok_or_else(|| TokenError::UnknownKid(self.kid.clone()))?;
        // Without a kid, the key must be the only one of its type: one signature check per
        // token, never one per key.
        if self.kid.is_none() && fitting.next().is_some() {
            return Err(TokenError::NoKid);
        }
        if first.material.verify(self.signing_input.as_bytes(), &self.signature) {
            Ok(())
        } else {
            Err(TokenError::Signature)
        }
    }

    /// The claims' rules ([`check_claims`]), once [`Unverified::verify`] passed.
    ///
    /// # Errors
    /// The first rule broken.
    pub fn grant(&self, expect: &Expect<'_>) -> Result<Grant, TokenError> {
        let at_jwt = self.typ.as_deref().is_some_and(|t| {
            t.eq_ignore_ascii_case("at+jwt") || t.eq_ignore_ascii_case("application/at+jwt")
        });
        if expect.require_at_jwt && !at_jwt {
            return Err(TokenError::Type(self.typ.clone()));
        }
        check_claims(&self.claims, expect)
    }
}

/// What a token must say to be taken here.
#[derive(Debug, Clone, Copy)]
pub struct Expect<'a> {
    /// The issuer it must name exactly.
    pub issuer: &'a str,
    /// This server's resource, which `aud` must contain.
    pub resource: &'a str,
    /// Now, in seconds since the epoch.
    pub now_s: u64,
    /// Slack for clocks that differ (s).
    pub leeway_s: u64,
    /// A JWT's `typ` must be `at+jwt` (RFC 9068 §4).
    pub require_at_jwt: bool,
}

/// An accepted token: who it is and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// `iss|sub`, and `|client_id` when the token names a client other than its subject. The
    /// owner of everything the caller keeps and the key of its quotas.
    pub principal: Arc<str>,
    /// The granted scopes, sorted.
    pub scopes: Arc<[Box<str>]>,
    /// When it stops being valid (s since the epoch; with the leeway).
    pub expires_at_s: u64,
}

impl Grant {
    /// Whether every scope of `needed` is granted.
    #[must_use]
    pub fn has_all(&self, needed: &[Box<str>]) -> bool {
        needed.iter().all(|n| self.scopes.binary_search(n).is_ok())
    }
}

fn same_resource(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

fn to_secs(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        // Whole seconds: truncation is the intent, and the range is checked.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let s = v.min(u64::MAX as f64) as u64;
        s
    } else {
        0
    }
}

fn check_claims(c: &Claims, expect: &Expect<'_>) -> Result<Grant, TokenError> {
    if c.iss.as_deref() != Some(expect.issuer) {
        return Err(TokenError::Issuer);
    }
    if !c.aud.as_ref().is_some_and(|a| a.iter().any(|a| same_resource(a, expect.resource))) {
        return Err(TokenError::Audience);
    }
    let exp = c.exp.map(to_secs).ok_or(TokenError::Expired)?;
    let expires_at_s = exp.saturating_add(expect.leeway_s);
    if expect.now_s >= expires_at_s {
        return Err(TokenError::Expired);
    }
    if let Some(nbf) = c.nbf.map(to_secs)
        && expect.now_s.saturating_add(expect.leeway_s) < nbf
    {
        return Err(TokenError::NotYetValid);
    }
    let subject = c.sub.as_deref().or(c.client_id.as_deref()).ok_or(TokenError::NoSubject)?;
    // Each part with `%` and `|` escaped: `|` separates them, so no two tokens' parts can
    // spell one principal.
    let part = |s: &str| s.replace('%', "%25").replace('|', "%7C");
    let mut principal = format!("{}|{}", part(expect.issuer), part(subject));
    if let Some(client) = c.client_id.as_deref().filter(|c| *c != subject) {
        principal.push('|');
        principal.push_str(&part(client));
    }
    let mut scopes: Vec<Box<str>> = c
        .scope
        .as_deref()
        .into_iter()
        .flat_map(str::split_ascii_whitespace)
        .chain(c.scp.iter().flat_map(OneOrMany::iter))
        .map(Box::from)
        .collect();
    scopes.sort();
    scopes.dedup();
    Ok(Grant { principal: principal.into(), scopes: scopes.into(), expires_at_s })
}

/// An RFC 7662 introspection answer, held to the same rules as a JWT: `active`, the issuer
/// when it says one (it answers for `issuer` anyway), the audience, the times.
///
/// # Errors
/// [`TokenError::Inactive`] and the claims' rules; [`TokenError::Malformed`] for an answer
/// that is not JSON.
pub fn grant_from_introspection(body: &[u8], expect: &Expect<'_>) -> Result<Grant, TokenError> {
    let mut c: Claims = serde_json::from_slice(body).map_err(|_| TokenError::Malformed)?;
    match c.active {
        Some(true) => {}
        Some(false) => return Err(TokenError::Inactive),
        // RFC 7662 requires `active`: without it the answer says nothing about the token.
        None => return Err(TokenError::Malformed),
    }
    if c.iss.is_none() {
        c.iss = Some(expect.issuer.to_owned());
    }
    check_claims(&c, expect)
}

/// What the resource server reads of an authorization server's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AsMetadata {
    /// Must be the configured issuer, exactly (RFC 8414 §3.3).
    pub issuer: String,
    /// Where its signing keys are.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// Where opaque tokens are introspected.
    #[serde(default)]
    pub introspection_endpoint: Option<String>,
}

impl AsMetadata {
    /// Read a metadata document fetched for `issuer`.
    ///
    /// # Errors
    /// When it is not JSON metadata, or names another issuer.
    pub fn parse(doc: &[u8], issuer: &str) -> Result<AsMetadata, String> {
        let m: AsMetadata = serde_json::from_slice(doc)
            .map_err(|e| format!("not authorization server metadata: {e}"))?;
        if m.issuer != issuer {
            return Err(format!("metadata names issuer {:?}, not {issuer:?}", m.issuer));
        }
        Ok(m)
    }
}

/// The places an issuer's metadata may be, in the order to try them: RFC 8414's
/// path-inserted `oauth-authorization-server`, then OpenID Connect's
/// `openid-configuration` (path-inserted, then appended).
#[must_use]
pub fn metadata_urls(issuer: &str) -> Vec<String> {
    let (origin, path) = split_url(issuer);
    let path = path.trim_end_matches('/');
    let mut urls = vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
    ];
    if !path.is_empty() {
        urls.push(format!("{origin}{path}/.well-known/openid-configuration"));
    }
    urls
}

/// `scheme://authority` and the path (with its leading `/`, or empty).
fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    }
}

/// Where a resource's Protected Resource Metadata is (RFC 9728 §3.1): the well-known name
/// inserted between the resource's authority and its path.
#[must_use]
pub fn prm_url(resource: &str) -> String {
    let (origin, path) = split_url(resource);
    format!("{origin}/.well-known/oauth-protected-resource{}", path.trim_end_matches('/'))
}

/// The path part of [`prm_url`] (what this server mounts).
#[must_use]
pub fn prm_path(resource: &str) -> String {
    let (_, path) = split_url(resource);
    format!("/.well-known/oauth-protected-resource{}", path.trim_end_matches('/'))
}

/// Whether a URL may name an authorization server or a resource: `https`, or `http` on a
/// loopback host only (for local use and tests); a host, an optional numeric port, no user
/// part, no fragment, no query, no quote.
#[must_use]
pub fn url_allowed(url: &str) -> bool {
    if url.contains(['#', '?', '"', '\\', ' ', '@']) {
        return false;
    }
    let (https, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        _ => return false,
    };
    let authority = rest.split('/').next().unwrap_or("");
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((h, port)) => (format!("[{h}]"), port),
            None => return false,
        },
        None => match authority.split_once(':') {
            Some((h, _)) => (h.to_owned(), &authority[h.len()..]),
            None => (authority.to_owned(), ""),
        },
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    !host.is_empty()
        && port_ok
        && (https || matches!(host.as_str(), "127.0.0.1" | "localhost" | "[::1]"))
}

/// Whether a scope is a `scope-token` (RFC 6749 §3.3: visible ASCII but `"` and `\`).
#[must_use]
pub fn scope_token_ok(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// The Protected Resource Metadata document (RFC 9728 §2). `offline_access` is never
/// advertised, whatever `scopes_supported` says.
#[must_use]
pub fn prm_document(
    resource: &str,
    authorization_servers: &[String],
    scopes_supported: &[String],
    resource_documentation: Option<&str>,
) -> Value {
    let scopes: Vec<&str> =
        scopes_supported.iter().map(String::as_str).filter(|s| *s != "offline_access").collect();
    let mut doc = json!({
        "resource": resource,
        "authorization_servers": authorization_servers,
        "bearer_methods_supported": ["header"],
    });
    if !scopes.is_empty() {
        doc["scopes_supported"] = json!(scopes);
    }
    if let Some(d) = resource_documentation {
        doc["resource_documentation"] = json!(d);
    }
    doc
}

/// The error a challenge names (RFC 6750 §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BearerError {
    /// The request is malformed (a token in the query string).
    InvalidRequest,
    /// A token was sent and is not accepted.
    InvalidToken,
    /// The token lacks a scope the request needs.
    InsufficientScope,
}

impl BearerError {
    fn as_str(self) -> &'static str {
        match self {
            BearerError::InvalidRequest => "invalid_request",
            BearerError::InvalidToken => "invalid_token",
            BearerError::InsufficientScope => "insufficient_scope",
        }
    }
}

/// A `WWW-Authenticate` value: `Bearer` with the metadata URL (RFC 9728 §5.1), the scopes
/// the request needs (MCP 2025-11-25; never `offline_access`, MCP 2026-07-28), and the error
/// when there is one. The values are quoted; the config refuses URLs and scopes with a quote
/// or a backslash.
#[must_use]
pub fn challenge(
    resource_metadata: Option<&str>,
    scopes: &[Box<str>],
    error: Option<BearerError>,
) -> String {
    let mut parts = Vec::with_capacity(3);
    if let Some(error) = error {
        parts.push(format!("error=\"{}\"", error.as_str()));
    }
    let scopes: Vec<&str> =
        scopes.iter().map(|s| &**s).filter(|s| *s != "offline_access").collect();
    if !scopes.is_empty() {
        parts.push(format!("scope=\"{}\"", scopes.join(" ")));
    }
    if let Some(url) = resource_metadata {
        parts.push(format!("resource_metadata=\"{url}\""));
    }
    if parts.is_empty() { "Bearer".to_owned() } else { format!("Bearer {}", parts.join(", ")) }
}

/// Which scopes each request needs: the endpoint's for every request, and for a method the
/// table's entry for `method:name` (a tool, prompt or resource), else for `method`.
#[derive(Debug, Clone, Default)]
pub struct ScopeTable {
    endpoint: Vec<Box<str>>,
    by_key: HashMap<Box<str>, Vec<Box<str>>>,
    /// A broader scope and the narrower ones it implies.
    implies: HashMap<Box<str>, Vec<Box<str>>>,
}

impl ScopeTable {
    /// From the endpoint's scopes and the table (`"tools/call:checkout" = ["baskets:write"]`,
    /// `"tools/call" = ["tools"]`).
    #[must_use]
    pub fn new<'a>(
        endpoint: impl IntoIterator<Item = &'a str>,
        table: impl IntoIterator<Item = (&'a str, &'a [String])>,
    ) -> ScopeTable {
        let sorted = |it: &mut dyn Iterator<Item = &'a str>| {
            let mut v: Vec<Box<str>> = it.map(Box::from).collect();
            v.sort();
            v.dedup();
            v
        };
        let endpoint = sorted(&mut endpoint.into_iter());
        let by_key = table
            .into_iter()
            .map(|(k, v)| {
                let mut all = endpoint.clone();
                all.extend(v.iter().map(|s| Box::from(s.as_str())));
                all.sort();
                all.dedup();
                (Box::from(k), all)
            })
            .collect();
        ScopeTable { endpoint, by_key, implies: HashMap::new() }
    }

    /// With a scope hierarchy: each broader scope and the narrower ones it implies
    /// (`"baskets:admin" = ["baskets:write"]`; followed transitively).
    #[must_use]
    pub fn with_implies<'a>(
        mut self,
        implies: impl IntoIterator<Item = (&'a str, &'a [String])>,
    ) -> ScopeTable {
        self.implies = implies
            .into_iter()
            .map(|(k, v)| (Box::from(k), v.iter().map(|s| Box::from(s.as_str())).collect()))
            .collect();
        self
    }

    /// `granted` with every scope a granted one implies, transitively, sorted: what a token
    /// is checked against (MCP 2026-07-28: a broader scope implies narrower ones).
    #[must_use]
    pub fn expand(&self, granted: &[Box<str>]) -> Arc<[Box<str>]> {
        let mut all: Vec<Box<str>> = granted.to_vec();
        let mut i = 0;
        while i < all.len() {
            if let Some(narrower) = self.implies.get(&all[i]) {
                for n in narrower {
                    if !all.contains(n) {
                        all.push(n.clone());
                    }
                }
            }
            i += 1;
        }
        all.sort();
        all.into()
    }

    /// The scopes every request needs.
    #[must_use]
    pub fn endpoint(&self) -> &[Box<str>] {
        &self.endpoint
    }

    /// The scopes a request of `method` (naming `name`, for a tool, prompt or resource)
    /// needs, sorted: the endpoint's and the table's.
    #[must_use]
    pub fn needed(&self, method: &str, name: Option<&str>) -> &[Box<str>] {
        if !self.by_key.is_empty() {
            if let Some(name) = name {
                let key = format!("{method}:{name}");
                if let Some(v) = self.by_key.get(key.as_str()) {
                    return v;
                }
            }
            if let Some(v) = self.by_key.get(method) {
                return v;
            }
        }
        &self.endpoint
    }
}

/// What a caller's lists show when `auth.filter_lists` is on: only the tools, prompts and
/// resources its token has the scopes to call, get or read.
#[derive(Debug, Clone)]
pub struct ListFilter {
    /// The scope table.
    pub table: Arc<ScopeTable>,
    /// The caller's grant.
    pub grant: Grant,
}

impl ListFilter {
    /// A list result (`tools/list`, `prompts/list`, `resources/list`) with only the entries
    /// the grant may use; `None` for another method (its result is unchanged).
    #[must_use]
    pub fn apply(&self, method: &str, result: &Value) -> Option<Value> {
        let (key, call, field) = match method {
            "tools/list" => ("tools", "tools/call", "name"),
            "prompts/list" => ("prompts", "prompts/get", "name"),
            "resources/list" => ("resources", "resources/read", "uri"),
            _ => return None,
        };
        let Value::Object(m) = result else { return Some(result.clone()) };
        // Only the entries kept are copied.
        let out = m
            .iter()
            .map(|(k, v)| {
                let v = match v.as_array() {
                    Some(items) if k == key => Value::Array(
                        items
                            .iter()
                            .filter(|item| {
                                let name = item.get(field).and_then(Value::as_str);
                                self.grant.has_all(self.table.needed(call, name))
                            })
                            .cloned()
                            .collect(),
                    ),
                    _ => v.clone(),
                };
                (k.clone(), v)
            })
            .collect();
        Some(Value::Object(out))
    }
}

/// What a request names for the scope table: the tool or prompt (`params.name`) or the
/// resource (`params.uri`).
#[must_use]
pub fn named_in<'p>(method: &str, params: Option<&'p Value>) -> Option<&'p str> {
    let field = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        _ => return None,
    };
    params?.get(field)?.as_str()
}

#[cfg(test)]
pub(crate) mod test_keys;
#[cfg(test)]
mod tests;
