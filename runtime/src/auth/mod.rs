//! The OAuth 2.1 resource server's shell: fetches what [`crate::proto::oauth`] decides with
//! (authorization server metadata, JWKS, introspection answers), keeps it, and turns a bearer
//! token into a [`Grant`].
//!
//! - Keys: fetched at an issuer's first token, again [`OAuthConfig::jwks_max_age_secs`]
//!   later, and on a `kid` no key has — at most once per `jwks_refresh_min_secs`, one fetch
//!   per issuer at a time (the others wait for it, within the fetch deadline).
//! - Validated tokens are kept by SHA-256 digest until they expire (introspected ones at most
//!   `introspection_cache_secs`), at most `token_cache_entries`: a token seen again costs a
//!   hash and a look-up, not a signature check or a round trip.
//! - An authorization server that cannot be reached is a 503 (the token may be good), never a
//!   401 (which tells the client to throw its token away).

mod fetch;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest as _, Sha256};

use crate::clock::Clock;
use crate::config::{OAuthConfig, RuntimeConfig, Secret};
use crate::proto::oauth::{
    AsMetadata, Expect, Grant, KeySet, ListFilter, ScopeTable, TokenError,
    grant_from_introspection, looks_like_jwt, metadata_urls, parse_jwt, prm_document, prm_url,
};

pub(crate) use self::fetch::Fetch;

/// Why a token got no grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// The token is not accepted: 401 `invalid_token`.
    Invalid(TokenError),
    /// An authorization server could not be asked (down, slow, or too many introspections at
    /// once): 503.
    Unavailable(String),
}

struct Keys {
    set: Arc<KeySet>,
    /// When they were fetched (ms); 0: never.
    fetched_ms: u64,
    metadata: Option<AsMetadata>,
}

