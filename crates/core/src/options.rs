//! Agent options and compositions: which model route an agent uses, and the
//! named presets (persona, tool set, model route) an agent is composed from.
//! Plain data with merge rules; recorded in the session header so that a
//! resume restores exactly what the agent ran with. Every type here is
//! durable (written in session headers) and so forward compatible: a reader
//! ignores fields it does not know, so an older build opens a log a newer
//! one wrote. Model input (tool arguments) stays strict elsewhere.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// How many steps (model requests) one turn may take when no option says
/// otherwise: a model that loops on a tool ends its turn with
/// [`StopReason::STEP_LIMIT`](crate::stop::StopReason::STEP_LIMIT) instead
/// of writing without end.
pub const DEFAULT_MAX_TURN_STEPS: u32 = 200;

/// Per-agent model options. Every field is optional; a missing field is
/// inherited by [`AgentOptions::merged_over`]. Unknown fields are ignored
/// when reading (forward compatibility of session headers).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentOptions {
    /// The model provider route (a name the host maps to a model client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model id, interpreted by the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Reasoning effort (`low`, `medium`, `high`, or a provider's own word).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Cap on output tokens for each model request; must be positive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Cap on the steps (model requests) of one turn; `None` inherits, and
    /// an agent with none set anywhere uses [`DEFAULT_MAX_TURN_STEPS`].
    /// Must be positive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turn_steps: Option<u32>,
    /// A delegation depth the agent counts as at least (B20): the subagent
    /// runtime takes the larger of this and the header's
    /// [`delegation_depth`](crate::session::SessionHeader::delegation_depth),
    /// so it can deepen an agent, and the children it starts, but never
    /// make either shallower. The loop neither sets nor reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_depth: Option<u32>,
}

impl AgentOptions {
    /// These options with every missing field taken from `base`: `self`
    /// wins, except for [`AgentOptions::subagent_depth`], where the larger
    /// value present wins (a merge can deepen, never lower).
    #[must_use]
    pub fn merged_over(&self, base: &AgentOptions) -> AgentOptions {
        AgentOptions {
            provider: self.provider.clone().or_else(|| base.provider.clone()),
            model: self.model.clone().or_else(|| base.model.clone()),
            reasoning_effort: self
                .reasoning_effort
                .clone()
                .or_else(|| base.reasoning_effort.clone()),
            max_output_tokens: self.max_output_tokens.or(base.max_output_tokens),
            max_turn_steps: self.max_turn_steps.or(base.max_turn_steps),
            subagent_depth: self.subagent_depth.max(base.subagent_depth),
        }
    }

    /// The step cap of a turn: [`AgentOptions::max_turn_steps`] or
    /// [`DEFAULT_MAX_TURN_STEPS`].
    pub fn turn_step_limit(&self) -> u32 {
        self.max_turn_steps.unwrap_or(DEFAULT_MAX_TURN_STEPS)
    }

    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == AgentOptions::default()
    }
}

/// A restriction of the tools an agent may see and run. A restricted tool
/// vanishes from the model-visible list and refuses to execute; naming a tool
/// that does not exist is an error where the restriction is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolRestriction {
    /// Only these tools.
    Allow(BTreeSet<String>),
    /// Every tool but these.
    Deny(BTreeSet<String>),
}

impl ToolRestriction {
    /// An allow-list.
    pub fn allow<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Self::Allow(names.into_iter().map(Into::into).collect())
    }

    /// A deny-list.
    pub fn deny<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Self::Deny(names.into_iter().map(Into::into).collect())
    }

    /// Whether the restriction lets `name` through.
    pub fn permits(&self, name: &str) -> bool {
        match self {
            Self::Allow(names) => names.contains(name),
            Self::Deny(names) => !names.contains(name),
        }
    }

    /// The names the restriction mentions.
    pub fn names(&self) -> &BTreeSet<String> {
        match self {
            Self::Allow(names) | Self::Deny(names) => names,
        }
    }
}

/// A named composition: a persona, a tool set and a model route that agents
/// can be created from. Data only; a host keeps its presets in a
/// [`PresetCatalog`]. Unknown fields are ignored when reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preset {
    /// The preset's id, recorded in the header of every agent composed from it.
    pub id: String,
    /// The persona template (strict `{{var}}` interpolation); `None` keeps the host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
    /// The names of the host tools this preset exposes; `None` means all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<BTreeSet<String>>,
    /// The model route.
    #[serde(default, skip_serializing_if = "AgentOptions::is_empty")]
    pub options: AgentOptions,
}

/// The presets a host offers, by id.
#[derive(Debug, Clone, Default)]
pub struct PresetCatalog {
    presets: std::collections::BTreeMap<String, Preset>,
    /// Whether an id the catalog does not hold is an empty preset.
    open_ended: bool,
}

