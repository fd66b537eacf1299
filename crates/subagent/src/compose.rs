//! Composition of a child: the capability checks of a request, its working
//! directory, and its header (lineage, depth, directory, composition and
//! model route), derived from the parent's composition and the provider.

use crate::AdmissionError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::collections::BTreeSet;

use dsh_core::{AgentOptions, Composition, SessionHeader, SessionId, ToolRestriction};

use crate::error::SubagentError;
use crate::provider::SubagentProvider;
use crate::request::StartRequest;

/// Refuse a request whose options the provider does not support, before
/// any provider code runs (B4).
pub(crate) fn check_capabilities(
    provider: &dyn SubagentProvider,
    request: &StartRequest,
) -> Result<(), SubagentError> {
    let caps = provider.capabilities();
    let needs: [(bool, bool, &'static str); 7] = [
        (
            request.agent_options.is_some(),
            caps.agent_options,
            "agent_options",
        ),
        (
            request.agent_preset.is_some(),
            caps.agent_preset,
            "agent_preset",
        ),
        (
            request.output_schema.is_some(),
            caps.output_schema,
            "output_schema",
        ),
        (request.max_depth.is_some(), caps.depth_limit, "depth_limit"),
        (
            request.tool_filter.is_some(),
            caps.tool_filter,
            "tool_filter",
        ),
        (request.persona.is_some(), caps.persona, "persona"),
        (
            request.token_budget.is_some(),
            caps.token_budget,
            "token_budget",
        ),
    ];
    for (requested, supported, capability) in needs {
        if requested && !supported {
            return Err(SubagentError::Admission(
                AdmissionError::UnsupportedCapability {
                    provider: provider.name().to_owned(),
                    capability,
                },
            ));
        }
    }
    if request.agent_preset.is_some() && provider.inherits_parent_context() {
        return Err(SubagentError::Admission(
            AdmissionError::UnsupportedCapability {
                provider: provider.name().to_owned(),
                capability: "agent_preset (the child inherits the parent's context and composition)",
            },
        ));
    }
    if let Some(persona) = &request.persona
        && persona.trim().is_empty()
    {
        return Err(SubagentError::Admission(AdmissionError::InvalidRequest(
            "the persona is empty".into(),
        )));
    }
    Ok(())
}

/// The child's tool restriction: the requested filter applied on top of
/// the inherited one (B4, B58). It can only narrow what the parent may use:
/// a request that allows a tool the parent's restriction hides is refused.
pub(crate) fn narrow_tools(
    inherited: Option<&ToolRestriction>,
    requested: Option<&ToolRestriction>,
) -> Result<Option<ToolRestriction>, SubagentError> {
    let widening = |names: &BTreeSet<String>, inherited: &ToolRestriction| {
        let hidden: Vec<&str> = names
            .iter()
            .filter(|name| !inherited.permits(name))
            .map(String::as_str)
            .collect();
        if hidden.is_empty() {
            Ok(())
        } else {
            Err(SubagentError::Admission(AdmissionError::InvalidRequest(
                format!(
                    "the tool filter allows {}, which this agent may not use itself; a child's tools can only be narrowed",
                    hidden.join(", ")
                ),
            )))
        }
    };
    Ok(match (inherited, requested) {
        (None, requested) => requested.cloned(),
        (Some(inherited), None) => Some(inherited.clone()),
        (Some(inherited), Some(ToolRestriction::Allow(names))) => {
            widening(names, inherited)?;
            Some(ToolRestriction::Allow(names.clone()))
        }
        (Some(ToolRestriction::Allow(allowed)), Some(ToolRestriction::Deny(denied))) => Some(
            ToolRestriction::Allow(allowed.difference(denied).cloned().collect()),
        ),
        (Some(ToolRestriction::Deny(inherited)), Some(ToolRestriction::Deny(denied))) => Some(
            ToolRestriction::Deny(inherited.union(denied).cloned().collect()),
        ),
    })
}

/// Resolve the child's directory: relative to the parent's, and an existing directory.
pub(crate) fn resolve_cwd(
    parent: &Path,
    requested: Option<&Path>,
) -> Result<PathBuf, SubagentError> {
    let cwd = match requested {
        None => parent.to_path_buf(),
        Some(path) if path.is_absolute() => path.to_path_buf(),
        Some(path) => parent.join(path),
    };
    if !cwd.is_absolute() {
        return Err(SubagentError::Admission(AdmissionError::InvalidRequest(
            format!("the working directory `{}` is not absolute", cwd.display()),
        )));
    }
    match std::fs::metadata(&cwd) {
        Ok(meta) if meta.is_dir() => Ok(cwd),
        _ => Err(SubagentError::Admission(AdmissionError::InvalidRequest(
            format!(
                "the working directory `{}` is not an existing directory",
                cwd.display()
            ),
        ))),
    }
}

/// The agent options of an external start: the request's over the
/// provider's default route.
pub(crate) fn external_options(
    provider: &dyn SubagentProvider,
    requested: Option<AgentOptions>,
) -> Option<AgentOptions> {
    match provider.agent_route_defaults() {
        None => requested,
        Some(route) => {
            let route = AgentOptions {
                provider: Some(route.provider),
                model: Some(route.model),
                ..AgentOptions::default()
            };
            Some(requested.unwrap_or_default().merged_over(&route))
        }
    }
}

/// The child's header: lineage, depth, directory and composition.
pub(crate) fn child_header(
    provider: &Arc<dyn SubagentProvider>,
    request: &StartRequest,
    child_id: &SessionId,
    cwd: &Path,
    depth: u32,
) -> SessionHeader {
    let parent = &request.parent;
    let parent_composition = parent.composition();
    let independent = request.agent_preset.is_some();
    let route = provider
        .agent_route_defaults()
        .map(|route| AgentOptions {
            provider: Some(route.provider),
            model: Some(route.model),
            ..AgentOptions::default()
        })
        .unwrap_or_default();
    let base = if independent {
        AgentOptions::default()
    } else {
        parent_composition.options.clone()
    };
    let options = request
        .agent_options
        .clone()
        .unwrap_or_default()
        .merged_over(&route)
        .merged_over(&base);
    let composition = if independent {
        Composition {
            preset: request.agent_preset.clone(),
            persona: request.persona.clone(),
            tools: request.tool_filter.clone(),
            options,
        }
    } else {
        Composition {
            preset: parent_composition.preset.clone(),
            persona: request
                .persona
                .clone()
                .or_else(|| parent_composition.persona.clone()),
            // Already narrowed over the parent's restriction at admission.
            tools: request.tool_filter.clone(),
            options,
        }
    };
    let mut header = SessionHeader::new(child_id.clone(), cwd);
    header.parent_session = Some(parent.id().clone());
    header.origin = parent
        .header()
        .origin
        .clone()
        .or_else(|| Some(parent.header().cwd.display().to_string()));
    header.delegation_depth = depth;
    header.composition = composition;
    header
}
