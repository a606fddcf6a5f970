//! A real OAuth authorization server for the tests: `scripts/oidc/provider.mjs` (oidc-provider,
//! a certified OpenID provider) on a loopback port, with the Node runtime and packages that
//! `npm ci` in `scripts/oidc` installs (the test command does). Every token comes from it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::TempDir;

/// Why the provider could not be started or asked.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// Its Node packages are not installed.
    #[error(
        "the OAuth provider's packages are missing ({0}): run `npm ci` in scripts/oidc (scripts/test.sh does)"
    )]
    NotInstalled(String),
    /// It did not say it was listening in time.
    #[error("the OAuth provider did not start: {0}")]
    NotReady(String),
    /// A request to it failed.
    #[error("OAuth provider: {0}")]
    Request(String),
}

/// `scripts/oidc`, or `MCP_OIDC_DIR`.
fn dir() -> PathBuf {
    std::env::var_os("MCP_OIDC_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/oidc"),
        PathBuf::from,
    )
}

/// One provider process; killed when dropped. Its stdin is a pipe held here, so it also
/// exits when the test process dies.
#[derive(Debug)]
pub struct OidcProvider {
    child: Child,
    _stdin: ChildStdin,
    issuer: String,
    log: PathBuf,
    home: Option<TempDir>,
}

impl OidcProvider {
    /// Start one on a free port with keys of its own.
    ///
    /// # Errors
    /// [`OidcError`].
    pub fn start() -> Result<OidcProvider, OidcError> {
        let dir = TempDir::new("oidc");
        let keys = dir.path().join("keys.json");
        let mut p = OidcProvider::spawn(0, &keys, false, dir.path())?;
        p.home = Some(dir);
        Ok(p)
    }

    /// Stop this one and start it again on the same port with its keys rotated: new keys
    /// (new `kid`s) sign, the old ones stay published. Tokens it issued before are gone (its
    /// store is in memory), its JWT signatures still verify with the old keys.
    ///
    /// # Errors
    /// [`OidcError`].
    pub fn restart_rotated(mut self) -> Result<OidcProvider, OidcError> {
        let port = self.port();
        let dir = self.home.take().expect("a provider from start() has its directory");
        let _ = self.child.kill();
        let _ = self.child.wait();
        let keys = dir.path().join("keys.json");
        let mut last = OidcError::NotReady(String::new());
        // The port is free again once the old process is reaped; a few tries for the kernel.
        for _ in 0..20 {
            match OidcProvider::spawn(port, &keys, true, dir.path()) {
                Ok(mut p) => {
                    p.home = Some(dir);
                    return Ok(p);
                }
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(last)
    }

    fn spawn(port: u16, keys: &Path, rotate: bool, logs: &Path) -> Result<OidcProvider, OidcError> {
        let root = dir();
        let node = root.join("node_modules/.bin/node");
        if !node.exists() || !root.join("node_modules/oidc-provider").exists() {
            return Err(OidcError::NotInstalled(root.display().to_string()));
        }
        let log = logs.join(format!("provider-{port}-{}.log", u8::from(rotate)));
        let mut cmd = Command::new(node);
        cmd.arg(root.join("provider.mjs"))
            .args(["--port", &port.to_string(), "--keys"])
            .arg(keys)
            .arg("--exit-with-stdin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).map_err(|e| OidcError::NotReady(e.to_string()))?);
        if rotate {
            cmd.arg("--rotate");
        }
        let mut child = cmd.spawn().map_err(|e| OidcError::NotInstalled(e.to_string()))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            // Drain the rest, so the provider never blocks on a full pipe.
            for _ in lines {}
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).ok().flatten();
        match line.as_deref().and_then(|l| l.strip_prefix("listening on ")) {
            Some(url) => Ok(OidcProvider {
                child,
                _stdin: stdin,
                issuer: url.trim().to_owned(),
                log,
                home: None,
            }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                Err(OidcError::NotReady(format!("{line:?}; stderr: {said}")))
            }
        }
    }

    /// Its issuer URL (`http://127.0.0.1:PORT`).
    #[must_use]
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Its port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.issuer.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0)
    }

    /// How many times its JWKS was fetched so far.
    #[must_use]
    pub fn jwks_fetches(&self) -> usize {
        std::fs::read_to_string(&self.log).map_or(0, |s| s.matches("jwks fetched").count())
    }

    /// An access token of `client` (client credentials; its secret is `<client>-secret`) for
    /// `resource` with `scope`.
    ///
    /// # Errors
    /// [`OidcError::Request`] with the provider's answer.
    pub fn token(&self, client: &str, resource: &str, scope: &str) -> Result<String, OidcError> {
        let form = format!(
            "grant_type=client_credentials&resource={}&scope={}",
            encode(resource),
            encode(scope)
        );
        let (status, body) = self.post(client, "/token", &form)?;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        match v["access_token"].as_str() {
            Some(t) if status == 200 => Ok(t.to_owned()),
            _ => Err(OidcError::Request(format!("token: {status} {body}"))),
        }
    }

    /// Revoke `token` (RFC 7009) as `client`.
    ///
    /// # Errors
    /// [`OidcError::Request`].
    pub fn revoke(&self, client: &str, token: &str) -> Result<(), OidcError> {
        let form = format!("token={}&token_type_hint=access_token", encode(token));
        match self.post(client, "/token/revocation", &form)? {
            (200, _) => Ok(()),
            (s, b) => Err(OidcError::Request(format!("revocation: {s} {b}"))),
        }
    }

    fn post(&self, client: &str, path: &str, form: &str) -> Result<(u16, String), OidcError> {
        let addr = self.issuer.trim_start_matches("http://");
        let err = |e: std::io::Error| OidcError::Request(e.to_string());
        let mut s = TcpStream::connect(addr).map_err(err)?;
        s.set_read_timeout(Some(Duration::from_secs(10))).map_err(err)?;
        let basic = base64(&format!("{client}:{client}-secret"));
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Basic {basic}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        );
        s.write_all(req.as_bytes()).map_err(err)?;
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            String::from_utf8_lossy(&crate::dechunk(body.as_bytes())).into_owned()
        } else {
            body.to_owned()
        };
        Ok((status, body))
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Form encoding of one value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Standard base64 with padding (HTTP Basic).
fn base64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n =
            chunk.iter().enumerate().fold(0u32, |n, (i, &c)| n | (u32::from(c) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(T[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn basic_credentials_are_standard_base64() {
        assert_eq!(super::base64("a:a-secret"), "YTphLXNlY3JldA==");
        assert_eq!(super::base64("ab"), "YWI=");
        assert_eq!(super::base64("abc"), "YWJj");
        assert_eq!(super::encode("a b/c"), "a+b%2Fc");
    }
}
