//! The admin API and the metrics endpoint, for a listener of their own (never the MCP
//! endpoint's): every request must carry `Authorization: Bearer <token>` (compared as
//! SHA-256 digests, in constant time), else 401.
//!
//! - `GET /admin/status`: phase, generations (flags, sessions, streams, requests in flight),
//!   ledger state, counters.
//! - `GET /admin/flags`, `PUT /admin/flags` (a JSON object of `[rollout]` fields; the ones
//!   given change, in a new generation).
//! - `POST /admin/rollback`: a new generation whose new streams are not resumable.
//! - `POST /admin/drain`: stop gracefully, as SIGTERM does.
//! - `GET /readyz`: 200 while serving with a ledger that commits, else 503, with why;
//!   `GET /livez`: 200 while the process serves.
//! - `GET /metrics`: Prometheus text.

use std::sync::Arc;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::actor::{GenOrigin, Supervisor};
use crate::proto::rollout::{Resumable, RolloutFlags, WriteTools};

/// The admin token, kept as its digest.
#[derive(Clone)]
pub struct AdminToken([u8; 32]);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// The token the admin API accepts.
    #[must_use]
    pub fn new(token: &str) -> AdminToken {
        AdminToken(Sha256::digest(token.as_bytes()).into())
    }

    fn accepts(&self, req: &HttpRequest) -> bool {
        let Some(given) = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        use subtle::ConstantTimeEq as _;
        let d: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
        d.ct_eq(&self.0).into()
    }
}

/// A change of the rollout flags: the fields given change, the others stay.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlagsPatch {
    resumable: Option<Resumable>,
    share: Option<f64>,
    write_tools: Option<WriteTools>,
}

struct AdminState {
    sup: Arc<Supervisor>,
    token: AdminToken,
    metrics: prometheus_client::registry::Registry,
}

fn unauthorized() -> HttpResponse {
    HttpResponse::Unauthorized().insert_header((header::WWW_AUTHENTICATE, "Bearer realm=\"mcp-host admin\"")).json(json!({"error": "a bearer token is required (the admin token: config admin.token, or the token file)"}))
}

fn bad_request(msg: String) -> HttpResponse {
    HttpResponse::BadRequest().json(json!({"error": msg}))
}

fn current_flags(sup: &Supervisor) -> (u32, RolloutFlags) {
    let g = sup.generations().current();
    (g.settings.id.0, g.settings.flags.unwrap_or_default())
}

/// The status document.
#[must_use]
pub fn status(sup: &Supervisor) -> serde_json::Value {
    let lifecycle = *sup.lifecycle().borrow();
    let gens = sup.generations().status();
    let w = sup.ledger_writer();
    let writer = w.snapshot();
    let now = sup.now().0;
    json!({
        "phase": lifecycle.phase,
        "since_ms": lifecycle.since_ms,
        "generation": lifecycle.generation,
        "generations": gens,
        "sessions": sup.session_count(),
        "sessions_hibernating": sup.sessions_hibernating(),
        "in_flight": gens.iter().map(|g| g.in_flight).sum::<i64>(),
        "streams": sup.stats().streams_live(),
        "ledger": {
            "backend": sup.config().ledger.backend,
            "location": ledger_location(&sup.config().ledger),
            "durable": sup.ledger_durable(),
            "key_id": sup.generations().current().settings.key_id,
            "state": writer.state,
            "last_commit_ms": writer.last_commit_ms,
            "since_last_commit_ms": writer.last_commit_ms.map(|t| now.saturating_sub(t)),
            "failing_since_ms": writer.failing_since_ms,
            "last_error": w.last_error(),
            "round_trip_us": w.store().round_trip_us(),
            "writer": writer,
        },
        "stats": sup.stats_snapshot(),
    })
}

