//! The shell's decisions with a scripted [`Fetch`] (what each URL answers, every call
//! recorded) and paused time: where a token goes, when keys are fetched, what is cached.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::*;
use crate::config::IntrospectionConfig;
use crate::proto::oauth::test_keys::Signer;

const A: &str = "https://a.example";
const B: &str = "https://b.example";
const RES: &str = "https://mcp.example/mcp";

/// Answers by URL (a missing URL is an error; a URL in `hang` never answers), and the URLs
/// asked, in order.
#[derive(Default, Clone)]
struct Script {
    answers: Arc<parking_lot::Mutex<HashMap<String, Result<Bytes, String>>>>,
    hang: Arc<parking_lot::Mutex<Vec<String>>>,
    asked: Arc<parking_lot::Mutex<Vec<String>>>,
}

impl Script {
    fn answer(&self, url: &str, body: Result<Value, &str>) {
        let body = body.map(|v| Bytes::from(v.to_string())).map_err(str::to_owned);
        self.answers.lock().insert(url.to_owned(), body);
    }

    fn raw(&self, url: &str, body: &'static [u8]) {
        self.answers.lock().insert(url.to_owned(), Ok(Bytes::from_static(body)));
    }

    fn hang(&self, url: &str) {
        self.hang.lock().push(url.to_owned());
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().clone()
    }

    fn reply(&self, url: &str) -> Result<Bytes, String> {
        self.asked.lock().push(url.to_owned());
        self.answers.lock().get(url).cloned().unwrap_or_else(|| Err(format!("{url}: refused")))
    }
}

impl Script {
    fn answering<'a>(
        &self,
        url: &str,
    ) -> Pin<Box<dyn Future<Output = Result<Bytes, String>> + 'a>> {
        let hangs = self.hang.lock().iter().any(|u| u == url);
        let r = self.reply(url);
        Box::pin(async move {
            if hangs {
                tokio::time::sleep(Duration::from_secs(86_400)).await;
            }
            r
        })
    }
}

impl Fetch for Script {
    fn get<'a>(
        &'a self,
        url: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Bytes, String>> + 'a>> {
        self.answering(url)
    }

    fn post_form<'a>(
        &'a self,
        url: &'a str,
        _basic: (&'a str, &'a str),
        _form: &'a [(&'a str, &'a str)],
    ) -> Pin<Box<dyn Future<Output = Result<Bytes, String>> + 'a>> {
        self.answering(url)
    }
}

/// A resource server trusting JWTs of A and introspecting at B, with a script whose A serves
/// its metadata and `keys`, and B its metadata.
fn server(
    keys: &[(&Signer, &str)],
    tweak: impl FnOnce(&mut RuntimeConfig),
) -> (Arc<OAuth>, Script) {
    let mut cfg = RuntimeConfig::default();
    cfg.auth.oauth.issuers = vec![A.into()];
    cfg.auth.oauth.introspection = vec![IntrospectionConfig {
        issuer: B.into(),
        client_id: "rs".into(),
        client_secret: "s".into(),
    }];
    cfg.auth.oauth.resource = Some(RES.into());
    tweak(&mut cfg);
    let script = Script::default();
    script.answer(
        &format!("{A}/.well-known/oauth-authorization-server"),
        Ok(json!({"issuer": A, "jwks_uri": format!("{A}/jwks")})),
    );
    script.answer(&format!("{A}/jwks"), Ok(jwks(keys)));
    script.answer(
        &format!("{B}/.well-known/oauth-authorization-server"),
        Ok(json!({"issuer": B, "introspection_endpoint": format!("{B}/introspect")})),
    );
    let oauth =
        OAuth::with_fetch(&cfg, Clock::start(), Box::new(script.clone())).expect("OAuth is on");
    (oauth, script)
}

fn jwks(keys: &[(&Signer, &str)]) -> Value {
    json!({"keys": keys.iter().map(|(s, kid)| s.jwk(kid)).collect::<Vec<_>>()})
}

fn claims(iss: &str) -> Value {
    json!({"iss": iss, "sub": "u", "aud": RES, "exp": wall_s() + 3600, "scope": "mcp"})
}

/// A new token of A's at each call (another `jti`): never from the cache.
fn fresh_tokens(key: &Signer) -> impl FnMut() -> String + '_ {
    let mut n = 0;
    move || {
        n += 1;
        let mut c = claims(A);
        c["jti"] = json!(n);
        key.sign("k", &c)
    }
}

