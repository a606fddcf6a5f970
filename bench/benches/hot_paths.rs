//! Criterion micro-benchmarks of the per-event and per-request hot paths.
//! Run: `cargo bench -p mcp-bench --bench hot_paths`.

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use mcp_runtime::client::accept::{Acceptor, Binding, IncomingEvent};
use mcp_runtime::client::journal::{Journal, MemoryJournal};
use mcp_runtime::proto::admission::{AdmitPolicy, HttpMethod, RequestHead, admit};
use mcp_runtime::proto::event_id::{CursorKey, EventId};
use mcp_runtime::proto::ids::{Generation, JsonRpcId, Seq, StreamId};
use mcp_runtime::proto::replay::{ReplayWindow, WindowLimits};
use mcp_runtime::proto::version::ProtocolVersion;
use mcp_runtime::sse::{Decoder, event_frame};

const CALL: &[u8] = br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello world"}}}"#;
const RESULT: &[u8] =
    br#"{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"hello world"}]}}"#;

fn event_id(c: &mut Criterion) {
    let signer =
        CursorKey::new(&[7u8; 32]).signer("1.abcdefghijklmnopqrstuvwxyz012345", Some("alice"));
    let id = EventId { generation: Generation(1), stream: StreamId(9), seq: Seq(1234) };
    let cursor = signer.encode(&id);
    c.bench_function("event_id/encode", |b| b.iter(|| signer.encode_array(black_box(&id))));
    c.bench_function("event_id/verify", |b| b.iter(|| signer.decode(black_box(&cursor)).unwrap()));
}

fn replay(c: &mut Criterion) {
    let frame = event_frame(&[b'a'; 43], RESULT);
    c.bench_function("replay/append (full window, evicting)", |b| {
        let mut w = ReplayWindow::new(WindowLimits { max_events: 1024, max_bytes: 1 << 20 });
        for _ in 0..1024 {
            w.push(frame.clone());
        }
        b.iter(|| w.push(black_box(frame.clone())));
    });
    let mut w = ReplayWindow::new(WindowLimits { max_events: 1024, max_bytes: 1 << 20 });
    for _ in 0..1024 {
        w.push(frame.clone());
    }
    let after = Seq(w.newest().0 - 64);
    c.bench_function("replay/replay 64 of 1024", |b| {
        b.iter(|| w.replay_after(black_box(after)).unwrap().cloned().collect::<Vec<Bytes>>())
    });
}

fn sse(c: &mut Criterion) {
    let cursor = [b'a'; 43];
    c.bench_function("sse/encode event", |b| {
        b.iter(|| event_frame(black_box(&cursor), black_box(RESULT)))
    });
    let frame = event_frame(&cursor, RESULT);
    c.bench_function("sse/decode event", |b| {
        b.iter(|| {
            let mut d = Decoder::new();
            d.feed(black_box(&frame))
        })
    });
}

fn admission(c: &mut Criterion) {
    let policy = AdmitPolicy::default();
    let head = RequestHead {
        accept: Some("application/json, text/event-stream"),
        content_type: Some("application/json"),
        session_id: Some("1.abcdefghijklmnopqrstuvwxyz012345"),
        protocol_version: Some("2025-11-25"),
        host: Some("127.0.0.1:8080"),
        ..RequestHead::new(HttpMethod::Post)
    };
    c.bench_function("admit/tools-call POST", |b| {
        b.iter(|| admit(black_box(&head), black_box(CALL), &policy).unwrap())
    });
}

fn accept(c: &mut Criterion) {
    let binding = Binding {
        session_generation: 1,
        session_id: Arc::from("s"),
        protocol_version: ProtocolVersion::V2025_11_25,
        principal: None,
    };
    let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":5}}"#;
    c.bench_function("accept_stream_event/notification", |b| {
        let mut a = Acceptor::new(binding.clone(), MemoryJournal::new(4096));
        let s = a.open_post_stream(&[JsonRpcId::Number(1)]).unwrap();
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            let id = n.to_string();
            let r = a.accept_stream_event(IncomingEvent {
                stream: &s,
                binding: &binding,
                id: Some(&id),
                data: note,
            });
            if n.is_multiple_of(1024) {
                let last = a.journal_mut().pending().last().map_or(0, |d| d.seq);
                a.journal_mut().ack(last);
            }
            r
        })
    });
}

