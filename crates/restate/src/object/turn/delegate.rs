//! Children on the cluster: the host's built-in `subagent` tool and a
//! child's settlement. Everything between parent and child is a call
//! between objects, journaled with the parent's (or the child's) turn, so
//! each happens exactly once (B61):
//!
//! 1. the catalog entry (`subagent/child`) in the parent's own log;
//! 2. `dsh.Session/{child}.create` (the one exclusive call across keys, to
//!    a brand-new object: it cannot deadlock);
//! 3. `dsh.Inbox/{child}.accept` of the prompt (request id `prompt`),
//!    which schedules the child's first turn;
//! 4. a foreground call then awaits an awakeable (the turn suspends and
//!    holds no worker) that the child resolves with its last reply when it
//!    first settles; a background call returns at once, and each time the
//!    child settles it sends the parent's inbox a notice (request id
//!    `notice:{child}:{seq}`, one-way).
//!
//! A child settles when its turn ends and its inbox holds no waking
//! input. Child ids are `{parent}.{n}`, `n` counting the parent's catalog
//! entries from 1, so a replayed turn names the same child.

use dsh_core::content::joined_text;
use dsh_core::{
    ContentBlock, EventPayload, ExtensionPayload, InboxTarget, MessageId, MessageSource,
    SessionHeader, SessionId, StopReason, ToolCall, ToolOutput, ToolSpec, UserMessage,
};
use restate_sdk::prelude::*;
use serde::Deserialize;
use serde_json::json;

use super::{Host, terminal};
use crate::object::SessionSeed;
use crate::object::inbox::InboxClient;
use crate::object::session::SessionClient;
use crate::state::inbox::AcceptRequest;

/// The name of the built-in delegation tool.
pub(super) const DELEGATE_TOOL: &str = "subagent";

/// The catalog entry's event type (as the local runtime's).
const CHILD_KIND: &str = "subagent/child";

/// The header extension holding a foreground child's awakeable.
const AWAKEABLE_KEY: &str = "restate_parent_awakeable";

/// The state key marking that a child has settled once.
const SETTLED_KEY: &str = "settled";

/// The delegation tool as the model is shown it.
pub(super) fn spec() -> ToolSpec {
    ToolSpec {
        name: DELEGATE_TOOL.to_owned(),
        description: "Start a subagent on the cluster with a prompt. In the foreground (the \
                      default) the call returns the subagent's last reply; with \
                      `background: true` it returns at once and a notice arrives when the \
                      subagent settles."
            .to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string"},
                "label": {"type": "string"},
                "background": {"type": "boolean"}
            },
            "required": ["prompt"]
        }),
    }
}

#[derive(Debug, Deserialize)]
struct DelegateInput {
    prompt: String,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    background: bool,
}

