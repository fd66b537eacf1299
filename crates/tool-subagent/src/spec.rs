//! What the model reads about the tool: its description and its input
//! schema, both worded for the provider registered now (whether the child
//! sees the parent's conversation, whether it meters tokens) and the
//! tool's configuration. Model-visible: snapshot-tested.

use dsh_core::ToolSpec;
use serde_json::{Value, json};

use crate::config::SubagentToolConfig;
use crate::role;

/// The tool as the model is shown it for `config`, for a provider whose
/// children do (`inherits`) or do not see the parent's conversation and
/// that does (`meters_tokens`) or does not meter tokens: what
/// [`SubagentTool`](crate::SubagentTool) offers, for a host that runs the
/// tool elsewhere (a Restate worker) and must offer it alike.
pub fn tool_spec(config: &SubagentToolConfig, inherits: bool, meters_tokens: bool) -> ToolSpec {
    ToolSpec {
        name: config.tool_name.clone(),
        description: full_description(config, inherits),
        input_schema: input_schema(config, inherits, meters_tokens),
    }
}

/// The description for `config`: what the tool does, whether it runs in
/// the background, model selection and the roles it offers.
pub(crate) fn full_description(config: &SubagentToolConfig, inherits: bool) -> String {
    let mut text = description(inherits, config.background);
    if config.model_selection.is_some() {
        text.push_str(" You may choose the subagent's model with `provider` and `model` (both or neither); only the routes this session was allowed are accepted, and a refused choice names them. Leave them out for the default.");
    }
    text.push_str(&role::listing(&config.roles));
    text
}

/// The tool description for a provider whose children do (`inherits`) or do
/// not see the parent's conversation.
pub(crate) fn description(inherits: bool, background: bool) -> String {
    let what = if inherits {
        "Delegate a task to a subagent that starts from this conversation: it sees every completed turn so far (not the turn in progress). Use it for work that builds on this context, such as a follow-up analysis, a review or a continuation, without spending this conversation's context on the work itself. You get its result, not its intermediate steps."
    } else {
        "Delegate a self-contained task to a subagent: a separate agent with its own context. Use it to offload focused, independent work, such as research, a scoped change or an analysis, without spending this conversation's context on it. You get its result, not its intermediate steps. It does not see this conversation, so give it a complete, standalone prompt."
    };
    let when = if background {
        " By default it runs in the background: the call returns the subagent's name at once and its result arrives later in your inbox as a notice. Start independent subagents together and keep working while they run. Set `run_in_background` to false when your next step needs the result."
    } else {
        " The call waits for the subagent and returns its result."
    };
    format!("{what}{when}")
}

