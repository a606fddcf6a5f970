//! HTTP/1.1 framing over a raw TCP stream, shared by the fault proxy and the soak's
//! abusive clients: message heads (parsed with `httparse`), `Content-Length` and chunked
//! bodies. Nothing here decides anything about MCP.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A TCP stream with a read buffer.
pub(crate) struct Conn {
    pub(crate) s: TcpStream,
    buf: Vec<u8>,
}

pub(crate) type IoResult<T> = std::io::Result<T>;

/// The peer closed the connection where more was due.
pub(crate) fn eof() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed")
}

impl Conn {
    pub(crate) fn new(s: TcpStream) -> Conn {
        let _ = s.set_nodelay(true);
        Conn { s, buf: Vec::with_capacity(16 * 1024) }
    }

    /// Read more bytes; `false` at end of stream.
    pub(crate) async fn fill(&mut self) -> IoResult<bool> {
        let mut tmp = [0u8; 16 * 1024];
        let n = self.s.read(&mut tmp).await?;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n > 0)
    }

    /// Write a whole request while watching for the response head: a server may answer
    /// (and close) before it has read the request body (413 on a declared length). Returns
    /// the head (`None`: the connection closed before any byte of it) and whether every
    /// byte of the request was written; if not, the connection must not be reused.
    ///
    /// # Errors
    /// Read errors, and a close in the middle of a head.
    pub(crate) async fn send_watching(
        &mut self,
        request: &[u8],
    ) -> IoResult<(Option<Vec<u8>>, bool)> {
        let Conn { s, buf } = self;
        let (mut rd, mut wr) = s.split();
        let mut written = 0;
        let mut write_failed = false;
        let mut tmp = [0u8; 16 * 1024];
        loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok((Some(buf.drain(..p + 4).collect()), written == request.len()));
            }
            if buf.len() > 64 * 1024 {
                return Err(std::io::Error::other("head too large"));
            }
            tokio::select! {
                n = rd.read(&mut tmp) => {
                    let n = n?;
                    if n == 0 {
                        return if buf.is_empty() { Ok((None, written == request.len())) } else { Err(eof()) };
                    }
                    buf.extend_from_slice(&tmp[..n]);
                }
                w = wr.write(&request[written..]), if written < request.len() && !write_failed => match w {
                    Ok(0) | Err(_) => write_failed = true,
                    Ok(n) => written += n,
                },
            }
        }
    }

    /// A message head (through the blank line). `None` on a clean end before any byte.
    pub(crate) async fn read_head(&mut self) -> IoResult<Option<Vec<u8>>> {
        loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok(Some(self.buf.drain(..p + 4).collect()));
            }
            if self.buf.len() > 64 * 1024 {
                return Err(std::io::Error::other("head too large"));
            }
            if !self.fill().await? {
                return if self.buf.is_empty() { Ok(None) } else { Err(eof()) };
            }
        }
    }

    /// Exactly `n` body bytes.
    pub(crate) async fn read_n(&mut self, n: usize) -> IoResult<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill().await? {
                return Err(eof());
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// One CRLF-terminated line, without its CRLF.
    pub(crate) async fn read_line(&mut self) -> IoResult<Vec<u8>> {
        loop {
            if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf.drain(..p + 2).take(p).collect();
                return Ok(line);
            }
            if !self.fill().await? {
                return Err(eof());
            }
        }
    }

    /// The next chunk of a chunked body; `None` after the last chunk (and trailers).
    pub(crate) async fn read_chunk(&mut self) -> IoResult<Option<Vec<u8>>> {
        let line = self.read_line().await?;
        let size =
            parse_chunk_size(&line).ok_or_else(|| std::io::Error::other("bad chunk size"))?;
        if size == 0 {
            while !self.read_line().await?.is_empty() {}
            return Ok(None);
        }
        let data = self.read_n(size).await?;
        self.read_line().await?;
        Ok(Some(data))
    }

    /// Whatever is buffered or arrives next; `None` at end of stream.
    pub(crate) async fn read_some(&mut self) -> IoResult<Option<Vec<u8>>> {
        if self.buf.is_empty() && !self.fill().await? {
            return Ok(None);
        }
        Ok(Some(std::mem::take(&mut self.buf)))
    }
}

fn parse_chunk_size(line: &[u8]) -> Option<usize> {
    let hex = line.split(|b| *b == b';').next()?;
    usize::from_str_radix(std::str::from_utf8(hex).ok()?.trim(), 16).ok()
}

/// One chunk of a chunked body.
pub(crate) fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// A parsed response head.
#[derive(Debug, Clone)]
pub(crate) struct ResponseHead {
    pub(crate) status: u16,
    pub(crate) chunked: bool,
    pub(crate) length: Option<usize>,
    pub(crate) sse: bool,
    pub(crate) close: bool,
    /// `Mcp-Session-Id`, when present.
    pub(crate) session_id: Option<String>,
}

pub(crate) fn parse_response_head(head: &[u8]) -> Option<ResponseHead> {
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut hs);
    if !r.parse(head).ok()?.is_complete() {
        return None;
    }
    let get = |name: &str| {
        r.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
    };
    Some(ResponseHead {
        status: r.code?,
        chunked: get("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked")),
        length: get("content-length").and_then(|v| v.trim().parse().ok()),
        sse: get("content-type").is_some_and(|v| v.starts_with("text/event-stream")),
        close: get("connection").is_some_and(|v| v.eq_ignore_ascii_case("close")),
        session_id: get("mcp-session-id").map(|v| v.trim().to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_parse_with_extensions_and_reject_garbage() {
        assert_eq!(parse_chunk_size(b"1a"), Some(26));
        assert_eq!(parse_chunk_size(b"1A;name=v"), Some(26));
        assert_eq!(parse_chunk_size(b"0"), Some(0));
        assert_eq!(parse_chunk_size(b"zz"), None);
        assert_eq!(chunk(b"abc"), b"3\r\nabc\r\n");
    }

    #[test]
    fn response_heads_report_framing() {
        let r = parse_response_head(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n").unwrap();
        assert!(r.sse && r.chunked && r.length.is_none() && r.status == 200);
        let j = parse_response_head(
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\nconnection: close\r\n\r\n",
        )
        .unwrap();
        assert!(!j.sse && !j.chunked && j.length == Some(12) && j.close && j.status == 404);
        assert_eq!(r.session_id, None);
        let s = parse_response_head(
            b"HTTP/1.1 200 OK\r\nMcp-Session-Id: 1.abc \r\ncontent-length: 0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(s.session_id.as_deref(), Some("1.abc"));
    }
}
