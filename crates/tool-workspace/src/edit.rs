//! `edit_file` (replace one exact, unique piece of text; the result is a
//! unified diff) and `write_file` (create or replace a whole file, making
//! missing parent directories inside the root). Both are writes for the
//! policy: below `workspace-write` they ask, or are refused.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::WorkspaceError;
use crate::policy::Action;
use crate::read::load_text;
use crate::{Workspace, blocking};

/// The arguments of `edit_file`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditFileInput {
    /// The file, relative to the caller's cwd.
    pub path: String,
    /// The exact text to replace; it must occur exactly once.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
}

/// The `edit_file` tool.
#[derive(Debug, Clone)]
pub struct EditFileTool {
    workspace: Arc<Workspace>,
}

impl EditFileTool {
    /// The tool over `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        Self { workspace }
    }
}

/// Replace the single occurrence of `old` in `content` by `new`.
pub(crate) fn replace_unique(
    shown: &str,
    content: &str,
    old: &str,
    new: &str,
) -> Result<String, WorkspaceError> {
    if old.is_empty() {
        return Err(WorkspaceError::EditInvalid(
            "old_string is empty. Give the exact text to replace (use write_file to create a file)."
                .to_owned(),
        ));
    }
    if old == new {
        return Err(WorkspaceError::EditInvalid(
            "old_string and new_string are the same, so there is nothing to change.".to_owned(),
        ));
    }
    // Overlapping occurrences count too: `aa` in `aaa` is ambiguous.
    let count = content
        .char_indices()
        .filter(|(i, _)| content[*i..].starts_with(old))
        .count();
    match count {
        0 => Err(WorkspaceError::EditAbsent(shown.to_owned())),
        1 => Ok(content.replacen(old, new, 1)),
        count => Err(WorkspaceError::EditAmbiguous {
            path: shown.to_owned(),
            count,
        }),
    }
}

/// The unified diff from `before` to `after` of `shown`.
pub(crate) fn diff(shown: &str, before: &str, after: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{shown}"), &format!("b/{shown}"))
        .to_string()
}

#[async_trait]
impl Tool for EditFileTool {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> String {
        "Edit a text file by replacing one exact piece of text. old_string must occur exactly \
         once in the file (copy it from read_file output without the line numbers, including \
         whitespace; add surrounding lines to make it unique). Nothing is changed when it is \
         absent or occurs more than once. The result is a unified diff of the change."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The file to edit, relative to your working directory."
                },
                "old_string": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The exact text to replace; it must occur exactly once."
                },
                "new_string": {
                    "type": "string",
                    "description": "The text to put in its place (may be empty to delete)."
                }
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }

    /// # Cancel safety
    /// Dropped before the policy check finishes, nothing is written; once
    /// the blocking read-replace-write has started it runs to completion
    /// on its own (the file is edited, the diff discarded).
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let EditFileInput {
            path,
            old_string,
            new_string,
        } = crate::parse(self.name(), input)?;
        let resolved = self
            .workspace
            .admit(&ctx, self.name(), Action::Write, &path)
            .await?;
        let text = blocking(move || {
            let before = load_text(&resolved, &path)?;
            let after = replace_unique(&path, &before, &old_string, &new_string)?;
            std::fs::write(&resolved, &after).map_err(|e| WorkspaceError::io(&path, &e))?;
            Ok(diff(&path, &before, &after))
        })
        .await?;
        Ok(ToolOutput::text(text))
    }
}

/// The arguments of `write_file`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteFileInput {
    /// The file, relative to the caller's cwd.
    pub path: String,
    /// The whole new content.
    pub content: String,
}

/// The `write_file` tool.
#[derive(Debug, Clone)]
pub struct WriteFileTool {
    workspace: Arc<Workspace>,
}

impl WriteFileTool {
    /// The tool over `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        Self { workspace }
    }
}

#[async_trait]
impl Tool for WriteFileTool {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> String {
        "Create a file, or replace a file's whole content, in the workspace. Missing parent \
         directories are created. Prefer edit_file to change part of an existing file."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The file to write, relative to your working directory."
                },
                "content": {
                    "type": "string",
                    "description": "The complete content of the file."
                }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    /// # Cancel safety
    /// Dropped before the policy check finishes, nothing is written; once
    /// the blocking write has started it runs to completion on its own.
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let WriteFileInput { path, content } = crate::parse(self.name(), input)?;
        let resolved = self
            .workspace
            .admit(&ctx, self.name(), Action::Write, &path)
            .await?;
        let text = blocking(move || {
            let existed = match std::fs::metadata(&resolved) {
                Ok(meta) if meta.is_dir() => return Err(WorkspaceError::IsDirectory(path)),
                Ok(_) => true,
                Err(_) => false,
            };
            if let Some(parent) = resolved.parent() {
                std::fs::create_dir_all(parent).map_err(|e| WorkspaceError::io(&path, &e))?;
            }
            std::fs::write(&resolved, &content).map_err(|e| WorkspaceError::io(&path, &e))?;
            let verb = if existed { "Replaced" } else { "Created" };
            Ok(format!(
                "{verb} `{path}` ({} bytes, {} lines).",
                content.len(),
                content.lines().count()
            ))
        })
        .await?;
        Ok(ToolOutput::text(text))
    }
}
