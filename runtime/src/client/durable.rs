//! [`SqliteJournal`]: the durable [`Journal`]. The one piece of the client core that touches
//! a file; everything it stores is written in single SQLite transactions (WAL mode), so a
//! crash leaves either the whole step or none of it.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::accept::{EventRef, ReceiptKey, StreamKey};
use super::journal::{Journal, JournalError, OutboxEntry, Recorded};
use crate::proto::ids::JsonRpcId;

const SCHEMA: &str = "
PRAGMA journal_mode = WAL;
CREATE TABLE IF NOT EXISTS streams (gen INTEGER NOT NULL, stream INTEGER NOT NULL, outstanding TEXT NOT NULL,
    cursor TEXT, PRIMARY KEY (gen, stream));
CREATE TABLE IF NOT EXISTS receipts (gen INTEGER NOT NULL, stream INTEGER NOT NULL, event TEXT NOT NULL,
    digest BLOB NOT NULL, PRIMARY KEY (gen, stream, event, digest)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, gen INTEGER NOT NULL,
    stream INTEGER NOT NULL, json TEXT NOT NULL);
";

fn err(e: rusqlite::Error) -> JournalError {
    JournalError(e.to_string())
}

fn key_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<StreamKey> {
    Ok(StreamKey { session_generation: r.get(0)?, stream: r.get::<_, i64>(1)? as u64 })
}

/// A journal in one SQLite file.
#[derive(Debug)]
pub struct SqliteJournal {
    db: Connection,
}

impl SqliteJournal {
    /// Open (creating if needed) the journal at `path`.
    ///
    /// # Errors
    /// The file cannot be opened or its schema created.
    pub fn open(path: &Path) -> Result<SqliteJournal, JournalError> {
        let db = Connection::open(path).map_err(err)?;
        db.execute_batch(SCHEMA).map_err(err)?;
        Ok(SqliteJournal { db })
    }

    fn event_text(e: &EventRef) -> Option<&str> {
        match e {
            EventRef::Id(id) => Some(id),
            // Events without an id cannot be replayed, so there is nothing to deduplicate.
            EventRef::Unnamed(_) => None,
        }
    }
}

impl Journal for SqliteJournal {
    fn record(
        &mut self,
        receipt: &ReceiptKey,
        cursor: Option<&str>,
        dispatch: Option<&str>,
        answered: Option<&JsonRpcId>,
    ) -> Result<Recorded, JournalError> {
        let (g, s) = (receipt.stream.session_generation, receipt.stream.stream as i64);
        let tx = self.db.transaction().map_err(err)?;
        if let Some(event) = Self::event_text(&receipt.event) {
            let inserted = tx
                .execute("INSERT OR IGNORE INTO receipts (gen, stream, event, digest) VALUES (?1, ?2, ?3, ?4)", params![g, s, event, &receipt.digest[..]])
                .map_err(err)?;
            if inserted == 0 {
                return Ok(Recorded::Duplicate);
            }
        }
        if let Some(c) = cursor {
            tx.execute(
                "UPDATE streams SET cursor = ?3 WHERE gen = ?1 AND stream = ?2",
                params![g, s, c],
            )
            .map_err(err)?;
        }
        if let Some(id) = answered {
            let out: Option<String> = tx
                .query_row(
                    "SELECT outstanding FROM streams WHERE gen = ?1 AND stream = ?2",
                    params![g, s],
                    |r| r.get(0),
                )
                .optional()
                .map_err(err)?;
            if let Some(out) = out {
                let mut ids: Vec<JsonRpcId> = serde_json::from_str(&out).unwrap_or_default();
                ids.retain(|o| o != id);
                let out = serde_json::to_string(&ids).map_err(|e| JournalError(e.to_string()))?;
                tx.execute(
                    "UPDATE streams SET outstanding = ?3 WHERE gen = ?1 AND stream = ?2",
                    params![g, s, out],
                )
                .map_err(err)?;
            }
        }
        let mut seq = None;
        if let Some(json) = dispatch {
            tx.execute(
                "INSERT INTO outbox (gen, stream, json) VALUES (?1, ?2, ?3)",
                params![g, s, json],
            )
            .map_err(err)?;
            seq = Some(tx.last_insert_rowid() as u64);
        }
        tx.commit().map_err(err)?;
        Ok(Recorded::New { dispatch: seq })
    }

    fn contains(&self, receipt: &ReceiptKey) -> bool {
        let Some(event) = Self::event_text(&receipt.event) else { return false };
        self.db
            .query_row(
                "SELECT 1 FROM receipts WHERE gen = ?1 AND stream = ?2 AND event = ?3 AND digest = ?4",
                params![receipt.stream.session_generation, receipt.stream.stream as i64, event, &receipt.digest[..]],
                |_| Ok(()),
            )
            .optional()
            .ok()
            .flatten()
            .is_some()
    }

    fn pending(&self) -> Vec<OutboxEntry> {
        let Ok(mut st) = self.db.prepare("SELECT gen, stream, seq, json FROM outbox ORDER BY seq")
        else {
            return Vec::new();
        };
        st.query_map([], |r| {
            Ok(OutboxEntry { stream: key_of(r)?, seq: r.get::<_, i64>(2)? as u64, json: r.get(3)? })
        })
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
    }

    fn ack(&mut self, seq: u64) {
        if let Err(e) = self.db.execute("DELETE FROM outbox WHERE seq <= ?1", params![seq as i64]) {
            tracing::warn!("journal ack failed: {e}");
        }
    }

