//! The OAuth 2.1 resource server's shell: fetches what [`crate::proto::oauth`] decides with
//! (authorization server metadata, JWKS, introspection answers), keeps it, and turns a bearer
//! token into a [`Grant`].
//!
//! - **Where a token goes.** A JWT-shaped token is routed by the `iss` it claims: to the
//!   signature check for a JWT issuer, to that issuer's introspection for an introspecting
//!   one, and nowhere for any other (401 without a fetch). Only an opaque token is asked of
//!   the introspecting issuers, in their configured order.
//! - **Keys** are read without waiting. They are fetched at an issuer's first token, again
//!   `jwks_max_age_secs` after the last good fetch (tried every `jwks_refresh_min_secs` while
//!   that fails; keys older than three maximum ages are not used: 503), and on a `kid` no key
//!   has, at most once per `jwks_refresh_min_secs`. One fetch per issuer at a time; a
//!   request that needs it waits for it, within the fetch deadline.
//! - **Validated tokens** are kept by SHA-256 digest until they expire (introspected ones at
//!   most `introspection_cache_secs`), refused ones as long, each at most
//!   `token_cache_entries`: a token seen again costs a hash and a look-up.
//! - An authorization server that cannot be asked is a 503 (the token may be good), not a 401
//!   (which tells the client to throw its token away). A JWT waits at most twice
//!   `fetch_timeout_ms` (another request's key fetch, then its own), an opaque token at most
//!   `fetch_timeout_ms` per introspecting server.
//! - `exp` and `nbf` are read against the wall clock; the intervals against the monotonic one.

mod fetch;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest as _, Sha256};

use crate::clock::Clock;
use crate::config::{OAuthConfig, RuntimeConfig, Secret};
use crate::proto::oauth::{
    AsMetadata, Expect, Grant, KeySet, ListFilter, ScopeTable, TokenError, Unverified,
    grant_from_introspection, looks_like_jwt, metadata_urls, parse_jwt, peek_issuer, prm_document,
    prm_url,
};

pub(crate) use self::fetch::Fetch;

/// Why a token got no grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// The token is not accepted: 401 `invalid_token`.
    Invalid(TokenError),
    /// An authorization server could not be asked (down, slow, a malformed answer, or too
    /// many introspections at once): 503.
    Unavailable(String),
}

/// An issuer's keys and when they were fetched (monotonic ms; 0: never).
#[derive(Clone, Default)]
struct Keys {
    set: Arc<KeySet>,
    /// The last fetch that gave keys.
    ok_ms: u64,
    /// The last fetch tried, good or not.
    tried_ms: u64,
}

struct Issuer {
    url: String,
    jwt: bool,
    introspection: Option<(String, Secret)>,
    /// Read by every uncached token of this issuer, never across an await.
    keys: parking_lot::RwLock<Keys>,
    /// Fetched once, and again after a failed key fetch.
    metadata: parking_lot::Mutex<Option<AsMetadata>>,
    /// One fetch (metadata, keys) at a time.
    fetching: tokio::sync::Mutex<()>,
}

/// The resource server: configuration, the issuers' keys, the validated tokens.
pub struct OAuth {
    resource: String,
    metadata_url: String,
    metadata_doc: Bytes,
    scopes: Arc<ScopeTable>,
    filter_lists: bool,
    issuers: Vec<Issuer>,
    cache: parking_lot::Mutex<HashMap<[u8; 32], Grant>>,
    /// Tokens refused, by digest, and until when (wall s): a retried bad token costs nothing.
    refused: parking_lot::Mutex<HashMap<[u8; 32], u64>>,
    cache_max: usize,
    leeway_s: u64,
    require_at_jwt: bool,
    refresh_min_ms: u64,
    max_age_ms: u64,
    introspection_cache_s: u64,
    fetch_timeout: Duration,
    introspections: tokio::sync::Semaphore,
    fetch: Box<dyn Fetch>,
    clock: Clock,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth").field("resource", &self.resource).finish_non_exhaustive()
    }
}

/// A token's cache key.
#[must_use]
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Seconds since the epoch, from the wall clock: what `exp` and `nbf` are compared with.
fn wall_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Where a token goes.
enum Route<'t> {
    /// A JWT of a JWT issuer: its signature and claims.
    Jwt(&'t Issuer, Box<Unverified<'t>>),
    /// Introspection at these issuers, in order.
    Introspect(Vec<&'t Issuer>),
}

