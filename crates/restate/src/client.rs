//! [`RestateClient`]: the calls dsh makes to a Restate server from outside
//! a handler, over plain HTTP/1.1: registering a worker with the admin API,
//! calling the objects' handlers through the ingress, and the admin API's
//! SQL over the server's tables. Loopback and plain `http://` only for now
//! (no TLS roots are configured; an `https://` URL fails to connect).
//!
//! A call through the ingress waits for a worker to run its handler, and
//! the server retries that for as long as its retry policy says (with the
//! defaults, for ever). [`RestateClient::with_worker_wait`] bounds the
//! wait: the server's last failure for the call is reported once through
//! a [`Stall`] as soon as the admin API shows one, and the call ends with
//! [`ClientError::NoWorker`] at the bound.
//!
//! A turn the server keeps retrying is [`ClientError::TurnFailing`], named
//! with its session, its step and the server's text. The file is long
//! (over 800 lines) because it is one short documented method per call
//! the server answers; splitting it would split one client.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::{InboxTarget, MessageId, SessionHeader, SessionId, UserMessage};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::object::{EventPage, InboxStatus, SessionSeed};
use crate::state::inbox::{AcceptRequest, Acceptance, InboxItem, InboxState};
use crate::state::log::LogHead;

/// How many retries in a row make a turn "failing" for
/// [`RestateClient::check_turns`]: a worker's death costs one or two (the
/// turn goes on elsewhere); five is 1.25 s of backing off with a 50 ms
/// first interval, 15.5 s with the server's default 500 ms.
pub const FAILING_AFTER_RETRIES: u32 = 5;

/// Where a session stands: its log's head and its inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStatus {
    /// The log's head (events, turns ended, the open turn).
    pub head: LogHead,
    /// The inbox (a turn scheduled, input waiting).
    pub inbox: InboxStatus,
}

impl SessionStatus {
    /// No turn is scheduled or open: the session waits for input.
    pub fn is_idle(&self) -> bool {
        !self.inbox.turn_scheduled && self.head.open_turn.is_none()
    }
}

/// Why a call to the server failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    /// The TLS configuration could not be built.
    #[error("building the TLS configuration: {0}")]
    Tls(#[source] rustls::Error),
    /// The request did not get an answer (connection refused, reset).
    #[error("{url}: {source}")]
    Transport {
        /// The URL asked.
        url: String,
        /// What failed.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with an error status: for a handler's refusal,
    /// the status is its code (409) and the body names it
    /// (`{"message":"DRAINING: ..."}`).
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The answer's body.
        body: String,
    },
    /// The cluster's workers run another version of dsh than this client.
    #[error("the workers run dsh {worker}, this is dsh {client}: deploy one version")]
    WorkerVersion {
        /// The workers' version.
        worker: String,
        /// This client's version.
        client: String,
    },
    /// The session does not exist on the cluster.
    #[error("session `{0}` does not exist on the cluster")]
    NoSuchSession(SessionId),
    /// No worker ran the handler called through the ingress within the
    /// bound of [`RestateClient::with_worker_wait`]. The call stays with
    /// the server, which runs it once a worker answers.
    #[error("no worker answered `{}` within {} s{}", .stall.call, .waited.as_secs(), .stall.cause())]
    NoWorker {
        /// The call and the server's last failure for it.
        stall: Stall,
        /// How long the call waited.
        waited: Duration,
    },
    /// A turn of the session keeps failing: the server retries it (or
    /// paused it) instead of finishing it. A journal mismatch (a turn
    /// replayed by a worker of another build that did not take the same
    /// path), a step failing on every worker, or no worker reachable;
    /// `step` names the journal entry it failed at, if the server names
    /// one.
    #[error("a turn of `{session}` is failing ({status}){}: {}{error}", step.as_ref().map(|step| format!(" at `{step}`")).unwrap_or_default(), mismatch_hint(error))]
    TurnFailing {
        /// The session.
        session: SessionId,
        /// The invocation's status (`backing-off`, `paused`, or `completed`
        /// for one that failed for good).
        status: String,
        /// The journal entry it failed at (`model:0:1`, `tool:call-1`): for
        /// a journal mismatch, the one the replay tried where the journal
        /// holds another (the server's text, in `error`, names both).
        step: Option<String>,
        /// The last failure, as the server reports it (`[570 Journal
        /// mismatch] ...`).
        error: String,
    },
    /// The answer is not the JSON expected.
    #[error("{url}: unexpected answer: {source}")]
    Decode {
        /// The URL asked.
        url: String,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
}

/// What a journal mismatch (the server's `[570 Journal mismatch] ...`)
/// means for dsh, put before the server's text; nothing for another
/// failure. A turn replays the same path from the same journal on the
/// same build and dsh.toml, so a mismatch points at the workers.
fn mismatch_hint(error: &str) -> &'static str {
    if error.starts_with("[570 ") {
        "its replay took another path than its journal (every worker must run the build and \
         dsh.toml that started it; docs/distributed.md, Versions): "
    } else {
        ""
    }
}