/// A 2048-bit RSA key made with `openssl genpkey` for this benchmark only (PKCS#1 DER, base64):
/// ring verifies RS256 but makes no RSA keys.
const RSA_DER: &str = "MIIEowIBAAKCAQEAmwH5riN1C5XUs2rqfDC5b5hNnP2m1uQACxS5vQyxIegUapI7fne5ZExHN78t0Ks/zc6QVsf7Zf/LhKqSQCPohE700bNh2NvgYuyC0lN//b62V47mu45uBapcBwxG9MfLlF31OCGqram/LmqMyajW0GoYE8zZIm/VGh2jY1sWBS0//aBPcderdOyB5wZxJ3ildDmOz1WMJQVJRLPzuxn6dAFlf9Zh4B7us6Xvt+XwMR1nlTa/rqonUGWkTZ0ejEHDtVCkJrJmKlEdUDxmMvNTXtYkWbnc7sboXK6L7thFkPlbabt0tg1DA4fDjwG7GX1ku4NzBysOdk8hbWu8hS+I+wIDAQABAoIBADowQaRnVxbkRhacOi4otFP6Hpiid7EPohyGyTr4ur35u0BOaNsO4p+OKuX4dKByyN7ffju1kuA1aBcDWSeO00hnw2u9JSwdTlyUYH/ILLH6l8TCtkcOLqsdyrIyn6hgIEIwC0/pA4Nxx30LLpK9OPa//Q3hxlkxFhRZr+4qUVfbkSikzcuOl4gtIljwzSIrIi4N49E6FAGYYjPbx1Ogb9XFxAF4ETOuCUOu9B5ikfwHYeVPsKzq8qCcut9Y/Aa82h7PiRlbGPIlRviNAk217tYGgdQxSjYoakQ53wA0Fz07yyFH5KO5fXubbGe0+0R9CeJsQ3iNvGT3NIqK6FAjgCECgYEAyhBULZDaRtejDSNZVAS+CLjdpew0zTeFWe8tGB/is2hPwLujwZItejqNUXmyPmIfd95AHesLOLWyqnzgJRyHllUW3JLF5u6wIzRORsNXy6ZTxQOq/JNFho2bX76/w9Ik+b86/cPx7iWqSBW2cDc5n8iIqzZtFbgLYS+YLCd0EIMCgYEAxGInQAfcf/PVksCwMW/6T+JWgAc3QDYF65XleXy1gPYd4rV2bCdolwXR7JVqPLfF6cFk6UP317y7eONy9Hx5tzZ2AixYBqOkNkFur6v1OKNfLpa6YNTZg3mUoIW5EmlzavUe3EJaldlW9TVPVzBYeQOl3xhCDRw2Cppb+SPmTCkCgYBRr7Q4D30OcpJJ92ZfXuNsJ0ADma/m3nEcYGJ8hDdji+Hh6nlTAcM8zHrg2y/BpG1QShrlfWW18U5fOchreFMf5Rou5W734rp2IOkcFlBh1cW7ubXgEbFjqc+ML1La2RN1m2c/u30MZ1GlfpGYX9r9y1Xk0UXcJ+EB0vnTr8dt/QKBgQC79c3nZR7QgIqb6T06NBj6OIHeDAn/tTU5ZMC75Ha8NdQo1tG/doCOe42OyPtjnekZcHarJNikbglpDRlLk4/ToZaVQegGgr17CGluTkFoskU5jB5a6548TjPI5/RZAQDtECs3WXLmFZ07GIkVxDoJqUorG0as0aGPyGnbLVcQ8QKBgC8WysbZYle0h58BVR4mOe3ds8j38W//pre6ET2IWLZ68cZ5BYp5pYjbt1ArwxoFiPAx+VcP5Jgktbh8cBcyC/jIccgHr28zdekB/74b68BZ1XGsSsZ3LeVhbZLHSsglgmGPI/ZRHscSpsnK+mcWCL+TFDE0BC3qGjVrZ6zZcbhm";