impl OAuth {
    /// The resource server of a validated configuration, or `None` when OAuth is off.
    #[must_use]
    pub(crate) fn from_config(cfg: &RuntimeConfig, clock: Clock) -> Option<Arc<OAuth>> {
        let o: &OAuthConfig = &cfg.auth.oauth;
        if !o.enabled() {
            // Before the fetcher: it reads the system's root certificates (about 17 million
            // instructions at every start, measured under callgrind in issue 23).
            return None;
        }
        let fetch = fetch::default_fetch(Duration::from_millis(o.fetch_timeout_ms));
        OAuth::with_fetch(cfg, clock, fetch)
    }

    fn with_fetch(cfg: &RuntimeConfig, clock: Clock, fetch: Box<dyn Fetch>) -> Option<Arc<OAuth>> {
        let o: &OAuthConfig = &cfg.auth.oauth;
        if !o.enabled() {
            return None;
        }
        let resource = o.resource.clone()?;
        let servers = o.authorization_servers();
        let issuers = servers
            .iter()
            .map(|url| Issuer {
                url: url.clone(),
                jwt: o.issuers.contains(url),
                introspection: o
                    .introspection
                    .iter()
                    .find(|i| &i.issuer == url)
                    .map(|i| (i.client_id.clone(), i.client_secret.clone())),
                keys: parking_lot::RwLock::default(),
                metadata: parking_lot::Mutex::new(None),
                fetching: tokio::sync::Mutex::new(()),
            })
            .collect();
        let doc = prm_document(
            &resource,
            &servers,
            &o.scopes_supported,
            o.resource_documentation.as_deref(),
        );
        let a = &cfg.auth;
        Some(Arc::new(OAuth {
            metadata_url: prm_url(&resource),
            metadata_doc: Bytes::from(serde_json::to_vec(&doc).unwrap_or_default()),
            scopes: Arc::new(
                ScopeTable::new(
                    a.required_scopes.iter().map(String::as_str),
                    a.scopes.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
                )
                .with_implies(a.scope_implies.iter().map(|(k, v)| (k.as_str(), v.as_slice()))),
            ),
            filter_lists: a.filter_lists,
            resource,
            issuers,
            cache: parking_lot::Mutex::new(HashMap::new()),
            refused: parking_lot::Mutex::new(HashMap::new()),
            cache_max: o.token_cache_entries,
            leeway_s: o.leeway_secs,
            require_at_jwt: !o.accept_any_jwt_typ,
            refresh_min_ms: o.jwks_refresh_min_secs.saturating_mul(1000),
            max_age_ms: o.jwks_max_age_secs.saturating_mul(1000),
            introspection_cache_s: o.introspection_cache_secs,
            fetch_timeout: Duration::from_millis(o.fetch_timeout_ms),
            introspections: tokio::sync::Semaphore::new(o.introspection_concurrency),
            fetch,
            clock,
        }))
    }

    /// The Protected Resource Metadata URL (the challenges' `resource_metadata`).
    #[must_use]
    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// The Protected Resource Metadata document, encoded.
    #[must_use]
    pub fn metadata_doc(&self) -> &Bytes {
        &self.metadata_doc
    }

    /// The scope table.
    #[must_use]
    pub fn scopes(&self) -> &ScopeTable {
        &self.scopes
    }

    /// What `grant`'s lists show, when `auth.filter_lists` is on.
    #[must_use]
    pub fn list_filter(&self, grant: &Grant) -> Option<Arc<ListFilter>> {
        self.filter_lists
            .then(|| Arc::new(ListFilter { table: Arc::clone(&self.scopes), grant: grant.clone() }))
    }

    /// The resource (the audience tokens must name).
    #[must_use]
    pub fn resource(&self) -> &str {
        &self.resource
    }

    fn now_ms(&self) -> u64 {
        self.clock.now().0
    }

    /// The grant of a token validated before and not yet expired, or the refusal of one
    /// refused lately: a look-up by its digest. `None`: not known, check it.
    ///
    /// # Errors
    /// [`AuthFailure::Invalid`] for a token refused within `introspection_cache_secs`.
    pub fn cached(&self, digest: &[u8; 32]) -> Option<Result<Grant, AuthFailure>> {
        let now = wall_s();
        if let Some(g) = self.cache.lock().get(digest).filter(|g| now < g.expires_at_s) {
            return Some(Ok(g.clone()));
        }
        self.refused
            .lock()
            .get(digest)
            .filter(|until| now < **until)
            .map(|_| Err(AuthFailure::Invalid(TokenError::Inactive)))
    }

