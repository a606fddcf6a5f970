//! Each fault scenario against the real endpoint (in-process server on a loopback socket),
//! through the real proxy, with the resilient client: what the client must end up with, and
//! proof from the proxy's counters that the fault really happened.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix_web::{App, HttpServer};
use mcp_runtime::actor::Supervisor;
use mcp_runtime::client::journal::MemoryJournal;
use mcp_runtime::client_http::{ClientConfig, ClientError, Closed, McpClient};
use mcp_runtime::config::RuntimeConfig;
use mcp_runtime::tools::{CallToolResult, Catalog, ServerInfo, ToolSpec, tool_fn};
use serde_json::{Value, json};

use crate::proxy::{self, Counts, FaultPlan, Scenario};

const ALICE: &str = "token-alice";
const BOB: &str = "token-bob";

fn catalog() -> Catalog {
    Catalog::builder()
        .tool(tool_fn(
            ToolSpec::new(
                "echo",
                "Echo",
                json!({"type":"object","properties":{"text":{"type":"string"}}}),
            ),
            |a: Value, _| async move {
                Ok(CallToolResult::text(a["text"].as_str().unwrap_or_default()))
            },
        ))
        .tool(tool_fn(
            ToolSpec::new(
                "progress",
                "Three progress steps",
                json!({"type":"object","properties":{}}),
            ),
            |_, cx| async move {
                for p in [1.0, 2.0, 3.0] {
                    cx.progress(p, Some(3.0), None).await;
                }
                Ok(CallToolResult::text("done"))
            },
        ))
        .build(ServerInfo { name: "scenario-test".into(), version: "0".into(), instructions: None })
        .expect("valid catalog")
}

/// The server, with bearer auth (two principals), fast `retry`.
async fn serve() -> std::net::SocketAddr {
    serve_with(RuntimeConfig::default()).await
}

