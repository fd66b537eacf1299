//! Scripted models the subagent suites share: one that echoes each agent's
//! prompt ([`echo`]), one that also holds the turns of `hold…` prompts
//! behind a gate ([`holding`]), and one that holds every `hold…` child's
//! first turn and otherwise answers from per-agent scripts ([`keyed`]).
//! One model serves every agent of a world, so each answers by the request.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use dsh_core::{Message, MessageSource, ModelRequest, Transcript};
use dsh_harness::{Scripted, ScriptedModel};
use tokio::sync::Semaphore;

use crate::requests::first_user_text;

/// `re: <the agent's first user text>`.
pub fn echo_of(request: &ModelRequest) -> Scripted {
    Scripted::Text(format!("re: {}", first_user_text(request)))
}

/// A model answering every request with [`echo_of`].
pub fn echo() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new().responder(echo_of))
}

/// `then`, held until `gate` gets a permit.
pub fn gated(gate: &Arc<Semaphore>, then: Scripted) -> Scripted {
    Scripted::Gated {
        gate: Arc::clone(gate),
        then: Box::new(then),
    }
}

/// A model that holds every request whose first user text starts with
/// `hold` until `gate` gets a permit, and echoes every request.
pub fn holding(gate: &Arc<Semaphore>) -> Arc<ScriptedModel> {
    let gate = Arc::clone(gate);
    Arc::new(ScriptedModel::new().responder(move |request| {
        if first_user_text(request).starts_with("hold") {
            gated(&gate, echo_of(request))
        } else {
            echo_of(request)
        }
    }))
}

/// Responses queued per agent, keyed by [`script_key`].
#[derive(Debug, Clone, Default)]
pub struct Scripts(Arc<Mutex<HashMap<String, VecDeque<Scripted>>>>);

impl Scripts {
    /// Queue `responses` for the agent whose requests have the key `key`.
    pub fn script(&self, key: &str, responses: impl IntoIterator<Item = Scripted>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default()
            .extend(responses);
    }

    /// The next response queued for `key`, if any.
    fn next(&self, key: &str) -> Option<Scripted> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(key)
            .and_then(VecDeque::pop_front)
    }
}

/// The script key of a request: the text of the last message the user
/// wrote (a root's turn), else of the first user message (a child's prompt).
pub fn script_key(messages: &Transcript) -> String {
    fn text(message: &Message) -> Option<(&MessageSource, String)> {
        match message {
            Message::User { content, source } => {
                Some((source, dsh_core::content::joined_text(content)))
            }
            _ => None,
        }
    }
    messages
        .iter()
        .rev()
        .filter_map(text)
        .find(|(source, _)| **source == MessageSource::User)
        .or_else(|| messages.iter().find_map(text))
        .map(|(_, text)| text)
        .unwrap_or_default()
}

/// A model that answers from the scripts it returns, by [`script_key`];
/// without one, it holds the first turn of an agent whose key starts with
/// `hold` (answering `done: <key>` once `gate` gets a permit) and answers
/// everything else with `ok`.
pub fn keyed(gate: &Arc<Semaphore>) -> (Arc<ScriptedModel>, Scripts) {
    let scripts = Scripts::default();
    let (gate, keyed) = (Arc::clone(gate), scripts.clone());
    let model = ScriptedModel::new().responder(move |request: &ModelRequest| {
        let key = script_key(&request.messages);
        if let Some(next) = keyed.next(&key) {
            return next;
        }
        if key.starts_with("hold") && request.messages.len() == 1 {
            gated(&gate, Scripted::Text(format!("done: {key}")))
        } else {
            Scripted::Text("ok".into())
        }
    });
    (Arc::new(model), scripts)
}