    /// The grant of a bearer token not in the cache ([`OAuth::cached`]): checked (a JWT with
    /// its issuer's keys, an opaque token by introspection), then kept (a refusal too).
    ///
    /// # Errors
    /// [`AuthFailure::Invalid`] for a token not accepted, [`AuthFailure::Unavailable`] when
    /// no authorization server that could accept it answered in time.
    pub async fn authenticate(&self, token: &str, digest: [u8; 32]) -> Result<Grant, AuthFailure> {
        // A JWT: the wait for another request's key fetch, then one fetch. An opaque token:
        // one deadline per introspecting server, each asked in turn.
        let rounds = self.issuers.iter().filter(|i| i.introspection.is_some()).count().max(1);
        let deadline =
            self.fetch_timeout.saturating_mul(u32::try_from(rounds + 1).unwrap_or(u32::MAX));
        let checked = match tokio::time::timeout(deadline, self.check(token)).await {
            Ok(r) => r,
            Err(_) => Err(AuthFailure::Unavailable(format!("no answer within {deadline:?}"))),
        };
        match checked {
            Ok(mut grant) => {
                grant.scopes = self.scopes.expand(&grant.scopes);
                keep(&self.cache, self.cache_max, digest, grant.clone(), |g| g.expires_at_s);
                Ok(grant)
            }
            Err(AuthFailure::Invalid(why)) => {
                // Kept only when time will not lift it: not a key the issuer may have just
                // added or replaced, not a token not yet valid.
                if !matches!(
                    why,
                    TokenError::UnknownKid(_)
                        | TokenError::Signature
                        | TokenError::NoKid
                        | TokenError::NotYetValid
                ) {
                    let until = wall_s().saturating_add(self.introspection_cache_s);
                    keep(&self.refused, self.cache_max, digest, until, |u| *u);
                }
                Err(AuthFailure::Invalid(why))
            }
            Err(e) => Err(e),
        }
    }

    async fn check(&self, token: &str) -> Result<Grant, AuthFailure> {
        match self.route(token)? {
            Route::Jwt(issuer, t) => self.check_jwt(issuer, &t).await,
            Route::Introspect(issuers) => self.introspect(&issuers, token).await,
        }
    }

