//! Agent roles a user defines: `[agents.NAME]` tables of `dsh.toml`, the
//! files `~/.config/dsh/agents/NAME.md` (under `$XDG_CONFIG_HOME` when it
//! is set) and `.dsh/agents/NAME.md` in the working directory, each later
//! source replacing a role of the same name from an earlier one (the
//! project's file wins over the user's, and both over the table). A file
//! is a YAML front matter between two `---` lines, then the role's
//! instructions. The keys are `description` (required), `tools`, `model`,
//! `provider`, `sandbox`, `max_depth`, `token_budget` and `time_limit`
//! (seconds), and in a table also `instructions`.
//!
//! This module reads and checks; a bad role is refused before anything
//! runs with one line naming the file, the key and what was expected
//! (exit 2). It resolves each role into the tool's
//! [`SubagentRole`]: the runtime's persona, tool filter, model route,
//! budget and depth cap, nothing more.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_core::{AgentOptions, ToolRestriction};
use dsh_tool_subagent::{SubagentRole, SubagentRoles};
use dsh_tool_workspace::Level;
use serde::Deserialize;

use crate::error::CliError;
use crate::model::ModelChoice;

/// A role's directory under the working directory or the user's
/// configuration directory.
const AGENTS_DIR: &str = "agents";

/// The workspace tools that write: what a `read-only` role loses.
const WRITING_TOOLS: &[&str] = &["edit_file", "write_file", "shell"];

/// One role as written (a front matter, or a `[agents.NAME]` table).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    /// What the role is for, listed to the model.
    pub description: String,
    /// The only tools the role's agents may use (narrowing the caller's).
    pub tools: Option<Vec<String>>,
    /// `<provider>:<model>` or a model id of the run's provider.
    pub model: Option<String>,
    /// The model provider, which must be the run's.
    pub provider: Option<String>,
    /// `read-only` takes the writing workspace tools away; the run's own
    /// level changes nothing.
    pub sandbox: Option<String>,
    /// The deepest the role's agents, and those they start, may be.
    pub max_depth: Option<u32>,
    /// A role child's token budget when the call names none.
    pub token_budget: Option<u64>,
    /// A role child's time limit in seconds when the call names none.
    pub time_limit: Option<u64>,
    /// The instructions (in a table; a file's body is its instructions).
    pub instructions: Option<String>,
}

/// A role read from its source, not yet checked against the run.
#[derive(Debug, Clone)]
pub struct AgentRole {
    /// Where it was read (the file, or `dsh.toml` for a table).
    pub source: PathBuf,
    /// The key prefix of its keys in that source (`agents.NAME.` in a
    /// table, nothing in a file).
    pub prefix: String,
    /// As written.
    pub spec: RoleSpec,
}

/// Why a file has no front matter to read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    /// The first line is not `---`.
    #[error("expected a YAML front matter: the file's first line must be `---`")]
    NoOpening,
    /// No `---` line closes it.
    #[error("expected a `---` line closing the YAML front matter")]
    NoClosing,
}

/// Split a role file into its front matter and its body: a leading BOM is
/// skipped, the first line must be `---`, and the first later line that is
/// `---` closes the front matter (either line may end in `\r` or spaces);
/// the body is everything after the closing line, `---` lines included.
pub fn split_front_matter(text: &str) -> Result<(&str, &str), FrontMatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (first, mut rest) = text.split_once('\n').unwrap_or((text, ""));
    if first.trim_end() != "---" {
        return Err(FrontMatterError::NoOpening);
    }
    let start = text.len() - rest.len();
    loop {
        let (line, after) = match rest.split_once('\n') {
            Some(split) => split,
            None if rest.is_empty() => return Err(FrontMatterError::NoClosing),
            None => (rest, ""),
        };
        if line.trim_end() == "---" {
            let end = text.len() - rest.len();
            return Ok((&text[start..end], after));
        }
        rest = after;
    }
}

