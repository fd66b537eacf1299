//! [`WorldBuilder`]: one configurable subagent test world instead of a copy
//! per suite. It chooses the store (memory or JSONL, in a temporary or
//! given directory, optionally copied from a killed process's logs, wrapped
//! as the test needs), the scripted model, the harness's tools and settings,
//! the runtime's limits and providers, and the root; [`WorldBuilder::build`]
//! makes them in that order.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_core::{AgentFactory, Durability, SessionHeader, SessionStore, Tool};
use dsh_harness::{Harness, HarnessBuilder, JsonlStore, MemoryStore, Scripted, ScriptedModel};
use dsh_subagent::{RuntimeConfig, SubagentProvider, SubagentRuntime};

use super::{
    Backing, HOST_TOOLS, LocalProvider, NamedTool, StreamedText, World, WorldStore, fresh,
    resuming, sid,
};
use crate::store::{FaultStore, GatedStore, SharedStore};

/// The root session of a [`WorldBuilder::project`] world.
pub const PROJECT_ROOT: &str = "lead-session";

/// Where a world keeps its logs and starts its roots, below its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// The logs are the directory's files and roots start in it.
    #[default]
    Flat,
    /// The logs are in `sessions/`, and roots start in `project/`.
    Split,
}

/// Wraps the world's base store: the typed store the test keeps, and the
/// same store as the harness and runtime hold it.
type Wrap<S> = Box<dyn FnOnce(Arc<dyn SessionStore>) -> (Arc<S>, Arc<dyn SessionStore>) + Send>;

/// Edits the root's header before it is created.
type EditHeader = Box<dyn FnOnce(&mut SessionHeader) + Send>;

/// Configures the harness beyond its model and tools.
type Configure = Box<dyn FnOnce(HarnessBuilder) -> HarnessBuilder + Send>;

/// Runs once the harness and the runtime exist, before the root does.
type Setup = Box<dyn FnOnce(&Harness, &SubagentRuntime) + Send>;

/// Builds a [`World`]. Defaults: JSONL files with no fsync in a temporary
/// directory ([`Layout::Flat`]), the store unwrapped, a model that answers
/// every request with `done`, no tool, no provider, the default runtime
/// configuration, and a fresh root `lead`.
pub struct WorldBuilder<S: ?Sized = dyn SessionStore> {
    backing: Backing,
    layout: Layout,
    at: Option<PathBuf>,
    from: Option<PathBuf>,
    wrap: Wrap<S>,
    model: Option<Arc<ScriptedModel>>,
    configure: Option<Configure>,
    setup: Option<Setup>,
    tools: Vec<Arc<dyn Tool>>,
    providers: Vec<Arc<dyn SubagentProvider>>,
    config: RuntimeConfig,
    root: String,
    edit_root: Option<EditHeader>,
    resume_root: bool,
    label: String,
}

impl Default for WorldBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl WorldBuilder {
    /// A builder with the defaults.
    pub fn new() -> Self {
        Self {
            backing: Backing::Jsonl(Durability::None),
            layout: Layout::Flat,
            at: None,
            from: None,
            wrap: Box::new(|base| (Arc::clone(&base), base)),
            model: None,
            configure: None,
            setup: None,
            tools: Vec::new(),
            providers: Vec::new(),
            config: RuntimeConfig::default(),
            root: "lead".to_owned(),
            edit_root: None,
            resume_root: false,
            label: String::new(),
        }
    }

    /// A builder laid out as a project ([`Layout::Split`]: logs in
    /// `sessions/`, roots in `project/`) whose root is [`PROJECT_ROOT`].
    pub fn project() -> Self {
        Self::new().layout(Layout::Split).root(PROJECT_ROOT)
    }

    /// Wrap the base store with `wrap`; the world's `store` is what it
    /// returns. Wrappers stack: a later `wrap` wraps the base store again
    /// (it replaces an earlier one).
    pub fn wrap<T: SessionStore>(
        self,
        wrap: impl FnOnce(Arc<dyn SessionStore>) -> Arc<T> + Send + 'static,
    ) -> WorldBuilder<T> {
        self.with_wrap(Box::new(move |base| {
            let store = wrap(base);
            let shared: Arc<dyn SessionStore> = Arc::clone(&store) as Arc<dyn SessionStore>;
            (store, shared)
        }))
    }

