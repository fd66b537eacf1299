//! `wait` on the cluster: until input arrives in the caller's inbox (a
//! message or a child's notice) or the timeout passes, without holding a
//! worker. The turn makes an awakeable and hands its id to its inbox
//! (`dsh.Inbox/{id}.watch`, exclusive and short): the inbox answers with
//! what waits already, or keeps the id and resolves it when it next
//! admits an item. The turn then races the awakeable against a durable
//! `ctx.sleep` for the timeout (both journaled: a retried turn on another
//! worker resumes the same race and a message is seen once), and tells the
//! inbox to forget the id (`unwatch`), which also answers what waits now.
//! An interrupt resolves the awakeable too: the wait then ends as a
//! cancelled local one does. The result is worded by the local tool's own
//! functions.

use std::time::Duration;

use dsh_core::{ToolCall, ToolOutput};
use dsh_tool_subagent_control::{
    Arrival, ControlError, DEFAULT_WAIT_MS, MAX_WAIT_MS, MIN_WAIT_MS, WaitInput, arrivals_text,
    nothing_arrived,
};
use restate_sdk::prelude::*;

use super::Host;
use super::control::{input, refused};
use crate::object::ClaimedItem;
use crate::object::inbox::InboxClient;

impl Host<'_, '_> {
    /// Run one call of `wait`.
    pub(super) async fn wait(&mut self, call: &ToolCall) -> HandlerResult<ToolOutput> {
        let WaitInput { timeout_ms } = match input(call) {
            Ok(input) => input,
            Err(output) => return Ok(output),
        };
        let timeout = timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
        if !(MIN_WAIT_MS..=MAX_WAIT_MS).contains(&timeout) {
            return Ok(refused(ControlError::TimeoutOutOfRange {
                got: timeout,
                min: MIN_WAIT_MS,
                max: MAX_WAIT_MS,
            }));
        }
        let inbox = self
            .ctx
            .object_client::<InboxClient>(self.header.id.to_string());
        let (awakeable, arrived) = self.ctx.awakeable::<String>();
        let mut waiting = inbox.watch(awakeable.clone()).call().await?.into_inner();
        if waiting.is_empty() {
            let woke = restate_sdk::select! {
                _ = arrived => true,
                _ = self.ctx.sleep(Duration::from_millis(timeout)) => false,
            };
            waiting = inbox.unwatch(awakeable).call().await?.into_inner();
            if waiting.is_empty() {
                if !woke {
                    return Ok(ToolOutput::text(nothing_arrived(timeout)));
                }
                if self.interrupted().await? {
                    return Ok(refused(ControlError::WaitCancelled));
                }
            }
        }
        let arrivals: Vec<Arrival> = waiting.iter().map(arrival).collect();
        // Senders are named as in the tree, read only when there are some.
        let tree = if arrivals.iter().any(|arrival| arrival.sender.is_some()) {
            Some(self.tree().await?)
        } else {
            None
        };
        Ok(ToolOutput::text(arrivals_text(&arrivals, |id| {
            tree.as_ref()
                .map_or_else(|| id.to_string(), |tree| tree.name_of(id))
        })))
    }
}

/// An inbox item as `wait` describes it.
fn arrival(waiting: &ClaimedItem) -> Arrival {
    let source = &waiting.item.message.source;
    Arrival {
        kind: source.kind().to_owned(),
        sender: source.sender().cloned(),
        target: waiting.target,
    }
}