/// A client of one Restate server's ingress and admin APIs. Cloning is
/// cheap (a shared connection pool).
#[derive(Debug, Clone)]
pub struct RestateClient {
    http: reqwest::Client,
    ingress: Arc<str>,
    admin: Arc<str>,
    /// How long an ingress call waits for a worker; `None`: as long as
    /// the server retries.
    worker_wait: Option<WorkerWait>,
}

/// A call through the ingress that no worker has answered yet, as the
/// admin API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// The handler called (`dsh.Session/{id}/create`).
    pub call: String,
    /// The worker the server last tried (its deployment's URL), or every
    /// registered worker when it has not tried one yet.
    pub worker: Option<String>,
    /// The server's last failure for the call, if it has one yet.
    pub failure: Option<String>,
}

impl Stall {
    /// ` (the server's last try, at URL, failed: ...)`, or nothing.
    fn cause(&self) -> String {
        match (&self.worker, &self.failure) {
            (Some(worker), Some(failure)) => {
                format!(" (the server's last try, at {worker}, failed: {failure})")
            }
            (None, Some(failure)) => format!(" (the server's last try failed: {failure})"),
            (Some(worker), None) => format!(" (the worker at {worker} did not run it)"),
            (None, None) => String::new(),
        }
    }
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no worker has answered `{}` yet{}",
            self.call,
            self.cause()
        )
    }
}

/// What is told of a stalled call.
type StallHook = Arc<dyn Fn(&Stall) + Send + Sync>;

/// The bound of [`RestateClient::with_worker_wait`].
#[derive(Clone)]
struct WorkerWait {
    bound: Duration,
    stalled: StallHook,
}

impl fmt::Debug for WorkerWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerWait")
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

/// How often a stalled ingress call asks the admin API why.
const STALL_POLL: Duration = Duration::from_millis(500);

