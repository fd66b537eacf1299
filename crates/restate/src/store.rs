//! [`RestateSessionStore`]: the read half of core's `SessionStore` over the
//! `dsh.Session` objects of a Restate server, for listings, `dsh show` and
//! export. It reads through the objects' shared handlers (`header`,
//! `events_since`), which run beside a turn without waiting for it, and
//! lists sessions with the admin API's SQL over the `state` table.
//!
//! Writes exist only inside a handler, where the log's one writer is its
//! `dsh.Session` object: `open` answers `SESSION_LOCKED`, and `create` and
//! `remove` an unsupported-operation I/O error.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::codec::LineReader;
use dsh_core::session::FORMAT_VERSION;
use dsh_core::{
    LoadedSession, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore, StoreError,
};

use crate::client::{ClientError, RestateClient};

/// A read-only `SessionStore` over a Restate server's `dsh.Session`
/// objects.
#[derive(Debug, Clone)]
pub struct RestateSessionStore {
    client: RestateClient,
}

impl RestateSessionStore {
    /// A store reading through `client`.
    pub fn new(client: RestateClient) -> Self {
        Self { client }
    }
}

/// The name a session goes by in errors, in place of a file.
fn place(id: &SessionId) -> PathBuf {
    PathBuf::from(format!("restate:dsh.Session/{id}"))
}

/// A failed call as the store's I/O error.
fn io(path: PathBuf, error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
    StoreError::Io {
        path,
        source: Arc::new(std::io::Error::other(error)),
    }
}

fn read_only(id: &SessionId, what: &str) -> StoreError {
    StoreError::Io {
        path: place(id),
        source: Arc::new(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!("{what}: a session on Restate is written only by its dsh.Session object"),
        )),
    }
}

fn corrupt(id: &SessionId, line: u64, message: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        path: place(id),
        line,
        message: message.to_string(),
    }
}

impl RestateSessionStore {
    async fn read_header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        let line = self
            .client
            .header_line(id)
            .await
            .map_err(|error: ClientError| io(place(id), error))?
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let header: SessionHeader =
            serde_json::from_str(&line).map_err(|error| corrupt(id, 1, error))?;
        if header.format > FORMAT_VERSION {
            return Err(StoreError::UnsupportedFormat {
                path: place(id),
                found: u64::from(header.format),
                supported: FORMAT_VERSION,
            });
        }
        Ok(header)
    }

    async fn read_events(&self, id: &SessionId) -> Result<Vec<SessionEvent>, StoreError> {
        let mut reader = LineReader::new();
        let mut events = Vec::new();
        let mut from = 0;
        loop {
            let page = self
                .client
                .events_since(id, from)
                .await
                .map_err(|error| io(place(id), error))?;
            for line in page.lines.lines() {
                let expected = u64::try_from(events.len()).unwrap_or(u64::MAX);
                // Line 1 is the header's, as in the session's JSONL file.
                let event = reader
                    .read(line)
                    .map_err(|error| corrupt(id, expected + 2, error))?;
                if event.seq != expected {
                    return Err(corrupt(
                        id,
                        expected + 2,
                        format!("expected event seq {expected}, found {}", event.seq),
                    ));
                }
                events.push(event);
            }
            if page.complete {
                return Ok(events);
            }
            if page.next_seq <= from {
                return Err(corrupt(id, from + 2, "the log's pages do not advance"));
            }
            from = page.next_seq;
        }
    }
}

#[async_trait]
impl SessionStore for RestateSessionStore {
    /// Refused: a session on Restate is created by its `dsh.Session`
    /// object's `create` handler.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn create(
        &self,
        header: &SessionHeader,
        _seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        Err(read_only(&header.id, "create"))
    }

    /// Refused with [`StoreError::Locked`]: the log's one writer is its
    /// `dsh.Session` object.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        Err(StoreError::Locked(id.clone()))
    }

    /// The header and every event, read through the shared handlers (a
    /// turn running meanwhile may have appended more).
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        let header = self.read_header(id).await?;
        let events = self.read_events(id).await?;
        Ok(LoadedSession {
            header,
            events,
            torn_tail: None,
        })
    }

    /// The header alone, in one call.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        self.read_header(id).await
    }

    /// Whether the session's object has a header.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        match self.client.header_line(id).await {
            Ok(line) => Ok(line.is_some()),
            Err(error) => Err(io(place(id), error)),
        }
    }

    /// Every session with a header, sorted, from the server's `state`
    /// table.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        let sql = "SELECT service_key FROM state \
                   WHERE service_name = 'dsh.Session' AND key = 'header'";
        let path = PathBuf::from("restate:state");
        let rows = self
            .client
            .query(sql)
            .await
            .map_err(|error| io(path.clone(), error))?;
        let mut ids = rows
            .iter()
            .map(|row| {
                let key = row.get("service_key").and_then(serde_json::Value::as_str);
                key.and_then(|key| SessionId::new(key).ok())
                    .ok_or_else(|| io(path.clone(), format!("not a session key: {row}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        ids.sort();
        Ok(ids)
    }

    /// Refused: a session on Restate is removed through the server.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        Err(read_only(id, "remove"))
    }
}