struct Issuer {
    url: String,
    jwt: bool,
    introspection: Option<(String, Secret)>,
    /// One fetch at a time; readers take the keys from it briefly.
    keys: tokio::sync::Mutex<Keys>,
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
    cache_max: usize,
    leeway_s: u64,
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

impl OAuth {
    /// The resource server of a validated configuration, or `None` when OAuth is off.
    #[must_use]
    pub(crate) fn from_config(cfg: &RuntimeConfig, clock: Clock) -> Option<Arc<OAuth>> {
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
                keys: tokio::sync::Mutex::new(Keys {
                    set: Arc::default(),
                    fetched_ms: 0,
                    metadata: None,
                }),
            })
            .collect();
        let doc = prm_document(
            &resource,
            &servers,
            &o.scopes_supported,
            o.resource_documentation.as_deref(),
        );
        Some(Arc::new(OAuth {
            metadata_url: prm_url(&resource),
            metadata_doc: Bytes::from(serde_json::to_vec(&doc).unwrap_or_default()),
            scopes: Arc::new(
                ScopeTable::new(
                    cfg.auth.required_scopes.iter().map(String::as_str),
                    cfg.auth.scopes.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
                )
                .with_implies(
                    cfg.auth.scope_implies.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
                ),
            ),
            filter_lists: cfg.auth.filter_lists,
            resource,
            issuers,
            cache: parking_lot::Mutex::new(HashMap::new()),
            cache_max: o.token_cache_entries,
            leeway_s: o.leeway_secs,
            refresh_min_ms: o.jwks_refresh_min_secs.saturating_mul(1000),
            max_age_ms: o.jwks_max_age_secs.saturating_mul(1000),
            introspection_cache_s: o.introspection_cache_secs,
            fetch_timeout: Duration::from_millis(o.fetch_timeout_ms),
            introspections: tokio::sync::Semaphore::new(o.introspection_concurrency),
            fetch: fetch::default_fetch(Duration::from_millis(o.fetch_timeout_ms)),
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

    /// The grant of a bearer token: from the cache, else checked (a JWT with its issuer's
    /// keys, an opaque token by introspection) and kept.
    ///
    /// # Errors
    /// [`AuthFailure::Invalid`] for a token not accepted, [`AuthFailure::Unavailable`] when
    /// no authorization server that could accept it answered.
    pub async fn authenticate(&self, token: &str) -> Result<Grant, AuthFailure> {
        if let Some(g) = self.cached(token) {
            return Ok(g);
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now_s = self.now_ms() / 1000;
        let mut grant = if looks_like_jwt(token) && self.jwt_issuer_of(token).is_some() {
            self.check_jwt(token).await?
        } else {
            self.introspect(token).await?
        };
        grant.scopes = self.scopes.expand(&grant.scopes);
        self.keep(digest, grant.clone(), now_s);
        Ok(grant)
    }

    /// The grant of a token validated before and not yet expired: a hash and a look-up.
    #[must_use]
    pub fn cached(&self, token: &str) -> Option<Grant> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now_s = self.now_ms() / 1000;
        self.cache.lock().get(&digest).filter(|g| now_s < g.expires_at_s).cloned()
    }

    /// The JWT issuer a JWT-shaped token names, when configured for JWTs.
    fn jwt_issuer_of(&self, token: &str) -> Option<&Issuer> {
        let t = parse_jwt(token).ok()?;
        let iss = t.issuer()?;
        self.issuers.iter().find(|i| i.jwt && i.url == iss)
    }

    async fn check_jwt(&self, token: &str) -> Result<Grant, AuthFailure> {
        let t = parse_jwt(token).map_err(AuthFailure::Invalid)?;
        let issuer = t
            .issuer()
            .and_then(|iss| self.issuers.iter().find(|i| i.jwt && i.url == iss))
            .ok_or(AuthFailure::Invalid(TokenError::Issuer))?;
        let keys = self.keys_of(issuer, None).await?;
        match t.verify(&keys) {
            Err(TokenError::UnknownKid(kid)) => {
                let again = self.keys_of(issuer, Some(kid.as_deref())).await?;
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
            now_s: self.now_ms() / 1000,
            leeway_s: self.leeway_s,
        }
    }

    /// An issuer's keys: fetched when there are none or they are older than the maximum age;
    /// with `unknown_kid`, fetched again unless they already have it or were fetched less
    /// than the refresh interval ago. One fetch per issuer at a time.
    async fn keys_of(
        &self,
        issuer: &Issuer,
        unknown_kid: Option<Option<&str>>,
    ) -> Result<Arc<KeySet>, AuthFailure> {
        let mut keys = tokio::time::timeout(self.fetch_timeout, issuer.keys.lock())
            .await
            .map_err(|_| AuthFailure::Unavailable(format!("{}: keys being fetched", issuer.url)))?;
        let now = self.now_ms();
        let age = now.saturating_sub(keys.fetched_ms);
        let stale = keys.fetched_ms == 0 || age >= self.max_age_ms;
        let refresh = match unknown_kid {
            None => stale,
            // Another request may have fetched them while this one waited.
            Some(kid) => stale || (!keys.set.has_kid(kid) && age >= self.refresh_min_ms),
        };
        if refresh {
            match self.fetch_keys(issuer, &mut keys).await {
                Ok(()) => {}
                // Keys that are there still verify; none at all is unavailable.
                Err(e) if keys.set.is_empty() => return Err(AuthFailure::Unavailable(e)),
                Err(e) => tracing::warn!(issuer = %issuer.url, "keys not refreshed: {e}"),
            }
            // Counted as a fetch even when it failed: an issuer that is down is asked again
            // only after the interval, not on every token.
            keys.fetched_ms = now.max(1);
        }
        Ok(Arc::clone(&keys.set))
    }

    async fn fetch_keys(&self, issuer: &Issuer, keys: &mut Keys) -> Result<(), String> {
        let metadata = self.metadata_of(issuer, keys).await?;
        let uri = metadata
            .jwks_uri
            .as_deref()
            .ok_or_else(|| format!("{}: metadata has no jwks_uri", issuer.url))?;
        let doc = self.fetch.get(uri).await?;
        let set = KeySet::parse(&doc)?;
        tracing::info!(issuer = %issuer.url, keys = set.len(), "fetched the issuer's keys");
        keys.set = Arc::new(set);
        Ok(())
    }

    /// The issuer's metadata, fetched once (and again with the keys when it could not be).
    async fn metadata_of(&self, issuer: &Issuer, keys: &mut Keys) -> Result<AsMetadata, String> {
        if let Some(m) = &keys.metadata {
            return Ok(m.clone());
        }
        let mut last = String::new();
        for url in metadata_urls(&issuer.url) {
            match self.fetch.get(&url).await {
                Ok(doc) => {
                    let m = AsMetadata::parse(&doc, &issuer.url)?;
                    keys.metadata = Some(m.clone());
                    return Ok(m);
                }
                Err(e) => last = e,
            }
        }
        Err(format!("{}: no metadata found ({last})", issuer.url))
    }

    /// Ask the introspecting issuers, in order, until one says the token is active.
    async fn introspect(&self, token: &str) -> Result<Grant, AuthFailure> {
        let mut unavailable = None;
        for issuer in self.issuers.iter().filter(|i| i.introspection.is_some()) {
            match self.introspect_at(issuer, token).await {
                Ok(g) => return Ok(g),
                Err(AuthFailure::Unavailable(e)) => unavailable = Some(e),
                Err(AuthFailure::Invalid(_)) => {}
            }
        }
        Err(match unavailable {
            Some(e) => AuthFailure::Unavailable(e),
            None if looks_like_jwt(token) => AuthFailure::Invalid(TokenError::Issuer),
            None => AuthFailure::Invalid(TokenError::Inactive),
        })
    }

    async fn introspect_at(&self, issuer: &Issuer, token: &str) -> Result<Grant, AuthFailure> {
        let Some((client, secret)) = &issuer.introspection else {
            return Err(AuthFailure::Invalid(TokenError::Inactive));
        };
        let endpoint = {
            let mut keys = tokio::time::timeout(self.fetch_timeout, issuer.keys.lock())
                .await
                .map_err(|_| AuthFailure::Unavailable(format!("{}: busy", issuer.url)))?;
            let m = self.metadata_of(issuer, &mut keys).await.map_err(AuthFailure::Unavailable)?;
            m.introspection_endpoint.ok_or_else(|| {
                AuthFailure::Unavailable(format!(
                    "{}: metadata has no introspection_endpoint",
                    issuer.url
                ))
            })?
        };
        let _permit = tokio::time::timeout(self.fetch_timeout, self.introspections.acquire())
            .await
            .map_err(|_| AuthFailure::Unavailable("too many introspections at once".into()))?
            .map_err(|_| AuthFailure::Unavailable("closed".into()))?;
        let body = self
            .fetch
            .post_form(
                &endpoint,
                (client, secret),
                &[("token", token), ("token_type_hint", "access_token")],
            )
            .await
            .map_err(AuthFailure::Unavailable)?;
        let mut g = grant_from_introspection(&body, &self.expect(&issuer.url))
            .map_err(AuthFailure::Invalid)?;
        let bound = self.now_ms() / 1000 + self.introspection_cache_s;
        g.expires_at_s = g.expires_at_s.min(bound);
        Ok(g)
    }

    /// Keep a grant; when full, drop the expired, and if that is not enough an eighth of the
    /// rest (whichever the map yields first).
    fn keep(&self, digest: [u8; 32], grant: Grant, now_s: u64) {
        let mut cache = self.cache.lock();
        if cache.len() >= self.cache_max {
            cache.retain(|_, g| now_s < g.expires_at_s);
            if cache.len() >= self.cache_max {
                let drop: Vec<[u8; 32]> =
                    cache.keys().take((self.cache_max / 8).max(1)).copied().collect();
                for k in drop {
                    cache.remove(&k);
                }
            }
        }
        cache.insert(digest, grant);
    }

    /// Validated tokens kept now.
    #[must_use]
    pub fn cached_tokens(&self) -> usize {
        self.cache.lock().len()
    }
}