fn bad(file: &Path, key: &str, reason: impl Into<String>) -> CliError {
    CliError::Config {
        file: file.to_owned(),
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// Parse the role file `file` (its text `text`).
pub fn parse_file(file: &Path, text: &str) -> Result<AgentRole, CliError> {
    let (yaml, body) = split_front_matter(text).map_err(|err| bad(file, "", err.to_string()))?;
    let deserializer = serde_norway::Deserializer::from_str(yaml);
    let mut spec: RoleSpec = serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        let message = err.inner().to_string();
        // The YAML error may already start with the key; a missing key
        // is named as the key.
        let message = message
            .strip_prefix(&format!("{path}: "))
            .unwrap_or(&message);
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next());
        let key = match (path.as_str(), missing) {
            (".", Some(field)) => field.to_owned(),
            (".", None) => String::new(),
            _ => path.clone(),
        };
        bad(file, &key, crate::one_line(message))
    })?;
    if spec.instructions.is_some() {
        return Err(bad(
            file,
            "instructions",
            "unknown key in a role file: its instructions are the text after the front matter",
        ));
    }
    spec.instructions = Some(body.to_owned());
    Ok(AgentRole {
        source: file.to_owned(),
        prefix: String::new(),
        spec,
    })
}

/// The directories role files are read from, in order (a later one's role
/// replaces an earlier one's of the same name): the user's, then the
/// project's.
pub fn search_dirs(cwd: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(config) = crate::config::search_path(cwd)
        .get(1)
        .and_then(|file| file.parent())
    {
        dirs.push(config.join(AGENTS_DIR));
    }
    dirs.push(cwd.join(".dsh").join(AGENTS_DIR));
    dirs
}

/// Every role: `tables` (from `config`, the dsh.toml read), then the files
/// of `dirs` in order, by name.
pub fn load(
    config: &Path,
    tables: BTreeMap<String, RoleSpec>,
    dirs: &[PathBuf],
) -> Result<BTreeMap<String, AgentRole>, CliError> {
    let mut roles = BTreeMap::new();
    for (name, spec) in tables {
        let prefix = format!("agents.{name}.");
        check_name(&name).map_err(|reason| bad(config, &format!("agents.{name}"), reason))?;
        roles.insert(
            name,
            AgentRole {
                source: config.to_owned(),
                prefix,
                spec,
            },
        );
    }
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(bad(dir, "", format!("cannot read it: {err}"))),
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
            .collect();
        files.sort();
        for file in files {
            let name = file
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_default();
            check_name(&name).map_err(|reason| bad(&file, "", reason))?;
            let text = std::fs::read_to_string(&file)
                .map_err(|err| bad(&file, "", format!("cannot read it: {err}")))?;
            roles.insert(name, parse_file(&file, &text)?);
        }
    }
    Ok(roles)
}

/// A role's name: 1-32 lower-case letters, digits, `-` or `_`, starting
/// with a letter.
fn check_name(name: &str) -> Result<(), String> {
    let well_formed = !name.is_empty()
        && name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if well_formed {
        Ok(())
    } else {
        Err(format!(
            "expected a role name of 1-32 lower-case letters, digits, `-` or `_`, starting with a letter, not `{name}`"
        ))
    }
}

/// What a role is checked against: the run's model, its sandbox level and
/// the tools that exist.
pub struct RunFacts<'a> {
    /// The run's model.
    pub model: &'a ModelChoice,
    /// The run's sandbox level.
    pub sandbox: Level,
    /// Every tool an agent of the run may have.
    pub tools: &'a BTreeSet<String>,
}

impl AgentRole {
    fn bad(&self, key: &str, reason: impl Into<String>) -> CliError {
        bad(&self.source, &format!("{}{key}", self.prefix), reason)
    }

