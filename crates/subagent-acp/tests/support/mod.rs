//! Shared fixtures of the ACP suites: where the installed peer agents are
//! (a missing one fails loudly, naming the install script), a world of
//! harness + runtime + providers, and the process-table check that every
//! test ends with. Every process a world starts carries a unique marker in
//! its environment (inherited by its own children), so the check finds
//! exactly this test's processes, grandchildren included, even when other
//! tests run alongside.

#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::{
    Agent, AgentFactory, CancellationToken, ContentBlock, CreateAgent, Durability, SessionHeader,
    SessionId, SessionStore,
};
use dsh_harness::{Harness, JsonlStore, Scripted, ScriptedModel};
use dsh_subagent::{
    ActivationSpec, Delivery, RuntimeConfig, StartRequest, SubagentActivation, SubagentResult,
    SubagentRuntime,
};
use dsh_subagent_acp::process::ProcStat;
use dsh_subagent_acp::{AcpConfig, AcpProgress, AcpProvider};

/// How long any single wait may take before the test fails instead of hanging.
pub const BOUND: Duration = Duration::from_secs(60);

/// The variable that marks this test's processes.
pub const MARK_VAR: &str = "DSH_ACP_TEST_MARK";

/// The installed peer agents.
pub struct Peers {
    /// `node` (20 or newer).
    pub node: PathBuf,
    /// The TypeScript SDK's example agent.
    pub ts_agent: PathBuf,
    /// The venv's Python, with the Python SDK installed.
    pub python: PathBuf,
    /// The Python SDK's examples.
    pub py_examples: PathBuf,
    /// This crate's own test agent.
    pub rogue: PathBuf,
}

fn require(path: &Path, what: &str) {
    assert!(
        path.exists(),
        "the ACP peer {what} is missing at {}: run crates/subagent-acp/peers/install.sh, \
         which needs Node.js 20+ with npm and Python 3.10+ with venv and says which is \
         missing (.ci/run runs it before the tests)",
        path.display()
    );
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

/// The peers, or a panic naming the install script.
pub fn peers() -> Peers {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers");
    let ts_agent = root.join("node_modules/@agentclientprotocol/sdk/dist/examples/agent.js");
    let python = root.join("venv/bin/python");
    let py_examples = root.join("python-examples/0.12.1");
    require(
        &ts_agent,
        "@agentclientprotocol/sdk 1.9.0 (dist/examples/agent.js)",
    );
    require(&python, "Python venv with agent-client-protocol");
    require(&py_examples.join("agent.py"), "Python SDK examples");
    let node = on_path("node").unwrap_or_else(|| {
        panic!("`node` is not on PATH: the TypeScript ACP peer needs Node 20 (see crates/subagent-acp/peers/install.sh)")
    });
    Peers {
        node,
        ts_agent,
        python,
        py_examples,
        rogue: Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/rogue_agent.py"),
    }
}

impl Peers {
    /// The TypeScript example agent.
    pub fn ts(&self) -> AcpConfig {
        AcpConfig::new(&self.node).args([self.ts_agent.display().to_string()])
    }

    /// A Python SDK example by file name.
    pub fn py(&self, example: &str) -> AcpConfig {
        AcpConfig::new(&self.python).args([self.py_examples.join(example).display().to_string()])
    }

    /// The test-only agent with `args`.
    pub fn rogue(&self, args: &[&str]) -> AcpConfig {
        let mut all = vec![self.rogue.display().to_string()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        AcpConfig::new(&self.python).args(all)
    }
}

/// A runtime over the real harness and JSONL store, a live root agent, and
/// the given providers registered (each marked).
pub struct World {
    pub dir: tempfile::TempDir,
    pub store: Arc<dyn SessionStore>,
    pub harness: Harness,
    pub runtime: SubagentRuntime,
    pub lead: Arc<dyn Agent>,
    pub providers: Vec<AcpProvider>,
    pub mark: String,
}

/// Short graces so that teardown tests do not idle.
pub fn quick(config: AcpConfig) -> AcpConfig {
    config.graces(Duration::from_millis(300), Duration::from_millis(300))
}

pub async fn world(configs: Vec<AcpConfig>) -> World {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("sub")).unwrap();
    let store: Arc<dyn SessionStore> =
        Arc::new(JsonlStore::new(dir.path().join("sessions"), Durability::None).unwrap());
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("noted".into())));
    let harness = Harness::builder(store.clone())
        .model(model)
        .build()
        .unwrap();
    let runtime = SubagentRuntime::new(
        Arc::new(harness.clone()),
        store.clone(),
        RuntimeConfig::default(),
    );
    let mark = SessionId::generate().to_string();
    let mut providers = Vec::new();
    for config in configs {
        let provider = AcpProvider::new(config.env(MARK_VAR, mark.clone())).unwrap();
        runtime.register(Arc::new(provider.clone())).unwrap();
        providers.push(provider);
    }
    let handle = harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::new("lead").unwrap(), &project),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    World {
        dir,
        store,
        harness,
        runtime,
        lead: handle.agent().clone(),
        providers,
        mark,
    }
}

