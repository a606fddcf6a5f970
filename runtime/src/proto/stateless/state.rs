//! Sealed `requestState` of multi-round-trip requests (SPEC.md §4.9): the answers a request
//! has collected so far, bound to its caller, a deadline and a digest of the original request,
//! under an HMAC-SHA256 with a key derived from the ledger's key, so any node with the key can
//! continue the request and nobody without it can forge, extend, move or reuse one. A state
//! is sealed with the current key and opened with the current or a previous one (a key
//! rotation does not void the states issued before it).
//!
//! Wire form: `v1.<base64url(JSON payload)>.<base64url(tag)>`, the tag over `v1.<payload>`.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::proto::digest::hex;

const PREFIX: &str = "v1.";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Why a `requestState` was refused. Each is reported to the client as it is (it tells the
/// client what to do: start the request again without the state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateRefused {
    /// Not of our form, or its tag does not verify (altered, or made with another key).
    Tampered,
    /// Its deadline passed.
    Expired,
    /// Issued to another caller.
    Foreign,
    /// Issued for another request (another method, tool or arguments).
    OtherRequest,
}

impl StateRefused {
    /// The explanation sent to the client.
    #[must_use]
    pub(crate) fn describe(self) -> &'static str {
        match self {
            StateRefused::Tampered => {
                "requestState is not one this server issued (altered or malformed); send the request again without it"
            }
            StateRefused::Expired => "requestState has expired; send the request again without it",
            StateRefused::Foreign => "requestState was issued to another caller",
            StateRefused::OtherRequest => {
                "requestState was issued for another request (method, name or arguments differ)"
            }
        }
    }
}

/// The digest of a request as a multi-round-trip retry must repeat it: its method and params
/// without `_meta`, `inputResponses` and `requestState` (and without an empty `arguments`).
#[must_use]
pub(crate) fn request_digest(method: &str, params: Option<&Value>) -> String {
    let mut p = params.and_then(Value::as_object).cloned().unwrap_or_default();
    for k in ["_meta", "inputResponses", "requestState"] {
        p.remove(k);
    }
    if p.get("arguments").is_some_and(|a| a.is_null() || a.as_object().is_some_and(Map::is_empty)) {
        p.remove("arguments");
    }
    // serde_json's map is ordered by key: the text is canonical.
    let text = json!({"m": method, "p": p}).to_string();
    hex(&Sha256::digest(text.as_bytes()))
}

fn principal_digest(principal: Option<&str>) -> String {
    principal.map_or_else(String::new, |p| hex(&Sha256::digest(p.as_bytes()))[..32].to_owned())
}

