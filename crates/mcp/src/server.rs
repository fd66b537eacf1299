//! One connected MCP server: its process (started by `dsh-process`, so it
//! is in its own group, with the parent-death signal and a scrubbed
//! environment), the `rmcp` client session over its pipes, its current tool
//! catalog (re-listed when it sends `notifications/tools/list_changed`),
//! its state, and the one way to call a tool (bounded by the call timeout,
//! and ended early when the process dies). The catalog and the state are
//! private to this module; [`Server::listed`], [`Server::status`] and
//! [`Server::call`] are what the tool adapter and the listing see.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use dsh_core::schema::JsonSchema;
use dsh_core::{ContentBlock, ToolOutput};
use dsh_process::{ProcessGroup, StderrTail};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ResourceContents,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::McpError;
use crate::config::{Endpoint, McpServerConfig};

/// How long a server may take to exit after its stdin closed, then after
/// SIGTERM, before the next rung of the ladder.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// How long a server that failed its start may take to exit by itself
/// (with its last words on stderr) before it is stopped.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// A tool as its server lists it.
#[derive(Debug)]
pub(crate) struct Listed {
    /// Its name on the server.
    pub(crate) name: String,
    /// Its description (its title when it has none).
    pub(crate) description: String,
    /// Its input schema, as listed.
    pub(crate) schema: Value,
    /// The same, compiled.
    pub(crate) compiled: JsonSchema,
}

/// The server's tools, as last listed.
#[derive(Debug, Default)]
struct Catalog {
    /// The usable tools, by their name on the server.
    tools: BTreeMap<String, Arc<Listed>>,
    /// The refused ones, with why.
    refused: BTreeMap<String, String>,
}

/// What a server is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Started and answering.
    Ready,
    /// Its process ended, or its connection closed (why).
    Exited(String),
    /// Stopped by its tree.
    Stopped,
}

/// The client side of the session: it hears list changes.
struct Handler {
    list_changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("dsh", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }
}

/// One connected server.
pub(crate) struct Server {
    config: McpServerConfig,
    session: tokio::sync::Mutex<Option<RunningService<RoleClient, Handler>>>,
    peer: rmcp::Peer<RoleClient>,
    group: tokio::sync::Mutex<Option<ProcessGroup>>,
    exit: Option<watch::Receiver<Option<ExitStatus>>>,
    tail: Option<StderrTail>,
    catalog: Mutex<Catalog>,
    state: Mutex<ServerState>,
    /// Bumped after every listing, for whoever waits for a re-list.
    listings: watch::Sender<u64>,
    /// Ends the re-listing task.
    stop: CancellationToken,
}

impl Server {
    /// Start the server, open the session and list its tools.
    /// A URL server is reached with `http`.
    pub(crate) async fn start(
        config: McpServerConfig,
        cwd: &Path,
        http: &reqwest::Client,
    ) -> Result<Arc<Self>, McpError> {
        let list_changed = Arc::new(Notify::new());
        let handler = Handler {
            list_changed: list_changed.clone(),
        };
        let name = config.name.clone();
        let (session, group, exit, tail) = match &config.endpoint {
            Endpoint::Command {
                command,
                args,
                inherit_env,
                env,
            } => {
                let spawned = dsh_process::spawn(&dsh_process::Launch {
                    command,
                    args,
                    inherit_env,
                    env,
                    cwd,
                    label: &name,
                })
                .map_err(|err| McpError::Spawn {
                    server: name.clone(),
                    reason: err.to_string(),
                })?;
                let mut group = spawned.group;
                let exit = group.exit_watch();
                let tail = group.stderr_tail();
                let serve = handler.serve((spawned.stdout, spawned.stdin));
                let session = match tokio::time::timeout(config.startup_timeout, serve).await {
                    Ok(Ok(session)) => session,
                    failed => {
                        let reason = match failed {
                            Ok(Err(err)) => err.to_string(),
                            _ => format!(
                                "it did not answer `initialize` within {}s",
                                config.startup_timeout.as_secs()
                            ),
                        };
                        // Stopped (given a moment to exit by itself) before
                        // its stderr is read: the stop joins the reaper,
                        // which has then read the pipe to its end.
                        let _ = group.stop(Some(EXIT_GRACE), STOP_GRACE).await;
                        return Err(McpError::Start {
                            server: name,
                            reason,
                            stderr: tail_text(&tail),
                        });
                    }
                };
                (session, Some(group), Some(exit), Some(tail))
            }
            Endpoint::Url { url, headers } => {
                let session = connect_url(&config, url, headers, http, handler).await?;
                (session, None, None, None)
            }
        };
        let peer = session.peer().clone();
        let server = Arc::new(Self {
            config,
            session: tokio::sync::Mutex::new(Some(session)),
            peer,
            group: tokio::sync::Mutex::new(group),
            exit,
            tail,
            catalog: Mutex::new(Catalog::default()),
            state: Mutex::new(ServerState::Ready),
            listings: watch::Sender::new(0),
            stop: CancellationToken::new(),
        });
        let listed = tokio::time::timeout(server.config.startup_timeout, server.relist()).await;
        if let Err(reason) = listed
            .map_err(|_| {
                format!(
                    "it did not answer `tools/list` within {}s",
                    server.config.startup_timeout.as_secs()
                )
            })
            .and_then(|listed| listed)
        {
            server.shutdown().await;
            return Err(McpError::Start {
                server: server.config.name.clone(),
                reason,
                stderr: server.stderr(),
            });
        }
        tokio::spawn(relist_on_change(
            Arc::downgrade(&server),
            list_changed,
            server.stop.clone(),
        ));
        Ok(server)
    }

