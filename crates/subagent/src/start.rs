//! Starting a child. The caller's future does only the synchronous checks
//! of admission (`admission.rs`); what follows is work the runtime owns ([`Owned`]): a caller that
//! goes away cancels the work not yet published and the runtime's tracker
//! finishes the rest, so what is left is either nothing or a published,
//! monitored activation. Publication is: the catalog entry in the parent's
//! log, the activation installed, the initial prompt accepted, the monitor
//! running.

use crate::{AdmissionError, InfraError, RegistryError};

use futures::future::Either;

use std::sync::Arc;

use dsh_core::{
    Agent, AgentHandle, AgentSetup, CreateAgent, MessageSource, SessionId, UserMessage,
};

use crate::activation::{Execution, NewActivation, SubagentActivation};
use crate::admission::Admitted;
use crate::capture::CaptureTool;
use crate::catalog::{CATALOG_EVENT, CatalogEntry, ChildMode, catalog_payload};
use crate::compose::{child_header, external_options};
use crate::error::SubagentError;
use crate::events::RunInfo;
use crate::notice::{ACTIVATION_EVENT, activation_payload};
use crate::owned::Owned;
use crate::provider::{ContinuableCreateRequest, ResolvedStartRequest};
use crate::request::{ActivationSpec, Delivery};
use crate::runtime::SubagentRuntime;

impl SubagentRuntime {
    /// Start a child and return once it is published: for a local child,
    /// once its catalog entry is written and its initial prompt accepted;
    /// for an external one, once its run has started.
    ///
    /// # Errors
    /// Every check fails before any provider code runs; a failure or
    /// cancellation before publication leaves nothing behind. A local
    /// child whose initial prompt is not accepted is torn down and the
    /// start fails.
    ///
    /// # Cancel safety
    /// The checks run before the first await. From there the runtime owns
    /// the start: dropping the future cancels the work not yet published
    /// (as the caller's token does) and hands the rest to the runtime's
    /// tracker, which leaves nothing behind or, once the catalog entry is
    /// written, a published and monitored activation that settles like any
    /// other.
    pub async fn start_activation(
        &self,
        spec: ActivationSpec,
    ) -> Result<SubagentActivation, SubagentError> {
        // Admitted apart, so this future does not keep the admitted start
        // beside the work that took it.
        self.admit_owned(spec)?.await
    }

    /// The checks, then the work the runtime owns from there.
    fn admit_owned(
        &self,
        spec: ActivationSpec,
    ) -> Result<Owned<Result<SubagentActivation, SubagentError>>, SubagentError> {
        let admitted = self.admit_start(spec)?;
        let cancel = admitted.cancel.clone();
        Ok(self.own(cancel, |runtime| runtime.run_start(admitted)))
    }