/// What checking an access token the cache does not hold costs, per algorithm: decode the
/// three parts, verify the signature with the issuer's key, check the claims (the server's
/// `crate::auth` adds a hash and a cache insert); and what a cached token costs: its SHA-256
/// (the cache key; the look-up itself is one `HashMap::get`).
fn oauth(c: &mut Criterion) {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use mcp_runtime::proto::oauth::{Expect, KeySet, parse_jwt};
    use ring::rand::SystemRandom;
    use ring::signature::{self as sig, KeyPair as _};
    use serde_json::json;
    let rng = SystemRandom::new();
    let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
    let claims = json!({"iss": "https://as.example", "sub": "client-1", "client_id": "client-1",
        "aud": "https://mcp.example/mcp", "exp": 4_000_000_000u64, "iat": 1_800_000_000u64,
        "scope": "mcp tools:read baskets:write", "jti": "bench-token-0123456789"});
    let expect = Expect {
        issuer: "https://as.example",
        resource: "https://mcp.example/mcp",
        now_s: 1_800_000_000,
        leeway_s: 30,
        require_at_jwt: true,
    };
    let token = |alg: &str, sign: &dyn Fn(&[u8]) -> Vec<u8>| {
        let input = format!(
            "{}.{}",
            b64(json!({"alg": alg, "kid": "k1", "typ": "at+jwt"}).to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let s = sign(input.as_bytes());
        format!("{input}.{}", b64(&s))
    };
    let ed = sig::Ed25519KeyPair::from_pkcs8(
        sig::Ed25519KeyPair::generate_pkcs8(&rng).unwrap().as_ref(),
    )
    .unwrap();
    let ec_alg = &sig::ECDSA_P256_SHA256_FIXED_SIGNING;
    let ec = sig::EcdsaKeyPair::from_pkcs8(
        ec_alg,
        sig::EcdsaKeyPair::generate_pkcs8(ec_alg, &rng).unwrap().as_ref(),
        &rng,
    )
    .unwrap();
    let rsa = sig::RsaKeyPair::from_der(&STANDARD.decode(RSA_DER).unwrap()).unwrap();
    let p = ec.public_key().as_ref();
    let rsa_pub: sig::RsaPublicKeyComponents<Vec<u8>> = rsa.public().into();
    let jwks = json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": b64(ed.public_key().as_ref())},
        {"kty": "EC", "crv": "P-256", "kid": "k1", "x": b64(&p[1..33]), "y": b64(&p[33..])},
        {"kty": "RSA", "kid": "k1",
            "n": b64(&rsa_pub.n), "e": b64(&rsa_pub.e)},
    ]});
    let keys = KeySet::parse(jwks.to_string().as_bytes()).unwrap();
    let tokens = [
        ("EdDSA", token("EdDSA", &|m| ed.sign(m).as_ref().to_vec())),
        ("ES256", token("ES256", &|m| ec.sign(&rng, m).unwrap().as_ref().to_vec())),
        (
            "RS256",
            token("RS256", &|m| {
                let mut s = vec![0; rsa.public().modulus_len()];
                rsa.sign(&sig::RSA_PKCS1_SHA256, &rng, m, &mut s).unwrap();
                s
            }),
        ),
    ];
    for (alg, t) in &tokens {
        c.bench_function(&format!("oauth/uncached_{alg}"), |b| {
            b.iter(|| {
                let u = parse_jwt(black_box(t)).unwrap();
                u.verify(&keys).unwrap();
                u.grant(&expect).unwrap()
            });
        });
    }
    let t = &tokens[1].1;
    c.bench_function("oauth/cached_digest", |b| {
        b.iter(|| ring::digest::digest(&ring::digest::SHA256, black_box(t.as_bytes())))
    });
}

criterion_group!(benches, event_id, replay, sse, admission, accept, oauth);
criterion_main!(benches);