/// [`serve`] with `cfg` as its other settings.
async fn serve_with(mut cfg: RuntimeConfig) -> std::net::SocketAddr {
    cfg.sse.retry_ms = 20;
    cfg.security.bearer_tokens =
        [(ALICE.to_owned(), "alice".to_owned()), (BOB.to_owned(), "bob".to_owned())].into();
    let sup = Supervisor::new(cfg, catalog());
    let server = HttpServer::new(move || {
        App::new().configure(mcp_runtime::http::configure("/mcp", Arc::clone(&sup)))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .expect("bind");
    let addr = server.addrs()[0];
    actix_rt::spawn(server.run());
    addr
}

/// Server + proxy with `faults` (each firing at most `limit` times).
async fn setup(
    faults: &[(Scenario, f64)],
    limit: Option<u64>,
) -> (String, std::rc::Rc<proxy::Proxy>) {
    let upstream = serve().await;
    let plan = FaultPlan {
        rates: faults.iter().copied().collect::<BTreeMap<_, _>>(),
        seed: 7,
        other_token: Some(mcp_runtime::client_http::BearerToken::fixed(BOB)),
        limit,
        ..FaultPlan::default()
    };
    let (addr, p) = proxy::start(vec![upstream], plan).await.expect("proxy");
    (format!("http://{addr}/mcp"), p)
}

async fn client(url: &str) -> McpClient {
    let mut cfg = ClientConfig::new(url);
    cfg.token = Some(mcp_runtime::client_http::BearerToken::fixed(ALICE));
    cfg.backoff.default_ms = 20;
    McpClient::connect(cfg, MemoryJournal::new(4096)).await.expect("connect")
}

async fn echo(c: &McpClient, text: &str, idempotent: bool) -> Result<String, ClientError> {
    let r = c
        .request("tools/call", Some(json!({"name":"echo","arguments":{"text":text}})), idempotent)
        .await?;
    Ok(r["content"][0]["text"].as_str().unwrap_or_default().to_owned())
}

/// Not our client: a raw GET resume of `session` from `cursor` as alice; its status (the
/// answer is dropped unread).
async fn raw_resume(url: &str, session: &str, cursor: &str) -> u16 {
    let r = awc::Client::default()
        .get(url)
        .insert_header(("Mcp-Session-Id", session))
        .insert_header(("Authorization", format!("Bearer {ALICE}")))
        .insert_header(("Accept", "text/event-stream"))
        .insert_header(("Last-Event-ID", cursor))
        .send()
        .await
        .expect("answer");
    r.status().as_u16()
}

fn count(c: &Counts, name: &str) -> u64 {
    c.get(name).copied().unwrap_or(0)
}

#[actix_web::test]
async fn cut_stream_is_resumed_and_the_call_completes() {
    let (url, p) = setup(&[(Scenario::Cut, 1.0)], Some(1)).await;
    let c = client(&url).await;
    assert_eq!(echo(&c, "a", false).await.unwrap(), "a");
    assert_eq!(count(&p.counts(), "cut"), 1);
    assert!(c.stats().resumes >= 1, "{:?}", c.stats());
    assert_eq!(c.take_resume_samples().len(), 1, "one resume measured");
}

#[actix_web::test]
async fn crossed_event_from_another_session_is_refused_not_dispatched() {
    let (url, p) = setup(&[(Scenario::CrossedIds, 1.0)], None).await;
    let a = client(&url).await;
    let b = client(&url).await;
    // a's events fill the proxy's pool; b's stream then gets one of them injected.
    assert_eq!(echo(&a, "from-a", false).await.unwrap(), "from-a");
    assert_eq!(echo(&b, "from-b", false).await.unwrap(), "from-b");
    assert!(count(&p.counts(), "crossed_ids") >= 1, "{:?}", p.counts());
    assert!(
        b.stats().accept.uncorrelated >= 1,
        "the foreign response was refused: {:?}",
        b.stats()
    );
    assert!(b.take_notifications().is_empty());
}

#[actix_web::test]
async fn replayed_events_after_ack_are_dropped_not_dispatched_again() {
    let (url, p) = setup(&[(Scenario::ReplayAfterAck, 1.0)], None).await;
    let c = client(&url).await;
    let r = c
        .request(
            "tools/call",
            Some(json!({"name":"progress","arguments":{},"_meta":{"progressToken":"t"}})),
            false,
        )
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "done");
    assert!(
        count(&p.counts(), "replay_after_ack.stream")
            + count(&p.counts(), "replay_after_ack.resume")
            >= 1,
        "{:?}",
        p.counts()
    );
    assert!(c.stats().accept.duplicates >= 1, "{:?}", c.stats());
    let steps: Vec<Value> =
        c.take_notifications().into_iter().map(|n| n["params"]["progress"].clone()).collect();
    assert_eq!(steps, vec![json!(1.0), json!(2.0), json!(3.0)], "each step dispatched once");
}

#[actix_web::test]
async fn forged_cursor_is_refused_and_only_an_idempotent_call_is_reissued() {
    let (url, p) = setup(&[(Scenario::Cut, 1.0), (Scenario::ForeignCursor, 1.0)], Some(1)).await;
    let c = client(&url).await;
    assert_eq!(echo(&c, "x", true).await.unwrap(), "x");
    assert_eq!(count(&p.counts(), "foreign_cursor.rejected"), 1, "{:?}", p.counts());
    assert_eq!(c.stats().reissued, 1);

    let (url, _p) = setup(&[(Scenario::Cut, 1.0), (Scenario::ForeignCursor, 1.0)], Some(1)).await;
    let c = client(&url).await;
    assert!(
        matches!(echo(&c, "y", false).await, Err(ClientError::Lost(..))),
        "a non-idempotent call is reported lost, never repeated"
    );
    assert_eq!(c.stats().reissued, 0);
}

#[actix_web::test]
async fn session_ended_while_the_response_is_in_flight_means_one_new_handshake() {
    let (url, p) = setup(&[(Scenario::ExpiryRace, 1.0)], Some(1)).await;
    let c = client(&url).await;
    let old = c.session_id();
    assert_eq!(echo(&c, "z", true).await.unwrap(), "z");
    assert_eq!(count(&p.counts(), "expiry_race"), 1, "{:?}", p.counts());
    let s = c.stats();
    assert_eq!(
        (s.not_found, s.recovered_after_404, s.handshakes, s.reissued),
        (1, 1, 2, 1),
        "{s:?}"
    );
    assert_ne!(c.session_id(), old);
    assert_eq!(count(&p.counts(), "session.reused_after_404"), 0);
}

#[actix_web::test]
async fn lost_delete_answer_is_sent_again_and_404_confirms_the_end() {
    let (url, p) = setup(&[(Scenario::LostDelete, 1.0)], Some(1)).await;
    let c = client(&url).await;
    assert_eq!(c.close().await.unwrap(), Closed::AlreadyGone);
    assert_eq!(count(&p.counts(), "lost_delete"), 1);
    // The DELETE sent again finds the end the first made: not a lost session.
    assert_eq!(count(&p.counts(), proxy::NOT_FOUND_DELETE_AGAIN), 1, "{:?}", p.counts());
    assert_eq!(count(&p.counts(), proxy::NOT_FOUND_UNEXPLAINED), 0);
}

#[test]
fn a_404_is_an_expiry_only_after_a_stuck_request_and_the_idle_ttl() {
    let s = std::time::Duration::from_secs;
    let ms = std::time::Duration::from_millis;
    let why = proxy::not_found_why;
    // TTL 10 s: explained from 10 s - 625 ms - 250 ms on.
    assert_eq!(why(false, Some(s(10)), Some(ms(9_125)), true), proxy::NOT_FOUND_AFTER_IDLE);
    assert_eq!(why(false, Some(s(10)), Some(ms(9_124)), true), proxy::NOT_FOUND_UNEXPLAINED);
    // Quiet, but no request went unanswered: the hosts saw every use; a 404 is unexplained.
    assert_eq!(why(false, Some(s(10)), Some(s(30)), false), proxy::NOT_FOUND_UNEXPLAINED);
    // No TTL known (a host the gate did not start), or never answered.
    assert_eq!(why(false, None, Some(s(30)), true), proxy::NOT_FOUND_UNEXPLAINED);
    assert_eq!(why(false, Some(s(10)), None, true), proxy::NOT_FOUND_UNEXPLAINED);
    assert_eq!(why(true, None, None, false), proxy::NOT_FOUND_DELETE_AGAIN);
}

#[actix_web::test]
async fn a_session_that_idled_out_without_a_stuck_request_is_an_unexplained_404() {
    // A real host with a 1 s TTL (the wait below is that TTL's, not a timing assertion).
    let mut cfg = RuntimeConfig::default();
    cfg.sessions.idle_ttl_secs = 1;
    let upstream = serve_with(cfg).await;
    for (ttl, expired, unexplained) in [(Some(1), 0, 1), (None, 0, 1)] {
        let plan = FaultPlan {
            session_ttl: ttl.map(std::time::Duration::from_secs),
            ..FaultPlan::default()
        };
        let (addr, p) = proxy::start(vec![upstream], plan).await.expect("proxy");
        let c = client(&format!("http://{addr}/mcp")).await;
        assert_eq!(echo(&c, "a", true).await.unwrap(), "a");
        // Unanswered past the host's 1 s TTL: the session expired, the client starts over.
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        assert_eq!(echo(&c, "b", true).await.unwrap(), "b");
        assert_eq!(c.stats().not_found, 1);
        let counts = p.counts();
        assert_eq!(count(&counts, proxy::NOT_FOUND_AFTER_IDLE), expired, "{ttl:?}: {counts:?}");
        assert_eq!(count(&counts, proxy::NOT_FOUND_UNEXPLAINED), unexplained, "{ttl:?}");
    }
}

#[actix_web::test]
async fn another_principals_token_is_refused_and_the_client_starts_over() {
    let (url, p) = setup(&[(Scenario::OldToken, 1.0)], Some(1)).await;
    // The first request with a session id is notifications/initialized: the swap hits it.
    let mut cfg = ClientConfig::new(&url);
    cfg.token = Some(mcp_runtime::client_http::BearerToken::fixed(ALICE));
    assert!(matches!(
        McpClient::connect(cfg, MemoryJournal::new(16)).await,
        Err(ClientError::Http(404, _))
    ));
    assert_eq!(count(&p.counts(), "old_token.rejected"), 1);
    assert_eq!(count(&p.counts(), "old_token.accepted"), 0);
    let c = client(&url).await;
    assert_eq!(echo(&c, "ok", true).await.unwrap(), "ok");
}

#[actix_web::test]
async fn missing_version_header_is_served_from_the_session() {
    let (url, p) = setup(&[(Scenario::MissingVersion, 1.0)], None).await;
    let c = client(&url).await;
    assert_eq!(echo(&c, "v", false).await.unwrap(), "v");
    assert!(count(&p.counts(), "missing_version.served") >= 2, "{:?}", p.counts());
    assert_eq!(count(&p.counts(), "missing_version.refused"), 0);
}

#[actix_web::test]
async fn rewritten_origin_is_refused_and_not_retried() {
    let (url, p) = setup(&[(Scenario::OriginRewrite, 1.0)], None).await;
    let mut cfg = ClientConfig::new(&url);
    cfg.token = Some(mcp_runtime::client_http::BearerToken::fixed(ALICE));
    assert!(matches!(
        McpClient::connect(cfg, MemoryJournal::new(16)).await,
        Err(ClientError::Http(403, _))
    ));
    assert_eq!(count(&p.counts(), "origin.rejected"), 1, "one refusal, no retry: {:?}", p.counts());
    assert_eq!(count(&p.counts(), "origin.accepted"), 0);
}

#[actix_web::test]
async fn storm_refusals_are_retried_no_sooner_than_retry_after() {
    let (url, p) = setup(&[(Scenario::Cut, 1.0), (Scenario::Storm, 1.0)], Some(1)).await;
    let c = client(&url).await;
    assert_eq!(echo(&c, "s", true).await.unwrap(), "s");
    let refusals = count(&p.counts(), "storm.refusals");
    assert!(refusals >= 1, "{:?}", p.counts());
    let samples = c.take_resume_samples();
    assert_eq!(samples.len(), 1);
    let floor = std::time::Duration::from_secs(refusals);
    assert!(
        samples[0].waited >= floor,
        "waited {:?} for {refusals} refusals with Retry-After: 1",
        samples[0].waited
    );
    assert_eq!(c.stats().resumes, refusals + 1);
    assert_eq!(count(&p.counts(), "resume.too_early"), 0);
}

#[actix_web::test]
async fn a_resume_sooner_than_retry_after_is_counted_by_the_proxy() {
    // Not our client: raw GETs, the second one right after the first was refused with
    // Retry-After: 1. The proxy must see that (the gate's check can fail).
    let (url, p) = setup(&[(Scenario::Storm, 1.0)], Some(1)).await;
    let c = client(&url).await;
    for _ in 0..2 {
        raw_resume(&url, &c.session_id(), "any").await;
    }
    assert_eq!(count(&p.counts(), "storm.refusals"), 1, "{:?}", p.counts());
    assert_eq!(count(&p.counts(), "resume.too_early"), 1, "{:?}", p.counts());
}

#[actix_web::test]
async fn a_resume_refused_400_that_the_proxy_did_not_forge_is_counted() {
    // Not our client: a raw resume of a real session with a cursor this session was never
    // given, through a proxy with no fault. The gate must see it (its check can fail).
    let (url, p) = setup(&[], None).await;
    let c = client(&url).await;
    assert_eq!(raw_resume(&url, &c.session_id(), "not-one-of-its-cursors").await, 400);
    assert_eq!(count(&p.counts(), "resume.refused_unexplained"), 1, "{:?}", p.counts());
    // A cursor the proxy forged itself is the foreign-cursor scenario's, not this count.
    let (url, p) = setup(&[(Scenario::ForeignCursor, 1.0)], Some(1)).await;
    let c = client(&url).await;
    assert_eq!(raw_resume(&url, &c.session_id(), "any").await, 400);
    assert_eq!(count(&p.counts(), "foreign_cursor.rejected"), 1, "{:?}", p.counts());
    assert_eq!(count(&p.counts(), "resume.refused_unexplained"), 0, "{:?}", p.counts());
}

#[actix_web::test]
async fn lost_priming_leaves_the_call_intact() {
    let (url, p) = setup(&[(Scenario::LostPriming, 1.0)], None).await;
    let c = client(&url).await;
    assert_eq!(echo(&c, "p", false).await.unwrap(), "p");
    assert_eq!(count(&p.counts(), "lost_priming"), 1);
    assert_eq!(c.stats().accept.cursor_only, 0, "no priming reached the client");
}