async fn auth(o: &OAuth, token: &str) -> Result<Grant, AuthFailure> {
    match o.cached(&digest(token)) {
        Some(r) => r,
        None => o.authenticate(token, digest(token)).await,
    }
}

#[tokio::test(start_paused = true)]
async fn a_token_goes_only_to_the_server_it_names() {
    let key = Signer::ed();
    let (o, script) = server(&[(&key, "k")], |_| {});
    // A JWT claiming a server not configured: refused, nothing fetched.
    let r = auth(&o, &key.sign("k", &claims("https://c.example"))).await;
    assert_eq!(r, Err(AuthFailure::Invalid(TokenError::Issuer)));
    // alg none claiming A: refused by A's rules, never introspected anywhere.
    let none = format!(
        "{}.{}.",
        crate::proto::oauth::test_keys::enc(&json!({"alg": "none"})),
        crate::proto::oauth::test_keys::enc(&claims(A))
    );
    assert!(matches!(auth(&o, &none).await, Err(AuthFailure::Invalid(TokenError::Algorithm(_)))));
    assert!(script.asked().is_empty(), "{:?}", script.asked());
    // A JWT claiming B (an introspecting server) is introspected at B only.
    script.answer(
        &format!("{B}/introspect"),
        Ok(json!({"active": true, "sub": "v", "aud": RES, "exp": wall_s() + 60})),
    );
    let g = auth(&o, &key.sign("k", &claims(B))).await.unwrap();
    assert_eq!(&*g.principal, "https://b.example|v");
    assert_eq!(
        script.asked(),
        [format!("{B}/.well-known/oauth-authorization-server"), format!("{B}/introspect")]
    );
    // An opaque token: introspection (B), never A's keys.
    let g = auth(&o, "opaque-1").await.unwrap();
    assert_eq!(&*g.principal, "https://b.example|v");
    assert!(script.asked().iter().all(|u| u.starts_with(B)));
}

#[tokio::test(start_paused = true)]
async fn keys_that_cannot_be_fetched_are_asked_again_only_after_the_refresh_interval() {
    let key = Signer::ec();
    let (o, script) = server(&[(&key, "k")], |c| c.auth.oauth.jwks_refresh_min_secs = 10);
    script.answer(&format!("{A}/jwks"), Err("down"));
    let token = key.sign("k", &claims(A));
    assert!(matches!(auth(&o, &token).await, Err(AuthFailure::Unavailable(_))));
    let fetches = || script.asked().iter().filter(|u| u.ends_with("/jwks")).count();
    assert_eq!(fetches(), 1);
    // Within the interval: 503 again (the token may be good), and no fetch.
    assert!(matches!(auth(&o, &token).await, Err(AuthFailure::Unavailable(_))));
    assert_eq!(fetches(), 1);
    tokio::time::advance(Duration::from_secs(10)).await;
    script.answer(&format!("{A}/jwks"), Ok(jwks(&[(&key, "k")])));
    assert!(auth(&o, &token).await.is_ok());
    assert_eq!(fetches(), 2);
}