    fn cursor(&self, stream: &StreamKey) -> Option<String> {
        self.db
            .query_row(
                "SELECT cursor FROM streams WHERE gen = ?1 AND stream = ?2",
                params![stream.session_generation, stream.stream as i64],
                |r| r.get(0),
            )
            .optional()
            .ok()
            .flatten()
            .flatten()
    }

    fn register_stream(
        &mut self,
        stream: &StreamKey,
        outstanding: &[JsonRpcId],
    ) -> Result<(), JournalError> {
        let out = serde_json::to_string(outstanding).map_err(|e| JournalError(e.to_string()))?;
        self.db
            .execute("INSERT OR REPLACE INTO streams (gen, stream, outstanding, cursor) VALUES (?1, ?2, ?3, NULL)", params![stream.session_generation, stream.stream as i64, out])
            .map_err(err)?;
        Ok(())
    }

    fn forget_stream(&mut self, stream: &StreamKey) {
        let (g, s) = (stream.session_generation, stream.stream as i64);
        let r = self.db.transaction().and_then(|tx| {
            tx.execute("DELETE FROM streams WHERE gen = ?1 AND stream = ?2", params![g, s])?;
            tx.execute("DELETE FROM receipts WHERE gen = ?1 AND stream = ?2", params![g, s])?;
            tx.commit()
        });
        if let Err(e) = r {
            tracing::warn!("journal forget_stream failed: {e}");
        }
    }

    fn streams(&self) -> Vec<(StreamKey, Vec<JsonRpcId>)> {
        let Ok(mut st) =
            self.db.prepare("SELECT gen, stream, outstanding FROM streams ORDER BY gen, stream")
        else {
            return Vec::new();
        };
        st.query_map([], |r| {
            let out: String = r.get(2)?;
            Ok((key_of(r)?, serde_json::from_str(&out).unwrap_or_default()))
        })
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::client::accept::{Acceptance, Acceptor, Binding, IncomingEvent, Refusal};
    use crate::proto::version::ProtocolVersion;

    fn binding() -> Binding {
        Binding {
            session_generation: 3,
            session_id: Arc::from("sess"),
            protocol_version: ProtocolVersion::V2025_11_25,
            principal: None,
        }
    }

    /// A journal file in a directory removed (with the file's `-wal` and `-shm`) when the
    /// returned guard drops.
    fn tmp(name: &str) -> (mcp_devtools::TempDir, std::path::PathBuf) {
        let dir = mcp_devtools::TempDir::new("journal");
        let path = dir.path().join(name);
        (dir, path)
    }

    const NOTE: &str =
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":1}}"#;
    const RESP: &str = r#"{"jsonrpc":"2.0","id":5,"result":{}}"#;

    #[test]
    fn restarted_client_neither_loses_nor_redispatches() {
        let (_dir, path) = tmp("restart");
        let b = binding();
        let (stream, first_seq) = {
            let mut a = Acceptor::new(b.clone(), SqliteJournal::open(&path).unwrap());
            let s = a.open_post_stream(&[JsonRpcId::Number(5)]).unwrap();
            a.accept_stream_event(IncomingEvent {
                stream: &s,
                binding: &b,
                id: Some("p"),
                data: "",
            })
            .unwrap();
            let Acceptance::Dispatched { seq, .. } = a
                .accept_stream_event(IncomingEvent {
                    stream: &s,
                    binding: &b,
                    id: Some("e1"),
                    data: NOTE,
                })
                .unwrap()
            else {
                panic!()
            };
            // The agent handled e1; the process dies before e2 arrives.
            a.journal_mut().ack(seq);
            (s, seq)
        };
        let mut a = Acceptor::new(b.clone(), SqliteJournal::open(&path).unwrap());
        assert_eq!(a.stream_keys(), vec![stream.clone()], "the stream is restored");
        assert_eq!(
            a.resume_cursor(&stream).as_deref(),
            Some("e1"),
            "resume from the durable cursor"
        );
        assert_eq!(a.outstanding(&stream), vec![JsonRpcId::Number(5)]);
        // The server replays e1 (already handled) and then e2.
        assert_eq!(
            a.accept_stream_event(IncomingEvent {
                stream: &stream,
                binding: &b,
                id: Some("e1"),
                data: NOTE
            }),
            Err(Refusal::Duplicate)
        );
        let r = a
            .accept_stream_event(IncomingEvent {
                stream: &stream,
                binding: &b,
                id: Some("e2"),
                data: RESP,
            })
            .unwrap();
        assert!(matches!(r, Acceptance::Dispatched { seq, completed: Some(_) } if seq > first_seq));
        let pending = a.journal_mut().pending();
        assert_eq!(pending.len(), 1, "only e2 waits for the agent: {pending:?}");
        assert_eq!(pending[0].json, RESP);
        drop(a);
        // A crash before the agent acknowledged e2: it is still pending after restart, once.
        let mut a = Acceptor::new(b.clone(), SqliteJournal::open(&path).unwrap());
        assert_eq!(a.journal_mut().pending().len(), 1);
        assert!(a.outstanding(&stream).is_empty(), "the answered request stays answered");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn streams_of_an_older_session_are_forgotten_on_restart() {
        let (_dir, path) = tmp("older");
        {
            let mut a = Acceptor::new(
                Binding { session_generation: 1, ..binding() },
                SqliteJournal::open(&path).unwrap(),
            );
            a.open_get_stream().unwrap();
        }
        let a = Acceptor::new(binding(), SqliteJournal::open(&path).unwrap());
        assert!(a.stream_keys().is_empty());
        let _ = std::fs::remove_file(&path);
    }
}
