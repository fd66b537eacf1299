//! The caller's tree as a turn on the cluster reads it, for the control
//! tools: each member's header and log through `dsh.Session`'s shared
//! handlers (`header`, `events_since`: calls between objects, journaled,
//! never blocked behind the member's running turn), its catalog folded as
//! a local parent's is (`dsh_subagent::fold_catalog`), and each member's
//! name as the local runtime gives it: `lead` for the root, the slash
//! path of names below it.

use dsh_core::{SessionEvent, SessionHeader, SessionId};
use dsh_subagent::{ChildMode, ROOT_NAME, fold_catalog};
use restate_sdk::prelude::*;

use super::{Host, terminal};
use crate::object::session::SessionClient;

/// One member below the root.
#[derive(Debug, Clone)]
pub(super) struct Member {
    /// Its session id.
    pub(super) id: SessionId,
    /// Its creator.
    pub(super) parent: SessionId,
    /// Its slash path of names from the root (`worker/helper`).
    pub(super) path: String,
    /// Its task label.
    pub(super) label: String,
}

/// The tree the caller belongs to: its root and every continuable member
/// below it, depth first in creation order.
#[derive(Debug, Clone)]
pub(super) struct Tree {
    pub(super) root: SessionId,
    pub(super) members: Vec<Member>,
}

impl Tree {
    /// The name of `id` for the model: `lead`, a path, else the id.
    pub(super) fn name_of(&self, id: &SessionId) -> String {
        if id == &self.root {
            return ROOT_NAME.to_owned();
        }
        self.members
            .iter()
            .find(|member| &member.id == id)
            .map_or_else(|| id.to_string(), |member| member.path.clone())
    }

    /// The member `name` names: `lead`, a path or a session id.
    pub(super) fn resolve(&self, name: &str) -> Option<SessionId> {
        if name == ROOT_NAME || name == self.root.as_str() {
            return Some(self.root.clone());
        }
        self.members
            .iter()
            .find(|member| member.path == name || member.id.as_str() == name)
            .map(|member| member.id.clone())
    }

    /// Whether `ancestor` created `id`, directly or through its members.
    pub(super) fn is_ancestor(&self, ancestor: &SessionId, id: &SessionId) -> bool {
        let mut at = id.clone();
        while let Some(member) = self.members.iter().find(|member| member.id == at) {
            if &member.parent == ancestor {
                return true;
            }
            at = member.parent.clone();
        }
        false
    }
}

impl Host<'_, '_> {
    /// The header of session `id`, or `None` when it does not exist.
    async fn header_of(&self, id: &SessionId) -> HandlerResult<Option<SessionHeader>> {
        if id == &self.header.id {
            return Ok(Some(self.header.clone()));
        }
        let line = self
            .ctx
            .object_client::<SessionClient>(id.to_string())
            .header()
            .call()
            .await?;
        line.map(|line| {
            serde_json::from_str(&line)
                .map_err(|bad| terminal("SESSION_CORRUPT", format!("{id}: header: {bad}")).into())
        })
        .transpose()
    }

    /// The events of session `id` (this turn's own from memory).
    async fn events_of(&self, id: &SessionId) -> HandlerResult<Vec<SessionEvent>> {
        if id == &self.header.id {
            return Ok(self.events.clone());
        }
        let mut events = Vec::new();
        let mut from = 0;
        loop {
            let page = self
                .ctx
                .object_client::<SessionClient>(id.to_string())
                .events_since(from)
                .call()
                .await?
                .into_inner();
            for line in page.lines.lines() {
                let event = serde_json::from_str(line)
                    .map_err(|bad| terminal("SESSION_CORRUPT", format!("{id}: {bad}")))?;
                events.push(event);
            }
            if page.complete || page.next_seq == from {
                return Ok(events);
            }
            from = page.next_seq;
        }
    }

    /// The caller's tree, read from the root down.
    pub(super) async fn tree(&self) -> HandlerResult<Tree> {
        let mut root = self.header.clone();
        while let Some(parent) = root.parent_session.clone() {
            match self.header_of(&parent).await? {
                Some(header) => root = header,
                None => break,
            }
        }
        let mut members = Vec::new();
        // Depth first: each parent's children in creation order, each
        // followed by its own.
        let mut stack = vec![(root.clone(), String::new())];
        while let Some((parent, path)) = stack.pop() {
            let events = self.events_of(&parent.id).await?;
            let catalog = fold_catalog(&parent, &events)
                .map_err(|bad| terminal("SESSION_CORRUPT", format!("{}: {bad}", parent.id)))?;
            let mut below = Vec::new();
            for entry in catalog.into_entries() {
                if entry.mode != ChildMode::CONTINUABLE {
                    continue;
                }
                let name = entry.name.unwrap_or_else(|| entry.child_id.to_string());
                let path = if path.is_empty() {
                    name
                } else {
                    format!("{path}/{name}")
                };
                members.push(Member {
                    id: entry.child_id.clone(),
                    parent: parent.id.clone(),
                    path: path.clone(),
                    label: entry.label,
                });
                if let Some(header) = self.header_of(&entry.child_id).await? {
                    below.push((header, path));
                }
            }
            stack.extend(below.into_iter().rev());
        }
        Ok(Tree {
            root: root.id,
            members: ordered(members),
        })
    }
}

/// Members depth first: each followed by the members below it.
fn ordered(members: Vec<Member>) -> Vec<Member> {
    fn visit(parent: &SessionId, members: &[Member], out: &mut Vec<Member>) {
        for member in members.iter().filter(|member| &member.parent == parent) {
            out.push(member.clone());
            visit(&member.id, members, out);
        }
    }
    let Some(root) = members.first().map(|member| member.parent.clone()) else {
        return members;
    };
    let mut out = Vec::with_capacity(members.len());
    visit(&root, &members, &mut out);
    out
}
