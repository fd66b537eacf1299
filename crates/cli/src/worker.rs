//! `dsh worker --listen ADDR`: serve dsh's Restate objects for a Restate
//! server to call, one of any number of identical workers behind the
//! address registered with the server (`docs/distributed.md`). Once bound
//! it prints `listening on http://ADDR` on stdout; SIGINT, SIGTERM or
//! SIGHUP stops it after the calls in flight (the server sends what was cut
//! to another worker).
//!
//! [`Composer`] makes what a session's turns run with from dsh.toml, as
//! `dsh run` makes it: the model (the tree's recorded one must be the one
//! this worker runs), the six workspace tools over the session's working
//! directory under the `sandbox` level (nobody to ask on a worker: an
//! action above it is refused), the shared system prompt, the step limit
//! and the delegation depth limit. A worker composes one agent for its own working directory before
//! it listens (and says what it composed with `-vv`), so a bad dsh.toml or
//! workspace fails at once, in one line.
//!
//! The [`Composer`] is the engine's `WorkerEnv`: `dsh_restate::worker`
//! asks it afresh at each turn, on whichever worker runs the turn. The
//! delegation and control tools (`subagent`, `fork`, `list_agents`,
//! `send_message`, `wait`, `interrupt_agent`) are the engine's own, offered
//! beside these. Not composed yet: the ACP and team tools, `report` and
//! `subagent_survey`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::{AgentOptions, Model, SessionHeader, SessionId};
use dsh_restate::worker::{Composed, WorkerEnv};
use dsh_tool_workspace::{Level, Policy, WorkspaceTools};

use crate::config::{self, Settings};
use crate::error::CliError;
use crate::model::{self, ModelChoice};
use crate::signals::Signals;

/// Makes what any session's turns run with ([`Composed`]), from one
/// worker's settings: the engine's [`WorkerEnv`].
pub struct Composer {
    choice: ModelChoice,
    model: Arc<dyn Model>,
    sandbox: Level,
    options: AgentOptions,
    system: String,
    max_depth: u32,
}

impl Composer {
    /// The composer of `settings`: builds the model client once.
    ///
    /// # Errors
    /// The model cannot be configured (a missing key, a bad base URL).
    ///
    /// # Cancel safety
    /// Cancel safe: it only builds the model client.
    pub async fn new(settings: &Settings) -> Result<Self, CliError> {
        let model: Arc<dyn Model> = match &settings.model {
            // The demo's script, without the gates a local runtime
            // releases: the cluster orders what arrives.
            ModelChoice::Demo => crate::demo::Demo::ungated_first_run().model(),
            ModelChoice::Api(api) => model::openai(api).await?,
        };
        let system = dsh_harness::SystemPrompt::new()
            .section("role", crate::world::SYSTEM_PROMPT)
            .render(None, &BTreeMap::new())
            .map_err(|err| CliError::Refused(format!("the system prompt: {err}")))?;
        Ok(Self {
            choice: settings.model.clone(),
            model,
            sandbox: settings.sandbox,
            options: AgentOptions {
                max_turn_steps: settings.limits.max_turn_steps,
                ..AgentOptions::default()
            },
            system,
            max_depth: settings.limits.max_depth,
        })
    }
}

impl WorkerEnv for Composer {
    /// What `header`'s turns run with.
    ///
    /// # Errors
    /// One line naming the session: its tree records another model than
    /// this worker runs, or its working directory is not one here.
    fn compose(&self, header: &SessionHeader) -> Result<Composed, String> {
        if let Some(recorded) = model::recorded(header)
            && model::record(&recorded) != model::record(&self.choice)
        {
            return Err(format!(
                "session {} runs model {}, this worker runs {} (every worker needs the same dsh.toml)",
                header.id,
                recorded.spec(),
                self.choice.spec()
            ));
        }
        let tools = WorkspaceTools::new(&header.cwd, Policy::new(self.sandbox, None))
            .map_err(|err| format!("session {}: cannot use the workspace: {err}", header.id))?;
        Ok(Composed {
            model: self.model.clone(),
            tools,
            system: self.system.clone(),
            options: self.options.clone(),
            max_depth: self.max_depth,
        })
    }
}

