use super::test_keys::{Signer, enc};
use super::*;

const ISS: &str = "https://as.example";
const RES: &str = "https://mcp.example/mcp";
const NOW: u64 = 1_800_000_000;

fn keys(signers: &[(&Signer, &str)]) -> KeySet {
    let doc = json!({"keys": signers.iter().map(|(s, kid)| s.jwk(kid)).collect::<Vec<_>>()});
    KeySet::parse(&serde_json::to_vec(&doc).unwrap()).unwrap()
}

fn claims() -> Value {
    json!({"iss": ISS, "sub": "user-1", "aud": RES, "exp": NOW + 60, "iat": NOW,
        "scope": "tools:read baskets:write", "client_id": "app-7"})
}

fn expect() -> Expect<'static> {
    Expect { issuer: ISS, resource: RES, now_s: NOW, leeway_s: 5, require_at_jwt: true }
}

fn check(token: &str, keys: &KeySet) -> Result<Grant, TokenError> {
    let t = parse_jwt(token)?;
    t.verify(keys)?;
    t.grant(&expect())
}

#[test]
fn a_signed_token_for_this_resource_is_accepted_with_its_principal_and_scopes() {
    for signer in [Signer::ed(), Signer::ec()] {
        let g = check(&signer.sign("k1", &claims()), &keys(&[(&signer, "k1")])).unwrap();
        assert_eq!(&*g.principal, "https://as.example|user-1|app-7");
        assert_eq!(&*g.scopes, &[Box::from("baskets:write"), Box::from("tools:read")][..]);
        assert_eq!(g.expires_at_s, NOW + 65, "exp plus the leeway");
        assert!(g.has_all(&[Box::from("tools:read")]));
        assert!(!g.has_all(&[Box::from("admin")]));
    }
}

#[test]
fn client_credentials_token_principal_is_issuer_and_client() {
    let s = Signer::ed();
    let mut c = claims();
    c["sub"] = json!("app-7");
    let g = check(&s.sign("k", &c), &keys(&[(&s, "k")])).unwrap();
    assert_eq!(&*g.principal, "https://as.example|app-7", "client_id equal to sub is not repeated");
    c.as_object_mut().unwrap().remove("sub");
    let g = check(&s.sign("k", &c), &keys(&[(&s, "k")])).unwrap();
    assert_eq!(&*g.principal, "https://as.example|app-7", "client_id stands for a missing sub");
    c.as_object_mut().unwrap().remove("client_id");
    assert_eq!(check(&s.sign("k", &c), &keys(&[(&s, "k")])), Err(TokenError::NoSubject));
}

#[test]
fn scp_lists_are_scopes_too() {
    let s = Signer::ec();
    let mut c = claims();
    c.as_object_mut().unwrap().remove("scope");
    c["scp"] = json!(["b", "a", "a"]);
    let g = check(&s.sign("k", &c), &keys(&[(&s, "k")])).unwrap();
    assert_eq!(&*g.scopes, &[Box::from("a"), Box::from("b")][..]);
}

#[test]
fn algorithms_other_than_rs256_es256_eddsa_are_refused_before_any_key() {
    let s = Signer::ed();
    let ks = keys(&[(&s, "k")]);
    for alg in ["none", "HS256", "HS512", "RS512", "PS256", "ES384"] {
        let t = s.sign_with_header(&json!({"alg": alg, "kid": "k"}), &claims());
        assert_eq!(check(&t, &ks), Err(TokenError::Algorithm(alg.into())), "{alg}");
    }
    // alg none with an empty signature, as an attacker would send it.
    let t = format!("{}.{}.", enc(&json!({"alg": "none"})), enc(&claims()));
    assert_eq!(check(&t, &ks), Err(TokenError::Algorithm("none".into())));
    let t = s.sign_with_header(&json!({"alg": "EdDSA", "kid": "k", "crit": ["x"]}), &claims());
    assert!(matches!(check(&t, &ks), Err(TokenError::Algorithm(_))));
}

#[test]
fn an_algorithm_is_checked_only_with_a_key_of_its_type() {
    // An ES256 header naming the kid of an Ed25519 key: no key fits (no confusion).
    let ed = Signer::ed();
    let ec = Signer::ec();
    let t = ed.sign_with_header(&json!({"alg": "ES256", "kid": "k"}), &claims());
    assert_eq!(check(&t, &keys(&[(&ed, "k")])), Err(TokenError::UnknownKid(Some("k".into()))));
    // A JWK whose alg disagrees with its type is left out.
    let mut jwk = ec.jwk("k");
    jwk["alg"] = json!("RS256");
    let ks = KeySet::parse(&serde_json::to_vec(&json!({"keys": [jwk]})).unwrap()).unwrap();
    assert!(ks.is_empty());
}