impl RestateClient {
    /// A client of the server whose ingress and admin APIs answer at these
    /// base URLs (`http://127.0.0.1:8080`, `http://127.0.0.1:9070`).
    ///
    /// # Errors
    /// [`ClientError::Tls`] or [`ClientError::Build`].
    pub fn new(ingress: &str, admin: &str) -> Result<Self, ClientError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(ClientError::Tls)?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .build()
            .map_err(ClientError::Build)?;
        Ok(Self {
            http,
            ingress: Arc::from(ingress.trim_end_matches('/')),
            admin: Arc::from(admin.trim_end_matches('/')),
            worker_wait: None,
        })
    }

    /// This client with every call through the ingress bounded: one that
    /// no worker has answered after `bound` ends with
    /// [`ClientError::NoWorker`] (the call itself stays with the server).
    /// While it waits, the admin API is asked why about twice a second;
    /// `stalled` hears the first answer that names a failure, once per
    /// call.
    pub fn with_worker_wait(
        mut self,
        bound: Duration,
        stalled: impl Fn(&Stall) + Send + Sync + 'static,
    ) -> Self {
        self.worker_wait = Some(WorkerWait {
            bound,
            stalled: Arc::new(stalled),
        });
        self
    }

    /// Register (or register again, replacing) the worker serving dsh's
    /// objects at `uri` (`http://127.0.0.1:9080`): the server asks it for
    /// its services over HTTP/2 and sends it their invocations from then
    /// on.
    ///
    /// # Errors
    /// [`ClientError::Transport`], or [`ClientError::Status`] when the
    /// server could not discover the worker.
    ///
    /// # Cancel safety
    /// Cancel safe to drop; the server may have registered the worker.
    pub async fn register_deployment(&self, uri: &str) -> Result<(), ClientError> {
        let url = format!("{}/deployments", self.admin);
        let body = serde_json::json!({ "uri": uri, "force": true });
        self.post::<serde_json::Value>(&url, &body, None).await?;
        Ok(())
    }

    /// Run an SQL query over the server's tables (`state`,
    /// `sys_invocation`, ...) through the admin API; one JSON object a row.
    ///
    /// # Errors
    /// [`ClientError::Transport`], [`ClientError::Status`] (a bad query
    /// answers 400) or [`ClientError::Decode`].
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn query(&self, sql: &str) -> Result<Vec<serde_json::Value>, ClientError> {
        #[derive(serde::Deserialize)]
        struct Rows {
            rows: Vec<serde_json::Value>,
        }
        let url = format!("{}/query", self.admin);
        let rows: Rows = self
            .post(&url, &serde_json::json!({ "query": sql }), None)
            .await?;
        Ok(rows.rows)
    }

    /// Accept a message into `session`'s inbox (`dsh.Inbox/{id}/accept`),
    /// once per request id.
    ///
    /// # Errors
    /// As [`RestateClient::query`]; a refusal (`DRAINING`) is a
    /// [`ClientError::Status`] 409.
    ///
    /// # Cancel safety
    /// Cancel safe to drop; the message may have been accepted, and asking
    /// again with the same request id accepts it at most once.
    pub async fn accept(
        &self,
        session: &SessionId,
        request: &AcceptRequest,
    ) -> Result<Acceptance, ClientError> {
        self.call("dsh.Inbox", session, "accept", request, None)
            .await
    }

    /// Claim the waiting items of one list of `session`'s inbox, oldest
    /// first. `idempotency_key` makes a retried claim return the same
    /// items instead of claiming again.
    ///
    /// # Errors
    /// As [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Not cancel safe without an idempotency key: dropped, the items may
    /// have been claimed and their answer lost.
    pub async fn claim(
        &self,
        session: &SessionId,
        target: InboxTarget,
        idempotency_key: Option<&str>,
    ) -> Result<Vec<InboxItem>, ClientError> {
        self.call("dsh.Inbox", session, "claim", &target, idempotency_key)
            .await
    }

    /// Drop waiting items of `session`'s inbox by message id.
    ///
    /// # Errors
    /// As [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Cancel safe to drop; the items may have been dropped, and asking
    /// again drops nothing more.
    pub async fn discard(&self, session: &SessionId, ids: &[MessageId]) -> Result<(), ClientError> {
        self.call("dsh.Inbox", session, "discard", ids, None).await
    }

    /// Make `session`'s inbox refuse new input (`DRAINING`).
    ///
    /// # Errors
    /// As [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Cancel safe to drop; the inbox may be draining.
    pub async fn drain(&self, session: &SessionId) -> Result<(), ClientError> {
        self.bare("dsh.Inbox", session.as_str(), "drain").await
    }

    /// Check that the cluster's workers run this version of dsh.
    ///
    /// # Errors
    /// [`ClientError::WorkerVersion`]; as [`RestateClient::query`] (no
    /// worker registered: a 404 naming `dsh.Worker`).
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn check_worker(&self) -> Result<(), ClientError> {
        let worker: String = self.bare("dsh.Worker", "", "version").await?;
        if worker != crate::object::WORKER_VERSION {
            return Err(ClientError::WorkerVersion {
                worker,
                client: crate::object::WORKER_VERSION.to_owned(),
            });
        }
        Ok(())
    }

    /// Interrupt `session`: park its inbox (input waits and wakes nothing
    /// until [`RestateClient::unpark`]); a running turn ends `aborted` at
    /// its next check (a model step or tool call in flight finishes first).
    ///
    /// # Errors
    /// As [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Cancel safe to drop; the session may be parked.
    pub async fn interrupt(&self, session: &SessionId) -> Result<(), ClientError> {
        self.bare("dsh.Inbox", session.as_str(), "interrupt").await
    }

    /// Unpark `session`: waiting waking input starts a turn.
    ///
    /// # Errors
    /// As [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Cancel safe to drop; the session may be unparked.
    pub async fn unpark(&self, session: &SessionId) -> Result<(), ClientError> {
        self.bare("dsh.Inbox", session.as_str(), "unpark").await
    }

    /// Create a session's log (`dsh.Session/{id}/create`) with its header
    /// and seed.
    ///
    /// # Errors
    /// As [`RestateClient::query`]; an existing session is a
    /// [`ClientError::Status`] 409 naming `SESSION_EXISTS`.
    ///
    /// # Cancel safety
    /// Cancel safe to drop; the session may have been created.
    pub async fn create_session(&self, seed: &SessionSeed) -> Result<(), ClientError> {
        self.call("dsh.Session", &seed.header.id, "create", seed, None)
            .await
    }

    /// Start a session: create it with `header` and an empty log, then
    /// accept `prompt` (request id: the message's id), which schedules its
    /// first turn on the cluster.
    ///
    /// # Errors
    /// As [`RestateClient::create_session`] (an existing id is a 409
    /// naming `SESSION_EXISTS`), then as [`RestateClient::accept`].
    ///
    /// # Cancel safety
    /// Cancel safe to drop; the session may have been created, and with
    /// the prompt accepted or not (a second `start` is refused: send the
    /// prompt with [`RestateClient::accept`] and the same request id).
    pub async fn start(
        &self,
        header: &SessionHeader,
        prompt: UserMessage,
    ) -> Result<MessageId, ClientError> {
        let seed = SessionSeed {
            header: header.clone(),
            seed: Vec::new(),
        };
        self.create_session(&seed).await?;
        let request = AcceptRequest {
            request_id: prompt.id.to_string(),
            message: prompt,
            target: InboxTarget::NextTurn,
            wake: true,
        };
        Ok(self.accept(&header.id, &request).await?.message_id)
    }

    /// Where `session` stands, read through the admin API's SQL over the
    /// objects' state, so it answers with no worker up (a snapshot that
    /// may trail the objects by a moment).
    ///
    /// # Errors
    /// As [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn status(&self, session: &SessionId) -> Result<SessionStatus, ClientError> {
        // Session ids are letters, digits, `-`, `_` and `.`: safe in a
        // quoted SQL string.
        let sql = format!(
            "SELECT service_name, key, value_utf8 FROM state WHERE service_key = '{session}' \
             AND ((service_name = 'dsh.Inbox' AND key = 'inbox') \
             OR (service_name = 'dsh.Session' AND key IN ('head', 'header')))"
        );
        let url = format!("{}/query", self.admin);
        let mut status = SessionStatus {
            head: LogHead::default(),
            inbox: InboxState::default().status(),
        };
        let mut exists = false;
        for row in self.query(&sql).await? {
            let value = row["value_utf8"].as_str().unwrap_or_default();
            let decode = |source| ClientError::Decode {
                url: url.clone(),
                source,
            };
            match row["key"].as_str() {
                Some("inbox") => {
                    let state: InboxState = serde_json::from_str(value).map_err(decode)?;
                    status.inbox = state.status();
                }
                Some("head") => status.head = serde_json::from_str(value).map_err(decode)?,
                _ => exists = true,
            }
        }
        if !exists {
            return Err(ClientError::NoSuchSession(session.clone()));
        }
        Ok(status)
    }

    /// Fail with [`ClientError::TurnFailing`] if a turn of `session` is
    /// failing now: it has retried [`FAILING_AFTER_RETRIES`] times in a
    /// row, is paused, or is the session's newest turn and failed for good
    /// (admin SQL over the server's invocations). A turn that failed for
    /// good and was followed by another (the session went on), or whose
    /// session has scheduled its next turn since, is history, not
    /// reported, though the server keeps it for its journal retention.
    ///
    /// # Errors
    /// [`ClientError::TurnFailing`]; as [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn check_turns(&self, session: &SessionId) -> Result<(), ClientError> {
        // Session ids are letters, digits, `-`, `_` and `.`: safe in a
        // quoted SQL string.
        let turns = format!(
            "target_service_name = 'dsh.Session' and target_service_key = '{session}' \
             and target_handler_name = 'run_turn'"
        );
        // The SDK's protocol journals commands: the failing step's name is
        // `last_failure_related_command_name` (the `..._entry_name` columns
        // stay empty, they are the older protocols').
        let sql = format!(
            "select status, last_failure, last_failure_related_command_name, completion_failure \
             from sys_invocation where {turns} \
             and (status = 'paused' \
             or (status = 'backing-off' and retry_count >= {FAILING_AFTER_RETRIES}) \
             or (completion_result = 'failure' \
             and created_at = (select max(created_at) from sys_invocation where {turns})))"
        );
        let rows = self.query(&sql).await?;
        // Input accepted after the failure schedules the next turn before
        // the server lists its invocation: the failure is history already.
        let row = match rows.first() {
            Some(row) if row["status"] == "completed" => {
                (!self.status(session).await?.inbox.turn_scheduled).then_some(row)
            }
            row => row,
        };
        match row {
            None => Ok(()),
            Some(row) => Err(ClientError::TurnFailing {
                session: session.clone(),
                status: row["status"].as_str().unwrap_or_default().to_owned(),
                step: row["last_failure_related_command_name"]
                    .as_str()
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned),
                error: row["last_failure"]
                    .as_str()
                    .or_else(|| row["completion_failure"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
            }),
        }
    }

    /// How many invocations addressed to any of `sessions` (their logs or
    /// inboxes) the server has not completed yet: a turn running or
    /// suspended, an accept or a notice on its way (admin SQL over the
    /// server's invocations). Zero, with every session idle, means nothing
    /// more will happen to them unless asked.
    ///
    /// # Errors
    /// As [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn in_flight(&self, sessions: &[SessionId]) -> Result<u64, ClientError> {
        if sessions.is_empty() {
            return Ok(0);
        }
        // Session ids are letters, digits, `-`, `_` and `.`: safe in a
        // quoted SQL string.
        let keys: Vec<String> = sessions.iter().map(|id| format!("'{id}'")).collect();
        let sql = format!(
            "select count(*) as n from sys_invocation where status <> 'completed' \
             and target_service_name in ('dsh.Session', 'dsh.Inbox') \
             and target_service_key in ({})",
            keys.join(", ")
        );
        let rows = self.query(&sql).await?;
        Ok(rows
            .first()
            .and_then(|row| row["n"].as_u64())
            .unwrap_or_default())
    }

    /// Wait until `session` is idle ([`SessionStatus::is_idle`]), asking
    /// every `poll`; a turn that keeps failing ends the wait with
    /// [`ClientError::TurnFailing`] instead of waiting for ever.
    ///
    /// # Errors
    /// As [`RestateClient::status`] and [`RestateClient::check_turns`].
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn wait_idle(
        &self,
        session: &SessionId,
        poll: Duration,
    ) -> Result<SessionStatus, ClientError> {
        loop {
            self.check_turns(session).await?;
            let status = self.status(session).await?;
            if status.is_idle() {
                return Ok(status);
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// The header line of a session, `None` when it does not exist.
    ///
    /// # Errors
    /// As [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn header_line(&self, session: &SessionId) -> Result<Option<String>, ClientError> {
        self.bare("dsh.Session", session.as_str(), "header").await
    }

    /// A page of a session's log lines from seq `from`.
    ///
    /// # Errors
    /// As [`RestateClient::query`].
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn events_since(
        &self,
        session: &SessionId,
        from: u64,
    ) -> Result<EventPage, ClientError> {
        self.call("dsh.Session", session, "events_since", &from, None)
            .await
    }

    /// Call `handler` of object `service/key` through the ingress and wait
    /// for its answer.
    async fn call<Req: Serialize + ?Sized, Res: DeserializeOwned>(
        &self,
        service: &str,
        key: &SessionId,
        handler: &str,
        input: &Req,
        idempotency_key: Option<&str>,
    ) -> Result<Res, ClientError> {
        // Session ids are safe path segments (`SessionId` validates them).
        let url = format!("{}/{service}/{key}/{handler}", self.ingress);
        let answer = self.post(&url, input, idempotency_key);
        self.answered(service, key.as_str(), handler, answer).await
    }

    /// Call `handler` (without input) of `service/key` (a service when
    /// `key` is empty) through the ingress and wait for its answer.
    async fn bare<Res: DeserializeOwned>(
        &self,
        service: &str,
        key: &str,
        handler: &str,
    ) -> Result<Res, ClientError> {
        let url = match key {
            "" => format!("{}/{service}/{handler}", self.ingress),
            key => format!("{}/{service}/{key}/{handler}", self.ingress),
        };
        let answer = self.send(self.http.post(&url), &url);
        self.answered(service, key, handler, answer).await
    }

    /// Wait for `answer`, the ingress call of `service/key/handler`, within
    /// the client's worker wait (for ever without one): while it waits,
    /// ask the admin API why, tell the first failure seen, and end with
    /// [`ClientError::NoWorker`] at the bound.
    async fn answered<Res>(
        &self,
        service: &str,
        key: &str,
        handler: &str,
        answer: impl Future<Output = Result<Res, ClientError>>,
    ) -> Result<Res, ClientError> {
        let Some(wait) = &self.worker_wait else {
            return answer.await;
        };
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + wait.bound;
        let mut told = false;
        let mut stall = Stall {
            call: [service, key, handler]
                .into_iter()
                .filter(|part| !part.is_empty())
                .collect::<Vec<_>>()
                .join("/"),
            worker: None,
            failure: None,
        };
        tokio::pin!(answer);
        loop {
            let next = (tokio::time::Instant::now() + STALL_POLL).min(deadline);
            tokio::select! {
                answered = &mut answer => return answered,
                () = tokio::time::sleep_until(next) => {}
            }
            // An admin API that does not answer leaves the last word known.
            if let Ok(seen) = self.stall(&stall.call).await {
                stall.worker = seen.worker.or(stall.worker);
                stall.failure = seen.failure.or(stall.failure);
            }
            if !told && stall.failure.is_some() {
                told = true;
                (wait.stalled)(&stall);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::NoWorker {
                    stall,
                    waited: started.elapsed(),
                });
            }
        }
    }

    /// Why the newest unfinished invocation of `target` (`service/handler`
    /// or `service/key/handler`) has not finished: the server's last
    /// failure and the worker it tried.
    async fn stall(&self, target: &str) -> Result<Stall, ClientError> {
        // Services, handlers and session ids are letters, digits, `-`,
        // `_` and `.`: safe in a quoted SQL string.
        let sql = format!(
            "select last_failure, last_attempt_deployment_id from sys_invocation \
             where target = '{target}' and status <> 'completed' \
             order by modified_at desc limit 1"
        );
        let row = self.query(&sql).await?.into_iter().next();
        let text = |row: &Option<serde_json::Value>, column: &str| {
            row.as_ref()
                .and_then(|row| row[column].as_str())
                .filter(|text| !text.is_empty())
                .map(str::to_owned)
        };
        let failure = text(&row, "last_failure");
        let deployments = match text(&row, "last_attempt_deployment_id") {
            Some(id) => format!("select endpoint from sys_deployment where id = '{id}'"),
            None => "select endpoint from sys_deployment".to_owned(),
        };
        let endpoints: Vec<String> = self
            .query(&deployments)
            .await?
            .iter()
            .filter_map(|row| row["endpoint"].as_str().map(str::to_owned))
            .collect();
        Ok(Stall {
            call: String::new(),
            worker: (!endpoints.is_empty()).then(|| endpoints.join(", ")),
            failure,
        })
    }

    async fn post<Res: DeserializeOwned>(
        &self,
        url: &str,
        body: &(impl Serialize + ?Sized),
        idempotency_key: Option<&str>,
    ) -> Result<Res, ClientError> {
        let body = serde_json::to_vec(body).map_err(|source| ClientError::Decode {
            url: url.to_owned(),
            source,
        })?;
        let mut request = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(body);
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        self.send(request, url).await
    }

    /// Whether the server is up: its admin API and its ingress answer
    /// their health checks.
    ///
    /// # Errors
    /// [`ClientError::Transport`] while the server is not listening yet (or
    /// not at all), [`ClientError::Status`] while it is not ready.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn health(&self) -> Result<(), ClientError> {
        for url in [
            format!("{}/health", self.admin),
            format!("{}/restate/health", self.ingress),
        ] {
            self.send::<serde_json::Value>(self.http.get(&url), &url)
                .await?;
        }
        Ok(())
    }

    /// Send `request` (to `url`) and read its JSON answer.
    async fn send<Res: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<Res, ClientError> {
        let transport = |source| ClientError::Transport {
            url: url.to_owned(),
            source,
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(transport)?;
        if !status.is_success() {
            return Err(ClientError::Status {
                url: url.to_owned(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        // A handler returning `()` answers with an empty body.
        let bytes: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
        serde_json::from_slice(bytes).map_err(|source| ClientError::Decode {
            url: url.to_owned(),
            source,
        })
    }
}