/// Run the command with dsh.toml (`config` when given) read as `dsh run`
/// reads it.
///
/// # Cancel safety
/// Dropped, the worker stops at once; the server retries what it was
/// running on another worker.
pub async fn worker(listen: &str, config: Option<PathBuf>) -> Result<(), CliError> {
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| CliError::BadFlag(format!("--listen `{listen}`: not an address (IP:PORT)")))?;
    let settings = config::load(&config::Overrides {
        config,
        ..config::Overrides::default()
    })?;
    let composer = Composer::new(&settings).await?;
    let here = SessionHeader::new(SessionId::generate(), std::env::current_dir()?);
    let composed = composer.compose(&here).map_err(CliError::Refused)?;
    let tools: Vec<&str> = composed.tools.iter().map(|tool| tool.name()).collect();
    tracing::info!(
        model = composed.model.name(),
        ?tools,
        system_bytes = composed.system.len(),
        max_turn_steps = ?composed.options.max_turn_steps,
        "dsh worker: the agents it composes"
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| CliError::Refused(format!("cannot listen on {addr}: {err}")))?;
    let bound = listener.local_addr()?;
    let mut signals = Signals::install()?;
    {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on http://{bound}")?;
        stdout.flush()?;
    }
    dsh_restate::worker::serve(listener, Arc::new(composer), async move {
        signals.recv().await;
    })
    .await
    .map_err(|err| CliError::Refused(format!("cannot serve on {addr}: {err}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    async fn composer(sandbox: Level) -> Composer {
        let mut settings = config::resolve(
            None,
            config::ConfigFile::default(),
            &config::Overrides::default(),
        )
        .unwrap();
        settings.sandbox = sandbox;
        settings.limits.max_turn_steps = Some(7);
        settings.limits.max_depth = 2;
        Composer::new(&settings).await.unwrap()
    }

    #[tokio::test]
    async fn a_session_gets_the_workspace_tools_over_its_directory_and_the_shared_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let header = SessionHeader::new(SessionId::generate(), dir.path());
        let composed = composer(Level::ReadOnly).await.compose(&header).unwrap();
        let names = |tools: &[Arc<dyn dsh_core::Tool>]| -> Vec<String> {
            tools.iter().map(|tool| tool.name().to_owned()).collect()
        };
        let workspace = WorkspaceTools::new(dir.path(), Policy::default()).unwrap();
        assert_eq!(names(&composed.tools), names(&workspace));
        assert_eq!(composed.system, crate::world::SYSTEM_PROMPT);
        assert_eq!(composed.model.name(), "demo");
        assert_eq!(composed.options.max_turn_steps, Some(7));
        assert_eq!(composed.max_depth, 2);
    }

    #[tokio::test]
    async fn another_model_or_a_missing_directory_is_refused_naming_the_session() {
        let composer = composer(Level::ReadOnly).await;
        let dir = tempfile::tempdir().unwrap();
        let mut header = SessionHeader::new(SessionId::new("s-other").unwrap(), dir.path());
        let api = model::ApiModel {
            provider: "openai".to_owned(),
            model: "gpt-x".to_owned(),
            base_url: "http://127.0.0.1:1/v1".to_owned(),
            api_key_env: None,
            key_origin: None,
        };
        header.extensions.insert(
            model::RUN_EXTENSION.to_owned(),
            model::record(&ModelChoice::Api(api)),
        );
        let said = composer.compose(&header).err().unwrap();
        assert_eq!(
            said,
            "session s-other runs model openai:gpt-x, this worker runs demo (every worker needs the same dsh.toml)"
        );
        header.extensions.insert(
            model::RUN_EXTENSION.to_owned(),
            model::record(&ModelChoice::Demo),
        );
        assert!(composer.compose(&header).is_ok());

        let gone = SessionHeader::new(SessionId::new("s-gone").unwrap(), dir.path().join("gone"));
        let said = composer.compose(&gone).err().unwrap();
        assert!(
            said.starts_with("session s-gone: cannot use the workspace: "),
            "{said}"
        );
    }
}