    /// Wrap the base store in the holding [`WorldStore`] (faults over
    /// gates), for [`World::hold`] and [`World::fail`].
    pub fn holding(self) -> WorldBuilder<WorldStore> {
        self.wrap(|base| Arc::new(FaultStore::new(GatedStore::new(SharedStore(base)))))
    }

    /// Wrap the base store in a [`FaultStore`], which also counts every call
    /// per log ([`FaultStore::calls_by_log`]).
    pub fn counting(self) -> WorldBuilder<FaultStore<SharedStore>> {
        self.wrap(|base| Arc::new(FaultStore::new(SharedStore(base))))
    }
}

impl<S: SessionStore + ?Sized> WorldBuilder<S> {
    fn with_wrap<T: ?Sized>(self, wrap: Wrap<T>) -> WorldBuilder<T> {
        WorldBuilder {
            backing: self.backing,
            layout: self.layout,
            at: self.at,
            from: self.from,
            wrap,
            model: self.model,
            configure: self.configure,
            setup: self.setup,
            tools: self.tools,
            providers: self.providers,
            config: self.config,
            root: self.root,
            edit_root: self.edit_root,
            resume_root: self.resume_root,
            label: self.label,
        }
    }

    /// Run on `backing`.
    #[must_use]
    pub fn backing(mut self, backing: Backing) -> Self {
        self.backing = backing;
        self
    }

    /// Run on JSONL files with `durability`.
    #[must_use]
    pub fn jsonl(self, durability: Durability) -> Self {
        self.backing(Backing::Jsonl(durability))
    }

    /// Run on an in-memory store.
    #[must_use]
    pub fn memory(self) -> Self {
        self.backing(Backing::Memory)
    }

    /// Lay the directory out so.
    #[must_use]
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Use `dir` as the world's directory (kept when the world goes)
    /// instead of a temporary one.
    #[must_use]
    pub fn in_dir(mut self, dir: &Path) -> Self {
        self.at = Some(dir.to_path_buf());
        self
    }

    /// Start from a copy of the logs in `from` (as a killed process left
    /// them), and resume the root instead of creating it.
    #[must_use]
    pub fn restarted_from(mut self, from: &Path) -> Self {
        self.from = Some(from.to_path_buf());
        self.resume_root = true;
        self
    }

    /// Resume the root from the logs already in the world's directory (a
    /// later process over [`WorldBuilder::in_dir`]) instead of creating it.
    #[must_use]
    pub fn resume_root(mut self) -> Self {
        self.resume_root = true;
        self
    }