impl Host<'_, '_> {
    /// Run one call of the delegation tool.
    pub(super) async fn delegate(&mut self, call: &ToolCall) -> HandlerResult<ToolOutput> {
        let input: DelegateInput = match call.input.parse() {
            Ok(input) => input,
            Err(bad) => {
                return Ok(ToolOutput::error(format!(
                    "Invalid arguments for `{DELEGATE_TOOL}`: {bad}"
                )));
            }
        };
        let parent = self.header.id.clone();
        let n = 1 + self
            .events
            .iter()
            .filter(|event| matches!(&event.payload, EventPayload::Extension { kind, .. } if kind == CHILD_KIND))
            .count();
        let child = match SessionId::new(format!("{parent}.{n}")) {
            Ok(child) => child,
            Err(bad) => return Ok(ToolOutput::error(bad.to_string())),
        };
        let label = input
            .label
            .unwrap_or_else(|| input.prompt.chars().take(40).collect());
        let mode = if input.background {
            "background"
        } else {
            "foreground"
        };
        let entry = json!({
            "child_id": child,
            "label": label,
            "provider": "restate",
            "mode": "continuable",
            "delegation": mode,
        });
        let payload = ExtensionPayload::new(&entry)
            .map_err(|bad| terminal("SESSION_CORRUPT", format!("{parent}: {bad}")))?;
        self.append(vec![EventPayload::Extension {
            kind: CHILD_KIND.to_owned(),
            payload,
        }])
        .await?;
        let mut header = SessionHeader::new(child.clone(), self.header.cwd.clone());
        header.parent_session = Some(parent.clone());
        header.origin = self.header.origin.clone();
        header.delegation_depth = self.header.delegation_depth + 1;
        header.created_at = self.now().await?;
        let waiting = if input.background {
            None
        } else {
            let (id, promise) = self.ctx.awakeable::<String>();
            header
                .extensions
                .insert(AWAKEABLE_KEY.to_owned(), json!(id));
            Some(promise)
        };
        self.ctx
            .object_client::<SessionClient>(child.to_string())
            .create(Json(SessionSeed {
                header,
                seed: Vec::new(),
            }))
            .call()
            .await?;
        let mut message = UserMessage::new(
            vec![ContentBlock::text(input.prompt)],
            MessageSource::AgentMessage {
                sender_session_id: parent,
            },
        );
        message.id = MessageId::new(format!("{child}.prompt"));
        self.ctx
            .object_client::<InboxClient>(child.to_string())
            .accept(Json(AcceptRequest {
                request_id: "prompt".to_owned(),
                message,
                target: InboxTarget::NextTurn,
                wake: true,
            }))
            .call()
            .await?;
        Ok(match waiting {
            None => ToolOutput::text(format!(
                "Started subagent `{child}` in the background; a notice arrives when it settles."
            )),
            Some(promise) => match promise.await {
                Ok(reply) => ToolOutput::text(reply),
                Err(failed) => {
                    ToolOutput::error(format!("Subagent `{child}` failed: {}", failed.message()))
                }
            },
        })
    }

    /// The turn ended and nothing wakes the agent again: if it is a child,
    /// hand its last reply to its parent (the awakeable the first time, for
    /// a foreground child; a notice otherwise).
    pub(super) async fn settle(&mut self) -> HandlerResult<()> {
        let Some(parent) = self.header.parent_session.clone() else {
            return Ok(());
        };
        let reply = self
            .events
            .iter()
            .rev()
            .find_map(|event| match &event.payload {
                EventPayload::AssistantMessage(entry) => Some(joined_text(&entry.content)),
                _ => None,
            })
            .unwrap_or_default();
        let stop_reason = self
            .events
            .iter()
            .rev()
            .find_map(|event| match &event.payload {
                EventPayload::TurnEnd(end) => Some(end.stop_reason.clone()),
                _ => None,
            });
        let awakeable = self
            .header
            .extensions
            .get(AWAKEABLE_KEY)
            .and_then(|id| id.as_str())
            .map(str::to_owned);
        let settled_before = self.ctx.get::<bool>(SETTLED_KEY).await?.unwrap_or(false);
        self.ctx.set(SETTLED_KEY, true);
        if let (Some(id), false) = (awakeable, settled_before) {
            self.ctx.resolve_awakeable(&id, reply);
            return Ok(());
        }
        let child = self.header.id.clone();
        let seq = self.head.next_seq;
        let how = stop_reason.clone().unwrap_or(StopReason::COMPLETED);
        let summary = format!("Subagent `{child}` settled ({how}).");
        let mut message = UserMessage::new(
            vec![ContentBlock::text(format!("{summary}\n\n{reply}"))],
            MessageSource::SubagentSettled {
                summary,
                stop_reason,
                sender_session_id: child.clone(),
            },
        );
        message.id = MessageId::new(format!("{child}.notice.{seq}"));
        self.ctx
            .object_client::<InboxClient>(parent.to_string())
            .accept_notice(Json(AcceptRequest {
                request_id: format!("notice:{child}:{seq}"),
                message,
                target: InboxTarget::NextTurn,
                wake: true,
            }))
            .send();
        Ok(())
    }
}
