//! `list_files`: the files under a directory, `.gitignore` (and `.ignore`,
//! hidden files) respected through the `ignore` crate ripgrep is built on,
//! optionally filtered by glob patterns, sorted, bounded to a count with a
//! marker. The same walk serves `grep`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::WorkspaceError;
use crate::policy::Action;
use crate::{Workspace, blocking, path};

/// The most entries one `list_files` call returns.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// The arguments of `list_files`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListFilesInput {
    /// The directory, relative to the caller's cwd (default `.`).
    #[serde(default)]
    pub path: Option<String>,
    /// Glob patterns a file must match (gitignore syntax: `*.rs`,
    /// `src/**/*.toml`); none lists every file.
    #[serde(default)]
    pub patterns: Option<Vec<String>>,
    /// The most entries to return.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// The `list_files` tool.
#[derive(Debug, Clone)]
pub struct ListFilesTool {
    workspace: Arc<Workspace>,
}

impl ListFilesTool {
    /// The tool over `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        Self { workspace }
    }
}

/// The regular files under `start` (a directory or a file) that the ignore
/// rules keep and `patterns` match, sorted by path. Links are followed only
/// when their target is inside `root`. Calls `each` per file until it
/// returns `false`.
pub(crate) fn walk(
    root: &Path,
    start: &Path,
    patterns: &[String],
    mut each: impl FnMut(PathBuf) -> bool,
) -> Result<(), WorkspaceError> {
    let mut builder = ignore::WalkBuilder::new(start);
    builder
        .standard_filters(true)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b));
    if !patterns.is_empty() {
        let base = if start.is_dir() {
            start
        } else {
            start.parent().unwrap_or(start)
        };
        let mut overrides = ignore::overrides::OverrideBuilder::new(base);
        for pattern in patterns {
            overrides
                .add(pattern)
                .map_err(|err| WorkspaceError::BadPattern {
                    pattern: pattern.clone(),
                    reason: err.to_string(),
                })?;
        }
        let overrides = overrides
            .build()
            .map_err(|err| WorkspaceError::BadPattern {
                pattern: patterns.join(" "),
                reason: err.to_string(),
            })?;
        builder.overrides(overrides);
    }
    for entry in builder.build() {
        // An unreadable entry (permissions, a vanished file) is skipped:
        // the walk reports what it can see.
        let Ok(entry) = entry else { continue };
        let Some(kind) = entry.file_type() else {
            continue;
        };
        let path = if kind.is_file() {
            entry.into_path()
        } else if kind.is_symlink() {
            match std::fs::canonicalize(entry.path()) {
                Ok(target) if target.starts_with(root) && target.is_file() => entry.into_path(),
                _ => continue,
            }
        } else {
            continue;
        };
        if !each(path) {
            break;
        }
    }
    Ok(())
}

#[async_trait]
impl Tool for ListFilesTool {
    fn name(&self) -> &str {
        "list_files"
    }

    fn description(&self) -> String {
        format!(
            "List the files under a directory of the workspace, recursively, sorted by path. \
             Files ignored by .gitignore or .ignore, and hidden files, are left out. Give \
             patterns (gitignore-style globs such as `*.rs` or `src/**/*.toml`) to keep only \
             matching files. At most {MAX_LIST_ENTRIES} entries are returned; a marker says \
             when there are more."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The directory to list, relative to your working directory. Default: your working directory."
                },
                "patterns": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "description": "Glob patterns a file must match (any of them), e.g. [\"*.rs\", \"docs/**/*.md\"]."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIST_ENTRIES,
                    "description": format!("The most entries to return (default and maximum {MAX_LIST_ENTRIES}).")
                }
            },
            "additionalProperties": false
        })
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn idempotent(&self) -> bool {
        true
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let ListFilesInput {
            path: dir,
            patterns,
            limit,
        } = crate::parse(self.name(), input)?;
        let limit = limit.unwrap_or(MAX_LIST_ENTRIES);
        if limit == 0 || limit > MAX_LIST_ENTRIES {
            return Err(WorkspaceError::BadArgument(format!(
                "limit must be between 1 and {MAX_LIST_ENTRIES}."
            ))
            .into());
        }
        let dir = dir.unwrap_or_else(|| ".".to_owned());
        let cwd = ctx.agent.cwd();
        let resolved = self
            .workspace
            .admit(&ctx, self.name(), Action::Read, &dir)
            .await?;
        let root = self.workspace.root().to_path_buf();
        let text = blocking(move || {
            let meta = std::fs::metadata(&resolved).map_err(|e| WorkspaceError::io(&dir, &e))?;
            if !meta.is_dir() {
                return Err(WorkspaceError::NotDirectory(dir));
            }
            let mut shown = Vec::new();
            let mut more = false;
            walk(&root, &resolved, &patterns.unwrap_or_default(), |file| {
                if shown.len() == limit {
                    more = true;
                    return false;
                }
                shown.push(path::display(&cwd, &file));
                true
            })?;
            let mut out = String::new();
            if shown.is_empty() {
                out.push_str(&format!("[no files under `{dir}` match]\n"));
            }
            for line in &shown {
                out.push_str(line);
                out.push('\n');
            }
            if more {
                out.push_str(&format!(
                    "[truncated at {limit} entries; narrow the path or patterns to see the rest]\n"
                ));
            }
            Ok(out)
        })
        .await?;
        Ok(ToolOutput::text(text))
    }
}