/// The input schema for `config`: `run_in_background` only when background
/// runs are on, `provider` and `model` only with model selection, `agent`
/// only with roles,
/// `token_budget` only for a provider that meters tokens (`budgets`),
/// `timeout_seconds` always (each bounded by the host's ceiling), and the
/// prompt worded for a child that does (`inherits`) or does not see the
/// parent's conversation.
pub(crate) fn input_schema(config: &SubagentToolConfig, inherits: bool, budgets: bool) -> Value {
    let prompt = if inherits {
        "What the subagent should do next. It already sees this conversation's completed turns, so state only what is new: the task and anything decided since."
    } else {
        "The complete task for the subagent. It does not see this conversation, so include everything it needs: the goal, the relevant files or facts, and what to report back."
    };
    let mut properties = json!({
        "description": {
            "type": "string",
            "minLength": 1,
            "description": "A short (3-5 word) label for the task, shown in agent listings."
        },
        "prompt": {
            "type": "string",
            "minLength": 1,
            "description": prompt
        },
        "name": {
            "type": "string",
            "description": "An optional name to address the subagent by later: 1-32 lower-case letters, digits and hyphens, starting with a letter, unique among your subagents. Omitted, it is named agent-N."
        }
    });
    if config.model_selection.is_some()
        && let Some(map) = properties.as_object_mut()
    {
        map.insert(
            "provider".to_owned(),
            json!({
                "type": "string",
                "minLength": 1,
                "description": "The model provider route for the subagent; give it with `model`, or leave both out for the default."
            }),
        );
        map.insert(
            "model".to_owned(),
            json!({
                "type": "string",
                "minLength": 1,
                "description": "The model id for the subagent, under `provider`."
            }),
        );
    }
    if !config.roles.is_empty()
        && let Some(map) = properties.as_object_mut()
    {
        map.insert(
            "agent".to_owned(),
            json!({
                "type": "string",
                "minLength": 1,
                "description": "The role to start the subagent as, one of those this tool's description lists; leave it out for a general subagent."
            }),
        );
    }
    if let Some(map) = properties.as_object_mut() {
        if budgets {
            let mut budget = json!({
                "type": "integer",
                "minimum": 1,
                "description": "The most tokens (input plus output) the subagent and any subagents it starts may use; it is stopped when they are spent and you get what it had so far. It must fit in what is left of your own budget, if you have one."
            });
            if let Some(ceiling) = config.budget.max_tokens {
                budget["maximum"] = json!(ceiling);
            }
            map.insert("token_budget".to_owned(), budget);
        }
        let mut timeout = json!({
            "type": "integer",
            "minimum": 1,
            "description": "The most seconds the subagent may run; it is stopped when they are up and you get what it had so far."
        });
        if let Some(ceiling) = config.budget.max_time {
            timeout["maximum"] = json!(ceiling.as_secs());
        }
        map.insert("timeout_seconds".to_owned(), timeout);
    }
    if config.background
        && let Some(map) = properties.as_object_mut()
    {
        map.insert(
            "run_in_background".to_owned(),
            json!({
                "type": "boolean",
                "description": "Run in the background and return the subagent's name at once (the default), or set false to wait for its result."
            }),
        );
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": ["description", "prompt"],
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::SubagentModelSelectionConfig;
    use crate::tool::Args;

    #[test]
    fn the_input_struct_accepts_exactly_what_its_schema_accepts() {
        let selecting = SubagentToolConfig {
            model_selection: Some(SubagentModelSelectionConfig::default()),
            ..SubagentToolConfig::new("spawn")
        };
        let mut with_roles = SubagentToolConfig::new("spawn");
        with_roles
            .roles
            .insert("reviewer".to_owned(), crate::SubagentRole::new("Reviews"));
        for config in [SubagentToolConfig::new("spawn"), selecting, with_roles] {
            let schema =
                dsh_core::schema::JsonSchema::compile(input_schema(&config, false, true)).unwrap();
            for input in [
                json!({"description": "a", "prompt": "b"}),
                json!({"description": "a", "prompt": "b", "name": "scout", "run_in_background": false}),
                json!({"description": "a"}),
                json!({"prompt": "b"}),
                json!({"description": "a", "prompt": "b", "extra": 1}),
                json!({"description": "a", "prompt": 2}),
                json!({"description": "a", "prompt": "b", "provider": "p", "model": "m"}),
                json!({"description": "a", "prompt": "b", "model": 3}),
                json!({"description": "a", "prompt": "b", "token_budget": 500, "timeout_seconds": 60}),
                json!({"description": "a", "prompt": "b", "token_budget": "many"}),
                json!({"description": "a", "prompt": "b", "agent": "reviewer"}),
                json!({"description": "a", "prompt": "b", "agent": 1}),
            ] {
                // What `execute` accepts: the struct, and the selection
                // parameters only when the tool has a selection setting.
                let parsed = serde_json::from_value::<Args>(input.clone()).is_ok_and(|args| {
                    (config.model_selection.is_some()
                        || (args.provider.is_none() && args.model.is_none()))
                        && (!config.roles.is_empty() || args.agent.is_none())
                });
                assert_eq!(schema.validate(&input).is_ok(), parsed, "{input}");
            }
        }
    }
}
