//! `dsh.Session/{session id}`: a session's log as state (the header line,
//! chunks of JSONL lines, the head; `crate::state::log`). So far it has
//! `create`, the turn (`run_turn`, hosted in `super::turn`) and the shared
//! read handlers `header`, `status` and `events_since`.

use dsh_core::{SessionEvent, SessionHeader};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::state::log::{self, HEAD_KEY, HEADER_KEY, LogHead};
use crate::worker::WorkerEnv;

/// How many chunks one [`EventPage`] holds at most, so a reply stays far
/// below the server's message limit.
const PAGE_CHUNKS: u64 = 16;

/// The `dsh.Session` virtual object. Its state is lazy: a handler fetches
/// the entries it reads, not the whole log with every invocation.
pub struct Session {
    env: Arc<dyn WorkerEnv>,
}

impl Session {
    /// The object, running turns with what `env` composes.
    pub fn new(env: Arc<dyn WorkerEnv>) -> Self {
        Self { env }
    }
}

/// What `create` writes: the header and the events the log starts with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSeed {
    /// The header; its id must be the object's key.
    pub header: SessionHeader,
    /// The first events, seqs from 0 (a fork's inherited prefix, say).
    pub seed: Vec<SessionEvent>,
}

/// A run of a log's lines, as `events_since` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventPage {
    /// The JSONL lines from the asked seq, each ending in `\n`.
    pub lines: String,
    /// The seq after the last line returned.
    pub next_seq: u64,
    /// Whether the page reaches the end of the log (as of the read).
    pub complete: bool,
}

#[restate_sdk::object(name = "dsh.Session", client_visibility = "pub(crate)", lazy_state)]
impl Session {
    /// Create the log: the header line and the seed. Refused with
    /// `SESSION_EXISTS` when the object already has a header.
    #[handler]
    async fn create(&self, ctx: ObjectContext<'_>, seed: Json<SessionSeed>) -> HandlerResult<()> {
        let SessionSeed { header, seed } = seed.into_inner();
        if header.id.as_str() != ctx.key() {
            return Err(super::refused(
                "SESSION_ID_MISMATCH",
                format!("a header of `{}` for object `{}`", header.id, ctx.key()),
            )
            .into());
        }
        if ctx.get::<String>(HEADER_KEY).await?.is_some() {
            return Err(super::refused(
                "SESSION_EXISTS",
                format!("session `{}` already exists", ctx.key()),
            )
            .into());
        }
        let mut head = LogHead::default();
        let writes = log::append(&mut head, None, &seed)
            .map_err(|bad| super::refused("OUT_OF_SEQUENCE", bad))?;
        let header_line = serde_json::to_string(&header)?;
        ctx.set(HEADER_KEY, header_line);
        for write in writes {
            ctx.set(&log::chunk_key(write.index), write.lines);
        }
        ctx.set(HEAD_KEY, Json(head));
        Ok(())
    }

    /// Run one turn: claim input, ask the model, run its tools, step by
    /// step, every effect journaled (`super::turn`). Scheduled by the
    /// inbox (one-way); tells the inbox when it ends.
    #[handler]
    async fn run_turn(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        super::turn::run_turn(&ctx, self.env.as_ref()).await
    }

    /// The log's head: how many events, turns ended, the open turn.
    #[handler]
    async fn status(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<LogHead>> {
        Ok(Json(
            ctx.get::<Json<LogHead>>(HEAD_KEY)
                .await?
                .map(Json::into_inner)
                .unwrap_or_default(),
        ))
    }

    /// The header line, exactly as the JSONL store writes it; `None` when
    /// the session does not exist.
    #[handler]
    async fn header(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Option<String>> {
        Ok(ctx.get::<String>(HEADER_KEY).await?)
    }

    /// The log's lines from seq `from` on, at most [`PAGE_CHUNKS`] chunks
    /// of them: ask again from `next_seq` until `complete`.
    #[handler]
    async fn events_since(
        &self,
        ctx: SharedObjectContext<'_>,
        from: u64,
    ) -> HandlerResult<Json<EventPage>> {
        let head = ctx
            .get::<Json<LogHead>>(HEAD_KEY)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        let mut lines = String::new();
        let mut next_seq = from.min(head.next_seq);
        let first = log::chunk_of(next_seq);
        let end = log::chunk_of(head.next_seq.saturating_sub(1)) + 1;
        for index in first..end.min(first + PAGE_CHUNKS) {
            if next_seq >= head.next_seq {
                break;
            }
            let key = log::chunk_key(index);
            let chunk = ctx.get::<Vec<u8>>(&key).await?.unwrap_or_default();
            let text = log::lines_from(index, &chunk, next_seq)
                .map_err(|bad| super::refused("SESSION_CORRUPT", bad))?;
            lines.push_str(text);
            next_seq = ((index + 1) * log::CHUNK_EVENTS).min(head.next_seq);
        }
        Ok(Json(EventPage {
            lines,
            complete: next_seq >= head.next_seq,
            next_seq,
        }))
    }
}
