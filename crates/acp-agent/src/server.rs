//! The connection: one client, its sessions (one [`Tree`] each) and their
//! turns. A request's handler runs in the protocol crate's dispatch loop,
//! so each one only checks and records, then leaves the work (building a
//! tree, a turn, a cancel) to a task of its own, which answers when done;
//! the loop goes on reading frames meanwhile (a `session/cancel` reaches
//! a turn that runs, a permission answer the question that waits).
//!
//! Refusals are the protocol's errors: an unknown session id is
//! `invalid_params`, a prompt while that session's turn runs is
//! `invalid_request`; a frame that is not JSON-RPC, or a method nobody
//! handles, is answered by the protocol crate itself. When the client
//! closes its side (end of input), or the host says stop, every tree is
//! stopped, children first, and closed, and every turn still running answers `cancelled` (to no
//! one): what the trees wrote stays written.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock as AcpBlock, Implementation,
    InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    McpCapabilities, McpServer, NewSessionRequest, NewSessionResponse, PromptCapabilities,
    PromptRequest, PromptResponse, SessionConfigOption, SessionConfigOptionCategory,
    SessionConfigSelectOption, SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
    StopReason,
};
use agent_client_protocol::{Agent, Client, Lines};
use dsh_core::ContentBlock;
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;

use crate::{Approvals, Client as TreeClient, Host, HostError, Models, Tree, TurnEnd, Updates};

/// The server's sessions.
struct Server {
    host: Arc<dyn Host>,
    sessions: Mutex<HashMap<String, Session>>,
    /// Turns, builds and cancels in flight, joined at the end.
    work: Mutex<JoinSet<()>>,
}

/// One session: its tree and whether a turn runs.
#[derive(Clone)]
struct Session {
    tree: Arc<dyn Tree>,
    busy: Arc<std::sync::atomic::AtomicBool>,
}