impl PresetCatalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take an id the catalog does not hold as an empty preset of that id
    /// (no persona, tools or route of its own) instead of refusing it. For
    /// a host whose presets only name what each composition records in
    /// full (the CLI's roles), so that an agent whose preset was withdrawn
    /// since it was created still resumes from its recorded composition.
    #[must_use]
    pub fn open_ended(mut self) -> Self {
        self.open_ended = true;
        self
    }

    /// Whether an id the catalog does not hold is an empty preset
    /// ([`PresetCatalog::open_ended`]) rather than an unknown one.
    pub fn is_open_ended(&self) -> bool {
        self.open_ended
    }

    /// Add or replace a preset.
    #[must_use]
    pub fn with(mut self, preset: Preset) -> Self {
        self.presets.insert(preset.id.clone(), preset);
        self
    }

    /// The preset with this id.
    pub fn get(&self, id: &str) -> Option<&Preset> {
        self.presets.get(id)
    }

    /// Every preset, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Preset> {
        self.presets.values()
    }
}

/// What an agent is composed of: the preset it joined (if any) and the
/// per-agent settings applied on top of it. Recorded in the session header
/// and restored on resume. Unknown fields are ignored when reading.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Composition {
    /// The preset id; `None` is the host's base composition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// A persona that shadows the preset's or host's for this agent alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
    /// A tool restriction applied on top of the preset's tool set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolRestriction>,
    /// Option overrides applied over the preset's route.
    #[serde(default, skip_serializing_if = "AgentOptions::is_empty")]
    pub options: AgentOptions,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_prefers_the_override_and_fills_gaps_from_the_base() {
        let base = AgentOptions {
            provider: Some("openai".into()),
            model: Some("base".into()),
            reasoning_effort: None,
            max_output_tokens: Some(100),
            max_turn_steps: Some(7),
            subagent_depth: Some(4),
        };
        let over = AgentOptions {
            model: Some("child".into()),
            reasoning_effort: Some("high".into()),
            subagent_depth: Some(2),
            ..AgentOptions::default()
        };
        let merged = over.merged_over(&base);
        assert_eq!(merged.provider.as_deref(), Some("openai"));
        assert_eq!(merged.model.as_deref(), Some("child"));
        assert_eq!(merged.reasoning_effort.as_deref(), Some("high"));
        assert_eq!(merged.max_output_tokens, Some(100));
        assert_eq!(merged.turn_step_limit(), 7);
        // The depth only deepens: the larger value wins, whichever side.
        assert_eq!(merged.subagent_depth, Some(4));
        assert_eq!(base.merged_over(&over).subagent_depth, Some(4));
        assert_eq!(
            AgentOptions::default().merged_over(&over).subagent_depth,
            Some(2)
        );
        // Unset, it is not written: headers without it are unchanged.
        let written = serde_json::to_value(AgentOptions::default()).unwrap();
        assert_eq!(written, serde_json::json!({}));
        assert_eq!(
            AgentOptions::default().turn_step_limit(),
            DEFAULT_MAX_TURN_STEPS
        );
    }

    #[test]
    fn restrictions_permit_and_round_trip() {
        let allow = ToolRestriction::allow(["read"]);
        assert!(allow.permits("read") && !allow.permits("write"));
        let deny = ToolRestriction::deny(["write"]);
        assert!(deny.permits("read") && !deny.permits("write"));
        let json = serde_json::to_string(&deny).unwrap();
        assert_eq!(json, r#"{"deny":["write"]}"#);
        assert_eq!(
            serde_json::from_str::<ToolRestriction>(&json).unwrap(),
            deny
        );
    }

    // An older reader opens a header a newer writer extended: every durable
    // option type ignores fields it does not know.
    #[test]
    fn durable_option_types_accept_unknown_fields() {
        let composition: Composition = serde_json::from_value(serde_json::json!({
            "preset": "reviewer",
            "tools": {"allow": ["read"]},
            "options": {"model": "m", "temperature_curve": [1, 2]},
            "added_in_a_later_version": true
        }))
        .unwrap();
        assert_eq!(composition.preset.as_deref(), Some("reviewer"));
        assert_eq!(composition.options.model.as_deref(), Some("m"));
        assert_eq!(composition.tools, Some(ToolRestriction::allow(["read"])));
        let preset: Preset = serde_json::from_value(serde_json::json!({
            "id": "p",
            "persona": "x",
            "icon": "later"
        }))
        .unwrap();
        assert_eq!(preset.id, "p");
        let options: AgentOptions =
            serde_json::from_value(serde_json::json!({"provider": "a", "seed": 4})).unwrap();
        assert_eq!(options.provider.as_deref(), Some("a"));
    }
}
