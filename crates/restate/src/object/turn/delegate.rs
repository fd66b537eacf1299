//! Children on the cluster: the delegation tools `subagent` (a fresh
//! child) and `fork` (a child whose log starts as a copy of the parent's
//! completed turns, as the local fork provider seeds it), and a child's
//! settlement. Everything between parent and child is a call between
//! objects, journaled with the parent's (or the child's) turn, so each
//! happens exactly once (B61):
//!
//! 1. the catalog entry (`subagent/child`, the local runtime's
//!    [`CatalogEntry`] with the child's name) in the parent's own log;
//! 2. `dsh.Session/{child}.create` with the header and, for a fork, the
//!    seed (the one exclusive call across keys, to a brand-new object: it
//!    cannot deadlock);
//! 3. `dsh.Inbox/{child}.accept` of the prompt (request id `prompt`),
//!    which schedules the child's first turn;
//! 4. a background call (the default, as locally) returns the local
//!    tool's "started" line at once, and each time the child settles it
//!    sends the parent's inbox a notice worded as the local runtime's
//!    (request id `notice:{child}:{seq}`, one-way); a foreground call
//!    awaits an awakeable (the turn suspends and holds no worker) that the
//!    child resolves with its result when it first settles.
//!
//! A child deeper than the worker's depth limit is refused as locally.
//! A child settles when its turn ends and its inbox holds no waking
//! input. Child ids are `{parent}.{n}`, `n` counting the parent's own
//! catalog entries from 1, so a replayed turn names the same child; names
//! are the model's or the first free `agent-N`, as locally.

use dsh_core::content::joined_text;
use dsh_core::session::completed_turn_prefix;
use dsh_core::{
    ContentBlock, EventPayload, InboxTarget, MessageId, MessageSource, SessionHeader, SessionId,
    StopReason, ToolCall, ToolOutput, UserMessage,
};
use dsh_subagent::result::summary_line;
use dsh_subagent::{
    AdmissionError, CATALOG_EVENT, CatalogEntry, ChildMode, SubagentError, SubagentResult,
    catalog_payload, fold_catalog, render_notice, validate_name,
};
use dsh_tool_subagent::{refusal, render_result, started_in_background};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::specs::FORK_TOOL;
use super::{Host, terminal};
use crate::object::SessionSeed;
use crate::object::inbox::InboxClient;
use crate::object::session::SessionClient;
use crate::state::inbox::AcceptRequest;

/// The header extension holding a foreground child's awakeable.
const AWAKEABLE_KEY: &str = "restate_parent_awakeable";

/// The header extension holding a child's name among its siblings (its
/// notices name it, as a local child's do).
const NAME_KEY: &str = "restate_child_name";

/// The state key marking that a child has settled once.
const SETTLED_KEY: &str = "settled";

/// What a call of `subagent` or `fork` without a budget that the cluster
/// does not enforce is refused with.
pub const UNMETERED: &str = "No subagent was started: `token_budget` and `timeout_seconds` are not enforced on a Restate cluster yet. Call again without them.";

/// The arguments, as the local tool takes them (it has no model selection
/// or roles by default, so neither here).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    description: String,
    prompt: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    run_in_background: Option<bool>,
    #[serde(default)]
    token_budget: Option<u64>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

/// How a child settled, as its awakeable carries it to a foreground call.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settled {
    output: String,
    stop_reason: StopReason,
}

impl Settled {
    fn result(&self) -> SubagentResult {
        let mut result = SubagentResult::stopped(self.stop_reason.clone());
        if !self.output.is_empty() {
            result.output = vec![ContentBlock::text(self.output.clone())];
        }
        result
    }
}