    /// The server's name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// List the tools again and replace the catalog.
    async fn relist(&self) -> Result<(), String> {
        let tools = self
            .peer
            .list_all_tools()
            .await
            .map_err(|err| format!("`tools/list` failed: {err}"))?;
        let mut catalog = Catalog::default();
        for tool in tools {
            let schema = Value::Object((*tool.input_schema).clone());
            match admit(&self.config.name, &tool.name, &schema) {
                Ok(compiled) => {
                    let description = tool
                        .description
                        .map(|d| d.into_owned())
                        .or(tool.title)
                        .unwrap_or_default();
                    let listed = Listed {
                        name: tool.name.to_string(),
                        description,
                        schema,
                        compiled,
                    };
                    catalog.tools.insert(listed.name.clone(), Arc::new(listed));
                }
                Err(reason) => {
                    tracing::warn!(server = %self.config.name, tool = %tool.name, "MCP tool refused: {reason}");
                    catalog.refused.insert(tool.name.to_string(), reason);
                }
            }
        }
        *self.catalog.lock().unwrap_or_else(PoisonError::into_inner) = catalog;
        self.listings.send_modify(|n| *n += 1);
        Ok(())
    }

    /// The tool `name` as last listed, when the server still offers it.
    pub(crate) fn listed(&self, name: &str) -> Option<Arc<Listed>> {
        self.catalog
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tools
            .get(name)
            .cloned()
    }

    /// Every usable tool, by name.
    pub(crate) fn tools(&self) -> Vec<Arc<Listed>> {
        self.catalog
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tools
            .values()
            .cloned()
            .collect()
    }

    /// The refused tools, with why.
    pub(crate) fn refused(&self) -> Vec<(String, String)> {
        self.catalog
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refused
            .iter()
            .map(|(name, why)| (name.clone(), why.clone()))
            .collect()
    }

    /// A receiver of the listing count (bumped after each listing).
    pub(crate) fn listings(&self) -> watch::Receiver<u64> {
        self.listings.subscribe()
    }

