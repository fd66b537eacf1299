//! Optional per-teammate isolation: a git worktree on a branch of its own
//! under the lead's repository, created before the teammate starts (its
//! working directory) and removed by the team. Git runs as a real process
//! on the blocking pool; without git, or outside a repository, the request
//! is refused before anything is written.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::error::TeamError;
use crate::record::TeamId;

/// Where a teammate's worktree lives and which branch it is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeRecord {
    /// The worktree's directory (the teammate's working directory).
    pub path: PathBuf,
    /// Its branch, `team/<team>/<name>`.
    pub branch: String,
    /// The repository it belongs to (the lead's).
    pub repository: PathBuf,
}

/// What removing a worktree did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorktreeRemoval {
    /// Whether the branch was deleted too; an unmerged branch is kept.
    pub branch_deleted: bool,
}

/// Run git in `dir`; its trimmed standard output, or why it failed.
fn git(dir: &Path, args: &[&str]) -> Result<String, GitFailure> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(|err| GitFailure::Missing(err.to_string()))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(GitFailure::Refused(
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ))
    }
}

enum GitFailure {
    Missing(String),
    Refused(String),
}

fn refused(what: &str, failure: GitFailure) -> TeamError {
    match failure {
        GitFailure::Missing(err) => TeamError::NoGit(format!("git cannot be run: {err}")),
        GitFailure::Refused(err) => TeamError::Worktree(format!("{what}: {err}")),
    }
}

/// A branch name component from a session id (git refuses `..` and more).
fn ref_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Decide where `name`'s worktree goes, for a lead working in `cwd`.
fn plan(cwd: &Path, team: &TeamId, name: &str) -> Result<WorktreeRecord, TeamError> {
    let top = git(cwd, &["rev-parse", "--show-toplevel"]).map_err(|failure| match failure {
        GitFailure::Missing(err) => TeamError::NoGit(format!("git cannot be run: {err}")),
        GitFailure::Refused(_) => TeamError::NoGit(format!(
            "`{}` is not inside a git repository",
            cwd.display()
        )),
    })?;
    let common = git(
        cwd,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )
    .map_err(|failure| refused("the repository cannot be read", failure))?;
    git(cwd, &["rev-parse", "--verify", "HEAD"])
        .map_err(|_| TeamError::NoGit("the repository has no commit to branch from".into()))?;
    let team = ref_safe(&team.to_string());
    Ok(WorktreeRecord {
        path: Path::new(&common).join("dsh-team").join(&team).join(name),
        branch: format!("team/{team}/{name}"),
        repository: PathBuf::from(top),
    })
}

fn create(record: &WorktreeRecord) -> Result<(), TeamError> {
    let path = record.path.to_string_lossy();
    git(
        &record.repository,
        &["worktree", "add", "-b", &record.branch, &path, "HEAD"],
    )
    .map(drop)
    .map_err(|failure| refused("the worktree cannot be created", failure))
}

fn remove(record: &WorktreeRecord) -> Result<WorktreeRemoval, TeamError> {
    let path = record.path.to_string_lossy();
    if record.path.exists() {
        git(
            &record.repository,
            &["worktree", "remove", "--force", &path],
        )
        .map_err(|failure| refused("the worktree cannot be removed", failure))?;
    }
    let branch_deleted = git(&record.repository, &["branch", "-d", &record.branch]).is_ok();
    Ok(WorktreeRemoval { branch_deleted })
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, TeamError> + Send + 'static,
) -> Result<T, TeamError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| TeamError::Interrupted(err.to_string()))?
}

/// Plan a worktree (no change to the repository).
pub(crate) async fn plan_for(
    cwd: PathBuf,
    team: TeamId,
    name: String,
) -> Result<WorktreeRecord, TeamError> {
    blocking(move || plan(&cwd, &team, &name)).await
}

/// Create a planned worktree and its branch.
pub(crate) async fn create_planned(record: WorktreeRecord) -> Result<(), TeamError> {
    blocking(move || create(&record)).await
}

/// Remove a worktree, and its branch when it is merged.
pub(crate) async fn remove_planned(record: WorktreeRecord) -> Result<WorktreeRemoval, TeamError> {
    blocking(move || remove(&record)).await
}
