//! `grep`: a regular expression searched line by line through the text
//! files of a directory (the same `.gitignore`-aware walk as `list_files`),
//! optionally narrowed by file globs, with context lines, bounded to a
//! number of matches and a line length, with markers when cut. Binary files
//! and files too large to load are skipped and counted.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::WorkspaceError;
use crate::list::walk;
use crate::policy::Action;
use crate::read::MAX_FILE_BYTES;
use crate::{Workspace, blocking, path, text};

/// The most matching lines one `grep` call returns.
pub const MAX_GREP_MATCHES: usize = 200;

/// The most context lines asked for on each side of a match.
pub const MAX_CONTEXT: usize = 10;

/// Lines longer than this are cut in the output.
const MAX_LINE_CHARS: usize = 400;

/// The arguments of `grep`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrepInput {
    /// The regular expression (Rust `regex` syntax).
    pub pattern: String,
    /// The directory or file to search, relative to the caller's cwd.
    #[serde(default)]
    pub path: Option<String>,
    /// Glob patterns a file must match to be searched.
    #[serde(default)]
    pub globs: Option<Vec<String>>,
    /// Lines of context before and after each match.
    #[serde(default)]
    pub context: Option<usize>,
    /// Match case-insensitively.
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    /// The most matching lines to return.
    #[serde(default)]
    pub max_matches: Option<usize>,
}

/// The `grep` tool.
#[derive(Debug, Clone)]
pub struct GrepTool {
    workspace: Arc<Workspace>,
}

impl GrepTool {
    /// The tool over `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        Self { workspace }
    }
}

/// What a search found, rendered as it goes.
struct Search {
    out: String,
    matches: usize,
    files: usize,
    skipped: usize,
    max: usize,
    full: bool,
}

impl Search {
    fn line(&mut self, shown: &str, number: usize, sep: char, line: &str) {
        let cut = text::cut(line, MAX_LINE_CHARS);
        let more = if cut.len() < line.len() {
            " [line cut]"
        } else {
            ""
        };
        self.out
            .push_str(&format!("{shown}{sep}{number}{sep}{cut}{more}\n"));
    }

    /// Search one file's `content`; `false` once the match bound is hit.
    fn file(&mut self, shown: &str, content: &str, regex: &regex::Regex, context: usize) -> bool {
        let lines: Vec<&str> = content.lines().collect();
        let hits: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| regex.is_match(l))
            .map(|(i, _)| i)
            .collect();
        if hits.is_empty() {
            return true;
        }
        if self.files > 0 || self.matches > 0 {
            self.out.push_str("--\n");
        }
        self.files += 1;
        let mut printed_to = 0usize; // one past the last line printed
        for (k, &hit) in hits.iter().enumerate() {
            if self.matches == self.max {
                self.full = true;
                return false;
            }
            let from = hit.saturating_sub(context).max(printed_to);
            if k > 0 && from > printed_to {
                self.out.push_str("--\n");
            }
            for (i, line) in lines.iter().enumerate().take(hit).skip(from) {
                self.line(shown, i + 1, '-', line);
            }
            self.line(shown, hit + 1, ':', lines[hit]);
            self.matches += 1;
            let next = hits.get(k + 1).copied().unwrap_or(usize::MAX);
            let to = (hit + 1 + context).min(lines.len()).min(next);
            for (i, line) in lines.iter().enumerate().take(to).skip(hit + 1) {
                self.line(shown, i + 1, '-', line);
            }
            printed_to = to.max(hit + 1);
        }
        true
    }
}

#[async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> String {
        format!(
            "Search the text files of the workspace for a regular expression (Rust regex \
             syntax), line by line, respecting .gitignore. Results are `path:line:text`; \
             context lines are `path-line-text`, groups separated by `--`. Narrow with path \
             and globs (e.g. [\"*.rs\"]). At most {MAX_GREP_MATCHES} matching lines are \
             returned; a marker says when the search stopped early. Binary files are skipped."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The regular expression to search for."
                },
                "path": {
                    "type": "string",
                    "description": "The directory or file to search, relative to your working directory. Default: your working directory."
                },
                "globs": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "description": "Only search files matching one of these globs, e.g. [\"*.rs\", \"!*_test.rs\"]."
                },
                "context": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_CONTEXT,
                    "description": "Lines of context to show before and after each match (default 0)."
                },
                "case_insensitive": {
                    "type": "boolean",
                    "description": "Match regardless of case (default false)."
                },
                "max_matches": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_GREP_MATCHES,
                    "description": format!("The most matching lines to return (default and maximum {MAX_GREP_MATCHES}).")
                }
            },
            "required": ["pattern"],
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
        let GrepInput {
            pattern,
            path: dir,
            globs,
            context,
            case_insensitive,
            max_matches,
        } = crate::parse(self.name(), input)?;
        let context = context.unwrap_or(0);
        let max = max_matches.unwrap_or(MAX_GREP_MATCHES);
        if context > MAX_CONTEXT || max == 0 || max > MAX_GREP_MATCHES {
            return Err(WorkspaceError::BadArgument(format!(
                "context must be at most {MAX_CONTEXT} and max_matches between 1 and {MAX_GREP_MATCHES}."
            ))
            .into());
        }
        let regex = regex::RegexBuilder::new(&pattern)
            .case_insensitive(case_insensitive.unwrap_or(false))
            .build()
            .map_err(|err| WorkspaceError::BadPattern {
                pattern: pattern.clone(),
                reason: err.to_string(),
            })?;
        let dir = dir.unwrap_or_else(|| ".".to_owned());
        let cwd = ctx.agent.cwd();
        let resolved = self
            .workspace
            .admit(&ctx, self.name(), Action::Read, &dir)
            .await?;
        let root = self.workspace.root().to_path_buf();
        let cancel = ctx.cancel.clone();
        let text = blocking(move || {
            if !resolved.exists() {
                return Err(WorkspaceError::NotFound(dir));
            }
            let mut search = Search {
                out: String::new(),
                matches: 0,
                files: 0,
                skipped: 0,
                max,
                full: false,
            };
            walk(&root, &resolved, &globs.unwrap_or_default(), |file| {
                if cancel.is_cancelled() {
                    return false;
                }
                let small = std::fs::metadata(&file).is_ok_and(|m| m.len() <= MAX_FILE_BYTES);
                let content = small
                    .then(|| std::fs::read(&file).ok())
                    .flatten()
                    .and_then(text::as_text);
                let Some(content) = content else {
                    search.skipped += 1;
                    return true;
                };
                search.file(&path::display(&cwd, &file), &content, &regex, context)
            })?;
            if cancel.is_cancelled() {
                return Err(WorkspaceError::Cancelled);
            }
            let mut out = search.out;
            if search.matches == 0 {
                out.push_str(&format!("[no matches for `{pattern}` under `{dir}`]\n"));
            }
            if search.full {
                out.push_str(&format!(
                    "[stopped at {max} matches; narrow the pattern, path or globs to see the rest]\n"
                ));
            }
            if search.skipped > 0 {
                out.push_str(&format!(
                    "[{} binary or oversized files skipped]\n",
                    search.skipped
                ));
            }
            Ok(out)
        })
        .await?;
        Ok(ToolOutput::text(text))
    }
}
