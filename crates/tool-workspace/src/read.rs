//! `read_file`: a text file's lines, numbered, from an optional start line
//! for an optional count, bounded to [`MAX_READ_BYTES`] of output with a
//! marker saying where to continue. Binary files are refused.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::WorkspaceError;
use crate::policy::Action;
use crate::{Workspace, blocking, text};

/// The most output one `read_file` call returns, in bytes of file text.
pub const MAX_READ_BYTES: usize = 64 * 1024;

/// The largest file `read_file` (and `edit_file`, `grep`) loads.
pub(crate) const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The arguments of `read_file`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFileInput {
    /// The file, relative to the caller's cwd.
    pub path: String,
    /// The first line to show, from 1.
    #[serde(default)]
    pub start_line: Option<usize>,
    /// How many lines to show.
    #[serde(default)]
    pub line_count: Option<usize>,
}

/// The `read_file` tool.
#[derive(Debug, Clone)]
pub struct ReadFileTool {
    workspace: Arc<Workspace>,
}

impl ReadFileTool {
    /// The tool over `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        Self { workspace }
    }
}

/// Load `path` (shown as `shown`) as text, refusing directories, huge and
/// binary files.
pub(crate) fn load_text(path: &std::path::Path, shown: &str) -> Result<String, WorkspaceError> {
    let meta = std::fs::metadata(path).map_err(|e| WorkspaceError::io(shown, &e))?;
    if meta.is_dir() {
        return Err(WorkspaceError::IsDirectory(shown.to_owned()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(WorkspaceError::BadArgument(format!(
            "`{shown}` is {} bytes, more than the {MAX_FILE_BYTES} bytes these tools load. Use grep to find the part you need.",
            meta.len()
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| WorkspaceError::io(shown, &e))?;
    text::as_text(bytes).ok_or_else(|| WorkspaceError::Binary(shown.to_owned()))
}

/// Render lines `start..` of `content` (at most `count`), numbered, within
/// [`MAX_READ_BYTES`].
pub(crate) fn render(
    shown: &str,
    content: &str,
    start: usize,
    count: Option<usize>,
) -> Result<String, WorkspaceError> {
    let lines: Vec<&str> = content.lines().collect();
    let total = lines.len();
    if total == 0 {
        return Ok(format!("[`{shown}` is empty]"));
    }
    if start > total {
        return Err(WorkspaceError::PastEnd {
            path: shown.to_owned(),
            lines: total,
            start,
        });
    }
    let end = count.map_or(total, |c| (start - 1 + c).min(total));
    let mut out = String::new();
    let mut used = 0usize;
    let mut last = start - 1;
    for (index, line) in lines[start - 1..end].iter().enumerate() {
        let number = start + index;
        if used + line.len() > MAX_READ_BYTES {
            if number == start {
                // A single line longer than the bound: show its head.
                out.push_str(&format!(
                    "{number:>6}\t{}\n",
                    text::cut(line, MAX_READ_BYTES)
                ));
                out.push_str(&format!(
                    "[truncated: line {number} is {} bytes; only its first {MAX_READ_BYTES} bytes are shown]\n",
                    line.len()
                ));
                if number < total {
                    out.push_str(&format!(
                        "[{} more lines: call read_file with start_line={}]\n",
                        total - number,
                        number + 1
                    ));
                }
                return Ok(out);
            }
            break;
        }
        used += line.len();
        out.push_str(&format!("{number:>6}\t{line}\n"));
        last = number;
    }
    if last < end {
        out.push_str(&format!(
            "[truncated at {MAX_READ_BYTES} bytes: showed lines {start}-{last} of {total}; call read_file with start_line={} to continue]\n",
            last + 1
        ));
    } else if end < total {
        out.push_str(&format!(
            "[lines {start}-{end} of {total}; call read_file with start_line={} for more]\n",
            end + 1
        ));
    }
    Ok(out)
}

#[async_trait]
impl Tool for ReadFileTool {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> String {
        format!(
            "Read a text file in the workspace. Lines are numbered from 1 (the number, a tab, then \
             the line). Give start_line and line_count to read part of a long file. At most \
             {MAX_READ_BYTES} bytes are returned per call; a marker says where to continue. \
             Binary files are refused. Paths are relative to your working directory and must \
             stay inside the workspace."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The file to read, relative to your working directory."
                },
                "start_line": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The first line to show (from 1). Default 1."
                },
                "line_count": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "How many lines to show. Default: to the end (within the byte bound)."
                }
            },
            "required": ["path"],
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
        let ReadFileInput {
            path,
            start_line,
            line_count,
        } = crate::parse(self.name(), input)?;
        let start = start_line.unwrap_or(1);
        if start == 0 || line_count == Some(0) {
            return Err(WorkspaceError::BadArgument(
                "start_line and line_count must be at least 1.".to_owned(),
            )
            .into());
        }
        let resolved = self
            .workspace
            .admit(&ctx, self.name(), Action::Read, &path)
            .await?;
        let text = blocking(move || {
            let content = load_text(&resolved, &path)?;
            render(&path, &content, start, line_count)
        })
        .await?;
        Ok(ToolOutput::text(text))
    }
}
