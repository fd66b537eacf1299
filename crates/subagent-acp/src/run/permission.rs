//! Answering an ACP agent's permission requests by the run's policy:
//! allow or reject at once, or ask the host's asker, answering `cancelled`
//! when the run is disposed while the question waits.

use std::sync::PoisonError;

use agent_client_protocol::v1::schema::{
    PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome,
};

use super::Shared;
use crate::config::{PermissionAnswer, PermissionPolicy, PermissionQuestion};
use crate::fault::agent_text;
use crate::progress::ProgressUpdate;

impl Shared {
    /// Answer a permission request by the policy (asking the host's asker
    /// under `ask`; a dispose while it waits answers `cancelled`).
    pub(super) async fn answer(
        &self,
        request: &RequestPermissionRequest,
    ) -> RequestPermissionResponse {
        let pick = |kinds: [PermissionOptionKind; 2]| {
            kinds.iter().find_map(|kind| {
                request
                    .options
                    .iter()
                    .find(|option| option.kind == *kind)
                    .map(|option| option.option_id.clone())
            })
        };
        let once = [
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ];
        let always = [
            PermissionOptionKind::AllowAlways,
            PermissionOptionKind::AllowOnce,
        ];
        let action = agent_text(
            &request
                .tool_call
                .fields
                .title
                .clone()
                .unwrap_or_else(|| request.tool_call.tool_call_id.to_string()),
            &self.masked,
        );
        let allowed = match (self.permission, &self.asker) {
            (PermissionPolicy::Allow, _) => pick(once),
            (PermissionPolicy::AllowAlways, _) => pick(always),
            (PermissionPolicy::Ask, Some(asker)) => {
                let question = PermissionQuestion {
                    agent: self.agent.clone(),
                    session: self.run_id.clone(),
                    action: action.clone(),
                    kind: request
                        .tool_call
                        .fields
                        .kind
                        .as_ref()
                        .and_then(|kind| serde_json::to_value(kind).ok())
                        .and_then(|kind| kind.as_str().map(str::to_owned)),
                };
                let answer = tokio::select! {
                    biased;
                    () = self.stop.cancelled() => None,
                    answer = asker.0.ask(question) => Some(answer),
                };
                match answer {
                    Some(PermissionAnswer::AllowOnce) => pick(once),
                    Some(PermissionAnswer::AllowAlways) => pick(always),
                    Some(PermissionAnswer::Reject) => None,
                    None => {
                        return RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled);
                    }
                }
            }
            (PermissionPolicy::Reject | PermissionPolicy::Ask, _) => None,
        };
        let granted = allowed.is_some();
        if !granted {
            self.refused
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(action);
        }
        let outcome = match allowed.or_else(|| {
            pick([
                PermissionOptionKind::RejectOnce,
                PermissionOptionKind::RejectAlways,
            ])
        }) {
            Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
            None => RequestPermissionOutcome::Cancelled,
        };
        self.emit(ProgressUpdate::Permission {
            tool_call_id: request.tool_call.tool_call_id.to_string(),
            granted,
        });
        RequestPermissionResponse::new(outcome)
    }
}