    /// The model id the role asks for, checked against the run's route.
    pub fn model_id(&self, run: &ModelChoice) -> Result<Option<String>, CliError> {
        let routed = match run {
            ModelChoice::Demo => "demo",
            ModelChoice::Api(api) => api.provider.as_str(),
        };
        let not_configured = |key: &str, provider: &str| {
            self.bad(
                key,
                format!(
                    "expected the run's model provider `{routed}`: the route `{provider}` is not configured for this run"
                ),
            )
        };
        if let Some(provider) = &self.spec.provider
            && provider != routed
        {
            return Err(not_configured("provider", provider));
        }
        let Some(model) = &self.spec.model else {
            return Ok(None);
        };
        let id = match model.split_once(':') {
            Some((provider, _)) if provider != routed => {
                return Err(not_configured("model", provider));
            }
            Some((_, id)) => id,
            None => model.as_str(),
        };
        if id.trim().is_empty() {
            return Err(self.bad("model", "expected a model id (`<provider>:<model>`)"));
        }
        Ok(Some(id.to_owned()))
    }

    /// The role as the tool takes it, checked against the run.
    pub fn resolve(&self, run: &RunFacts<'_>) -> Result<SubagentRole, CliError> {
        let spec = &self.spec;
        if spec.description.trim().is_empty() {
            return Err(self.bad("description", "expected a non-empty description"));
        }
        let positive = |value: Option<u64>, key: &str| match value {
            Some(0) => Err(self.bad(key, "expected a positive number, not 0")),
            other => Ok(other),
        };
        let token_budget = positive(spec.token_budget, "token_budget")?;
        let time_limit = positive(spec.time_limit, "time_limit")?.map(Duration::from_secs);
        let max_depth = positive(spec.max_depth.map(u64::from), "max_depth")?.and(spec.max_depth);
        let mut filter = match &spec.tools {
            None => None,
            Some(tools) if tools.is_empty() => {
                return Err(self.bad(
                    "tools",
                    "expected at least one tool (leave `tools` out for every tool)",
                ));
            }
            Some(tools) => {
                if let Some(unknown) = tools.iter().find(|tool| !run.tools.contains(*tool)) {
                    let known: Vec<&str> = run.tools.iter().map(String::as_str).collect();
                    return Err(self.bad(
                        "tools",
                        format!(
                            "there is no tool `{unknown}`; expected some of: {}",
                            known.join(", ")
                        ),
                    ));
                }
                Some(ToolRestriction::allow(tools.iter().cloned()))
            }
        };
        if let Some(level) = &spec.sandbox {
            let level: Level = level.parse().map_err(|_| {
                self.bad(
                    "sandbox",
                    format!("expected `read-only`, `workspace-write` or `full`, not `{level}`"),
                )
            })?;
            if level > run.sandbox {
                return Err(self.bad(
                    "sandbox",
                    format!(
                        "expected at most the run's level `{}`: a role can only narrow it",
                        run.sandbox
                    ),
                ));
            }
            if level == Level::ReadOnly && run.sandbox != Level::ReadOnly {
                filter = Some(read_only(filter, run.tools));
            } else if level != run.sandbox {
                return Err(self.bad(
                    "sandbox",
                    format!(
                        "expected `read-only` or the run's level `{}`: only the writing tools can be taken away",
                        run.sandbox
                    ),
                ));
            }
        }
        let options = self.model_id(run.model)?.map(|model| AgentOptions {
            model: Some(model),
            ..AgentOptions::default()
        });
        let persona = spec
            .instructions
            .as_deref()
            .map(str::trim)
            .filter(|text| !text.is_empty())
            .map(str::to_owned);
        Ok(SubagentRole {
            description: crate::one_line(spec.description.trim()),
            persona,
            tool_filter: filter,
            options,
            max_depth,
            token_budget,
            time_limit,
        })
    }
}

/// `filter` without the writing tools (of those that exist).
fn read_only(filter: Option<ToolRestriction>, tools: &BTreeSet<String>) -> ToolRestriction {
    let writing = WRITING_TOOLS
        .iter()
        .map(|tool| (*tool).to_owned())
        .filter(|tool| tools.contains(tool));
    match filter {
        Some(ToolRestriction::Allow(allowed)) => ToolRestriction::Allow(
            allowed
                .into_iter()
                .filter(|tool| !WRITING_TOOLS.contains(&tool.as_str()))
                .collect(),
        ),
        Some(ToolRestriction::Deny(denied)) => {
            ToolRestriction::Deny(denied.into_iter().chain(writing).collect())
        }
        None => ToolRestriction::Deny(writing.collect()),
    }
}

