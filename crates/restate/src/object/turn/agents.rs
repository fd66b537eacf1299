//! `list_agents` on the cluster: the caller's tree (`tree`), each member
//! by the name the local tool gives it, with its task label and whether it
//! works right now: a turn is scheduled or running on its inbox
//! (`dsh.Inbox/{id}.status`, a shared handler, journaled with the turn).
//! The listing is worded as the local tool's; what it adds locally (the
//! tool a running child is in, tokens used) is not known here and not
//! shown.

use dsh_core::{SessionId, ToolCall, ToolOutput};
use dsh_tool_subagent_control::{LISTING_HEADING, ListAgentsInput};
use restate_sdk::prelude::*;

use super::Host;
use super::control::input;
use super::tree::Tree;
use crate::object::inbox::InboxClient;

impl Host<'_, '_> {
    /// Run one call of `list_agents`.
    pub(super) async fn list_agents(&mut self, call: &ToolCall) -> HandlerResult<ToolOutput> {
        let ListAgentsInput {} = match input(call) {
            Ok(input) => input,
            Err(output) => return Ok(output),
        };
        let tree = self.tree().await?;
        let mut running = Vec::with_capacity(tree.members.len() + 1);
        for id in std::iter::once(&tree.root).chain(tree.members.iter().map(|member| &member.id)) {
            running.push(self.is_running(id).await?);
        }
        Ok(ToolOutput::text(render(&tree, &running, &self.header.id)))
    }

    /// Whether `id` works right now: a turn scheduled or running, not
    /// parked.
    async fn is_running(&self, id: &SessionId) -> HandlerResult<bool> {
        let status = self
            .ctx
            .object_client::<InboxClient>(id.to_string())
            .status()
            .call()
            .await?
            .into_inner();
        Ok(status.turn_scheduled && !status.parked)
    }
}

/// The listing: the root's line, then each member's (`running` lists the
/// root first, then the members in order).
fn render(tree: &Tree, running: &[bool], caller: &SessionId) -> String {
    let you = |id: &SessionId| if id == caller { " (you)" } else { "" };
    let activity = |index: usize| {
        if running.get(index).copied().unwrap_or(false) {
            "running"
        } else {
            "inactive"
        }
    };
    let mut lines = vec![
        LISTING_HEADING.to_owned(),
        format!("- lead{}: {}", you(&tree.root), activity(0)),
    ];
    for (index, member) in tree.members.iter().enumerate() {
        lines.push(format!(
            "- {}{}: {} — {}",
            member.path,
            you(&member.id),
            activity(index + 1),
            member.label
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::tree::Member;
    use super::*;

    #[test]
    fn a_listing_reads_as_the_local_tools() {
        let id = |s: &str| SessionId::new(s).unwrap();
        let member = |child: &str, parent: &str, path: &str, label: &str| Member {
            id: id(child),
            parent: id(parent),
            path: path.to_owned(),
            label: label.to_owned(),
        };
        let tree = Tree {
            root: id("s-root"),
            members: vec![
                member("s-root.1", "s-root", "researcher", "search the documents"),
                member(
                    "s-root.1.1",
                    "s-root.1",
                    "researcher/helper",
                    "read one file",
                ),
                member("s-root.2", "s-root", "reviewer", "review the plan"),
            ],
        };
        insta::assert_snapshot!(render(&tree, &[true, false, true, false], &id("s-root.1")));
    }
}
