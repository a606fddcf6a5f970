//! The host's admin API as the gate uses it: flags, rollback and `/metrics` scrapes, over one
//! blocking HTTP/1.1 exchange per call on a fresh loopback connection (run on a blocking
//! thread: the virtual clients keep running).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Where a spawned host's admin API is and its token.
#[derive(Debug, Clone)]
pub(crate) struct Admin {
    /// `ADDR:PORT`.
    pub(crate) addr: String,
    pub(crate) token: String,
}

impl Admin {
    /// One request; `(status, body)`.
    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        body: &str,
    ) -> Result<(u16, String), String> {
        let mut s =
            TcpStream::connect(&self.addr).map_err(|e| format!("admin {}: {e}", self.addr))?;
        s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.token,
            body.len()
        );
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).map_err(|e| format!("admin {path}: {e}"))?;
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| format!("admin {path}: no response head"))?;
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("admin {path}: no status"))?;
        let body = &raw[split + 4..];
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            mcp_devtools::dechunk(body)
        } else {
            body.to_vec()
        };
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// `PUT /admin/flags` with `flags` (a JSON object).
    pub(crate) fn set_flags(&self, flags: &serde_json::Value) -> Result<(), String> {
        match self.call("PUT", "/admin/flags", &flags.to_string())? {
            (200, _) => Ok(()),
            (s, b) => Err(format!("PUT /admin/flags {flags}: {s} {b}")),
        }
    }

    /// `POST /admin/rollback`.
    pub(crate) fn rollback(&self) -> Result<(), String> {
        match self.call("POST", "/admin/rollback", "")? {
            (200, _) => Ok(()),
            (s, b) => Err(format!("POST /admin/rollback: {s} {b}")),
        }
    }

    /// Every sample of `/metrics` but histogram buckets: series -> value.
    pub(crate) fn scrape(&self) -> Result<BTreeMap<String, f64>, String> {
        match self.call("GET", "/metrics", "")? {
            (200, body) => Ok(parse_samples(&body)),
            (s, b) => Err(format!("GET /metrics: {s} {b}")),
        }
    }
}

/// Prometheus text samples (comments and `_bucket` series left out).
pub(crate) fn parse_samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| !series.split('{').next().unwrap_or_default().ends_with("_bucket"))
        .filter_map(|(series, v)| v.parse::<f64>().ok().map(|v| (series.to_owned(), v)))
        .collect()
}

/// The sum of every series of `name` (all its label sets).
pub(crate) fn total(samples: &BTreeMap<String, f64>, name: &str) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| k.as_str() == name || k.starts_with(&format!("{name}{{")))
        .map(|(_, v)| v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_without_buckets_and_summed_over_labels() {
        let text = "# HELP a_total x\n# TYPE a_total counter\na_total{k=\"1\"} 2\na_total{k=\"2\"} 3\nh_bucket{le=\"1\"} 9\nh_count 4\n";
        let s = parse_samples(text);
        assert_eq!(s.len(), 3);
        assert_eq!(total(&s, "a_total"), 5.0);
        assert_eq!(total(&s, "h_count"), 4.0);
    }
}
