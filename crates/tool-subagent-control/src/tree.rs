//! The caller's tree as the control tools see it: one listing of the root's
//! descendants, used to name agents for the model and to tell refusals
//! apart. Read-only; it never loads, resumes or messages an agent.

use dsh_subagent::DeliveryError;
use std::sync::Arc;

use dsh_core::{Agent, CancellationToken, SessionId};
use dsh_subagent::{ChildMode, DescendantRow, ROOT_NAME, SubagentError, SubagentRuntime};

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
        let root = match runtime.root_of(caller) {
            Ok(root) => root,
            // A live session outside every tree sees only its own, empty one.
            Err(SubagentError::Delivery(DeliveryError::NotAMember(id))) => id,
            Err(err) => return Err(ControlError::Failed(err.to_string())),
        };
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

    /// Why a target the runtime refused as `NOT_IN_TREE` for a message was
    /// refused, judged from the listing: a listed member is classified by
    /// its mode, anything else is an unknown name.
    pub(crate) fn message_refusal(
        &self,
        name: &str,
        target: &SessionId,
        err: SubagentError,
    ) -> ControlError {
        if target == &self.root {
            return ControlError::Failed(err.to_string());
        }
        match self.row(target) {
            None => ControlError::UnknownName(name.to_owned()),
            Some(row) if row.entry.mode == ChildMode::EXTERNAL => {
                ControlError::External(name.to_owned())
            }
            Some(row) if row.entry.mode != ChildMode::CONTINUABLE => {
                ControlError::NotMessageable(name.to_owned())
            }
            Some(_) => ControlError::Failed(err.to_string()),
        }
    }
}
