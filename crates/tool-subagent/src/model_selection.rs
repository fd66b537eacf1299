//! Seed 002's `ctx.subagentModelSelection`: the host setting that says
//! whether a top-level session may choose its children's model route, the
//! exact routes it may choose from, and the route a child gets when the
//! caller names none. The host owns and edits it; a `subagent` tool
//! configured with it samples it once per exact agent, the first time it is
//! offered to that agent (before the agent's first model request with the
//! tool), so a later edit never changes what a running agent was allowed.
//! Validation runs on every write, so a setting that cannot work is refused
//! where it is made, not at a child's start.

use std::sync::{Arc, Mutex, PoisonError};

use dsh_subagent::AgentRoute;

/// One value of the setting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelSelectionSettings {
    /// Whether top-level sessions get model selection (off by default).
    pub enabled: bool,
    /// The route a child gets when the caller names none.
    pub default_model: Option<AgentRoute>,
    /// The exact routes a caller may name; each at most once.
    pub allowed_models: Vec<AgentRoute>,
}

impl ModelSelectionSettings {
    /// Whether `route` is one of the allowed routes, exactly.
    pub fn allows(&self, route: &AgentRoute) -> bool {
        self.enabled && self.allowed_models.contains(route)
    }

    /// Check the setting: no empty or repeated route; when enabled, at
    /// least one allowed route and a default among them.
    ///
    /// # Errors
    /// The first [`ModelSelectionError`] found.
    pub fn validate(&self) -> Result<(), ModelSelectionError> {
        for (at, route) in self.allowed_models.iter().enumerate() {
            if route.provider.is_empty() || route.model.is_empty() {
                return Err(ModelSelectionError::EmptyRoute);
            }
            if self.allowed_models[..at].contains(route) {
                return Err(ModelSelectionError::DuplicateRoute(route.clone()));
            }
        }
        if !self.enabled {
            return Ok(());
        }
        if self.allowed_models.is_empty() {
            return Err(ModelSelectionError::NoAllowedRoute);
        }
        match &self.default_model {
            Some(default) if !self.allowed_models.contains(default) => {
                Err(ModelSelectionError::DefaultNotAllowed(default.clone()))
            }
            _ => Ok(()),
        }
    }
}

/// Why a model-selection setting was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelSelectionError {
    /// A route with an empty provider or model.
    #[error("a model route needs both a provider and a model")]
    EmptyRoute,
    /// The same route listed twice.
    #[error("the model route {}:{} is listed twice", .0.provider, .0.model)]
    DuplicateRoute(AgentRoute),
    /// Enabled with nothing to choose from.
    #[error("model selection is enabled but allows no route")]
    NoAllowedRoute,
    /// A default that is not one of the allowed routes.
    #[error("the default model route {}:{} is not an allowed route", .0.provider, .0.model)]
    DefaultNotAllowed(AgentRoute),
}

impl ModelSelectionError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::EmptyRoute => "EMPTY_ROUTE",
            Self::DuplicateRoute(_) => "DUPLICATE_ROUTE",
            Self::NoAllowedRoute => "NO_ALLOWED_ROUTE",
            Self::DefaultNotAllowed(_) => "DEFAULT_NOT_ALLOWED",
        }
    }
}

/// The host's model-selection setting. Cheap to clone; clones share the
/// value, so the host edits the one its tools read.
#[derive(Debug, Clone, Default)]
pub struct SubagentModelSelectionConfig {
    value: Arc<Mutex<ModelSelectionSettings>>,
}

impl PartialEq for SubagentModelSelectionConfig {
    /// The same setting (clones of one config), not equal values.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.value, &other.value)
    }
}

impl SubagentModelSelectionConfig {
    /// A setting holding `settings`.
    ///
    /// # Errors
    /// As [`ModelSelectionSettings::validate`].
    pub fn new(settings: ModelSelectionSettings) -> Result<Self, ModelSelectionError> {
        settings.validate()?;
        Ok(Self {
            value: Arc::new(Mutex::new(settings)),
        })
    }

    /// A detached copy of the current value.
    pub fn current(&self) -> ModelSelectionSettings {
        self.value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replace the value. Agents that already sampled it keep what they
    /// sampled.
    ///
    /// # Errors
    /// As [`ModelSelectionSettings::validate`]; the value is unchanged then.
    pub fn update(&self, settings: ModelSelectionSettings) -> Result<(), ModelSelectionError> {
        settings.validate()?;
        *self.value.lock().unwrap_or_else(PoisonError::into_inner) = settings;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(provider: &str, model: &str) -> AgentRoute {
        AgentRoute {
            provider: provider.into(),
            model: model.into(),
        }
    }

    #[test]
    fn settings_that_cannot_work_are_refused_and_leave_the_value() {
        let config = SubagentModelSelectionConfig::default();
        assert_eq!(config.current(), ModelSelectionSettings::default());
        let refused = [
            ModelSelectionSettings {
                enabled: true,
                ..Default::default()
            },
            ModelSelectionSettings {
                allowed_models: vec![route("a", "m"), route("a", "m")],
                ..Default::default()
            },
            ModelSelectionSettings {
                allowed_models: vec![route("", "m")],
                ..Default::default()
            },
            ModelSelectionSettings {
                enabled: true,
                default_model: Some(route("b", "m")),
                allowed_models: vec![route("a", "m")],
            },
        ];
        let codes: Vec<&str> = refused
            .into_iter()
            .map(|settings| config.update(settings).unwrap_err().code())
            .collect();
        assert_eq!(
            codes,
            [
                "NO_ALLOWED_ROUTE",
                "DUPLICATE_ROUTE",
                "EMPTY_ROUTE",
                "DEFAULT_NOT_ALLOWED"
            ]
        );
        assert_eq!(config.current(), ModelSelectionSettings::default());

        let good = ModelSelectionSettings {
            enabled: true,
            default_model: Some(route("a", "m")),
            allowed_models: vec![route("a", "m"), route("a", "n")],
        };
        let shared = config.clone();
        config.update(good.clone()).unwrap();
        assert_eq!(shared.current(), good, "clones share the value");
        assert!(good.allows(&route("a", "n")) && !good.allows(&route("a", "x")));
    }
}