/// Where the ledger is: its file, its server (without the password), or `memory`.
fn ledger_location(l: &crate::config::LedgerConfig) -> String {
    match l.backend {
        crate::config::LedgerBackend::Sqlite => l.path.clone(),
        crate::config::LedgerBackend::Redis => {
            format!("{} (prefix {})", crate::ledger::redacted(&l.redis_url), l.redis_prefix)
        }
        crate::config::LedgerBackend::Memory => "memory".into(),
    }
}

/// Why the process is (not) ready: its phase and its ledger's state.
fn readiness(sup: &Supervisor) -> serde_json::Value {
    let w = sup.ledger_writer();
    let s = w.snapshot();
    json!({
        "ready": sup.ready(),
        "phase": sup.phase(),
        "ledger": {"state": s.state, "failing_since_ms": s.failing_since_ms, "last_error": w.last_error(), "last_commit_ms": s.last_commit_ms},
    })
}

async fn handle(req: HttpRequest, body: web::Bytes, st: web::Data<AdminState>) -> HttpResponse {
    if !st.token.accepts(&req) {
        return unauthorized();
    }
    let sup = &st.sup;
    let method = req.method().clone();
    match (method.as_str(), req.path()) {
        ("GET", "/metrics") => HttpResponse::Ok().content_type(super::metrics::CONTENT_TYPE).body(super::metrics::encode(&st.metrics)),
        ("GET", "/admin/status") => HttpResponse::Ok().json(status(sup)),
        ("GET", "/readyz") => {
            let doc = readiness(sup);
            if sup.ready() { HttpResponse::Ok().json(doc) } else { HttpResponse::ServiceUnavailable().json(doc) }
        }
        ("GET", "/livez") => HttpResponse::Ok().json(json!({"live": true})),
        ("GET", "/admin/flags") => {
            let (generation, flags) = current_flags(sup);
            HttpResponse::Ok().json(json!({"generation": generation, "flags": flags}))
        }
        ("PUT", "/admin/flags") => {
            let patch: FlagsPatch = match serde_json::from_slice(&body) {
                Ok(p) => p,
                Err(e) => return bad_request(format!("the body must be a JSON object of [rollout] fields (resumable: off|shadow|on, share: 0.0..=1.0, write_tools: all|receipts): {e}")),
            };
            let (_, mut flags) = current_flags(sup);
            flags.resumable = patch.resumable.unwrap_or(flags.resumable);
            flags.share = patch.share.unwrap_or(flags.share);
            flags.write_tools = patch.write_tools.unwrap_or(flags.write_tools);
            let flags = match flags.validate() {
                Ok(f) => f,
                Err(e) => return bad_request(e.to_string()),
            };
            let generation = sup.reload(GenOrigin::Reload, |s| s.flags = Some(flags));
            HttpResponse::Ok().json(json!({"generation": generation, "flags": flags}))
        }
        ("POST", "/admin/rollback") => {
            let generation = sup.rollback();
            let (_, flags) = current_flags(sup);
            HttpResponse::Ok().json(json!({"generation": generation, "flags": flags}))
        }
        ("POST", "/admin/drain") => {
            sup.request_stop();
            HttpResponse::Accepted().json(json!({"phase": "draining"}))
        }
        (_, "/metrics" | "/admin/status" | "/admin/flags" | "/admin/rollback" | "/admin/drain" | "/readyz" | "/livez") => HttpResponse::MethodNotAllowed().json(json!({"error": format!("{method} is not served on {}", req.path())})),
        _ => HttpResponse::NotFound().json(json!({"error": "not an admin endpoint: /admin/status, /admin/flags, /admin/rollback, /admin/drain, /readyz, /livez, /metrics"})),
    }
}

/// Mount the admin API and `/metrics` (for the admin listener's `App`).
pub fn configure(sup: Arc<Supervisor>, token: AdminToken) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        let metrics = super::metrics::registry(Arc::clone(&sup));
        cfg.app_data(web::Data::new(AdminState { sup, token, metrics }))
            .app_data(web::PayloadConfig::new(16 << 10))
            .default_service(web::to(handle));
    }
}