/// Every role resolved against the run.
pub fn resolve_all(
    roles: &BTreeMap<String, AgentRole>,
    run: &RunFacts<'_>,
) -> Result<SubagentRoles, CliError> {
    roles
        .iter()
        .map(|(name, role)| Ok((name.clone(), role.resolve(run)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    /// A body: any lines, `---` ones among them, without a BOM at its
    /// start (a BOM is only skipped before the opening fence).
    fn body() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![Just("---".to_owned()), Just(String::new()), "[^\n]{0,20}"],
            0..6,
        )
        .prop_map(|lines| lines.join("\n"))
    }

    /// Front matter lines that are never a fence.
    fn yaml() -> impl Strategy<Value = String> {
        proptest::collection::vec("[a-z]{1,8}: [a-z0-9 ]{0,10}", 0..4)
            .prop_map(|lines| lines.join("\n"))
    }

    proptest! {
        #[test]
        fn the_front_matter_and_the_body_come_back_whole(
            yaml in yaml(),
            body in body(),
            crlf in any::<bool>(),
            bom in any::<bool>(),
        ) {
            let eol = if crlf { "\r\n" } else { "\n" };
            let yaml_lines: String = yaml.lines().map(|line| format!("{line}{eol}")).collect();
            let text = format!("{}---{eol}{yaml_lines}---{eol}{body}", if bom { "\u{feff}" } else { "" });
            let (front, rest) = split_front_matter(&text).unwrap();
            prop_assert_eq!(front, yaml_lines.as_str());
            prop_assert_eq!(rest, body.as_str());
        }

        #[test]
        fn a_missing_closing_fence_is_refused(yaml in yaml(), crlf in any::<bool>()) {
            let eol = if crlf { "\r\n" } else { "\n" };
            let text = format!("---{eol}{yaml}");
            prop_assert_eq!(split_front_matter(&text), Err(FrontMatterError::NoClosing));
        }

        #[test]
        fn a_file_not_opening_with_a_fence_is_refused(body in "[^-\u{feff}][^\n]{0,20}(\n[^\n]{0,20}){0,3}") {
            prop_assert_eq!(split_front_matter(&body), Err(FrontMatterError::NoOpening));
        }
    }

    fn facts_tools() -> BTreeSet<String> {
        ["subagent", "wait", "read_file", "edit_file", "shell"]
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    fn resolved(text: &str, sandbox: Level) -> Result<SubagentRole, String> {
        let file = Path::new("/p/.dsh/agents/reviewer.md");
        let model = ModelChoice::Api(crate::model::ApiModel {
            provider: "deepseek".into(),
            model: "deepseek-chat".into(),
            base_url: "http://x/v1".into(),
            api_key_env: None,
            key_origin: None,
        });
        let tools = facts_tools();
        parse_file(file, text)
            .and_then(|role| {
                role.resolve(&RunFacts {
                    model: &model,
                    sandbox,
                    tools: &tools,
                })
            })
            .map_err(|err| format!("{err} (exit {})", err.exit_code()))
    }

    #[test]
    fn a_role_file_maps_onto_persona_tools_route_budget_and_depth() {
        let text = "---\ndescription: Reviews a change\ntools: [read_file, subagent]\nmodel: deepseek:deepseek-reasoner\nmax_depth: 2\ntoken_budget: 5000\ntime_limit: 90\n---\nYou review.\n---\nStill the body.\n";
        let role = resolved(text, Level::ReadOnly).unwrap();
        assert_eq!(role.description, "Reviews a change");
        assert_eq!(
            role.persona.as_deref(),
            Some("You review.\n---\nStill the body.")
        );
        assert_eq!(
            role.tool_filter,
            Some(ToolRestriction::allow(["read_file", "subagent"]))
        );
        assert_eq!(
            role.options.and_then(|o| o.model).as_deref(),
            Some("deepseek-reasoner")
        );
        assert_eq!(role.max_depth, Some(2));
        assert_eq!(role.token_budget, Some(5000));
        assert_eq!(role.time_limit, Some(Duration::from_secs(90)));
        let read_only = resolved(
            "---\ndescription: d\nsandbox: read-only\n---\n",
            Level::Full,
        )
        .unwrap();
        assert_eq!(
            read_only.tool_filter,
            Some(ToolRestriction::deny(["edit_file", "shell"]))
        );
    }

    #[test]
    fn every_bad_role_file_is_one_line_naming_the_file_the_key_and_what_was_expected() {
        let cases = [
            "description: d\n",
            "---\ndescription: d\n",
            "---\ntools: [read_file]\n---\n",
            "---\ndescription: d\ncolour: red\n---\n",
            "---\ndescription: d\ntools: read_file\n---\n",
            "---\ndescription: d\ntools: [no_such_tool]\n---\n",
            "---\ndescription: d\ntools: []\n---\n",
            "---\ndescription: d\nmodel: openai:gpt-4o\n---\n",
            "---\ndescription: d\nprovider: openai\n---\n",
            "---\ndescription: d\ntoken_budget: 0\n---\n",
            "---\ndescription: d\ntime_limit: 0\n---\n",
            "---\ndescription: d\nmax_depth: 0\n---\n",
            "---\ndescription: d\nmax_depth: -1\n---\n",
            "---\ndescription: d\nsandbox: full\n---\n",
            "---\ndescription: d\nsandbox: yolo\n---\n",
            "---\ndescription: d\ninstructions: x\n---\n",
            "---\ndescription: [unclosed\n---\n",
        ];
        let lines: Vec<String> = cases
            .iter()
            .map(|text| {
                let err = resolved(text, Level::ReadOnly).unwrap_err();
                assert_eq!(err.lines().count(), 1, "{err}");
                assert!(err.starts_with("/p/.dsh/agents/reviewer.md: "), "{err}");
                assert!(err.ends_with("(exit 2)"), "{err}");
                format!("{text:?}\n  -> {err}")
            })
            .collect();
        insta::assert_snapshot!(lines.join("\n"));
    }

    #[test]
    fn the_projects_file_wins_over_the_users_and_both_over_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user");
        let project = dir.path().join("project");
        for (dir, role, description) in [
            (&user, "reviewer", "user's"),
            (&user, "scout", "user's"),
            (&project, "reviewer", "project's"),
        ] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(
                dir.join(format!("{role}.md")),
                format!("---\ndescription: {description}\n---\nbody"),
            )
            .unwrap();
        }
        std::fs::write(project.join("notes.txt"), "not a role").unwrap();
        let tables: BTreeMap<String, RoleSpec> = [
            (
                "scout".to_owned(),
                RoleSpec {
                    description: "table's".into(),
                    ..RoleSpec::default()
                },
            ),
            (
                "fixer".to_owned(),
                RoleSpec {
                    description: "table's".into(),
                    ..RoleSpec::default()
                },
            ),
        ]
        .into_iter()
        .collect();
        let roles = load(Path::new("dsh.toml"), tables, &[user, project.clone()]).unwrap();
        let described: Vec<(&str, &str)> = roles
            .iter()
            .map(|(name, role)| (name.as_str(), role.spec.description.as_str()))
            .collect();
        assert_eq!(
            described,
            [
                ("fixer", "table's"),
                ("reviewer", "project's"),
                ("scout", "user's")
            ]
        );
        assert_eq!(roles["reviewer"].source, project.join("reviewer.md"));
        std::fs::write(project.join("Bad Name.md"), "---\ndescription: d\n---\n").unwrap();
        let err = load(Path::new("dsh.toml"), BTreeMap::new(), &[project]).unwrap_err();
        assert!(
            err.to_string()
                .contains("Bad Name.md: expected a role name"),
            "{err}"
        );
    }
}
