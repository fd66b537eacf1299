//! Opening an ACP session: `initialize`, the prompt checked against what
//! the agent accepts, `session/new` (or `session/load` of an earlier run's
//! session) in the run's directory with what the agent advertised
//! recorded, then the model, when one was asked for, through the agent's
//! model selector.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use agent_client_protocol::Agent;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    self as acp, Implementation, InitializeRequest, LoadSessionRequest, NewSessionRequest,
    SetSessionConfigOptionRequest,
};
use dsh_subagent::AdmissionError;
use tokio::sync::watch;

use super::{Open, Phase, Shared, StartFailure};
use crate::advertised::Advertised;
use crate::fault::Fault;

/// `initialize`, check the prompt against what the agent accepts, then
/// `session/new` in `cwd`, recording what the agent advertised; then the
/// model, when one was asked for, through the agent's model selector.
pub(super) async fn open_session(
    cx: &agent_client_protocol::v1::ConnectionTo<Agent>,
    shared: &Shared,
    opening: Opening,
    exit: &mut watch::Receiver<Option<ExitStatus>>,
) -> Result<acp::SessionId, StartFailure> {
    let Opening {
        cwd,
        images,
        model,
        open,
    } = opening;
    shared.set_phase(Phase::Initialize);
    let initialize = InitializeRequest::new(ProtocolVersion::V1).client_info(Implementation::new(
        "dsh-subagent-acp",
        env!("CARGO_PKG_VERSION"),
    ));
    let initialized = match cx.send_request(initialize).block_task().await {
        Ok(response) => response,
        Err(err) => return Err(shared.request_fault(&err, exit).await.into()),
    };
    if images > 0 && !initialized.agent_capabilities.prompt_capabilities.image {
        return Err(Fault::ImagesUnsupported { count: images }.into());
    }
    let load_session = initialized.agent_capabilities.load_session;
    shared.set_phase(Phase::NewSession);
    if let Open::Load(session_id) = open {
        if !load_session {
            return Err(StartFailure::NotResumable(
                "the agent no longer advertises loadSession".to_owned(),
            ));
        }
        shared.replaying.store(true, Ordering::SeqCst);
        let loaded = cx
            .send_request(LoadSessionRequest::new(session_id.clone(), cwd.clone()))
            .block_task()
            .await;
        shared.replaying.store(false, Ordering::SeqCst);
        return match loaded {
            Ok(_) => {
                *shared
                    .session
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) =
                    Some((session_id.clone(), cwd, load_session));
                Ok(session_id)
            }
            Err(err) if agent_client_protocol::is_incoming_transport_closed(&err) => {
                Err(shared.request_fault(&err, exit).await.into())
            }
            Err(err) => Err(StartFailure::NotResumable(format!(
                "the agent did not load its session: {}",
                shared.request_fault(&err, exit).await
            ))),
        };
    }
    let session = match cx
        .send_request(NewSessionRequest::new(cwd.clone()))
        .block_task()
        .await
    {
        Ok(session) => session,
        Err(err) => return Err(shared.request_fault(&err, exit).await.into()),
    };
    *shared
        .session
        .lock()
        .unwrap_or_else(PoisonError::into_inner) =
        Some((session.session_id.clone(), cwd, load_session));
    let selector = ModelSelector::of(session.config_options.as_deref().unwrap_or_default());
    shared.advertised.record(Advertised {
        load_session: initialized.agent_capabilities.load_session,
        images: initialized.agent_capabilities.prompt_capabilities.image,
        models: selector.as_ref().map(|selector| selector.values.clone()),
    });
    let Some(model) = model else {
        return Ok(session.session_id);
    };
    let Some(selector) = selector else {
        return Err(StartFailure::Refused(
            AdmissionError::UnsupportedCapability {
                provider: shared.agent.clone(),
                capability: "agent_options (the agent advertises no model selector)",
            },
        ));
    };
    if !selector.values.contains(&model) {
        return Err(StartFailure::Refused(AdmissionError::UnsupportedValue {
            provider: shared.agent.clone(),
            option: "model",
            value: model,
            offered: selector.values,
        }));
    }
    let choose = SetSessionConfigOptionRequest::new(
        session.session_id.clone(),
        selector.config_id,
        acp::SessionConfigValueId::new(model),
    );
    match cx.send_request(choose).block_task().await {
        Ok(_) => Ok(session.session_id),
        Err(err) => Err(shared.request_fault(&err, exit).await.into()),
    }
}

/// What opening a session needs.
pub(super) struct Opening {
    pub(super) cwd: PathBuf,
    pub(super) images: usize,
    pub(super) model: Option<String>,
    pub(super) open: Open,
}

/// An agent's model selector: the first `select` option of category
/// `model`, and the value ids it offers (groups flattened).
struct ModelSelector {
    config_id: acp::SessionConfigId,
    values: Vec<String>,
}

impl ModelSelector {
    fn of(options: &[acp::SessionConfigOption]) -> Option<Self> {
        options.iter().find_map(|option| {
            let acp::SessionConfigKind::Select(select) = &option.kind else {
                return None;
            };
            if option.category != Some(acp::SessionConfigOptionCategory::Model) {
                return None;
            }
            let values = match &select.options {
                acp::SessionConfigSelectOptions::Ungrouped(options) => options
                    .iter()
                    .map(|option| option.value.to_string())
                    .collect(),
                acp::SessionConfigSelectOptions::Grouped(groups) => groups
                    .iter()
                    .flat_map(|group| &group.options)
                    .map(|option| option.value.to_string())
                    .collect(),
                _ => Vec::new(),
            };
            Some(Self {
                config_id: option.id.clone(),
                values,
            })
        })
    }
}