impl Host<'_, '_> {
    /// Run one call of `subagent` or `fork`.
    pub(super) async fn delegate(&mut self, call: &ToolCall) -> HandlerResult<ToolOutput> {
        let fork = call.name == FORK_TOOL;
        let args: Args = match call.input.parse() {
            Ok(args) => args,
            Err(bad) => return Ok(ToolOutput::error(format!("Invalid arguments: {bad}."))),
        };
        if args.token_budget.is_some() || args.timeout_seconds.is_some() {
            return Ok(ToolOutput::error(UNMETERED));
        }
        let depth = self.header.delegation_depth + 1;
        let max = self.composed.max_depth;
        if depth > max {
            let bad = SubagentError::Admission(AdmissionError::DepthLimit { depth, max });
            return Ok(ToolOutput::error(refusal(&bad)));
        }
        let background = args.run_in_background.unwrap_or(true);
        let parent = self.header.id.clone();
        let catalog = fold_catalog(&self.header, &self.events)
            .map_err(|bad| terminal("SESSION_CORRUPT", format!("{parent}: {bad}")))?;
        let taken = catalog.names();
        let name = match args.name {
            Some(name) => {
                if let Err(bad) = validate_name(&name) {
                    return Ok(ToolOutput::error(refusal(&bad)));
                }
                if taken.contains(&name) {
                    let bad = SubagentError::Admission(AdmissionError::NameTaken(name));
                    return Ok(ToolOutput::error(refusal(&bad)));
                }
                name
            }
            None => (1..)
                .map(|n| format!("agent-{n}"))
                .find(|name| !taken.contains(name))
                .unwrap_or_default(),
        };
        let child = match SessionId::new(format!("{parent}.{}", catalog.len() + 1)) {
            Ok(child) => child,
            Err(bad) => return Ok(ToolOutput::error(bad.to_string())),
        };
        let entry = CatalogEntry {
            child_id: child.clone(),
            name: Some(name.clone()),
            label: args.description,
            provider: if fork { FORK_TOOL } else { "spawn" }.to_owned(),
            mode: ChildMode::CONTINUABLE,
        };
        self.append(vec![EventPayload::Extension {
            kind: CATALOG_EVENT.to_owned(),
            payload: catalog_payload(&entry),
        }])
        .await?;
        let seed = if fork {
            completed_turn_prefix(&self.events).to_vec()
        } else {
            Vec::new()
        };
        let mut header = SessionHeader::new(child.clone(), self.header.cwd.clone());
        header.parent_session = Some(parent.clone());
        header.origin = self.header.origin.clone();
        header.delegation_depth = depth;
        header.seed_len = seed.len() as u64;
        header.created_at = self.now().await?;
        header.extensions.insert(NAME_KEY.to_owned(), json!(name));
        let waiting = if background {
            None
        } else {
            let (id, promise) = self.ctx.awakeable::<Json<Settled>>();
            header
                .extensions
                .insert(AWAKEABLE_KEY.to_owned(), json!(id));
            Some(promise)
        };
        self.ctx
            .object_client::<SessionClient>(child.to_string())
            .create(Json(SessionSeed { header, seed }))
            .call()
            .await?;
        let mut message = UserMessage::new(
            vec![ContentBlock::text(args.prompt)],
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
            None => ToolOutput::text(started_in_background(&name, true)),
            Some(promise) => match promise.await {
                Ok(Json(settled)) => render_result(&name, &settled.result()),
                Err(failed) => ToolOutput::error(format!(
                    "The subagent `{name}` could not deliver a result: {}",
                    failed.message()
                )),
            },
        })
    }

    /// The turn ended and nothing wakes the agent again: if it is a child,
    /// hand its result to its parent (the awakeable the first time, for a
    /// foreground child; a notice worded as the local runtime's otherwise).
    pub(super) async fn settle(&mut self) -> HandlerResult<()> {
        let Some(parent) = self.header.parent_session.clone() else {
            return Ok(());
        };
        let own = self
            .events
            .get(usize::try_from(self.header.seed_len).unwrap_or(usize::MAX)..)
            .unwrap_or_default();
        let output = own
            .iter()
            .rev()
            .find_map(|event| match &event.payload {
                EventPayload::AssistantMessage(entry) => Some(joined_text(&entry.content)),
                _ => None,
            })
            .unwrap_or_default();
        let (ended, stop_reason) = own
            .iter()
            .rev()
            .find_map(|event| match &event.payload {
                EventPayload::TurnEnd(end) => Some((event.seq, end.stop_reason.clone())),
                _ => None,
            })
            .unwrap_or((self.head.next_seq, StopReason::COMPLETED));
        let settled = Settled {
            output,
            stop_reason,
        };
        let awakeable = self
            .header
            .extensions
            .get(AWAKEABLE_KEY)
            .and_then(|id| id.as_str())
            .map(str::to_owned);
        let settled_before = self.ctx.get::<bool>(SETTLED_KEY).await?.unwrap_or(false);
        self.ctx.set(SETTLED_KEY, true);
        if let (Some(id), false) = (awakeable, settled_before) {
            self.ctx.resolve_awakeable(&id, Json(settled));
            return Ok(());
        }
        let child = self.header.id.clone();
        let name = self
            .header
            .extensions
            .get(NAME_KEY)
            .and_then(|name| name.as_str())
            .map_or_else(|| child.to_string(), str::to_owned);
        let result = settled.result();
        let summary = summary_line(&name, &result);
        let mut message = UserMessage::new(
            render_notice(&summary, &result),
            MessageSource::SubagentSettled {
                summary,
                stop_reason: Some(result.stop_reason),
                sender_session_id: child.clone(),
            },
        );
        message.id = MessageId::new(format!("notice-{child}-{ended}"));
        self.ctx
            .object_client::<InboxClient>(parent.to_string())
            .accept_notice(Json(AcceptRequest {
                request_id: format!("notice:{child}:{ended}"),
                message,
                target: InboxTarget::NextTurn,
                wake: true,
            }))
            .send();
        Ok(())
    }
}