/// Serve `host` to the client at the other end of `input` and `output`
/// (stdin and stdout for `dsh acp`), one JSON-RPC message per line, until
/// the client closes `input` or `stop` completes (a signal). Every tree is
/// then stopped, children first, and closed.
///
/// # Errors
/// The connection failed (a write to `output` failed).
///
/// # Cancel safety
/// Not meant to be dropped: a drop leaves the trees to their host, which
/// must close them; what they wrote stays written.
pub async fn serve(
    host: Arc<dyn Host>,
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), agent_client_protocol::Error> {
    let incoming = futures::stream::unfold(Some(BufReader::new(input)), |reader| async move {
        let mut reader = reader?;
        let mut line = String::new();
        match reader.read_line(&mut line).await {
            Ok(0) => None,
            Ok(_) => {
                let line = line.trim_end_matches(['\n', '\r']).to_owned();
                Some((Ok(line), Some(reader)))
            }
            // A read error ends the input after it is told.
            Err(err) => Some((Err(err), None)),
        }
    })
    .boxed();
    let outgoing = Box::pin(futures::sink::unfold(
        output,
        |mut output, line: String| async move {
            output.write_all(line.as_bytes()).await?;
            output.write_all(b"\n").await?;
            output.flush().await?;
            Ok::<_, std::io::Error>(output)
        },
    ));
    let server = Arc::new(Server {
        host,
        sessions: Mutex::new(HashMap::new()),
        work: Mutex::new(JoinSet::new()),
    });
    let (on_init, on_new, on_load, on_prompt, on_cancel, on_config) = (
        server.clone(),
        server.clone(),
        server.clone(),
        server.clone(),
        server.clone(),
        server.clone(),
    );
    let closing = server.clone();
    Agent
        .v1()
        .name("dsh")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                responder.respond(on_init.initialize(&request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, cx| {
                let server = on_new.clone();
                on_new.spawn(async move {
                    let opened = server
                        .open(request.cwd, &request.mcp_servers, None, cx)
                        .await;
                    let _ = responder.respond_with_result(opened.map(|(id, tree)| {
                        NewSessionResponse::new(id).config_options(config_options(tree.as_ref()))
                    }));
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx| {
                let server = on_load.clone();
                on_load.spawn(async move {
                    let id = request.session_id.0.to_string();
                    let opened = server
                        .open(request.cwd, &request.mcp_servers, Some(id), cx)
                        .await;
                    let _ = responder.respond_with_result(opened.map(|(_, tree)| {
                        LoadSessionResponse::new().config_options(config_options(tree.as_ref()))
                    }));
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, _cx| {
                let id = request.session_id.0.to_string();
                let session = match on_prompt.begin_turn(&id) {
                    Ok(session) => session,
                    Err(err) => return responder.respond_with_error(err),
                };
                on_prompt.spawn(async move {
                    let content = request.prompt.iter().filter_map(block_of).collect();
                    let ended = session.tree.prompt(content).await;
                    session
                        .busy
                        .store(false, std::sync::atomic::Ordering::SeqCst);
                    let _ = responder.respond_with_result(
                        ended
                            .map(|end| PromptResponse::new(stop_reason(end)))
                            .map_err(error),
                    );
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: SetSessionConfigOptionRequest, responder, _cx| {
                responder.respond_with_result(on_config.set_option(&request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx| {
                let id = notification.session_id.0.to_string();
                if let Some(session) = on_cancel.session(&id) {
                    on_cancel.spawn(async move { session.tree.cancel().await });
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(Lines::new(outgoing, incoming), async move |cx| {
            tokio::select! {
                () = cx.incoming_closed() => {}
                () = stop => {}
            }
            closing.close().await;
            Ok(())
        })
        .await
}

impl Server {
    /// What dsh supports: loading sessions, images when the model takes
    /// them, and the client's MCP servers over stdio and streamable HTTP
    /// (not SSE).
    fn initialize(&self, request: &InitializeRequest) -> InitializeResponse {
        let version = std::cmp::min(
            request.protocol_version,
            agent_client_protocol::schema::ProtocolVersion::LATEST,
        );
        InitializeResponse::new(version)
            .agent_capabilities(
                AgentCapabilities::new()
                    .load_session(true)
                    .mcp_capabilities(McpCapabilities::new().http(true))
                    .prompt_capabilities(PromptCapabilities::new().image(self.host.images())),
            )
            .agent_info(Implementation::new("dsh", env!("CARGO_PKG_VERSION")))
    }

    /// Set the session's `model` option (the only one) to a value it
    /// lists; the answer is the session's options as they now are.
    fn set_option(
        &self,
        request: &SetSessionConfigOptionRequest,
    ) -> Result<SetSessionConfigOptionResponse, agent_client_protocol::Error> {
        let id = request.session_id.0.to_string();
        let Some(session) = self.session(&id) else {
            return Err(error(HostError::UnknownSession(id)));
        };
        let refused = |why: String| agent_client_protocol::Error::invalid_params().data(why);
        let Some(models) = session.tree.models() else {
            return Err(refused(format!("session `{id}` has no config options")));
        };
        if &*request.config_id.0 != MODEL_OPTION {
            return Err(refused(format!(
                "session `{id}` has no option `{}`; its only option is `{MODEL_OPTION}`",
                request.config_id.0
            )));
        }
        let value = request.value.as_value_id().map(|value| &*value.0);
        let Some(model) = value.filter(|value| models.choices.iter().any(|choice| choice == value))
        else {
            return Err(refused(format!(
                "the `{MODEL_OPTION}` option takes one of: {}",
                models.choices.join(", ")
            )));
        };
        session.tree.set_model(model).map_err(error)?;
        Ok(SetSessionConfigOptionResponse::new(
            config_options(session.tree.as_ref()).unwrap_or_default(),
        ))
    }

    fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.work
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .spawn(work);
    }

    fn session(&self, id: &str) -> Option<Session> {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// The session `id`, marked busy; refused when unknown or busy.
    fn begin_turn(&self, id: &str) -> Result<Session, agent_client_protocol::Error> {
        let Some(session) = self.session(id) else {
            return Err(error(HostError::UnknownSession(id.to_owned())));
        };
        if session.busy.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(error(HostError::Refused(format!(
                "session `{id}` is running a turn; wait for its answer or cancel it"
            ))));
        }
        Ok(session)
    }

    /// A new tree at `cwd`, or the persisted tree `load`, as a session,
    /// with the client's MCP servers `mcp`.
    ///
    /// # Cancel safety
    /// As the host's open and load.
    async fn open(
        &self,
        cwd: PathBuf,
        mcp: &[McpServer],
        load: Option<String>,
        cx: ConnectionTo<Client>,
    ) -> Result<(String, Arc<dyn Tree>), agent_client_protocol::Error> {
        if !cwd.is_absolute() {
            return Err(agent_client_protocol::Error::invalid_params()
                .data(format!("cwd `{}` is not an absolute path", cwd.display())));
        }
        if let Some(id) = &load
            && self.session(id).is_some()
        {
            return Err(error(HostError::Refused(format!(
                "session `{id}` is already open on this connection"
            ))));
        }
        let mcp_servers = crate::mcp::configs(mcp)?;
        let updates = Updates::new(cx.clone());
        let approvals = Approvals::new(cx, updates.clone());
        let client = TreeClient {
            updates,
            approvals: approvals.clone(),
            mcp_servers,
        };
        let tree = match &load {
            None => self.host.open(cwd, client).await,
            Some(id) => self.host.load(id, cwd, client).await,
        }
        .map_err(error)?;
        let id = tree.id().to_string();
        approvals.root(&tree.id());
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id.clone(),
                Session {
                    tree: tree.clone(),
                    busy: Arc::default(),
                },
            );
        Ok((id, tree))
    }

    /// Stop and close every tree, then wait for the work in flight.
    async fn close(&self) {
        let sessions: Vec<Session> = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, session)| session)
            .collect();
        futures::future::join_all(sessions.iter().map(|session| session.tree.close())).await;
        let mut work =
            std::mem::take(&mut *self.work.lock().unwrap_or_else(PoisonError::into_inner));
        while work.join_next().await.is_some() {}
    }
}

/// A prompt's block as dsh takes it (text and images; a resource's text).
fn block_of(block: &AcpBlock) -> Option<ContentBlock> {
    match block {
        AcpBlock::Text(text) => Some(ContentBlock::text(text.text.clone())),
        AcpBlock::Image(image) => Some(ContentBlock::Image {
            media_type: image.mime_type.clone(),
            data: image.data.clone(),
        }),
        AcpBlock::Resource(resource) => match &resource.resource {
            agent_client_protocol::v1::schema::EmbeddedResourceResource::TextResourceContents(
                text,
            ) => Some(ContentBlock::text(text.text.clone())),
            _ => None,
        },
        AcpBlock::ResourceLink(link) => Some(ContentBlock::text(link.uri.clone())),
        _ => None,
    }
}

fn stop_reason(end: TurnEnd) -> StopReason {
    match end {
        TurnEnd::EndTurn => StopReason::EndTurn,
        TurnEnd::Cancelled => StopReason::Cancelled,
        TurnEnd::MaxTurnRequests => StopReason::MaxTurnRequests,
        TurnEnd::Refusal => StopReason::Refusal,
        TurnEnd::BudgetSpent => StopReason::MaxTokens,
    }
}

/// A host's failure as the protocol's error.
/// The id of the session's model option.
const MODEL_OPTION: &str = "model";

/// The session's config options: the model, when the tree offers a
/// choice.
fn config_options(tree: &dyn Tree) -> Option<Vec<SessionConfigOption>> {
    let Models { current, choices } = tree.models()?;
    let options = choices
        .into_iter()
        .map(|choice| SessionConfigSelectOption::new(choice.clone(), choice))
        .collect::<Vec<_>>();
    Some(vec![
        SessionConfigOption::select(MODEL_OPTION, "Model", current, options)
            .description("The model of the lead and of every agent without a model of its own; a change applies from the next prompt.".to_owned())
            .category(SessionConfigOptionCategory::Model),
    ])
}

fn error(err: HostError) -> agent_client_protocol::Error {
    let base = match &err {
        HostError::UnknownSession(_) => agent_client_protocol::Error::invalid_params(),
        HostError::Refused(_) => agent_client_protocol::Error::invalid_request(),
        HostError::Failed(_) => agent_client_protocol::Error::internal_error(),
    };
    base.data(err.to_string())
}