impl World {
    pub fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// A caller-delivered start of `prompt` with `provider`.
    pub fn spec(&self, provider: &str, prompt: &str) -> ActivationSpec {
        ActivationSpec {
            provider: provider.into(),
            label: "acp test".into(),
            name: None,
            child_id: None,
            cancel: CancellationToken::new(),
            delivery: Delivery::Caller,
            request: StartRequest::new(self.lead.clone(), vec![ContentBlock::text(prompt)]),
        }
    }

    pub async fn start(&self, spec: ActivationSpec) -> SubagentActivation {
        bounded("start_activation", self.runtime.start_activation(spec))
            .await
            .unwrap()
    }

    /// Start `prompt` and wait for its result.
    pub async fn run(&self, provider: &str, prompt: &str) -> SubagentResult {
        let activation = self.start(self.spec(provider, prompt)).await;
        result_of(&activation).await
    }

    /// Every progress event of provider `index`, as a channel.
    pub fn progress(
        &self,
        index: usize,
    ) -> (
        dsh_core::observe::Subscription,
        dsh_core::observe::Events<AcpProgress>,
    ) {
        self.providers[index].progress().subscribe()
    }

    /// The live processes carrying this world's mark.
    pub fn processes(&self) -> Vec<ProcStat> {
        marked_processes(&self.mark)
    }

    /// The processes this world started, once there are `count` of them:
    /// a process caught mid-`exec` can be missing from one scan of `/proc`.
    pub async fn processes_once(&self, count: usize) -> Vec<ProcStat> {
        let started = Instant::now();
        loop {
            let running = self.processes();
            if running.len() == count || started.elapsed() >= Duration::from_secs(10) {
                return running;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Fail if any process this world started is still alive: checked
    /// once, without waiting, because dispose and a failed start return
    /// only when the whole tree is gone.
    pub fn assert_no_process_left(&self) {
        let left = self.processes();
        assert!(left.is_empty(), "processes left behind: {left:?}");
    }

    /// The same, allowing asynchronous cleanup (an abandoned start is
    /// killed on drop, not awaited) a bounded time.
    pub async fn assert_no_process_left_soon(&self) {
        let started = Instant::now();
        loop {
            let left = self.processes();
            if left.is_empty() {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "processes left behind: {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Live (non-zombie) processes whose environment holds `MARK_VAR=mark`.
pub fn marked_processes(mark: &str) -> Vec<ProcStat> {
    let needle = format!("{MARK_VAR}={mark}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !environ
            .split(|b| *b == 0)
            .any(|var| var == needle.as_bytes())
        {
            continue;
        }
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            && let Some(stat) = ProcStat::parse(&stat)
            && stat.state != 'Z'
        {
            found.push(stat);
        }
    }
    found
}

pub async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(BOUND, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

pub async fn result_of(activation: &SubagentActivation) -> SubagentResult {
    bounded("the activation's result", activation.result())
        .await
        .unwrap()
}

pub fn text(result: &SubagentResult) -> String {
    dsh_core::content::joined_text(&result.output)
}

/// Wait for the first progress event matching `pred`; returns every event
/// seen up to and including it.
pub async fn progress_until(
    rx: &mut dsh_core::observe::Events<AcpProgress>,
    mut pred: impl FnMut(&AcpProgress) -> bool,
) -> Vec<AcpProgress> {
    let mut seen = Vec::new();
    loop {
        let event = bounded("a progress event", rx.recv())
            .await
            .expect("the provider keeps its bus");
        let hit = pred(&event);
        seen.push(event);
        if hit {
            return seen;
        }
    }
}

/// Drain what is already queued.
pub fn drain(rx: &mut dsh_core::observe::Events<AcpProgress>) -> Vec<AcpProgress> {
    let mut seen = Vec::new();
    while let Ok(event) = rx.try_recv() {
        seen.push(event);
    }
    seen
}
