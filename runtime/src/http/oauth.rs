//! The endpoint's OAuth steps (thin: the rules are `proto::oauth`'s, the fetching
//! `crate::auth`'s): the bearer token to a grant, the scopes a command needs, the challenge
//! of a refusal, and the Protected Resource Metadata routes.

use std::sync::Arc;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::actor::Supervisor;
use crate::auth::{AuthFailure, OAuth};
use crate::proto::admission::{
    Admitted, Command, HttpMethod, cors_headers, cors_origin, missing_scopes,
};
use crate::proto::error::Rejection;
use crate::proto::oauth::Grant;

/// Whether a query string carries an access token (refused: tokens go in the header only).
pub(super) fn token_in_query(query: &str) -> bool {
    !query.is_empty()
        && query.split(['&', ';']).any(|pair| {
            let name = pair.split('=').next().unwrap_or("");
            // The name as a form decoder reads it (`access%5Ftoken` is `access_token`).
            let mut decoded = Vec::with_capacity(name.len());
            let b = name.as_bytes();
            let mut i = 0;
            while i < b.len() {
                let hex = |c: u8| char::from(c).to_digit(16);
                match (
                    b[i],
                    b.get(i + 1).copied().and_then(hex),
                    b.get(i + 2).copied().and_then(hex),
                ) {
                    (b'%', Some(h), Some(l)) => {
                        decoded.push(u8::try_from(h * 16 + l).unwrap_or(0));
                        i += 3;
                    }
                    (c, _, _) => {
                        decoded.push(c);
                        i += 1;
                    }
                }
            }
            decoded.eq_ignore_ascii_case(b"access_token")
        })
}

/// The grant of the request's bearer token: from the cache without awaiting anything, else
/// checked (boxed: only this rare path adds its state to the request's future). A check
/// takes a token of the client address's bucket of refusals first (429 when it has none, so
/// its checks in flight are bounded by the burst) and gives it back unless the token was
/// refused. A token in the cache passes whatever the bucket: a client behind the same
/// address as a flood keeps working while its token is cached.
pub(super) async fn authenticate(
    oauth: &OAuth,
    token: Option<&str>,
    req: &HttpRequest,
    sup: &Supervisor,
) -> Result<Grant, Rejection> {
    let token = token.ok_or(Rejection::Unauthorized)?;
    let digest = crate::auth::digest(token);
    let cached = oauth.cached(&digest);
    if let Some(Ok(g)) = cached {
        return Ok(g);
    }
    let client = super::caller_key(req, None, sup);
    sup.auth_charge(&client)?;
    let checked = match cached {
        Some(refused) => refused,
        None => Box::pin(oauth.authenticate(token, digest)).await,
    };
    if !matches!(checked, Err(AuthFailure::Invalid(_))) {
        sup.auth_refund(&client);
    }
    match checked {
        Ok(g) => Ok(g),
        Err(AuthFailure::Invalid(why)) => {
            tracing::debug!(target: "mcp_runtime::auth", "token refused: {:?}", why.to_string());
            Err(Rejection::InvalidToken)
        }
        Err(AuthFailure::Unavailable(why)) => {
            // Per request: debug (a failed key fetch is warned once per attempt, at most one
            // an issuer per refresh interval).
            tracing::debug!(target: "mcp_runtime::auth", "authorization server unavailable: {why}");
            Err(Rejection::AuthUnavailable)
        }
    }
}

/// 403 `insufficient_scope` naming what the command needs, when the grant lacks it (with the
/// request's id on a stateless request, whose body was read).
pub(super) fn check_scopes(
    oauth: &OAuth,
    admitted: &Admitted,
    grant: &Grant,
) -> Result<(), Rejection> {
    let Some(needed) = missing_scopes(&admitted.command, oauth.scopes(), grant) else {
        return Ok(());
    };
    let refusal = Rejection::InsufficientScope(Arc::from(needed));
    Err(match &admitted.command {
        Command::Modern { request, .. } => refusal.with_id(&request.id),
        _ => refusal,
    })
}

/// The full challenge of an authentication refusal: the metadata URL and the endpoint's
/// scopes (the scopes an insufficient-scope refusal names are its own).
pub(super) fn challenge(oauth: &OAuth, rejection: &Rejection, resp: &mut HttpResponse) {
    let value = rejection.challenge(Some(oauth.metadata_url()), oauth.scopes().endpoint());
    if let Ok(v) = header::HeaderValue::from_str(&value) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
}

/// `GET` (and a CORS preflight of) the Protected Resource Metadata: the document built at
/// start from `[auth.oauth]` (never from the request's `Host`), with CORS for the origins
/// the endpoint allows.
async fn metadata(req: HttpRequest, sup: web::Data<Arc<Supervisor>>) -> HttpResponse {
    let Some(oauth) = sup.oauth() else {
        return HttpResponse::NotFound().finish();
    };
    let method = match *req.method() {
        actix_web::http::Method::OPTIONS => HttpMethod::Options,
        _ => HttpMethod::Get,
    };
    let head = super::request_head(method, req.headers());
    let mut resp = if method == HttpMethod::Options {
        let mut b = HttpResponse::NoContent();
        b.insert_header((header::ACCESS_CONTROL_ALLOW_METHODS, "GET"));
        b.insert_header((
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            crate::proto::admission::CORS_ALLOW_HEADERS,
        ));
        b.insert_header((header::ACCESS_CONTROL_MAX_AGE, "86400"));
        b.finish()
    } else {
        HttpResponse::Ok()
            .content_type("application/json")
            .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
            .body(oauth.metadata_doc().clone())
    };
    if let Some(origin) = cors_origin(&head, sup.admit_policy()) {
        for (k, v) in cors_headers(origin) {
            if let (Ok(k), Ok(v)) =
                (header::HeaderName::try_from(k), header::HeaderValue::from_str(&v))
            {
                resp.headers_mut().insert(k, v);
            }
        }
    }
    resp
}

/// Mount the metadata at the root well-known name and at the resource's path-inserted one.
pub(super) fn routes(cfg: &mut web::ServiceConfig, sup: &Supervisor) {
    let Some(oauth) = sup.oauth() else { return };
    let root = "/.well-known/oauth-protected-resource";
    let inserted = crate::proto::oauth::prm_path(oauth.resource());
    for path in [root.to_owned(), inserted].iter().collect::<std::collections::BTreeSet<_>>() {
        cfg.route(path, web::get().to(metadata))
            .route(path, web::method(actix_web::http::Method::OPTIONS).to(metadata));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_token_parameter_is_found_in_any_place_of_the_query() {
        assert!(token_in_query("access_token=abc"));
        assert!(token_in_query("a=1&access_token=abc"));
        assert!(token_in_query("access_token"));
        assert!(!token_in_query(""));
        assert!(!token_in_query("x_access_token=1&token=2"));
        assert!(token_in_query("access%5Ftoken=abc"), "percent-encoded");
        assert!(token_in_query("a=1;ACCESS_TOKEN=abc"), "any case, either separator");
    }
}
