//! A session's approvals: the asker the host's workspace tools consult for
//! an action above the sandbox level, and its ACP children's own
//! permission requests under `permission = "ask"`, each put to the client
//! as one `session/request_permission` on the root session (a client that
//! knows nothing of child sessions can answer it). The request names the
//! agent's path of names, the tool and the exact command or path; its
//! `toolCall` is the asking call (the agent's newest open one, on the
//! agent's own session, `_meta.dsh.agentSessionId`).
//!
//! An answer covers that call only, or, when the client picks "always",
//! every later question of that agent for the session: it is remembered
//! here, never in the policy, so it cannot widen what the level and the
//! member's tool filter allow (only what would be asked is answered). No
//! answer (the client gone, the request failed, the client answered
//! `cancelled`, the call dropped) is a refusal, which the tool reports to
//! the model in a sentence it can act on.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use async_trait::async_trait;
use dsh_core::SessionId;
use dsh_subagent_acp::{PermissionAnswer, PermissionAsker, PermissionQuestion};
use dsh_tool_workspace::{Answer, Asker, Request};
use serde_json::json;

use crate::Updates;

/// The option ids offered.
const ALLOW: &str = "allow";
const ALWAYS: &str = "always";
const REJECT: &str = "reject";

/// A session's approvals; cheap to clone, every clone the same session.
#[derive(Clone)]
pub struct Approvals {
    inner: Arc<Inner>,
}

struct Inner {
    connection: ConnectionTo<Client>,
    updates: Updates,
    /// Who asks: the tree's root, once known.
    session: Mutex<Option<SessionId>>,
    /// Agents the client allowed for the session ("always"), by path.
    always: Mutex<HashSet<String>>,
    /// Ids for questions that name no open call.
    next: AtomicU64,
    /// What the host runs before a question, so that the updates the
    /// asking call caused have reached [`Updates`] (the asking call is then
    /// known).
    settle: Mutex<Option<Settle>>,
}

/// A host's hook run before each question ([`Approvals::before_asking`]).
type Settle = Arc<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").finish_non_exhaustive()
    }
}

/// What the client answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Once,
    Always,
    No,
}

/// One question, as the client sees it.
struct Question {
    /// The asking agent's path of names, read once it is announced (its
    /// provider's name until then for an ACP child).
    path: String,
    /// Its session: a member's, or an ACP child's run.
    agent: Option<SessionId>,
    tool: String,
    subject: String,
    kind: ToolKind,
}

impl Approvals {
    /// The approvals of a session on `connection`, naming agents through
    /// `updates`.
    pub(crate) fn new(connection: ConnectionTo<Client>, updates: Updates) -> Self {
        Self {
            inner: Arc::new(Inner {
                connection,
                updates,
                session: Mutex::new(None),
                always: Mutex::new(HashSet::new()),
                next: AtomicU64::new(0),
                settle: Mutex::new(None),
            }),
        }
    }

    /// The session the questions are asked on (the tree's root).
    pub fn root(&self, id: &SessionId) {
        *self
            .inner
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(id.clone());
    }

    /// Run `settle` before each question: a host whose events reach
    /// [`Updates`] through a queue waits there for what it already sent, so
    /// that the question names the asking call and follows its update.
    pub fn before_asking(
        &self,
        settle: impl Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync + 'static,
    ) {
        *self
            .inner
            .settle
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(settle));
    }

    /// The workspace tools' asker.
    pub fn workspace(&self) -> Arc<dyn Asker> {
        Arc::new(self.clone())
    }

    /// The ACP provider's asker (an ACP child's own permission requests).
    pub fn acp(&self) -> Arc<dyn PermissionAsker> {
        Arc::new(self.clone())
    }

    /// Put `question` to the client.
    ///
    /// # Cancel safety
    /// Dropped while the client thinks, the request stays with the client
    /// and its late answer is ignored; the call it was for is refused.
    async fn put(&self, question: Question) -> Reply {
        let settle = self
            .inner
            .settle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(settle) = settle {
            settle().await;
        }
        // A child asking before the runtime announced it: after its
        // announcement, which names it and shows its asking call.
        if let Some(agent) = &question.agent {
            self.inner.updates.announced(agent).await;
        }
        let Some(session) = self
            .inner
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return Reply::No;
        };
        // Named after the announcement: the path is then the child's.
        let path = match &question.agent {
            Some(agent) => self.inner.updates.name_of(agent),
            None => question.path.clone(),
        };
        let always = self
            .inner
            .always
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&path);
        if always {
            return Reply::Once;
        }
        let question = Question { path, ..question };
        let asking = question
            .agent
            .as_ref()
            .and_then(|agent| self.inner.updates.open_calls(agent).pop());
        let call = asking.unwrap_or_else(|| {
            format!(
                "approval-{}",
                self.inner.next.fetch_add(1, Ordering::Relaxed)
            )
        });
        let title = format!(
            "{}: {} `{}`",
            question.path, question.tool, question.subject
        );
        let meta = json!({ "dsh": {
            "agent": question.path,
            "agentSessionId": question.agent.as_ref().map(ToString::to_string),
            "tool": question.tool,
            "subject": question.subject,
        }});
        let tool_call = ToolCallUpdate::new(
            call,
            ToolCallUpdateFields::new()
                .title(title)
                .kind(question.kind)
                .raw_input(json!({ "tool": question.tool, "subject": question.subject })),
        )
        .meta(meta.as_object().cloned());
        let options = vec![
            PermissionOption::new(ALLOW, "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new(
                ALWAYS,
                format!("Always allow {} in this session", question.path),
                PermissionOptionKind::AllowAlways,
            ),
            PermissionOption::new(REJECT, "Reject", PermissionOptionKind::RejectOnce),
        ];
        let request = RequestPermissionRequest::new(session.to_string(), tool_call, options);
        let reply = match self
            .inner
            .connection
            .send_request(request)
            .block_task()
            .await
        {
            Ok(response) => match response.outcome {
                RequestPermissionOutcome::Selected(selected) => match &*selected.option_id.0 {
                    ALLOW => Reply::Once,
                    ALWAYS => Reply::Always,
                    _ => Reply::No,
                },
                _ => Reply::No,
            },
            Err(err) => {
                tracing::debug!("a permission request got no answer: {err}");
                Reply::No
            }
        };
        if reply == Reply::Always {
            self.inner
                .always
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(question.path);
        }
        reply
    }
}

#[async_trait]
impl Asker for Approvals {
    async fn ask(&self, request: &Request) -> Answer {
        let question = Question {
            path: String::new(),
            agent: Some(request.agent.clone()),
            tool: request.tool.clone(),
            subject: request.subject.clone(),
            kind: match request.tool.as_str() {
                "shell" => ToolKind::Execute,
                _ => ToolKind::Edit,
            },
        };
        match self.put(question).await {
            Reply::Once | Reply::Always => Answer::Allow,
            Reply::No => Answer::Deny,
        }
    }
}

#[async_trait]
impl PermissionAsker for Approvals {
    async fn ask(&self, question: PermissionQuestion) -> PermissionAnswer {
        let question = Question {
            path: question.agent,
            agent: Some(question.session),
            tool: question.kind.unwrap_or_else(|| "permission".to_owned()),
            subject: question.action,
            kind: ToolKind::Other,
        };
        match self.put(question).await {
            Reply::Once => PermissionAnswer::AllowOnce,
            Reply::Always => PermissionAnswer::AllowAlways,
            Reply::No => PermissionAnswer::Reject,
        }
    }
}