    /// Cancelled when the server is stopped (or dropped).
    pub(crate) fn stopped(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// What the server is doing now.
    pub(crate) fn state(&self) -> ServerState {
        if let Some(exit) = &self.exit
            && let Some(status) = *exit.borrow()
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if *state == ServerState::Ready {
                *state = ServerState::Exited(format!("its process exited ({status})"));
            }
        }
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The last lines of its stderr, joined by ` | `.
    fn stderr(&self) -> String {
        self.tail.as_ref().map(tail_text).unwrap_or_default()
    }

    /// Call tool `tool` with `arguments`: a result the model sees, or why
    /// the call failed (for the model, and as the one line for the user).
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, String> {
        let name = &self.config.name;
        if self.state() != ServerState::Ready {
            return Err(format!(
                "MCP server `{name}` is not running; its tools cannot be called in this run."
            ));
        }
        let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let call = self.peer.call_tool(request);
        let mut exit = self.exit.clone();
        let died = async {
            match &mut exit {
                Some(exit) => {
                    let _ = exit.wait_for(Option::is_some).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let timeout = self.config.call_timeout;
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(format!("The call to `{tool}` was cancelled.")),
            result = call => match result {
                Ok(result) => Ok(output(result)),
                Err(rmcp::ServiceError::McpError(err)) => Err(format!(
                    "MCP server `{name}` refused the call to `{tool}`: {}",
                    err.message
                )),
                Err(rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)) => {
                    Err(self.crashed(tool).await)
                }
                Err(err) => Err(format!("MCP server `{name}` failed the call to `{tool}`: {err}")),
            },
            () = died => Err(self.crashed(tool).await),
            () = tokio::time::sleep(timeout) => Err(format!(
                "MCP server `{name}` did not answer the call to `{tool}` within {}s; the call was abandoned. \
                 Try again with less work, or without this tool.",
                timeout.as_secs()
            )),
        }
    }

    /// The text for a call the server's death ended. The connection may
    /// close a moment before the process is reaped: wait (bounded) for the
    /// exit, so the text names it.
    async fn crashed(&self, tool: &str) -> String {
        if let Some(mut exit) = self.exit.clone() {
            let _ = tokio::time::timeout(STOP_GRACE, exit.wait_for(Option::is_some)).await;
        }
        let name = &self.config.name;
        let state = self.state();
        let why = match &state {
            ServerState::Exited(why) => why.clone(),
            _ => "its connection closed".to_owned(),
        };
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = match state {
            ServerState::Ready => ServerState::Exited(why.clone()),
            other => other,
        };
        format!(
            "MCP server `{name}` stopped during the call to `{tool}` ({why}); its tools are unavailable for the rest of this run."
        )
    }

    /// Close the session and stop the process: stdin closed, then SIGTERM,
    /// then SIGKILL to its group; returns when no member is left.
    pub(crate) async fn shutdown(&self) {
        self.stop.cancel();
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            *state = ServerState::Stopped;
        }
        if let Some(session) = self.session.lock().await.take() {
            let _ = tokio::time::timeout(STOP_GRACE, session.cancel()).await;
        }
        if let Some(mut group) = self.group.lock().await.take()
            && let Err(err) = group.stop(Some(STOP_GRACE), STOP_GRACE).await
        {
            tracing::error!(server = %self.config.name, "{err}");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// How often a streamable-HTTP server's event stream is reconnected (one
/// second, then two, then four apart) before its connection counts as
/// closed.
const HTTP_RECONNECTS: usize = 3;

/// Open the session with the streamable-HTTP server at `url`, sending
/// `headers` with every request: `initialize` answered within the startup
/// timeout, or one error naming the URL (a header that cannot be sent, a
/// refused connection, a certificate the client does not trust, an HTTP
/// error status), without a retry.
async fn connect_url(
    config: &McpServerConfig,
    url: &str,
    headers: &BTreeMap<String, String>,
    http: &reqwest::Client,
    handler: Handler,
) -> Result<RunningService<RoleClient, Handler>, McpError> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::common::client_side_sse::ExponentialBackoff;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    // One line, whatever the server's error page holds.
    let failed = |reason: String| McpError::Start {
        server: config.name.clone(),
        reason: format!(
            "`{url}`: {}",
            reason
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        stderr: String::new(),
    };
    let mut retry = ExponentialBackoff::default();
    retry.max_times = Some(HTTP_RECONNECTS);
    let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url);
    transport_config.retry_config = Arc::new(retry);
    for (name, value) in headers {
        let checked = match crate::config::check_header(name, value) {
            Some(reason) => Err(reason),
            None => reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .ok()
                .zip(reqwest::header::HeaderValue::from_str(value).ok())
                .ok_or("it cannot be sent"),
        };
        let (name, mut value) =
            checked.map_err(|reason| failed(format!("header `{name}`: {reason}")))?;
        // Kept out of the HTTP client's own debugging output.
        value.set_sensitive(true);
        transport_config.custom_headers.insert(name, value);
    }
    let transport = StreamableHttpClientTransport::with_client(http.clone(), transport_config);
    let reason = match tokio::time::timeout(config.startup_timeout, handler.serve(transport)).await
    {
        Ok(Ok(session)) => return Ok(session),
        // Its transport error is not its `source`: opened by hand.
        Ok(Err(rmcp::service::ClientInitializeError::TransportError { error, .. })) => {
            http_reason(&error)
        }
        Ok(Err(err)) => http_reason(&err),
        Err(_) => format!(
            "it did not answer `initialize` within {}s",
            config.startup_timeout.as_secs()
        ),
    };
    Err(failed(reason))
}

/// Why a start over HTTP failed: the transport's own error (without the
/// SDK's wrapping that names its Rust types), and for the HTTP client's
/// error its causes too (`error sending request for url (...): ...:
/// Connection refused`); else `err`'s whole chain.
fn http_reason(err: &(dyn std::error::Error + 'static)) -> String {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut source = Some(err);
    while let Some(current) = source {
        match current.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::Client(client)) => return error_chain(client),
            Some(other) => return error_chain(other),
            None => source = current.source(),
        }
    }
    error_chain(err)
}

/// An error and its causes, joined by `: ` (a cause its parent's text
/// already ends with is not repeated).
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let piece = cause.to_string();
        if !text.ends_with(&piece) {
            text.push_str(": ");
            text.push_str(&piece);
        }
        source = cause.source();
    }
    text
}