fn tag(key: &[u8; 32], body: &str) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(body.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// Seal `answers` for the request `digest` of `principal`, valid until `expires_ms`.
#[must_use]
pub(crate) fn seal(
    key: &[u8; 32],
    principal: Option<&str>,
    digest: &str,
    expires_ms: u64,
    answers: &Map<String, Value>,
) -> String {
    let payload =
        json!({"p": principal_digest(principal), "d": digest, "x": expires_ms, "a": answers});
    let body = format!("{PREFIX}{}", B64.encode(payload.to_string()));
    let t = B64.encode(tag(key, &body));
    format!("{body}.{t}")
}

/// Open a `requestState`: its answers, when it is ours (its tag verifies under one of `keys`:
/// the current key, then the previous ones), unexpired, the caller's and this request's.
///
/// # Errors
/// [`StateRefused`].
pub(crate) fn open(
    keys: &[[u8; 32]],
    state: &str,
    principal: Option<&str>,
    digest: &str,
    now_ms: u64,
) -> Result<Map<String, Value>, StateRefused> {
    let (body, t) = state.rsplit_once('.').ok_or(StateRefused::Tampered)?;
    if !body.starts_with(PREFIX) {
        return Err(StateRefused::Tampered);
    }
    let given = B64.decode(t).map_err(|_| StateRefused::Tampered)?;
    let verifies = |key: &[u8; 32]| {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(body.as_bytes());
        mac.verify_slice(&given).is_ok()
    };
    if !keys.iter().any(verifies) {
        return Err(StateRefused::Tampered);
    }
    let payload: Value = B64
        .decode(&body[PREFIX.len()..])
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or(StateRefused::Tampered)?;
    if payload["x"].as_u64().is_none_or(|x| now_ms >= x) {
        return Err(StateRefused::Expired);
    }
    if payload["p"].as_str() != Some(principal_digest(principal).as_str()) {
        return Err(StateRefused::Foreign);
    }
    if payload["d"].as_str() != Some(digest) {
        return Err(StateRefused::OtherRequest);
    }
    Ok(payload["a"].as_object().cloned().unwrap_or_default())
}

/// Check a client's answer to an input request of `method` (the shape its result must have).
///
/// # Errors
/// What is wrong with it.
pub(crate) fn check_answer(method: &str, params: &Value, answer: &Value) -> Result<(), String> {
    let obj = answer.as_object().ok_or("must be an object")?;
    match method {
        "elicitation/create" => {
            let action = obj.get("action").and_then(Value::as_str).ok_or("needs an action")?;
            match action {
                "accept" => {
                    let content =
                        obj.get("content").ok_or("an accepted elicitation needs content")?;
                    if !content.is_object() {
                        return Err("content must be an object".into());
                    }
                    match params.get("requestedSchema") {
                        Some(schema) => crate::proto::schema::validate_arguments(schema, content)
                            .map_err(|e| {
                                format!("content does not match the requested schema: {e}")
                            }),
                        None => Ok(()),
                    }
                }
                "decline" | "cancel" => Ok(()),
                other => Err(format!("unknown action {other:?}")),
            }
        }
        "sampling/createMessage" => {
            match (obj.get("role").and_then(Value::as_str), obj.get("content")) {
                (Some(_), Some(c)) if c.is_object() || c.is_array() => Ok(()),
                _ => Err("a sampling result needs role and content".into()),
            }
        }
        "roots/list" => match obj.get("roots") {
            Some(Value::Array(_)) => Ok(()),
            _ => Err("a roots result needs a roots array".into()),
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    fn answers() -> Map<String, Value> {
        json!({"step1": {"action": "accept", "content": {"name": "Alice"}}})
            .as_object()
            .cloned()
            .unwrap()
    }

    #[test]
    fn a_sealed_state_opens_for_its_caller_and_request_until_it_expires() {
        let d = request_digest("tools/call", Some(&json!({"name": "t", "arguments": {}})));
        let s = seal(&KEY, Some("alice"), &d, 1_000, &answers());
        assert_eq!(open(&[KEY], &s, Some("alice"), &d, 999).unwrap(), answers());
        assert_eq!(open(&[KEY], &s, Some("alice"), &d, 1_000), Err(StateRefused::Expired));
        assert_eq!(open(&[KEY], &s, Some("bob"), &d, 0), Err(StateRefused::Foreign));
        assert_eq!(open(&[KEY], &s, None, &d, 0), Err(StateRefused::Foreign));
        let other =
            request_digest("tools/call", Some(&json!({"name": "t", "arguments": {"x": 1}})));
        assert_eq!(open(&[KEY], &s, Some("alice"), &other, 0), Err(StateRefused::OtherRequest));
    }

    #[test]
    fn a_tampered_or_foreign_keyed_state_is_refused() {
        let d = request_digest("tools/call", None);
        let s = seal(&KEY, None, &d, 10, &answers());
        assert_eq!(
            open(&[KEY], &format!("{s}-TAMPERED"), None, &d, 0),
            Err(StateRefused::Tampered)
        );
        assert_eq!(open(&[[8; 32]], &s, None, &d, 0), Err(StateRefused::Tampered), "another key");
        // Change the payload, keep the tag.
        let (body, t) = s.rsplit_once('.').unwrap();
        let forged = B64.encode(json!({"p": "", "d": d, "x": u64::MAX, "a": {}}).to_string());
        assert_eq!(
            open(&[KEY], &format!("v1.{forged}.{t}"), None, &d, 0),
            Err(StateRefused::Tampered)
        );
        assert!(body.starts_with("v1."));
        for junk in ["", "v1.", "x.y", "v1.!!.!!"] {
            assert_eq!(open(&[KEY], junk, None, &d, 0), Err(StateRefused::Tampered), "{junk:?}");
        }
    }

    #[test]
    fn a_state_sealed_before_a_key_rotation_opens_with_the_previous_key_listed() {
        let d = request_digest("tools/call", None);
        let (old, new) = ([1; 32], [2; 32]);
        let s = seal(&old, Some("alice"), &d, 10, &answers());
        assert_eq!(open(&[new, old], &s, Some("alice"), &d, 0).unwrap(), answers());
        assert_eq!(
            open(&[new], &s, Some("alice"), &d, 0),
            Err(StateRefused::Tampered),
            "the previous key no longer listed"
        );
        assert_eq!(
            open(&[new, old], &s, Some("bob"), &d, 0),
            Err(StateRefused::Foreign),
            "the other checks still apply"
        );
        assert_eq!(open(&[], &s, Some("alice"), &d, 0), Err(StateRefused::Tampered));
    }

    #[test]
    fn the_digest_ignores_meta_responses_state_and_empty_arguments() {
        let a = request_digest("tools/call", Some(&json!({"name": "t"})));
        assert_eq!(
            a,
            request_digest(
                "tools/call",
                Some(
                    &json!({"name": "t", "arguments": {}, "_meta": {"x": 1}, "inputResponses": {}, "requestState": "s"})
                )
            )
        );
        assert_ne!(a, request_digest("prompts/get", Some(&json!({"name": "t"}))));
    }

    #[test]
    fn answers_are_checked_against_their_request() {
        let p = json!({"message": "?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}});
        assert!(
            check_answer(
                "elicitation/create",
                &p,
                &json!({"action": "accept", "content": {"name": "A"}})
            )
            .is_ok()
        );
        assert!(check_answer("elicitation/create", &p, &json!(12345)).is_err());
        assert!(
            check_answer(
                "elicitation/create",
                &p,
                &json!({"action": "accept", "content": {"name": 5}})
            )
            .is_err()
        );
        assert!(check_answer("elicitation/create", &p, &json!({"action": "decline"})).is_ok());
        assert!(
            check_answer(
                "sampling/createMessage",
                &json!({}),
                &json!({"role": "assistant", "content": {"type": "text", "text": "x"}})
            )
            .is_ok()
        );
        assert!(check_answer("roots/list", &json!({}), &json!({"roots": []})).is_ok());
        assert!(check_answer("roots/list", &json!({}), &json!({})).is_err());
    }
}
