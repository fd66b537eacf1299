//! The caller's tree as the control tools see it: its root, a member's
//! catalog entry found along its own lineage (what a refusal needs, read
//! without listing the tree), and, for `list_agents` and the one refusal
//! the lineage cannot answer (a target with no session of its own), one
//! listing of the root's descendants. Read-only; it never loads, resumes or
//! messages an agent.

use dsh_subagent::DeliveryError;
use std::sync::Arc;

use dsh_core::{Agent, AgentError, CancellationToken, SessionId, StoreError};
use dsh_subagent::{
    CatalogEntry, ChildMode, DescendantRow, ROOT_NAME, SubagentError, SubagentRuntime,
};

use crate::error::ControlError;

/// One listing of a tree.
pub(crate) struct TreeView {
    /// The root session.
    pub(crate) root: SessionId,
    /// Every descendant, in the runtime's stable pre-order.
    pub(crate) rows: Vec<DescendantRow>,
}

impl TreeView {
    /// List the tree `caller` belongs to.
    pub(crate) async fn of(
        runtime: &SubagentRuntime,
        caller: &Arc<dyn Agent>,
        cancel: &CancellationToken,
    ) -> Result<Self, ControlError> {
        let root = root_of(runtime, caller)?;
        let rows = runtime
            .list_descendants(&root, cancel)
            .await
            .map_err(|err| match err {
                SubagentError::Cancelled => ControlError::Cancelled,
                other => ControlError::Failed(other.to_string()),
            })?;
        Ok(Self { root, rows })
    }

    /// The row of a descendant.
    pub(crate) fn row(&self, id: &SessionId) -> Option<&DescendantRow> {
        self.rows.iter().find(|row| &row.entry.child_id == id)
    }

    /// The model-facing name of a member: `lead` for the root, the slash
    /// path when every level is named, else the session id.
    pub(crate) fn name_of(&self, id: &SessionId) -> String {
        if id == &self.root {
            return ROOT_NAME.to_owned();
        }
        self.row(id)
            .and_then(|row| row.path.clone())
            .unwrap_or_else(|| id.to_string())
    }
}

/// The root of the tree `caller` belongs to, from the runtime's live
/// state: no read.
pub(crate) fn root_of(
    runtime: &SubagentRuntime,
    caller: &Arc<dyn Agent>,
) -> Result<SessionId, ControlError> {
    match runtime.root_of(caller) {
        Ok(root) => Ok(root),
        // A live session outside every tree sees only its own, empty one.
        Err(SubagentError::Delivery(DeliveryError::NotAMember(id))) => Ok(id),
        Err(err) => Err(ControlError::Failed(err.to_string())),
    }
}

/// A refusal of a message to `name`, judged by the catalog entry of the
/// target (`None`: not a member).
fn refusal_for(name: &str, entry: Option<&CatalogEntry>, err: SubagentError) -> ControlError {
    match entry {
        None => ControlError::UnknownName(name.to_owned()),
        Some(entry) if entry.mode == ChildMode::EXTERNAL => ControlError::External(name.to_owned()),
        Some(entry) if entry.mode != ChildMode::CONTINUABLE => {
            ControlError::NotMessageable(name.to_owned())
        }
        Some(_) => ControlError::Failed(err.to_string()),
    }
}

/// Whether `err` says a session does not exist.
fn is_missing(err: &SubagentError) -> bool {
    matches!(
        err,
        SubagentError::Agent(AgentError::Store(StoreError::NotFound(_)))
    )
}

/// Where `target` sits in `caller`'s tree: `Ok(true)` for the root,
/// `Ok(Some(entry))` through the entry. Read along the target's lineage
/// ([`SubagentRuntime::member_entry`]); only a target with no session of
/// its own falls back to listing the tree, where its creator's catalog is.
async fn membership(
    runtime: &SubagentRuntime,
    caller: &Arc<dyn Agent>,
    target: &SessionId,
    cancel: &CancellationToken,
) -> Result<(bool, Option<CatalogEntry>), ControlError> {
    let root = root_of(runtime, caller)?;
    if target == &root {
        return Ok((true, None));
    }
    match runtime.member_entry(&root, target).await {
        Ok(entry) => Ok((false, entry)),
        Err(err) if is_missing(&err) => {
            let view = TreeView::of(runtime, caller, cancel).await?;
            Ok((false, view.row(target).map(|row| row.entry.clone())))
        }
        Err(err) => Err(ControlError::Failed(err.to_string())),
    }
}

/// Why a target the runtime refused as `NOT_IN_TREE` for a message was
/// refused: a member is classified by its mode, anything else is an
/// unknown name.
pub(crate) async fn message_refusal(
    runtime: &SubagentRuntime,
    caller: &Arc<dyn Agent>,
    name: &str,
    target: &SessionId,
    err: SubagentError,
    cancel: &CancellationToken,
) -> ControlError {
    match membership(runtime, caller, target, cancel).await {
        Ok((true, _)) => ControlError::Failed(err.to_string()),
        Ok((false, entry)) => refusal_for(name, entry.as_ref(), err),
        Err(failed) => failed,
    }
}

/// Whether `target` is `caller`'s root or a cataloged member of its tree.
pub(crate) async fn is_member(
    runtime: &SubagentRuntime,
    caller: &Arc<dyn Agent>,
    target: &SessionId,
    cancel: &CancellationToken,
) -> Result<bool, ControlError> {
    let (is_root, entry) = membership(runtime, caller, target, cancel).await?;
    Ok(is_root || entry.is_some())
}