    /// Where a token goes ([`Route`]); a JWT-shaped token claiming no configured issuer is
    /// refused here, with no fetch.
    fn route<'s, 't>(&'s self, token: &'t str) -> Result<Route<'t>, AuthFailure>
    where
        's: 't,
    {
        if !looks_like_jwt(token) {
            let all: Vec<&Issuer> =
                self.issuers.iter().filter(|i| i.introspection.is_some()).collect();
            return if all.is_empty() {
                Err(AuthFailure::Invalid(TokenError::Malformed))
            } else {
                Ok(Route::Introspect(all))
            };
        }
        let iss = peek_issuer(token).ok_or(AuthFailure::Invalid(TokenError::Issuer))?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.url == iss)
            .ok_or(AuthFailure::Invalid(TokenError::Issuer))?;
        if issuer.jwt {
            let t = parse_jwt(token).map_err(AuthFailure::Invalid)?;
            Ok(Route::Jwt(issuer, Box::new(t)))
        } else {
            Ok(Route::Introspect(vec![issuer]))
        }
    }

    async fn check_jwt(&self, issuer: &Issuer, t: &Unverified<'_>) -> Result<Grant, AuthFailure> {
        let keys = self.keys_of(issuer, false).await?;
        match t.verify(&keys) {
            // A key the issuer added or replaced since (a new kid, a kid reused for new key
            // material, a token without kid while keys overlap): the keys are fetched again,
            // unless that was done within the refresh interval.
            Err(why @ (TokenError::UnknownKid(_) | TokenError::Signature | TokenError::NoKid)) => {
                let again = self.keys_of(issuer, true).await?;
                if Arc::ptr_eq(&again, &keys) {
                    return Err(AuthFailure::Invalid(why));
                }
                t.verify(&again).map_err(AuthFailure::Invalid)?;
            }
            other => other.map_err(AuthFailure::Invalid)?,
        }
        t.grant(&self.expect(&issuer.url)).map_err(AuthFailure::Invalid)
    }

    fn expect<'a>(&'a self, issuer: &'a str) -> Expect<'a> {
        Expect {
            issuer,
            resource: &self.resource,
            now_s: wall_s(),
            leeway_s: self.leeway_s,
            require_at_jwt: self.require_at_jwt,
        }
    }

    /// An issuer's keys, fetched first when there are none yet, when they are due (past
    /// their maximum age), or — `unknown_kid` — when a token names a key they lack; every
    /// fetch at most once per refresh interval. Keys that are there are used while a due
    /// fetch fails, up to three maximum ages. A key a token needs that could not be fetched is
    /// a 503 (the new key may well be the issuer's), whether this request's fetch failed or
    /// the last one did.
    async fn keys_of(
        &self,
        issuer: &Issuer,
        unknown_kid: bool,
    ) -> Result<Arc<KeySet>, AuthFailure> {
        let unavailable = |e: &str| AuthFailure::Unavailable(format!("{}: {e}", issuer.url));
        let seen = issuer.keys.read().clone();
        let now = self.now_ms();
        let never = seen.ok_ms == 0;
        let due = never || now.saturating_sub(seen.ok_ms) >= self.max_age_ms;
        // At most once per refresh interval, whatever asks (a first fetch that failed too).
        let may = seen.tried_ms == 0 || now.saturating_sub(seen.tried_ms) >= self.refresh_min_ms;
        if !(may && (unknown_kid || due)) {
            if unknown_kid && seen.tried_ms != seen.ok_ms {
                return Err(unavailable("its keys could not be fetched lately"));
            }
            return self.usable(issuer, seen, now);
        }
        let _one = tokio::time::timeout(self.fetch_timeout, issuer.fetching.lock())
            .await
            .map_err(|_| unavailable("its keys are being fetched"))?;
        // Fetched by another request while this one waited.
        let current = issuer.keys.read().clone();
        if current.tried_ms != seen.tried_ms {
            return if current.ok_ms == current.tried_ms {
                Ok(current.set)
            } else if unknown_kid || current.ok_ms == 0 {
                Err(unavailable("its keys could not be fetched"))
            } else {
                self.usable(issuer, current, now)
            };
        }
        // The attempt counts from its start: one cut short by the request's deadline is
        // still an attempt (no second one within the interval).
        issuer.keys.write().tried_ms = now.max(1);
        let fetched = match tokio::time::timeout(self.fetch_timeout, self.fetch_keys(issuer)).await
        {
            Ok(r) => r,
            Err(_) => {
                *issuer.metadata.lock() = None;
                Err(format!("no keys within {:?}", self.fetch_timeout))
            }
        };
        match fetched {
            Ok(set) => {
                let mut keys = issuer.keys.write();
                keys.set = Arc::new(set);
                keys.ok_ms = keys.tried_ms;
                Ok(Arc::clone(&keys.set))
            }
            Err(e) => {
                tracing::warn!(target: "mcp_runtime::auth", issuer = %issuer.url, "keys not fetched: {e}");
                if unknown_kid || never {
                    return Err(unavailable(&e));
                }
                let kept = issuer.keys.read().clone();
                self.usable(issuer, kept, now)
            }
        }
    }

    /// Keys that are there, unless older than three maximum ages.
    fn usable(&self, issuer: &Issuer, keys: Keys, now: u64) -> Result<Arc<KeySet>, AuthFailure> {
        if keys.ok_ms == 0 || now.saturating_sub(keys.ok_ms) > self.max_age_ms.saturating_mul(3) {
            return Err(AuthFailure::Unavailable(format!("{}: no current keys", issuer.url)));
        }
        Ok(keys.set)
    }

    async fn fetch_keys(&self, issuer: &Issuer) -> Result<KeySet, String> {
        let metadata = self.metadata_of(issuer).await?;
        let uri =
            metadata.jwks_uri.as_deref().ok_or_else(|| "metadata has no jwks_uri".to_owned())?;
        let fetched = match self.fetch.get(uri).await {
            Ok(doc) => KeySet::parse(&doc),
            Err(e) => Err(e),
        };
        match fetched {
            Ok(set) => {
                tracing::info!(target: "mcp_runtime::auth", issuer = %issuer.url, keys = set.len(), "fetched the issuer's keys");
                Ok(set)
            }
            Err(e) => {
                // The keys may have moved: the metadata is asked again next time.
                *issuer.metadata.lock() = None;
                Err(e)
            }
        }
    }

    /// The issuer's metadata: kept once fetched (dropped when a key fetch fails).
    async fn metadata_of(&self, issuer: &Issuer) -> Result<AsMetadata, String> {
        if let Some(m) = issuer.metadata.lock().clone() {
            return Ok(m);
        }
        let mut last = String::new();
        for url in metadata_urls(&issuer.url) {
            // A 200 that is not this issuer's metadata is no answer either: the next place.
            match self.fetch.get(&url).await.and_then(|doc| AsMetadata::parse(&doc, &issuer.url)) {
                Ok(m) => {
                    *issuer.metadata.lock() = Some(m.clone());
                    return Ok(m);
                }
                Err(e) => last = e,
            }
        }
        Err(format!("no metadata found ({last})"))
    }

    /// Ask `issuers`, in order, until one says the token is active.
    async fn introspect(&self, issuers: &[&Issuer], token: &str) -> Result<Grant, AuthFailure> {
        let mut unavailable = None;
        for issuer in issuers {
            // Each within its own deadline: one server that hangs does not keep the others'
            // tokens from being asked.
            let asked = tokio::time::timeout(self.fetch_timeout, self.introspect_at(issuer, token))
                .await
                .unwrap_or_else(|_| {
                    Err(AuthFailure::Unavailable(format!("{}: no answer in time", issuer.url)))
                });
            match asked {
                Ok(g) => return Ok(g),
                Err(AuthFailure::Unavailable(e)) => unavailable = Some(e),
                Err(AuthFailure::Invalid(_)) => {}
            }
        }
        Err(match unavailable {
            Some(e) => AuthFailure::Unavailable(e),
            None => AuthFailure::Invalid(TokenError::Inactive),
        })
    }

    async fn introspect_at(&self, issuer: &Issuer, token: &str) -> Result<Grant, AuthFailure> {
        let unavailable = |e: String| AuthFailure::Unavailable(format!("{}: {e}", issuer.url));
        let Some((client, secret)) = &issuer.introspection else {
            return Err(AuthFailure::Invalid(TokenError::Inactive));
        };
        let metadata = {
            let _one = tokio::time::timeout(self.fetch_timeout, issuer.fetching.lock())
                .await
                .map_err(|_| unavailable("busy".into()))?;
            self.metadata_of(issuer).await.map_err(unavailable)?
        };
        let endpoint = metadata
            .introspection_endpoint
            .ok_or_else(|| unavailable("metadata has no introspection_endpoint".into()))?;
        let _permit = tokio::time::timeout(self.fetch_timeout, self.introspections.acquire())
            .await
            .map_err(|_| unavailable("too many introspections at once".into()))?
            .map_err(|_| unavailable("closed".into()))?;
        let body = self
            .fetch
            .post_form(
                &endpoint,
                (client, secret),
                &[("token", token), ("token_type_hint", "access_token")],
            )
            .await
            .map_err(unavailable)?;
        let mut g = match grant_from_introspection(&body, &self.expect(&issuer.url)) {
            // A 200 that is not an introspection answer says nothing about the token.
            Err(TokenError::Malformed) => {
                return Err(unavailable("not an introspection answer".into()));
            }
            other => other.map_err(AuthFailure::Invalid)?,
        };
        g.expires_at_s = g.expires_at_s.min(wall_s().saturating_add(self.introspection_cache_s));
        Ok(g)
    }
}

/// Keep `value` under `digest` in a map of at most `max` entries: when full, drop the expired
/// (by `until`, wall s), and if that is not enough an eighth of the rest (whichever the map
/// yields first).
fn keep<V>(
    map: &parking_lot::Mutex<HashMap<[u8; 32], V>>,
    max: usize,
    digest: [u8; 32],
    value: V,
    until: impl Fn(&V) -> u64,
) {
    let now = wall_s();
    let mut map = map.lock();
    if map.len() >= max {
        map.retain(|_, v| now < until(v));
        if map.len() >= max {
            let drop: Vec<[u8; 32]> = map.keys().take((max / 8).max(1)).copied().collect();
            for k in drop {
                map.remove(&k);
            }
        }
    }
    map.insert(digest, value);
}

#[cfg(test)]
mod tests;