    /// The start's work, boxed and held for as long as the start is in
    /// flight (every child of a concurrent batch at once), so kept small:
    /// one branch's state, and the admitted pieces moved in once.
    fn run_start(
        self,
        admitted: Admitted,
    ) -> impl Future<Output = Result<SubagentActivation, SubagentError>> + Send + 'static {
        if admitted.provider.continuable().is_some() {
            Either::Left(self.start_local(admitted))
        } else {
            Either::Right(self.start_external(admitted))
        }
    }

    fn start_local(
        self,
        admitted: Admitted,
    ) -> impl Future<Output = Result<SubagentActivation, SubagentError>> + Send + 'static {
        let Admitted {
            provider,
            spec:
                ActivationSpec {
                    label,
                    child_id,
                    delivery,
                    request,
                    ..
                },
            cwd,
            depth,
            root,
            slot,
            reservation,
            ticket,
            turn,
            cancel,
        } = admitted;
        async move {
            let parent = request.parent.clone();
            let child_id = match child_id {
                Some(child_id) => {
                    // A caller-supplied id may name a session of an earlier
                    // process: refuse it, and never touch that log.
                    if self.store().exists(&child_id).await? {
                        return Err(SubagentError::Infra(InfraError::DuplicateRunId {
                            provider: provider.name().to_owned(),
                            id: child_id,
                        }));
                    }
                    child_id
                }
                None => SessionId::generate(),
            };
            let Some(continuable) = provider.continuable() else {
                return Err(SubagentError::Registry(RegistryError::NoProvider(
                    provider.name().to_owned(),
                )));
            };
            // Preparation has no effect to undo, so it can be abandoned.
            let prepared = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(SubagentError::Cancelled),
                prepared = continuable.prepare(ContinuableCreateRequest {
                    cwd: cwd.clone(),
                    session_id: child_id.clone(),
                    parent: parent.clone(),
                    cancel: cancel.clone(),
                }) => prepared?,
            };

            let capture = request.output_schema.clone().map(CaptureTool::new);
            let mut setup = AgentSetup::default();
            if let Some(capture) = &capture {
                setup.tools.push(capture.clone());
            }
            let header = child_header(&provider, &request, &child_id, &cwd, depth);
            // Not raced with the token: the factory sees it and rolls back what
            // it made itself, so a failure here leaves nothing to remove.
            let handle = self
                .factory()
                .create(CreateAgent {
                    header,
                    seed: prepared.seed,
                    setup,
                    cancel: cancel.clone(),
                })
                .await
                .map_err(|err| match err {
                    dsh_core::AgentError::Composition(message) => {
                        SubagentError::Admission(AdmissionError::InvalidRequest(message))
                    }
                    other => SubagentError::from(other),
                })?;
            // From here the log is this start's own.
            if cancel.is_cancelled() {
                self.discard(&child_id, &handle).await;
                return Err(SubagentError::Cancelled);
            }
            // The child's full name, read before its own name moves into
            // its entry.
            let path = self.full_name(parent.id(), reservation.name());
            let entry = CatalogEntry {
                child_id: child_id.clone(),
                name: Some(reservation.name().to_owned()),
                label,
                provider: provider.name().to_owned(),
                mode: ChildMode::CONTINUABLE,
            };
            // Publication: the entry is written after every earlier start's
            // under this parent. Until it is taken to be written, a cancel
            // withdraws it (the last cancellation point).
            let write = {
                let (parent, payload) = (parent.clone(), catalog_payload(&entry));
                async move { parent.record(CATALOG_EVENT, payload).await }
            };
            let seq = match turn.publish(Some(&cancel), write).await {
                Some(Ok(seq)) => seq,
                failed => {
                    self.discard(&child_id, &handle).await;
                    return Err(match failed {
                        Some(Err(err)) => err.into(),
                        _ => SubagentError::Cancelled,
                    });
                }
            };
            self.catalogs()
                .commit_name(reservation, &parent, Some((seq, &entry)));
            let child = handle.agent().clone();
            let start_seq = crate::activation::next_seq(child.as_ref());
            let limits = request.limits();
            let activation = self.install_limited(
                NewActivation {
                    info: run_info(entry, path.as_deref(), &parent, &root, true),
                    path,
                    parent: parent.reference(),
                    root,
                    delivery,
                    execution: Execution::Local {
                        handle: handle.clone(),
                        start_seq,
                        capture,
                    },
                    slot,
                },
                limits,
            );
            let prompt = UserMessage::new(
                request.prompt,
                MessageSource::AgentMessage {
                    sender_session_id: parent.id().clone(),
                },
            );
            let accepted = match child
                .record(ACTIVATION_EVENT, activation_payload(delivery))
                .await
            {
                Ok(_) => child.followup(prompt).await,
                Err(err) => Err(err),
            };
            match accepted {
                Ok(message_id) => {
                    // The monitor is spawned at once: a yield first (to let the
                    // driver run before it) parks the worker once per start,
                    // sequential or concurrent, to wake the deferred start.
                    self.launch(&activation);
                    drop(ticket);
                    Ok(SubagentActivation::new(&activation, Some(message_id)))
                }
                Err(err) => {
                    // Nothing ran: the child never took input. It stays in the
                    // catalog, and its log says it has no task (B54).
                    self.uninstall(&activation);
                    handle.dispose().await;
                    Err(SubagentError::Infra(InfraError::InitialPrompt {
                        child: child_id,
                        reason: err.to_string(),
                    }))
                }
            }
        }
    }

    fn start_external(
        self,
        admitted: Admitted,
    ) -> impl Future<Output = Result<SubagentActivation, SubagentError>> + Send + 'static {
        let Admitted {
            provider,
            spec,
            cwd,
            root,
            slot,
            reservation,
            ticket,
            turn,
            cancel,
            ..
        } = admitted;
        async move {
            let Some(external) = provider.external() else {
                return Err(SubagentError::Registry(RegistryError::NoProvider(
                    provider.name().to_owned(),
                )));
            };
            let request = spec.request;
            let parent = request.parent.clone();
            let limits = request.limits();
            let resolved = ResolvedStartRequest {
                label: spec.label.clone(),
                cwd,
                prompt: request.prompt,
                parent: parent.clone(),
                agent_options: external_options(provider.as_ref(), request.agent_options),
                agent_preset: request.agent_preset,
                output_schema: request.output_schema,
                max_depth: request.max_depth,
                tool_filter: request.tool_filter,
                persona: request.persona,
                cancel: cancel.clone(),
            };
            // A provider's start must be safe to abandon (SubagentProvider docs).
            let run = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(SubagentError::Cancelled),
                run = external.start(resolved) => run?,
            };
            let child_id = run.id().clone();
            // B11: not a live session, not a live external run, not a stored
            // log, not a child this parent cataloged already. A store that
            // cannot say is an error of its own, not a collision.
            let claim = if self.registry().get(&child_id).is_some() {
                None
            } else {
                self.run_ids().claim(child_id.clone())
            };
            let collides = match &claim {
                None => Ok(true),
                Some(_) => match self.store().exists(&child_id).await {
                    Ok(true) => Ok(true),
                    Ok(false) => {
                        self.with_live_catalog(&parent, |fold| fold.entry(&child_id).is_some())
                    }
                    Err(err) => Err(SubagentError::from(err)),
                },
            };
            if !matches!(collides, Ok(false)) || cancel.is_cancelled() {
                if let Err(err) = run.dispose().await {
                    tracing::warn!(run = %child_id, "disposing an unpublished run failed: {err}");
                }
                return Err(match collides {
                    Ok(false) => SubagentError::Cancelled,
                    Ok(true) => SubagentError::Infra(InfraError::DuplicateRunId {
                        provider: provider.name().to_owned(),
                        id: child_id,
                    }),
                    Err(err) => err,
                });
            }
            // The child's full name, read before its own name moves into
            // its entry.
            let path = self.full_name(parent.id(), reservation.name());
            let entry = CatalogEntry {
                child_id: child_id.clone(),
                name: Some(reservation.name().to_owned()),
                label: spec.label,
                provider: provider.name().to_owned(),
                mode: ChildMode::EXTERNAL,
            };
            // A background child is cataloged; a foreground one's membership is
            // its caller's, kept for it in a record older readers skip.
            // Written after every earlier start's under this parent.
            let write = {
                let (runtime, parent, run) = (self.clone(), parent.clone(), run.clone());
                let (delivery, payload) = (spec.delivery, catalog_payload(&entry));
                async move {
                    match delivery {
                        Delivery::Parent => match parent.record(CATALOG_EVENT, payload).await {
                            Ok(_) => runtime.record_resumable(&parent, run.as_ref()).await,
                            Err(err) => Err(err.into()),
                        },
                        Delivery::Caller => parent
                            .record(crate::external::FOREGROUND_EVENT, payload)
                            .await
                            .map(drop)
                            .map_err(SubagentError::from),
                    }
                }
            };
            let recorded = turn
                .publish(None, write)
                .await
                .unwrap_or(Err(SubagentError::Cancelled));
            if let Err(err) = recorded {
                if let Err(dispose) = run.dispose().await {
                    tracing::warn!(run = %child_id, "disposing an unpublished run failed: {dispose}");
                }
                return Err(err);
            }
            self.catalogs().commit_name(reservation, &parent, None);
            let activation = self.install_limited(
                NewActivation {
                    info: run_info(entry, path.as_deref(), &parent, &root, false),
                    path,
                    parent: parent.reference(),
                    root,
                    delivery: spec.delivery,
                    execution: Execution::External { run, _claim: claim },
                    slot,
                },
                limits,
            );
            self.launch(&activation);
            drop(ticket);
            Ok(SubagentActivation::new(&activation, None))
        }
    }

    /// Undo an unpublished local child this start created: dispose it and
    /// delete its log (never a log it did not create).
    async fn discard(&self, child: &SessionId, handle: &AgentHandle) {
        handle.dispose().await;
        self.cold().forget(child);
        match self.store().remove(child).await {
            Ok(()) | Err(dsh_core::StoreError::NotFound(_)) => {}
            Err(err) => {
                tracing::error!(child = %child, "could not remove an unpublished child: {err}")
            }
        }
    }
}

/// What the start event and the activation say of a child being published.
fn run_info(
    entry: CatalogEntry,
    path: Option<&str>,
    parent: &Arc<dyn Agent>,
    root: &SessionId,
    local: bool,
) -> RunInfo {
    RunInfo {
        name: path.map_or_else(|| entry.child_id.to_string(), str::to_owned),
        provider: entry.provider,
        label: entry.label,
        child_id: entry.child_id,
        parent_session_id: parent.id().clone(),
        root: root.clone(),
        local,
    }
}
