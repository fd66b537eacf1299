#![doc = include_str!("../README.md")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_core::{Tool, ToolContext};
use serde::de::DeserializeOwned;
use serde_json::Value;

mod edit;
mod error;
mod grep;
mod list;
mod path;
mod policy;
mod read;
mod sandbox;
mod shell;
mod text;

pub use edit::{EditFileInput, EditFileTool, WriteFileInput, WriteFileTool};
pub use error::WorkspaceError;
pub use grep::{GrepInput, GrepTool, MAX_CONTEXT, MAX_GREP_MATCHES};
pub use list::{ListFilesInput, ListFilesTool, MAX_LIST_ENTRIES};
pub use path::confine;
pub use policy::{Action, Answer, Asker, Grant, Level, Policy, Request, SerialAsker, UnknownLevel};
pub use read::{MAX_READ_BYTES, ReadFileInput, ReadFileTool};
pub use sandbox::{LandlockStatus, landlock_status};
pub use shell::{
    DEFAULT_SHELL_TIMEOUT_MS, MAX_SHELL_OUTPUT_BYTES, MAX_SHELL_TIMEOUT_MS, ShellInput, ShellTool,
};

/// The root and policy every workspace tool of one host shares.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    policy: Policy,
}

impl Workspace {
    /// A workspace rooted at `root` (canonicalised) under `policy`.
    ///
    /// # Errors
    /// [`WorkspaceError::BadRoot`] when `root` is not an existing directory.
    pub fn new(root: impl AsRef<Path>, policy: Policy) -> Result<Self, WorkspaceError> {
        let root = root.as_ref();
        let bad = || WorkspaceError::BadRoot(root.display().to_string());
        let root = std::fs::canonicalize(root).map_err(|_| bad())?;
        if !root.is_dir() {
            return Err(bad());
        }
        Ok(Self { root, policy })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Resolve `input` against `cwd`, confined to the root.
    pub(crate) fn resolve(&self, cwd: &Path, input: &str) -> Result<PathBuf, WorkspaceError> {
        confine(&self.root, cwd, input)
    }

    /// What every path tool does before it touches the disk: resolve
    /// `path` against the calling agent's cwd, confined to the root, then
    /// check `action` on it against the policy (asking when a level is
    /// missing). Returns the resolved path.
    ///
    /// # Cancel safety
    /// As [`Policy::check`]: dropped while asking, nothing has been done.
    pub(crate) async fn admit(
        &self,
        ctx: &ToolContext,
        tool: &str,
        action: Action,
        path: &str,
    ) -> Result<PathBuf, WorkspaceError> {
        let resolved = self.resolve(&ctx.agent.cwd(), path)?;
        self.policy
            .check(ctx.agent.id(), tool, action, path, &ctx.cancel)
            .await?;
        Ok(resolved)
    }
}

/// Builds the six workspace tools.
#[derive(Debug, Clone, Copy)]
pub struct WorkspaceTools;

impl WorkspaceTools {
    /// The six tools (`read_file`, `list_files`, `grep`, `edit_file`,
    /// `write_file`, `shell`) over `root` under `policy`.
    ///
    /// # Errors
    /// [`WorkspaceError::BadRoot`] when `root` is not an existing directory.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(
        root: impl AsRef<Path>,
        policy: Policy,
    ) -> Result<Vec<Arc<dyn Tool>>, WorkspaceError> {
        Ok(Self::with_workspace(Arc::new(Workspace::new(
            root, policy,
        )?)))
    }

    /// The six tools over an existing [`Workspace`].
    pub fn with_workspace(workspace: Arc<Workspace>) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(ReadFileTool::new(workspace.clone())),
            Arc::new(ListFilesTool::new(workspace.clone())),
            Arc::new(GrepTool::new(workspace.clone())),
            Arc::new(EditFileTool::new(workspace.clone())),
            Arc::new(WriteFileTool::new(workspace.clone())),
            Arc::new(ShellTool::new(workspace)),
        ]
    }
}

/// Parse validated tool input into its struct. The harness validated it
/// against the published schema already, so a failure here means the
/// schema and the struct disagree, or the tool was called directly.
pub(crate) fn parse<T: DeserializeOwned>(
    tool: &str,
    input: Value,
) -> Result<T, dsh_core::ToolError> {
    serde_json::from_value(input).map_err(|err| {
        dsh_core::ToolError::new(format!(
            "Invalid arguments for `{tool}`: {err}. Fix the arguments and call the tool again."
        ))
    })
}

/// Run blocking filesystem work off the async threads.
///
/// # Cancel safety
/// Dropping the future leaves the blocking work to finish on its own; its
/// result is discarded.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, WorkspaceError> + Send + 'static,
) -> Result<T, WorkspaceError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| WorkspaceError::Io {
            subject: "the tool".to_owned(),
            reason: format!("its worker failed: {err}"),
        })?
}