/// Re-list `server`'s tools each time it says they changed, until `stop`.
async fn relist_on_change(server: Weak<Server>, changed: Arc<Notify>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = changed.notified() => {}
        }
        let Some(server) = server.upgrade() else {
            return;
        };
        if let Err(reason) = server.relist().await {
            tracing::warn!(server = %server.name(), "re-listing the MCP tools failed: {reason}");
        }
    }
}

/// Check a listed tool: its full name is one a model API takes, and its
/// input schema is an object schema that compiles.
fn admit(server: &str, tool: &str, schema: &Value) -> Result<JsonSchema, String> {
    let full = crate::tool_name(server, tool);
    if full.len() > 64
        || !full
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "its name `{full}` is not 1 to 64 ASCII letters, digits, `-` or `_`"
        ));
    }
    if schema.get("type") != Some(&Value::from("object")) {
        return Err(
            "its input schema is not an object schema (`\"type\": \"object\"` at the root)"
                .to_owned(),
        );
    }
    JsonSchema::compile(schema.clone())
        .map_err(|err| format!("its input schema does not compile: {err}"))
}

/// A call's result as the model sees it.
fn output(result: CallToolResult) -> ToolOutput {
    let mut content: Vec<ContentBlock> = result
        .content
        .into_iter()
        .map(|block| match block {
            rmcp::model::ContentBlock::Text(text) => ContentBlock::text(text.text),
            rmcp::model::ContentBlock::Image(image) => ContentBlock::Image {
                media_type: image.mime_type,
                data: image.data,
            },
            rmcp::model::ContentBlock::Audio(audio) => {
                ContentBlock::text(format!("[audio ({}) not shown]", audio.mime_type))
            }
            rmcp::model::ContentBlock::Resource(resource) => match resource.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    ContentBlock::text(format!("[resource {uri}]\n{text}"))
                }
                ResourceContents::BlobResourceContents { uri, mime_type, .. } => {
                    ContentBlock::text(format!(
                        "[resource {uri} ({}) not shown]",
                        mime_type.as_deref().unwrap_or("binary")
                    ))
                }
                _ => ContentBlock::text("[resource not shown]"),
            },
            rmcp::model::ContentBlock::ResourceLink(link) => {
                ContentBlock::text(format!("[resource link {} ({})]", link.uri, link.name))
            }
            _ => ContentBlock::text("[content not shown]"),
        })
        .collect();
    if content.is_empty()
        && let Some(structured) = result.structured_content
    {
        content.push(ContentBlock::text(structured.to_string()));
    }
    ToolOutput {
        content,
        is_error: result.is_error == Some(true),
        end_turn: false,
    }
}

/// Stderr's kept lines, joined by ` | `.
fn tail_text(tail: &StderrTail) -> String {
    let tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
    tail.iter().cloned().collect::<Vec<_>>().join(" | ")
}