#[test]
fn a_tampered_token_or_a_key_of_another_issuer_fails_the_signature() {
    let s = Signer::ec();
    let ks = keys(&[(&s, "k")]);
    let t = s.sign("k", &claims());
    // Claims changed after signing (a wider scope).
    let (h, rest) = t.split_once('.').unwrap();
    let (_, sig) = rest.split_once('.').unwrap();
    let mut c = claims();
    c["scope"] = json!("admin");
    assert_eq!(check(&format!("{h}.{}.{sig}", enc(&c)), &ks), Err(TokenError::Signature));
    // The signature's last byte flipped.
    let mut raw = b64(sig).unwrap();
    *raw.last_mut().unwrap() ^= 1;
    let t2 = format!("{h}.{}.{}", rest.split_once('.').unwrap().0, URL_SAFE_NO_PAD.encode(raw));
    assert_eq!(check(&t2, &ks), Err(TokenError::Signature));
    // Same kid, another key.
    let other = Signer::ec();
    assert_eq!(check(&other.sign("k", &claims()), &ks), Err(TokenError::Signature));
}

#[test]
fn an_unknown_kid_asks_for_the_keys_again() {
    let s = Signer::ed();
    let t = s.sign("new", &claims());
    assert_eq!(check(&t, &keys(&[(&s, "old")])), Err(TokenError::UnknownKid(Some("new".into()))));
    assert!(check(&t, &keys(&[(&Signer::ed(), "old"), (&s, "new")])).is_ok());
    // No kid: the only key of the type, or refused (one signature check per token).
    let t = s.sign_with_header(&json!({"alg": "EdDSA", "typ": "at+jwt"}), &claims());
    assert!(check(&t, &keys(&[(&Signer::ec(), "a"), (&s, "b")])).is_ok());
    assert_eq!(check(&t, &keys(&[(&Signer::ed(), "a"), (&s, "b")])), Err(TokenError::NoKid));
}

#[test]
fn principal_parts_are_escaped_so_two_tokens_never_spell_one_principal() {
    let s = Signer::ed();
    let ks = keys(&[(&s, "k")]);
    let mut one = claims();
    one["sub"] = json!("a|b");
    one.as_object_mut().unwrap().remove("client_id");
    let mut two = claims();
    two["sub"] = json!("a");
    two["client_id"] = json!("b");
    let p1 = check(&s.sign("k", &one), &ks).unwrap().principal;
    let p2 = check(&s.sign("k", &two), &ks).unwrap().principal;
    assert_eq!(&*p1, "https://as.example|a%7Cb");
    assert_eq!(&*p2, "https://as.example|a|b");
}

#[test]
fn a_jwt_must_be_typed_as_an_access_token_unless_told_otherwise() {
    let s = Signer::ed();
    let ks = keys(&[(&s, "k")]);
    for typ in [json!("JWT"), json!(null)] {
        let t = s.sign_with_header(&json!({"alg": "EdDSA", "kid": "k", "typ": typ}), &claims());
        let u = parse_jwt(&t).unwrap();
        u.verify(&ks).unwrap();
        assert!(matches!(u.grant(&expect()), Err(TokenError::Type(_))), "{typ}");
        assert!(u.grant(&Expect { require_at_jwt: false, ..expect() }).is_ok());
    }
    let t = s.sign_with_header(
        &json!({"alg": "EdDSA", "kid": "k", "typ": "application/AT+JWT"}),
        &claims(),
    );
    assert!(check(&t, &ks).is_ok());
}

#[test]
fn issuer_audience_and_times_are_checked() {
    let s = Signer::ed();
    let ks = keys(&[(&s, "k")]);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = claims();
        f(&mut c);
        check(&s.sign("k", &c), &ks)
    };
    assert_eq!(with(&|c| c["iss"] = json!("https://as.example/")), Err(TokenError::Issuer));
    assert_eq!(with(&|c| c["iss"] = json!("https://other.example")), Err(TokenError::Issuer));
    assert_eq!(with(&|c| c["aud"] = json!("https://other.example/mcp")), Err(TokenError::Audience));
    assert_eq!(with(&|c| c["aud"] = json!(["app-7"])), Err(TokenError::Audience));
    assert_eq!(
        with(&|c| drop(c.as_object_mut().unwrap().remove("aud"))),
        Err(TokenError::Audience)
    );
    assert!(with(&|c| c["aud"] = json!(["app-7", RES])).is_ok(), "a list containing it");
    assert!(with(&|c| c["aud"] = json!(format!("{RES}/"))).is_ok(), "a trailing slash");
    assert_eq!(with(&|c| c["exp"] = json!(NOW - 5)), Err(TokenError::Expired), "past the leeway");
    assert!(with(&|c| c["exp"] = json!(NOW - 4)).is_ok(), "within the leeway");
    assert_eq!(with(&|c| drop(c.as_object_mut().unwrap().remove("exp"))), Err(TokenError::Expired));
    assert_eq!(with(&|c| c["nbf"] = json!(NOW + 6)), Err(TokenError::NotYetValid));
    assert!(with(&|c| c["nbf"] = json!(NOW + 5)).is_ok());
}