    /// Every agent asks `model`.
    #[must_use]
    pub fn model(mut self, model: Arc<ScriptedModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// Configure the harness further (routes, a system prompt, ...).
    #[must_use]
    pub fn harness(
        mut self,
        configure: impl FnOnce(HarnessBuilder) -> HarnessBuilder + Send + 'static,
    ) -> Self {
        self.configure = Some(Box::new(configure));
        self
    }

    /// Run `setup` once the harness and the runtime exist (providers
    /// registered), before the root is created: to install a tool that
    /// needs the runtime, so the root is offered it.
    #[must_use]
    pub fn setup(
        mut self,
        setup: impl FnOnce(&Harness, &SubagentRuntime) + Send + 'static,
    ) -> Self {
        self.setup = Some(Box::new(setup));
        self
    }

    /// Stream every agent's model text to the runtime's progress bus token
    /// by token (the harness's text observer feeds
    /// [`SubagentRuntime::text_feed`]), after any [`Self::harness`] and
    /// [`Self::setup`] given before or after.
    #[must_use]
    pub fn stream_text(mut self) -> Self {
        let streamed = Arc::new(StreamedText::default());
        let observer: Arc<dyn dsh_harness::TextObserver> = streamed.clone();
        let configure = self.configure.take();
        self.configure = Some(Box::new(move |builder: HarnessBuilder| {
            let builder = builder.text_observer(observer);
            match configure {
                Some(configure) => configure(builder),
                None => builder,
            }
        }));
        let setup = self.setup.take();
        self.setup = Some(Box::new(
            move |harness: &Harness, runtime: &SubagentRuntime| {
                streamed.attach(runtime);
                if let Some(setup) = setup {
                    setup(harness, runtime);
                }
            },
        ));
        self
    }

    /// Offer `tool` to every agent.
    #[must_use]
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Offer every one of `tools`.
    #[must_use]
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Offer the [`HOST_TOOLS`] (each answers `ok`).
    #[must_use]
    pub fn host_tools(self) -> Self {
        self.tools(
            HOST_TOOLS
                .into_iter()
                .map(|name| Arc::new(NamedTool(name)) as Arc<dyn Tool>),
        )
    }

    /// Register `provider` with the runtime (in the order given).
    #[must_use]
    pub fn provider(mut self, provider: Arc<dyn SubagentProvider>) -> Self {
        self.providers.push(provider);
        self
    }

    /// Register a [`LocalProvider`] named `local`.
    #[must_use]
    pub fn local(self) -> Self {
        self.provider(Arc::new(LocalProvider::new("local")))
    }

    /// Run the runtime with `config`.
    #[must_use]
    pub fn config(mut self, config: RuntimeConfig) -> Self {
        self.config = config;
        self
    }

    /// Name the root `id` (default `lead`).
    #[must_use]
    pub fn root(mut self, id: &str) -> Self {
        id.clone_into(&mut self.root);
        self
    }

    /// Edit the root's header (depth, directory, ...) before it is created.
    #[must_use]
    pub fn root_header(mut self, edit: impl FnOnce(&mut SessionHeader) + Send + 'static) -> Self {
        self.edit_root = Some(Box::new(edit));
        self
    }

    /// Name the world in the panic of a failed build (a loop over crash
    /// points says which one failed).
    #[must_use]
    pub fn label(mut self, label: &str) -> Self {
        self.label = format!("{label}: ");
        self
    }

    /// Build the world: directory, store, harness, runtime with its
    /// providers, then the root.
    ///
    /// # Panics
    /// When any part cannot be made (a test failure).
    ///
    /// # Cancel safety
    /// A drop part-way drops what was made: a temporary directory goes with
    /// its contents; in a given directory the root's log may be left, with
    /// no live agent.
    #[allow(clippy::expect_used)]
    pub async fn build(self) -> World<S> {
        let (dir, temp) = match &self.at {
            Some(at) => (at.clone(), None),
            None => {
                let temp = tempfile::tempdir().expect("a temporary directory");
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        let (sessions, project) = match self.layout {
            Layout::Flat => (dir.clone(), dir.clone()),
            Layout::Split => (dir.join("sessions"), dir.join("project")),
        };
        std::fs::create_dir_all(&project).expect("the project directory");
        if let Some(from) = &self.from {
            copy_logs(from, &sessions);
        }
        let (base, jsonl): (Arc<dyn SessionStore>, _) = match self.backing {
            Backing::Jsonl(durability) => {
                let jsonl = JsonlStore::new(&sessions, durability).expect("a JSONL store");
                (Arc::new(jsonl.clone()), Some(jsonl))
            }
            Backing::Memory => (Arc::new(MemoryStore::new()), None),
        };
        let (store, shared) = (self.wrap)(base);
        let model = self.model.unwrap_or_else(|| {
            Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("done".into())))
        });
        let mut builder = Harness::builder(Arc::clone(&shared)).model(model.clone());
        for tool in self.tools {
            builder = builder.tool(tool).expect("the tool registers");
        }
        if let Some(configure) = self.configure {
            builder = configure(builder);
        }
        let harness = builder.build().expect("a harness");
        let runtime =
            SubagentRuntime::new(Arc::new(harness.clone()), Arc::clone(&shared), self.config);
        for provider in self.providers {
            runtime.register(provider).expect("the provider registers");
        }
        if let Some(setup) = self.setup {
            setup(&harness, &runtime);
        }
        let root = if self.resume_root {
            harness
                .resume(resuming(sid(&self.root)))
                .await
                .unwrap_or_else(|err| panic!("{}the root resumes: {err}", self.label))
        } else {
            let mut header = SessionHeader::new(sid(&self.root), &project);
            if let Some(edit) = self.edit_root {
                edit(&mut header);
            }
            harness
                .create(fresh(header))
                .await
                .unwrap_or_else(|err| panic!("{}the root is created: {err}", self.label))
        };
        World {
            dir,
            sessions,
            project,
            _temp: temp,
            jsonl,
            store,
            shared,
            model,
            harness,
            runtime,
            root,
        }
    }
}

/// Copy every file of `from` into `to` (created).
#[allow(clippy::expect_used)]
fn copy_logs(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("the sessions directory");
    for entry in std::fs::read_dir(from).expect("the old directory lists") {
        let path = entry.expect("a directory entry").path();
        if path.is_file()
            && let Some(name) = path.file_name()
        {
            std::fs::copy(&path, to.join(name)).expect("a log copies");
        }
    }
}
