//! One tree's MCP servers: configured once, started together on first use
//! ([`McpServers::tools`]), shared by every agent of the tree through the
//! tools they yield, and stopped with it ([`McpServers::shutdown`], or at
//! the latest when the set is dropped: each server's process group is then
//! SIGKILLed). [`McpServers::status`] is what a listing shows.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use dsh_core::Tool;
use serde::Serialize;
use tokio::sync::OnceCell;

use crate::McpError;
use crate::config::{Endpoint, McpServerConfig};
use crate::server::{Server, ServerState};
use crate::tool::McpTool;

/// How long connecting to a URL server may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The MCP servers of one tree.
pub struct McpServers {
    configs: Vec<McpServerConfig>,
    cwd: PathBuf,
    /// How URL servers' certificates are checked (see [`McpServers::with_tls`]).
    tls: Option<rustls::ClientConfig>,
    started: OnceCell<Vec<Arc<Server>>>,
    /// The full names of the tools handed out so far.
    offered: Arc<Mutex<BTreeSet<String>>>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServers")
            .field(
                "servers",
                &self.configs.iter().map(|c| &c.name).collect::<Vec<_>>(),
            )
            .field("started", &self.started.initialized())
            .finish()
    }
}

/// A server as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    /// Its name.
    pub name: String,
    /// Its command line, or its URL.
    pub endpoint: String,
    /// `disabled`, `not started`, `ready`, `exited: <why>` or `stopped`.
    pub state: String,
    /// Its tools as offered to agents.
    pub tools: Vec<ToolStatus>,
    /// Tools it lists that are not offered, with why.
    pub refused: Vec<ToolStatus>,
}

/// One tool in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolStatus {
    /// `mcp__<server>__<tool>` (for a refused tool, its name on the server).
    pub name: String,
    /// Its description, or why it is refused.
    pub description: String,
}

impl McpServers {
    /// The servers `configs` describe, to be started in `cwd`; nothing is
    /// started yet.
    ///
    /// # Errors
    /// [`McpError::Name`] for a server name that cannot be used, or used twice.
    pub fn new(configs: Vec<McpServerConfig>, cwd: PathBuf) -> Result<Self, McpError> {
        let mut seen = BTreeSet::new();
        for config in &configs {
            if let Some(reason) = crate::config::check_server_name(&config.name) {
                return Err(McpError::Name {
                    server: config.name.clone(),
                    reason: reason.to_owned(),
                });
            }
            if !seen.insert(config.name.as_str()) {
                return Err(McpError::Name {
                    server: config.name.clone(),
                    reason: "two servers have this name".to_owned(),
                });
            }
        }
        Ok(Self {
            configs,
            cwd,
            tls: None,
            started: OnceCell::new(),
            offered: Arc::default(),
        })
    }

    /// Check the certificates of the servers reached by an `https` URL with
    /// `tls` (dsh's own: `dsh_llm_openai::tls_config`, the system's roots).
    /// Without it an `https` server's certificate is trusted by no root, so
    /// its start fails at once; a plain `http` URL needs none.
    #[must_use]
    pub fn with_tls(mut self, tls: rustls::ClientConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Whether no server is configured.
    pub fn is_empty(&self) -> bool {
        self.configs.is_empty()
    }

    /// Start every enabled server (at the first call only; all at once)
    /// and return their tools, one [`Tool`] per listed tool, named
    /// `mcp__<server>__<tool>`, to register with the tree's harness.
    ///
    /// # Errors
    /// [`McpError::Start`] or [`McpError::Spawn`] for the first server that
    /// does not start (with its stderr's last lines); the servers that did
    /// start are stopped again.
    ///
    /// # Cancel safety
    /// A drop during the first call stops nothing it started until the set
    /// is dropped (each server's group is then SIGKILLed); a later call
    /// starts them again.
    pub async fn tools(&self) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        let servers = self.started.get_or_try_init(|| self.start_all()).await?;
        let mut offered = self.offered.lock().unwrap_or_else(PoisonError::into_inner);
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for server in servers {
            for listed in server.tools() {
                let tool = McpTool::new(server.clone(), &listed);
                offered.insert(tool.name().to_owned());
                tools.push(Arc::new(tool));
            }
        }
        Ok(tools)
    }