#[tokio::test(start_paused = true)]
async fn keys_are_used_while_a_due_refresh_fails_but_not_past_three_maximum_ages() {
    let key = Signer::ed();
    let (o, script) = server(&[(&key, "k")], |c| {
        c.auth.oauth.jwks_max_age_secs = 100;
        c.auth.oauth.jwks_refresh_min_secs = 10;
    });
    let mut fresh = fresh_tokens(&key);
    assert!(auth(&o, &fresh()).await.is_ok());
    script.answer(&format!("{A}/jwks"), Err("down"));
    tokio::time::advance(Duration::from_secs(150)).await;
    assert!(auth(&o, &fresh()).await.is_ok(), "due, the refresh fails, the keys still serve");
    let asked = script.asked();
    assert!(
        asked.iter().any(|u| u.ends_with("/.well-known/oauth-authorization-server")),
        "the metadata is asked again after a failed key fetch"
    );
    tokio::time::advance(Duration::from_secs(151)).await;
    assert!(
        matches!(auth(&o, &fresh()).await, Err(AuthFailure::Unavailable(_))),
        "older than three maximum ages"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unknown_kid_whose_fetch_fails_is_503_and_within_the_interval_401_without_a_fetch() {
    let old = Signer::ed();
    let new = Signer::ed();
    let (o, script) = server(&[(&old, "old")], |c| c.auth.oauth.jwks_refresh_min_secs = 10);
    assert!(auth(&o, &old.sign("old", &claims(A))).await.is_ok());
    let fetches = || script.asked().iter().filter(|u| u.ends_with("/jwks")).count();
    // Within the interval: refused, no fetch, and not remembered as refused.
    let t = new.sign("new", &claims(A));
    assert_eq!(
        auth(&o, &t).await,
        Err(AuthFailure::Invalid(TokenError::UnknownKid(Some("new".into()))))
    );
    assert_eq!(fetches(), 1);
    tokio::time::advance(Duration::from_secs(10)).await;
    script.answer(&format!("{A}/jwks"), Err("down"));
    assert!(
        matches!(auth(&o, &t).await, Err(AuthFailure::Unavailable(_))),
        "the new key may be the issuer's"
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    script.answer(&format!("{A}/jwks"), Ok(jwks(&[(&old, "old"), (&new, "new")])));
    assert!(auth(&o, &t).await.is_ok(), "taken once the keys have it");
}

#[tokio::test(start_paused = true)]
async fn a_refused_token_is_refused_from_the_cache_and_a_good_one_served_from_it() {
    let key = Signer::ed();
    let (o, script) = server(&[(&key, "k")], |_| {});
    let mut c = claims(A);
    c["aud"] = json!("https://other.example/mcp");
    let wrong = key.sign("k", &c);
    assert_eq!(auth(&o, &wrong).await, Err(AuthFailure::Invalid(TokenError::Audience)));
    let good = key.sign("k", &claims(A));
    assert!(auth(&o, &good).await.is_ok());
    let before = script.asked().len();
    assert!(matches!(o.cached(&digest(&wrong)), Some(Err(AuthFailure::Invalid(_)))));
    assert!(matches!(o.cached(&digest(&good)), Some(Ok(_))));
    assert_eq!(script.asked().len(), before);
    // An opaque token B calls inactive is refused once and then from the cache.
    script.answer(&format!("{B}/introspect"), Ok(json!({"active": false})));
    assert_eq!(auth(&o, "revoked").await, Err(AuthFailure::Invalid(TokenError::Inactive)));
    let before = script.asked().len();
    assert!(auth(&o, "revoked").await.is_err());
    assert_eq!(script.asked().len(), before, "no second introspection");
}

#[tokio::test(start_paused = true)]
async fn an_introspection_answer_that_is_not_json_is_503_and_a_jwt_without_at_jwt_type_401() {
    let key = Signer::ed();
    let (o, script) = server(&[(&key, "k")], |_| {});
    script.raw(&format!("{B}/introspect"), b"<html>proxy error</html>");
    assert!(matches!(auth(&o, "opaque").await, Err(AuthFailure::Unavailable(_))));
    let id_token =
        key.sign_with_header(&json!({"alg": "EdDSA", "kid": "k", "typ": "JWT"}), &claims(A));
    assert_eq!(
        auth(&o, &id_token).await,
        Err(AuthFailure::Invalid(TokenError::Type(Some("JWT".into()))))
    );
    let (lax, _) = server(&[(&key, "k")], |c| c.auth.oauth.accept_any_jwt_typ = true);
    assert!(auth(&lax, &id_token).await.is_ok(), "accept_any_jwt_typ");
}

#[tokio::test(start_paused = true)]
async fn the_token_caches_stay_within_their_bound() {
    let key = Signer::ed();
    let (o, _) = server(&[(&key, "k")], |c| c.auth.oauth.token_cache_entries = 4);
    for n in 0..20 {
        let mut good = claims(A);
        good["jti"] = json!(n);
        assert!(auth(&o, &key.sign("k", &good)).await.is_ok());
        let mut bad = good.clone();
        bad["aud"] = json!("https://other.example/mcp");
        assert!(auth(&o, &key.sign("k", &bad)).await.is_err());
        assert!(o.cache.lock().len() <= 4 && o.refused.lock().len() <= 4);
    }
    assert!(!o.cache.lock().is_empty(), "the newest is kept");
}

#[tokio::test(start_paused = true)]
async fn a_key_fetch_that_hangs_counts_as_an_attempt_and_the_keys_there_still_serve() {
    let key = Signer::ed();
    let (o, script) = server(&[(&key, "k")], |c| {
        c.auth.oauth.jwks_max_age_secs = 100;
        c.auth.oauth.jwks_refresh_min_secs = 10;
        c.auth.oauth.fetch_timeout_ms = 1000;
    });
    let mut fresh = fresh_tokens(&key);
    assert!(auth(&o, &fresh()).await.is_ok());
    tokio::time::advance(Duration::from_secs(150)).await;
    script.hang(&format!("{A}/jwks"));
    assert!(
        auth(&o, &fresh()).await.is_ok(),
        "due, the fetch hangs past its deadline, the keys still serve"
    );
    let fetches = || script.asked().iter().filter(|u| u.ends_with("/jwks")).count();
    assert_eq!(fetches(), 2);
    assert!(auth(&o, &fresh()).await.is_ok());
    assert_eq!(fetches(), 2, "the hung attempt counts: none again within the interval");
}

#[tokio::test(start_paused = true)]
async fn a_new_kid_while_the_keys_cannot_be_fetched_is_503_not_401() {
    let old = Signer::ed();
    let new = Signer::ed();
    let (o, script) = server(&[(&old, "old")], |c| {
        c.auth.oauth.jwks_max_age_secs = 100;
        c.auth.oauth.jwks_refresh_min_secs = 10;
    });
    assert!(auth(&o, &old.sign("old", &claims(A))).await.is_ok());
    tokio::time::advance(Duration::from_secs(150)).await;
    script.answer(&format!("{A}/jwks"), Err("down"));
    // Due: this request's own fetch fails, then its kid is not there.
    assert!(matches!(
        auth(&o, &new.sign("new", &claims(A))).await,
        Err(AuthFailure::Unavailable(_))
    ));
    // Within the interval, with the last fetch failed: still 503.
    let mut c = claims(A);
    c["jti"] = json!("again");
    assert!(matches!(auth(&o, &new.sign("new", &c)).await, Err(AuthFailure::Unavailable(_))));
}

#[tokio::test(start_paused = true)]
async fn a_token_signed_by_a_replaced_key_material_fetches_the_keys_again() {
    let before = Signer::ed();
    let after = Signer::ed();
    let (o, script) = server(&[(&before, "k")], |c| c.auth.oauth.jwks_refresh_min_secs = 10);
    assert!(auth(&o, &before.sign("k", &claims(A))).await.is_ok());
    script.answer(&format!("{A}/jwks"), Ok(jwks(&[(&after, "k")])));
    let t = after.sign("k", &claims(A));
    assert_eq!(
        auth(&o, &t).await,
        Err(AuthFailure::Invalid(TokenError::Signature)),
        "within the interval"
    );
    assert!(o.cached(&digest(&t)).is_none(), "not remembered as refused");
    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(auth(&o, &t).await.is_ok(), "the same kid, new key material: fetched again, taken");
}

#[tokio::test(start_paused = true)]
async fn an_introspection_server_that_hangs_does_not_keep_the_next_from_answering() {
    let key = Signer::ed();
    const C: &str = "https://c.example";
    let (o, script) = server(&[(&key, "k")], |c| {
        c.auth.oauth.fetch_timeout_ms = 1000;
        c.auth.oauth.introspection.push(IntrospectionConfig {
            issuer: C.into(),
            client_id: "rs".into(),
            client_secret: "s".into(),
        });
    });
    script.answer(
        &format!("{C}/.well-known/oauth-authorization-server"),
        Ok(json!({"issuer": C, "introspection_endpoint": format!("{C}/introspect")})),
    );
    script.hang(&format!("{B}/introspect"));
    script.answer(
        &format!("{C}/introspect"),
        Ok(json!({"active": true, "sub": "w", "aud": RES, "exp": wall_s() + 60})),
    );
    let g = auth(&o, "opaque-for-c").await.unwrap();
    assert_eq!(&*g.principal, "https://c.example|w");
}

#[tokio::test(start_paused = true)]
async fn a_broader_scope_is_expanded_into_the_grant() {
    let key = Signer::ed();
    let admin = vec!["baskets:write".to_owned()];
    let (o, _) = server(&[(&key, "k")], |c| {
        c.auth.scope_implies.insert("baskets:admin".into(), admin);
    });
    let mut c = claims(A);
    c["scope"] = json!("baskets:admin");
    let g = auth(&o, &key.sign("k", &c)).await.unwrap();
    assert!(g.has_all(&[Box::from("baskets:write")]));
}