#[test]
fn malformed_tokens_are_refused() {
    let ks = KeySet::default();
    for t in ["", "abc", "a.b", "a.b.c.d", "!!.??.**", &"a".repeat(MAX_TOKEN_BYTES + 1)] {
        assert_eq!(check(t, &ks).unwrap_err(), TokenError::Malformed, "{t:.20}");
    }
    assert!(!looks_like_jwt("opaque-token-value"));
    assert!(looks_like_jwt(&Signer::ed().sign("k", &claims())));
}

#[test]
fn introspection_answers_follow_the_same_rules() {
    let e = expect();
    let ans = |v: Value| grant_from_introspection(&serde_json::to_vec(&v).unwrap(), &e);
    assert_eq!(ans(json!({"active": false})), Err(TokenError::Inactive));
    assert_eq!(ans(json!({"sub": "u"})), Err(TokenError::Malformed), "no active: no answer");
    let g = ans(json!({"active": true, "sub": "u", "aud": [RES], "exp": NOW + 10, "scope": "x"}))
        .unwrap();
    assert_eq!(&*g.principal, "https://as.example|u", "the issuer asked stands for a missing iss");
    assert_eq!(
        ans(json!({"active": true, "sub": "u", "aud": "https://other/mcp", "exp": NOW + 10})),
        Err(TokenError::Audience)
    );
    assert_eq!(
        ans(json!({"active": true, "iss": "https://evil", "sub": "u", "aud": RES, "exp": NOW + 9})),
        Err(TokenError::Issuer)
    );
    assert_eq!(grant_from_introspection(b"<html>", &e), Err(TokenError::Malformed));
}

#[test]
fn metadata_must_name_the_configured_issuer() {
    let doc = br#"{"issuer":"https://as.example","jwks_uri":"https://as.example/jwks"}"#;
    assert_eq!(
        AsMetadata::parse(doc, ISS).unwrap().jwks_uri.as_deref(),
        Some("https://as.example/jwks")
    );
    assert!(AsMetadata::parse(doc, "https://as.example/tenant").is_err());
    assert_eq!(
        metadata_urls("https://as.example/tenant1/"),
        [
            "https://as.example/.well-known/oauth-authorization-server/tenant1",
            "https://as.example/.well-known/openid-configuration/tenant1",
            "https://as.example/tenant1/.well-known/openid-configuration",
        ]
    );
    assert_eq!(
        metadata_urls("http://127.0.0.1:9")[0],
        "http://127.0.0.1:9/.well-known/oauth-authorization-server"
    );
}

#[test]
fn protected_resource_metadata_is_at_the_path_inserted_url_and_never_offers_offline_access() {
    assert_eq!(prm_url(RES), "https://mcp.example/.well-known/oauth-protected-resource/mcp");
    assert_eq!(prm_path(RES), "/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        prm_url("https://mcp.example"),
        "https://mcp.example/.well-known/oauth-protected-resource"
    );
    assert_eq!(
        prm_url("https://mcp.example/"),
        "https://mcp.example/.well-known/oauth-protected-resource"
    );
    let doc =
        prm_document(RES, &[ISS.into()], &["a".into(), "offline_access".into()], Some("https://d"));
    assert_eq!(
        doc,
        json!({"resource": RES, "authorization_servers": [ISS], "bearer_methods_supported": ["header"],
            "scopes_supported": ["a"], "resource_documentation": "https://d"})
    );
    let bare = prm_document(RES, &[ISS.into()], &[], None);
    assert!(bare.get("scopes_supported").is_none() && bare.get("resource_documentation").is_none());
}

#[test]
fn challenges_name_the_metadata_the_scopes_and_the_error() {
    let url = Some("https://mcp.example/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        challenge(url, &[], None),
        "Bearer resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/mcp\""
    );
    assert_eq!(
        challenge(url, &[Box::from("a"), Box::from("b")], Some(BearerError::InsufficientScope)),
        "Bearer error=\"insufficient_scope\", scope=\"a b\", resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/mcp\""
    );
    assert_eq!(
        challenge(None, &[], Some(BearerError::InvalidToken)),
        "Bearer error=\"invalid_token\""
    );
    assert_eq!(
        challenge(None, &[Box::from("mcp"), Box::from("offline_access")], None),
        "Bearer scope=\"mcp\"",
        "offline_access is never asked for"
    );
    assert_eq!(challenge(None, &[], None), "Bearer");
}