    /// Hand each tool a started server adds later (a re-listing that names
    /// a tool not handed out before) to `sink`, for as long as the server
    /// runs: what registers it makes it available to the agents created
    /// after that (an agent's tools are fixed when it is built). The sink is
    /// dropped when the servers stop. Does nothing before
    /// [`McpServers::tools`] started the servers.
    pub fn on_new_tools(&self, sink: impl Fn(Arc<dyn Tool>) + Send + Sync + 'static) {
        let Some(servers) = self.started.get() else {
            return;
        };
        let sink = Arc::new(sink);
        for server in servers {
            let mut listings = server.listings();
            // A re-listing between the start and now is looked at too.
            listings.mark_changed();
            let stopped = server.stopped();
            let server = Arc::downgrade(server);
            let offered = self.offered.clone();
            let sink = sink.clone();
            // Ends when the server stops: the sink (which may hold what
            // holds the server's tools) is dropped then.
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = stopped.cancelled() => return,
                        changed = listings.changed() => if changed.is_err() {
                            return;
                        },
                    }
                    let Some(server) = server.upgrade() else {
                        return;
                    };
                    for listed in server.tools() {
                        let tool = McpTool::new(server.clone(), &listed);
                        let new = offered
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(tool.name().to_owned());
                        if new {
                            sink(Arc::new(tool));
                        }
                    }
                }
            });
        }
    }

    async fn start_all(&self) -> Result<Vec<Arc<Server>>, McpError> {
        let http = self.http_client()?;
        let starts = self
            .configs
            .iter()
            .filter(|config| config.enabled)
            .map(|config| Server::start(config.clone(), &self.cwd, &http));
        let mut servers = Vec::new();
        let mut first_error = None;
        for started in futures::future::join_all(starts).await {
            match started {
                Ok(server) => servers.push(server),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        if let Some(err) = first_error {
            for server in &servers {
                server.shutdown().await;
            }
            return Err(err);
        }
        Ok(servers)
    }

    /// The HTTP client of the URL servers: the workspace's reqwest over
    /// rustls on `ring`, with [`McpServers::with_tls`]'s roots (none
    /// without it), no proxy guessing beyond the environment's.
    fn http_client(&self) -> Result<reqwest::Client, McpError> {
        let http_error = |reason: String| McpError::Http { reason };
        let tls = match &self.tls {
            Some(tls) => tls.clone(),
            None => {
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|err| http_error(err.to_string()))?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            }
        };
        reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("dsh-mcp/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| http_error(err.to_string()))
    }

    /// Every configured server, with its state and tools.
    pub fn status(&self) -> Vec<ServerStatus> {
        let started = self.started.get();
        self.configs
            .iter()
            .map(|config| {
                let server = started
                    .and_then(|servers| servers.iter().find(|server| server.name() == config.name));
                let state = match (config.enabled, server) {
                    (false, _) => "disabled".to_owned(),
                    (true, None) => "not started".to_owned(),
                    (true, Some(server)) => match server.state() {
                        ServerState::Ready => "ready".to_owned(),
                        ServerState::Exited(why) => format!("exited: {why}"),
                        ServerState::Stopped => "stopped".to_owned(),
                    },
                };
                let (tools, refused) = server.map_or_else(Default::default, |server| {
                    let tools = server
                        .tools()
                        .iter()
                        .map(|listed| ToolStatus {
                            name: crate::tool_name(&config.name, &listed.name),
                            description: listed.description.clone(),
                        })
                        .collect();
                    let refused = server
                        .refused()
                        .into_iter()
                        .map(|(name, description)| ToolStatus { name, description })
                        .collect();
                    (tools, refused)
                });
                ServerStatus {
                    name: config.name.clone(),
                    endpoint: endpoint_text(&config.endpoint),
                    state,
                    tools,
                    refused,
                }
            })
            .collect()
    }

    /// A receiver of server `name`'s listing count, bumped after each
    /// listing (the first and every re-listing); `None` when it is not
    /// running.
    pub fn listings(&self, name: &str) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.started
            .get()?
            .iter()
            .find(|server| server.name() == name)
            .map(|server| server.listings())
    }

    /// Stop every started server and wait until none of their processes is
    /// left.
    ///
    /// # Cancel safety
    /// A drop part-way leaves the servers not yet stopped running until the
    /// set is dropped (their groups are then SIGKILLed).
    pub async fn shutdown(&self) {
        if let Some(servers) = self.started.get() {
            futures::future::join_all(servers.iter().map(|server| server.shutdown())).await;
        }
    }
}

/// A server's command line (its program and arguments), or its URL.
fn endpoint_text(endpoint: &Endpoint) -> String {
    match endpoint {
        Endpoint::Command { command, args, .. } => std::iter::once(command.display().to_string())
            .chain(args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" "),
        Endpoint::Url { url, .. } => url.clone(),
    }
}
