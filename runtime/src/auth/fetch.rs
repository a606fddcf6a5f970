//! How the resource server asks an authorization server: a `GET` of a document, a form `POST`
//! with HTTP Basic client authentication (introspection). Each answer must be `200` and at
//! most [`MAX_DOCUMENT_BYTES`]; redirects are not followed; each fetch has a deadline.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

/// Largest document taken from an authorization server.
#[cfg_attr(not(feature = "oauth"), allow(dead_code))]
pub(crate) const MAX_DOCUMENT_BYTES: usize = 1 << 20;

type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Fetches from authorization servers.
pub(crate) trait Fetch: Send + Sync {
    /// `GET url`, the body of a `200`.
    fn get<'a>(&'a self, url: &'a str) -> LocalBoxFuture<'a, Result<Bytes, String>>;
    /// `POST url` of a form, with HTTP Basic `(client id, secret)`, the body of a `200`.
    fn post_form<'a>(
        &'a self,
        url: &'a str,
        basic: (&'a str, &'a str),
        form: &'a [(&'a str, &'a str)],
    ) -> LocalBoxFuture<'a, Result<Bytes, String>>;
}

/// `application/x-www-form-urlencoded` of one value (RFC 6749 §2.3.1 asks it of the Basic
/// credentials too).
#[cfg_attr(not(feature = "oauth"), allow(dead_code))]
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'*') {
            out.push(char::from(b));
        } else if b == b' ' {
            out.push('+');
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg_attr(not(feature = "oauth"), allow(dead_code))]
fn form_body(form: &[(&str, &str)]) -> String {
    form.iter()
        .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg_attr(not(feature = "oauth"), allow(dead_code))]
fn basic(client: &str, secret: &str) -> String {
    use base64::Engine as _;
    let pair = format!("{}:{}", form_encode(client), form_encode(secret));
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
}

#[cfg(feature = "oauth")]
mod awc_fetch {
    use std::sync::Arc;

    use super::{Bytes, Duration, Fetch, LocalBoxFuture, MAX_DOCUMENT_BYTES, basic, form_body};

    /// awc over rustls (ring) with the system's root certificates; a client per fetch (awc's
    /// is bound to its thread; fetches are rare: keys, metadata, uncached opaque tokens).
    pub(crate) struct AwcFetch {
        tls: Arc<rustls::ClientConfig>,
        timeout: Duration,
    }

    impl AwcFetch {
        pub(crate) fn new(timeout: Duration) -> AwcFetch {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!("a system root certificate could not be read: {e}");
            }
            let (added, _) = roots.add_parsable_certificates(found.certs);
            tracing::debug!(added, "root certificates for authorization servers");
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let tls = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| b.with_root_certificates(roots).with_no_client_auth())
                .unwrap_or_else(|e| {
                    // ring supports the default versions; kept as an error, not a panic.
                    tracing::error!("TLS for authorization servers: {e}");
                    rustls::ClientConfig::builder_with_provider(Arc::new(
                        rustls::crypto::ring::default_provider(),
                    ))
                    .with_protocol_versions(&[&rustls::version::TLS13])
                    .expect("TLS 1.3 with ring")
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
                });
            AwcFetch { tls: Arc::new(tls), timeout }
        }

        fn client(&self) -> awc::Client {
            awc::Client::builder()
                .connector(awc::Connector::new().rustls_0_23(Arc::clone(&self.tls)))
                .timeout(self.timeout)
                .disable_redirects()
                .finish()
        }
    }

    async fn body(
        sent: Result<awc::ClientResponse, awc::error::SendRequestError>,
        url: &str,
    ) -> Result<Bytes, String> {
        let mut resp = sent.map_err(|e| format!("{url}: {e}"))?;
        if resp.status() != awc::http::StatusCode::OK {
            return Err(format!("{url}: status {}", resp.status()));
        }
        resp.body().limit(MAX_DOCUMENT_BYTES).await.map_err(|e| format!("{url}: {e}"))
    }

    impl Fetch for AwcFetch {
        fn get<'a>(&'a self, url: &'a str) -> LocalBoxFuture<'a, Result<Bytes, String>> {
            Box::pin(async move {
                let sent = self
                    .client()
                    .get(url)
                    .insert_header(("Accept", "application/json"))
                    .send()
                    .await;
                body(sent, url).await
            })
        }

        fn post_form<'a>(
            &'a self,
            url: &'a str,
            (client, secret): (&'a str, &'a str),
            form: &'a [(&'a str, &'a str)],
        ) -> LocalBoxFuture<'a, Result<Bytes, String>> {
            Box::pin(async move {
                let sent = self
                    .client()
                    .post(url)
                    .insert_header(("Accept", "application/json"))
                    .insert_header(("Authorization", basic(client, secret)))
                    .content_type("application/x-www-form-urlencoded")
                    .send_body(form_body(form))
                    .await;
                body(sent, url).await
            })
        }
    }
}

/// A build without the `oauth` feature: configuration refuses OAuth there, so this is never
/// asked; it answers that it cannot.
#[cfg(not(feature = "oauth"))]
struct NoFetch;

#[cfg(not(feature = "oauth"))]
impl Fetch for NoFetch {
    fn get<'a>(&'a self, _url: &'a str) -> LocalBoxFuture<'a, Result<Bytes, String>> {
        Box::pin(async { Err("built without the oauth feature".to_owned()) })
    }

    fn post_form<'a>(
        &'a self,
        _url: &'a str,
        _basic: (&'a str, &'a str),
        _form: &'a [(&'a str, &'a str)],
    ) -> LocalBoxFuture<'a, Result<Bytes, String>> {
        Box::pin(async { Err("built without the oauth feature".to_owned()) })
    }
}

/// The fetcher of this build.
pub(crate) fn default_fetch(timeout: Duration) -> Box<dyn Fetch> {
    #[cfg(feature = "oauth")]
    {
        Box::new(awc_fetch::AwcFetch::new(timeout))
    }
    #[cfg(not(feature = "oauth"))]
    {
        let _ = timeout;
        Box::new(NoFetch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_and_basic_credentials_are_form_encoded() {
        assert_eq!(
            form_body(&[("token", "a b+c/=é"), ("k", "v")]),
            "token=a+b%2Bc%2F%3D%C3%A9&k=v"
        );
        // "id:x" with the colon of the id encoded, so the pair splits at the right one.
        assert_eq!(
            basic("i:d", "s e"),
            format!("Basic {}", {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.encode("i%3Ad:s+e")
            })
        );
    }
}