#[test]
fn the_scope_table_adds_a_method_or_a_named_entry_to_the_endpoint_scopes() {
    let write = ["baskets:write".to_owned()];
    let tools = ["tools".to_owned()];
    let t =
        ScopeTable::new(["mcp"], [("tools/call:checkout", &write[..]), ("tools/call", &tools[..])]);
    let names = |v: &[Box<str>]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(names(t.needed("tools/call", Some("checkout"))), ["baskets:write", "mcp"]);
    assert_eq!(names(t.needed("tools/call", Some("echo"))), ["mcp", "tools"]);
    assert_eq!(names(t.needed("tools/call", None)), ["mcp", "tools"]);
    assert_eq!(names(t.needed("tools/list", None)), ["mcp"]);
    assert_eq!(names(t.endpoint()), ["mcp"]);
    let p = json!({"name": "checkout", "arguments": {}});
    assert_eq!(named_in("tools/call", Some(&p)), Some("checkout"));
    assert_eq!(named_in("resources/read", Some(&json!({"uri": "file:///a"}))), Some("file:///a"));
    assert_eq!(named_in("tools/list", Some(&p)), None);
}

#[test]
fn only_https_or_loopback_http_urls_and_scope_tokens_are_allowed() {
    for ok in [
        "https://as.example",
        "https://as.example/t",
        "http://127.0.0.1:8080",
        "http://localhost/x",
        "http://[::1]:9",
    ] {
        assert!(url_allowed(ok), "{ok}");
    }
    for bad in [
        "http://localhost:@evil.example",
        "https://user@as.example",
        "http://localhost.evil",
        "https://a:x",
        "https://[::1",
        "http://as.example",
        "http://127.0.0.1.evil.example",
        "https://",
        "https://a/#f",
        "https://a/?q",
        "ftp://a",
        "https://a\"b",
    ] {
        assert!(!url_allowed(bad), "{bad}");
    }
    assert!(scope_token_ok("baskets:write"));
    assert!(
        !scope_token_ok("a b")
            && !scope_token_ok("")
            && !scope_token_ok("a\"")
            && !scope_token_ok("é")
    );
}

#[test]
fn a_broader_scope_implies_its_narrower_ones_transitively() {
    let admin = ["baskets:write".to_owned(), "baskets:read".to_owned()];
    let write = ["baskets:read".to_owned(), "baskets:admin".to_owned()];
    let t = ScopeTable::new(["mcp"], [])
        .with_implies([("baskets:admin", &admin[..]), ("baskets:write", &write[..])]);
    let got = t.expand(&[Box::from("mcp"), Box::from("baskets:admin")]);
    let names: Vec<&str> = got.iter().map(|s| &**s).collect();
    assert_eq!(names, ["baskets:admin", "baskets:read", "baskets:write", "mcp"], "a cycle ends");
    assert_eq!(&*t.expand(&[Box::from("x")]), &[Box::from("x")][..]);
}

#[test]
fn a_list_filter_keeps_what_the_grant_may_call_get_or_read() {
    let write = ["w".to_owned()];
    let table = Arc::new(ScopeTable::new(
        ["mcp"],
        [("tools/call:checkout", &write[..]), ("resources/read:file:///secret", &write[..])],
    ));
    let grant = |scopes: &[&str]| Grant {
        principal: "p".into(),
        scopes: scopes.iter().map(|s| Box::from(*s)).collect::<Vec<_>>().into(),
        expires_at_s: u64::MAX,
    };
    let tools = json!({"tools": [{"name": "echo"}, {"name": "checkout"}], "nextCursor": null});
    let f = ListFilter { table: Arc::clone(&table), grant: grant(&["mcp"]) };
    assert_eq!(
        f.apply("tools/list", &tools).unwrap(),
        json!({"tools": [{"name": "echo"}], "nextCursor": null})
    );
    let res = json!({"resources": [{"uri": "file:///a"}, {"uri": "file:///secret"}]});
    assert_eq!(
        f.apply("resources/list", &res).unwrap(),
        json!({"resources": [{"uri": "file:///a"}]})
    );
    assert_eq!(f.apply("tools/call", &tools), None, "not a list");
    let wide = ListFilter { table: Arc::clone(&table), grant: grant(&["mcp", "w"]) };
    assert_eq!(wide.apply("tools/list", &tools).unwrap(), tools);
    let none = ListFilter { table, grant: grant(&["w"]) };
    assert_eq!(none.apply("tools/list", &tools).unwrap(), json!({"tools": [], "nextCursor": null}));
}
