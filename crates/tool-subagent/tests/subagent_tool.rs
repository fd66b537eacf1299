//! The `subagent` tool against the real harness, the JSONL store and the
//! spawn and fork providers, with a scripted model playing every agent:
//! availability and wording follow the provider (B43), foreground and
//! background runs (B44), refusals as sentences (B45), configuration checked
//! at install, and the published schema matching what the tool accepts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_test_support::requests::{first_user_text, tool_results};
use dsh_test_support::wait::bounded;
use std::sync::Arc;
use std::time::Duration;

use dsh_core::content::joined_text;
use dsh_core::schema::JsonSchema;
use dsh_core::{
    Agent, AgentFactory, Message, MessageSource, ModelRequest, SessionStore, Tool, ToolRestriction,
    UserMessage,
};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent::{PrepareContinuable, SubagentCapabilities, SubagentProvider};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::world::{World as KitWorld, WorldBuilder};
use dsh_tool_subagent::{
    InstallError, MaxDepth, ModelSelectionSettings, SubagentModelSelectionConfig, SubagentTool,
    SubagentToolConfig,
};
use serde_json::{Value, json};

type Responder = Box<dyn Fn(&ModelRequest) -> Scripted + Send + Sync>;

/// A kit world and the lead it answers for.
struct World(KitWorld<dyn SessionStore>);

impl std::ops::Deref for World {
    type Target = KitWorld<dyn SessionStore>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl World {
    fn lead(&self) -> &Arc<dyn Agent> {
        self.0.root.agent()
    }

    async fn ask(&self, text: &str) {
        self.lead()
            .followup(UserMessage::user_text(text))
            .await
            .unwrap();
        bounded(self.lead().wait_idle()).await;
    }

    /// The requests the lead's model saw (the ones whose first message is
    /// the lead's own prompt).
    fn lead_requests(&self) -> Vec<ModelRequest> {
        self.model
            .requests()
            .into_iter()
            .filter(|request| first_user_text(request).starts_with("lead:"))
            .collect()
    }
}

/// The text of the last tool result in a request.
fn last_tool_result(request: &ModelRequest) -> (bool, String) {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((*is_error, joined_text(content))),
            _ => None,
        })
        .expect("a tool result")
}

fn has_tool_result(request: &ModelRequest) -> bool {
    request
        .messages
        .iter()
        .any(|m| matches!(m, Message::Tool { .. }))
}

fn call(input: Value) -> Scripted {
    Scripted::ToolCalls {
        text: None,
        calls: vec![("subagent".into(), input)],
    }
}

/// The lead makes `input` its one tool call, then answers "noted"; every
/// child answers `child says: <prompt>`.
fn lead_calls(input: Value) -> Responder {
    Box::new(move |request| {
        let first = first_user_text(request);
        if first.starts_with("lead:") {
            if has_tool_result(request) {
                Scripted::Text("noted".into())
            } else {
                call(input.clone())
            }
        } else {
            Scripted::Text(format!("child says: {first}"))
        }
    })
}

/// A world with `providers` registered and, before the lead exists, a tool
/// installed on the harness for each of `tools`.
async fn build(responder: Responder, providers: &[&str], tools: &[SubagentToolConfig]) -> World {
    let mut builder =
        WorldBuilder::project().model(Arc::new(ScriptedModel::new().responder(responder)));
    for provider in providers {
        builder = builder.provider(provider_named(provider));
    }
    let tools = tools.to_vec();
    let world = builder
        .setup(move |harness, runtime| {
            for config in tools {
                harness
                    .add_tool(SubagentTool::install(runtime, config).unwrap())
                    .unwrap();
            }
        })
        .build()
        .await;
    World(world)
}

async fn world(responder: Responder, providers: &[&str]) -> World {
    build(responder, providers, &[]).await
}

async fn world_with_tool(responder: Responder, config: SubagentToolConfig) -> World {
    let provider = config.provider.clone();
    build(responder, &[provider.as_str()], &[config]).await
}

fn provider_named(provider: &str) -> Arc<dyn SubagentProvider> {
    match provider {
        "spawn" => Arc::new(SpawnProvider::new()),
        "fork" => Arc::new(ForkProvider::new()),
        other => panic!("no test provider {other}"),
    }
}

fn spec_json(tool: &dyn Tool) -> Value {
    dsh_test_support::specs::spec(tool)
}

// ---------------------------------------------------------------------------
// B43: availability and wording follow the provider
// ---------------------------------------------------------------------------

#[tokio::test]
async fn b43_the_tool_is_offered_only_while_its_provider_is_registered_with_fresh_wording() {
    let world = world(Box::new(|_| Scripted::Text("ok".into())), &[]).await;
    let tool = SubagentTool::install(&world.runtime, SubagentToolConfig::new("delegate")).unwrap();
    assert!(!tool.is_available(), "no provider yet");

    // A spawn provider registered under the configured name: standalone wording.
    world
        .runtime
        .register(Arc::new(SpawnProvider::named("delegate")))
        .unwrap();
    assert!(tool.is_available());
    let spawn_wording = tool.description();
    assert!(spawn_wording.contains("does not see this conversation"));
    let prompt_wording =
        |tool: &SubagentTool| tool.input_schema()["properties"]["prompt"]["description"].clone();
    let spawn_prompt = prompt_wording(&tool);
    assert!(
        spawn_prompt
            .as_str()
            .unwrap()
            .contains("include everything it needs")
    );

    // Gone, then back as a fork: the wording says what a fork sees.
    assert!(world.runtime.remove("delegate"));
    assert!(!tool.is_available());
    world
        .runtime
        .register(Arc::new(ForkProvider::named("delegate")))
        .unwrap();
    assert!(tool.is_available());
    let fork_wording = tool.description();
    assert!(fork_wording.contains("sees every completed turn"));
    // The prompt parameter follows the provider found now (edges.md §3.1).
    let fork_prompt = prompt_wording(&tool);
    assert!(
        fork_prompt
            .as_str()
            .unwrap()
            .contains("state only what is new")
    );
    assert_ne!(spawn_prompt, fork_prompt);
    for wording in [&spawn_wording, &fork_wording] {
        for promise in ["tools", "permission", "authority"] {
            assert!(
                !wording.contains(promise),
                "the wording promises {promise}: {wording}"
            );
        }
    }
}

#[tokio::test]
async fn b43_an_agent_sees_the_tool_only_while_the_provider_is_there() {
    let world = world_with_tool(
        Box::new(|_| Scripted::Text("ok".into())),
        SubagentToolConfig::new("spawn"),
    )
    .await;
    world.ask("lead: one").await;
    world.runtime.remove("spawn");
    world.ask("lead: two").await;
    world.runtime.register(provider_named("spawn")).unwrap();
    world.ask("lead: three").await;
    let offered: Vec<Vec<String>> = world
        .lead_requests()
        .iter()
        .map(|r| r.tools.iter().map(|t| t.name.clone()).collect())
        .collect();
    assert_eq!(
        offered,
        [
            vec!["subagent".to_owned()],
            vec![],
            vec!["subagent".to_owned()]
        ]
    );
}

#[tokio::test]
async fn tool_specs_are_snapshotted_for_each_wording() {
    let world = world(
        Box::new(|_| Scripted::Text("ok".into())),
        &["spawn", "fork"],
    )
    .await;
    let spawn = SubagentTool::install(&world.runtime, SubagentToolConfig::new("spawn")).unwrap();
    let fork = SubagentTool::install(
        &world.runtime,
        SubagentToolConfig {
            tool_name: "fork".into(),
            ..SubagentToolConfig::new("fork")
        },
    )
    .unwrap();
    let foreground_only = SubagentTool::install(
        &world.runtime,
        SubagentToolConfig {
            background: false,
            ..SubagentToolConfig::new("spawn")
        },
    )
    .unwrap();
    insta::assert_json_snapshot!("spawn_tool", spec_json(spawn.as_ref()));
    insta::assert_json_snapshot!("fork_tool", spec_json(fork.as_ref()));
    insta::assert_json_snapshot!("foreground_only_tool", spec_json(foreground_only.as_ref()));
    let selecting = SubagentTool::install(
        &world.runtime,
        SubagentToolConfig {
            model_selection: Some(SubagentModelSelectionConfig::default()),
            ..SubagentToolConfig::new("spawn")
        },
    )
    .unwrap();
    insta::assert_json_snapshot!("model_selection_tool", spec_json(selecting.as_ref()));

    // The committed spec the API catalogue reads is the live default tool.
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/subagent.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        committed,
        spec_json(spawn.as_ref()),
        "tools/subagent.json is stale: copy the spawn_tool snapshot into it"
    );
}

// ---------------------------------------------------------------------------
// Install-time configuration checks
// ---------------------------------------------------------------------------

/// The spawn provider without the depth and persona flags.
struct Limited(SpawnProvider);

impl SubagentProvider for Limited {
    fn name(&self) -> &str {
        "limited"
    }
    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities {
            depth_limit: false,
            persona: false,
            ..SubagentCapabilities::ALL
        }
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn continuable(&self) -> Option<&dyn PrepareContinuable> {
        self.0.continuable()
    }
}

#[tokio::test]
async fn configuration_that_cannot_work_fails_at_install() {
    let world = world(Box::new(|_| Scripted::Text("ok".into())), &["spawn"]).await;
    world
        .runtime
        .register(Arc::new(Limited(SpawnProvider::new())))
        .unwrap();
    let install = |config: SubagentToolConfig| {
        SubagentTool::install(&world.runtime, config)
            .map(|_| ())
            .unwrap_err()
    };
    let errors = [
        install(SubagentToolConfig::new("limited")),
        install(SubagentToolConfig {
            max_depth: Some(MaxDepth::ProviderManaged),
            persona: Some("You are terse.".into()),
            ..SubagentToolConfig::new("limited")
        }),
        install(SubagentToolConfig {
            tool_filter: Some(ToolRestriction::allow(Vec::<String>::new())),
            ..SubagentToolConfig::new("spawn")
        }),
        install(SubagentToolConfig {
            tool_name: String::new(),
            ..SubagentToolConfig::new("spawn")
        }),
    ];
    let shown: Vec<(&str, String)> = errors.iter().map(|e| (e.code(), e.to_string())).collect();
    insta::assert_debug_snapshot!(shown);
    assert!(matches!(
        &errors[0],
        InstallError::MissingCapability {
            capability: "depth_limit",
            ..
        }
    ));

    // Provider-managed depth needs no flag.
    SubagentTool::install(
        &world.runtime,
        SubagentToolConfig {
            max_depth: Some(MaxDepth::ProviderManaged),
            ..SubagentToolConfig::new("limited")
        },
    )
    .unwrap();
}

// ---------------------------------------------------------------------------
// B44: foreground and background
// ---------------------------------------------------------------------------

#[tokio::test]
async fn b44_a_foreground_call_waits_and_returns_the_childs_output() {
    let world = world_with_tool(
        lead_calls(json!({
            "description": "count files",
            "prompt": "count the files",
            "name": "counter",
            "run_in_background": false
        })),
        SubagentToolConfig::new("spawn"),
    )
    .await;
    world.ask("lead: delegate").await;
    let requests = world.lead_requests();
    assert_eq!(requests.len(), 2);
    let (is_error, text) = last_tool_result(&requests[1]);
    assert!(!is_error);
    assert_eq!(text, "child says: count the files");
    // Caller delivery: no settlement notice reaches the lead.
    assert!(world.lead().pending().is_empty());
}

#[tokio::test]
async fn b44_a_failed_foreground_child_is_an_error_result_with_headline_and_diagnostic() {
    let responder: Responder = Box::new(|request| {
        let first = first_user_text(request);
        if first.starts_with("lead:") {
            if has_tool_result(request) {
                Scripted::Text("noted".into())
            } else {
                call(json!({
                    "description": "flaky work",
                    "prompt": "do flaky work",
                    "run_in_background": false
                }))
            }
        } else {
            Scripted::Fail(dsh_core::ModelError::new(
                dsh_core::ModelErrorKind::Api,
                "rate-limited",
            ))
        }
    });
    let world = world_with_tool(responder, SubagentToolConfig::new("spawn")).await;
    world.ask("lead: delegate").await;
    let (is_error, text) = last_tool_result(&world.lead_requests()[1]);
    assert!(is_error);
    insta::assert_snapshot!(text);
}

#[tokio::test]
async fn b44_cancelling_a_foreground_call_disposes_the_child() {
    let responder: Responder = Box::new(|request| {
        if first_user_text(request).starts_with("lead:") {
            call(json!({
                "description": "slow work",
                "prompt": "never finish",
                "name": "slow",
                "run_in_background": false
            }))
        } else {
            Scripted::Hang
        }
    });
    let world = world_with_tool(responder, SubagentToolConfig::new("spawn")).await;
    world
        .lead()
        .followup(UserMessage::user_text("lead: delegate"))
        .await
        .unwrap();
    // Wait until the child is live and its model call hangs.
    bounded(async {
        while world.runtime.live_activations() == 0
            || world
                .model
                .requests()
                .iter()
                .all(|r| first_user_text(r) != "never finish")
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    world.lead().cancel(
        dsh_core::CancelCause::User,
        dsh_core::CancelOptions::default(),
    );
    bounded(world.lead().wait_idle()).await;
    bounded(async {
        while world.runtime.live_activations() > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert_eq!(world.runtime.registry().len(), 1, "only the lead is live");
}

// edges.md §3.1: "stopped" is said only once the child is gone.
#[tokio::test]
async fn a_cancelled_foreground_call_reports_stopped_only_after_the_teardown() {
    let world = world(
        Box::new(|request| {
            if first_user_text(request) == "never finish" {
                Scripted::Hang
            } else {
                Scripted::Text("ok".into())
            }
        }),
        &["spawn"],
    )
    .await;
    let tool = SubagentTool::install(&world.runtime, SubagentToolConfig::new("spawn")).unwrap();
    let cancel = dsh_core::CancellationToken::new();
    let ctx = dsh_core::ToolContext {
        agent: world.lead().clone(),
        call_id: dsh_core::CallId::new("call-1"),
        cancel: cancel.clone(),
    };
    let input =
        json!({"description": "slow", "prompt": "never finish", "run_in_background": false});
    // The call runs on this task, so nothing else runs between its return
    // and the checks below; another task cancels it once the child hangs.
    let model = world.model.clone();
    tokio::spawn(async move {
        while model
            .requests()
            .iter()
            .all(|r| first_user_text(r) != "never finish")
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        cancel.cancel();
    });
    let output = bounded(tool.execute(input, ctx)).await.unwrap();
    assert!(output.is_error);
    assert!(joined_text(&output.content).contains("was stopped"));
    // Checked before anything else runs: the teardown was awaited.
    assert_eq!(world.runtime.live_activations(), 0);
    assert_eq!(world.runtime.registry().len(), 1, "only the lead is live");
}

#[tokio::test]
async fn b44_a_background_call_returns_the_name_and_the_result_arrives_as_a_notice() {
    let world = world_with_tool(
        lead_calls(json!({
            "description": "summarise",
            "prompt": "summarise the notes",
            "name": "summariser"
        })),
        SubagentToolConfig::new("spawn"),
    )
    .await;
    world.ask("lead: delegate").await;
    let (is_error, text) = last_tool_result(&world.lead_requests()[1]);
    assert!(!is_error);
    insta::assert_snapshot!("background_started", text);

    // The notice wakes the lead for another turn.
    bounded(async {
        loop {
            let notice = world.lead_requests().iter().any(|r| {
                r.messages.iter().any(|m| {
                    matches!(
                        m,
                        Message::User {
                            source: MessageSource::SubagentSettled { .. },
                            ..
                        }
                    )
                })
            });
            if notice {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
}

// ---------------------------------------------------------------------------
// B45: refusals
// ---------------------------------------------------------------------------

#[tokio::test]
async fn b45_depth_and_name_refusals_are_sentences() {
    // Depth cap 0: no child may be started at all.
    let world = world_with_tool(
        lead_calls(json!({"description": "x", "prompt": "y", "run_in_background": false})),
        SubagentToolConfig {
            max_depth: Some(MaxDepth::Limit(0)),
            ..SubagentToolConfig::new("spawn")
        },
    )
    .await;
    world.ask("lead: delegate").await;
    let depth = last_tool_result(&world.lead_requests()[1]);

    // The same name twice in one step: the second is refused.
    let responder: Responder = Box::new(|request| {
        let first = first_user_text(request);
        if first.starts_with("lead:") {
            if has_tool_result(request) {
                Scripted::Text("noted".into())
            } else {
                let input = json!({"description": "x", "prompt": "y", "name": "twin"});
                Scripted::ToolCalls {
                    text: None,
                    calls: vec![
                        ("subagent".into(), input.clone()),
                        ("subagent".into(), input),
                    ],
                }
            }
        } else {
            Scripted::Text("ok".into())
        }
    });
    let world = world_with_tool(responder, SubagentToolConfig::new("spawn")).await;
    world.ask("lead: delegate").await;
    let results = tool_results(&world.lead_requests()[1]);
    let refused: Vec<&(bool, String)> = results.iter().filter(|(error, _)| *error).collect();
    assert_eq!(refused.len(), 1, "{results:?}");
    insta::assert_debug_snapshot!((depth, refused[0]));
}

// Seed 002 `resolveMaxDepth`: a tool without its own limit follows the
// runtime's user setting at each call, live edits included.
#[tokio::test]
async fn a_tool_without_a_limit_follows_the_user_depth_setting() {
    let world = world_with_tool(
        lead_calls(json!({"description": "x", "prompt": "y", "run_in_background": false})),
        SubagentToolConfig::new("spawn"),
    )
    .await;
    world.runtime.set_max_depth(0);
    world.ask("lead: delegate").await;
    let (refused, text) = last_tool_result(&world.lead_requests()[1]);
    assert!(refused, "{text}");
    assert!(text.contains("the limit is 0"), "{text}");
}

// Seed 002 `ctx.subagentModelSelection`: a top-level session chooses among
// the routes it was allowed; omitted, the default applies; anything else is
// refused with the allowed routes named.
#[tokio::test]
async fn model_selection_lets_a_top_level_session_choose_an_allowed_route() {
    let route = |model: &str| dsh_subagent::AgentRoute {
        provider: "default".into(),
        model: model.into(),
    };
    let selection = SubagentModelSelectionConfig::new(ModelSelectionSettings {
        enabled: true,
        default_model: Some(route("alpha")),
        allowed_models: vec![route("alpha"), route("beta")],
    })
    .unwrap();
    let responder: Responder = Box::new(|request| {
        let first = first_user_text(request);
        if !first.starts_with("lead:") {
            return Scripted::Text("ok".into());
        }
        if matches!(request.messages.last(), Some(Message::Tool { .. })) {
            return Scripted::Text("noted".into());
        }
        let call = |prompt: &str, model: Option<&str>| {
            let mut input =
                json!({"description": "x", "prompt": prompt, "run_in_background": false});
            if let Some(model) = model {
                input["provider"] = json!("default");
                input["model"] = json!(model);
            }
            ("subagent".to_owned(), input)
        };
        Scripted::ToolCalls {
            text: None,
            calls: vec![
                call("child: chosen", Some("beta")),
                call("child: default", None),
                call("child: refused", Some("gamma")),
            ],
        }
    });
    let world = world_with_tool(
        responder,
        SubagentToolConfig {
            model_selection: Some(selection.clone()),
            ..SubagentToolConfig::new("spawn")
        },
    )
    .await;
    world.ask("lead: delegate").await;

    let model_of = |prompt: &str| -> Vec<Option<String>> {
        world
            .model
            .requests()
            .iter()
            .filter(|request| first_user_text(request) == prompt)
            .map(|request| request.model.clone())
            .collect()
    };
    assert_eq!(model_of("child: chosen"), [Some("beta".to_owned())]);
    assert_eq!(model_of("child: default"), [Some("alpha".to_owned())]);
    assert!(model_of("child: refused").is_empty(), "nothing started");
    let results = tool_results(&world.lead_requests()[1]);
    let refused: Vec<&String> = results.iter().filter(|(e, _)| *e).map(|(_, t)| t).collect();
    assert_eq!(
        refused,
        [
            "No subagent was started: default:gamma is not an allowed model. Allowed: default:alpha, default:beta."
        ]
    );

    // The session sampled its setting: a later host edit does not take it
    // back from the running lead.
    selection.update(ModelSelectionSettings::default()).unwrap();
    world.ask("lead: delegate again").await;
    assert_eq!(model_of("child: chosen").len(), 2, "still allowed");
}

#[tokio::test]
async fn malformed_arguments_are_refused_before_anything_starts() {
    let world = world_with_tool(
        lead_calls(json!({"description": "x", "prompt": "y", "colour": "red"})),
        SubagentToolConfig {
            background: false,
            ..SubagentToolConfig::new("spawn")
        },
    )
    .await;
    world.ask("lead: delegate").await;
    let (is_error, text) = last_tool_result(&world.lead_requests()[1]);
    assert!(is_error);
    assert!(
        text.starts_with("Invalid arguments for `subagent`"),
        "{text}"
    );
    assert_eq!(world.runtime.live_activations(), 0);
    assert_eq!(world.harness.registry().len(), 1);
}

#[tokio::test]
async fn the_published_schema_accepts_exactly_what_the_tool_parses() {
    let world = world(Box::new(|_| Scripted::Text("ok".into())), &["spawn"]).await;
    for background in [true, false] {
        let tool = SubagentTool::install(
            &world.runtime,
            SubagentToolConfig {
                background,
                ..SubagentToolConfig::new("spawn")
            },
        )
        .unwrap();
        let schema = JsonSchema::compile(tool.input_schema()).unwrap();
        let valid = [
            json!({"description": "a", "prompt": "b"}),
            json!({"description": "a", "prompt": "b", "name": "scout"}),
        ];
        let invalid = [
            json!({"prompt": "b"}),
            json!({"description": "a"}),
            json!({"description": "a", "prompt": "b", "extra": 1}),
            json!({"description": 1, "prompt": "b"}),
            json!({"description": "", "prompt": "b"}),
        ];
        for input in &valid {
            assert!(schema.validate(input).is_ok(), "{input}");
        }
        for input in &invalid {
            assert!(schema.validate(input).is_err(), "{input}");
        }
        let with_background = json!({"description": "a", "prompt": "b", "run_in_background": true});
        assert_eq!(schema.validate(&with_background).is_ok(), background);
    }
}

// Budgets through the tool: the host's ceiling refuses a larger request
// with a sentence, and a call that names none gets the host's default, so
// a foreground child that spends it ends `budget-exhausted` with what it
// had said so far.
#[tokio::test]
async fn the_host_sets_budget_defaults_and_ceilings_the_model_cannot_raise() {
    let budgeted = || SubagentToolConfig {
        budget: dsh_subagent::BudgetPolicy {
            default_tokens: Some(1),
            max_tokens: Some(1000),
            ..Default::default()
        },
        ..SubagentToolConfig::new("spawn")
    };
    let world = world_with_tool(
        lead_calls(json!({"description": "x", "prompt": "y", "token_budget": 5000})),
        budgeted(),
    )
    .await;
    world.ask("lead: delegate").await;
    let over = last_tool_result(&world.lead_requests()[1]);
    assert!(over.0, "{over:?}");

    let responder: Responder = Box::new(|request| {
        let first = first_user_text(request);
        if first.starts_with("lead:") {
            if has_tool_result(request) {
                Scripted::Text("noted".into())
            } else {
                let input =
                    json!({"description": "x", "prompt": "spend", "run_in_background": false});
                Scripted::ToolCalls {
                    text: None,
                    calls: vec![("subagent".into(), input)],
                }
            }
        } else if has_tool_result(request) {
            Scripted::Hang
        } else {
            Scripted::ToolCalls {
                text: Some("partial findings".into()),
                calls: vec![("no_such_tool".into(), json!({}))],
            }
        }
    });
    let world = world_with_tool(responder, budgeted()).await;
    world.ask("lead: delegate").await;
    let spent = last_tool_result(&world.lead_requests()[1]);
    insta::assert_debug_snapshot!((over, spent));
}

// ---------------------------------------------------------------------------
// B63: roles map onto persona, tool filter, model route, budget and depth
// ---------------------------------------------------------------------------

/// Two roles: a reviewer (persona, tools, model, budget, depth 1) and a
/// scout (description only).
fn roles() -> dsh_tool_subagent::SubagentRoles {
    let reviewer = dsh_tool_subagent::SubagentRole {
        description: "Reviews a change and reports the risks.".into(),
        persona: Some("You review code.".into()),
        tool_filter: Some(ToolRestriction::allow(["subagent"])),
        options: Some(dsh_core::AgentOptions {
            model: Some("careful-model".into()),
            ..dsh_core::AgentOptions::default()
        }),
        max_depth: Some(1),
        token_budget: Some(900),
        time_limit: Some(Duration::from_secs(60)),
    };
    let scout = dsh_tool_subagent::SubagentRole::new("Finds things.");
    [
        ("scout".to_owned(), scout),
        ("reviewer".to_owned(), reviewer),
    ]
    .into_iter()
    .collect()
}

/// A world whose `subagent` tool offers [`roles`], each registered as a
/// preset of the harness.
async fn role_world(responder: Responder) -> World {
    let config = SubagentToolConfig {
        roles: roles(),
        ..SubagentToolConfig::new("spawn")
    };
    let world = WorldBuilder::project()
        .model(Arc::new(ScriptedModel::new().responder(responder)))
        .provider(provider_named("spawn"))
        .harness(|builder| {
            let mut presets = dsh_core::PresetCatalog::new();
            for name in roles().keys() {
                presets = presets.with(dsh_core::Preset {
                    id: name.clone(),
                    persona: None,
                    tools: None,
                    options: dsh_core::AgentOptions::default(),
                });
            }
            builder.presets(presets)
        })
        .setup(move |harness, runtime| {
            harness
                .add_tool(SubagentTool::install(runtime, config).unwrap())
                .unwrap();
        })
        .build()
        .await;
    World(world)
}

#[tokio::test]
async fn b63_with_roles_the_spec_lists_them_and_takes_an_agent() {
    let with_roles = role_world(Box::new(|_| Scripted::Text("ok".into()))).await;
    let tool = SubagentTool::install(
        &with_roles.runtime,
        SubagentToolConfig {
            roles: roles(),
            ..SubagentToolConfig::new("spawn")
        },
    )
    .unwrap();
    insta::assert_json_snapshot!("roles_tool", spec_json(tool.as_ref()));
    // Roles need a child that starts fresh: a fork cannot take them.
    let forking = world(Box::new(|_| Scripted::Text("ok".into())), &["fork"]).await;
    let fork = SubagentTool::install(
        &forking.runtime,
        SubagentToolConfig {
            tool_name: "fork".into(),
            roles: roles(),
            ..SubagentToolConfig::new("fork")
        },
    );
    assert_eq!(fork.unwrap_err().code(), "MISSING_CAPABILITY");
}

#[tokio::test]
async fn b63_a_role_maps_onto_the_childs_persona_tools_route_budget_and_depth() {
    let world = role_world(lead_calls(json!({
        "description": "review", "prompt": "child: look", "agent": "reviewer",
        "run_in_background": false
    })))
    .await;
    world.ask("lead: delegate").await;
    let (is_error, text) = last_tool_result(&world.lead_requests()[1]);
    assert!(!is_error, "{text}");
    let child_request = world
        .model
        .requests()
        .into_iter()
        .find(|request| first_user_text(request) == "child: look")
        .unwrap();
    assert!(child_request.system.contains("You review code."));
    assert_eq!(child_request.model.as_deref(), Some("careful-model"));
    let tools: Vec<&str> = child_request
        .tools
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    assert_eq!(tools, ["subagent"], "the role's filter");
    let row = world
        .runtime
        .list_descendants(world.lead().id(), &dsh_core::CancellationToken::new())
        .await
        .unwrap()
        .remove(0);
    let header = world.store.header(&row.entry.child_id).await.unwrap();
    assert_eq!(header.composition.preset.as_deref(), Some("reviewer"));
    assert_eq!(
        header.composition.tools,
        Some(ToolRestriction::allow(["subagent"]))
    );
}

#[tokio::test]
async fn b63_a_role_child_cannot_start_below_its_roles_depth() {
    // The reviewer (depth cap 1) tries to start a child of its own.
    let responder: Responder = Box::new(|request| {
        let first = first_user_text(request);
        if first.starts_with("lead:") {
            if has_tool_result(request) {
                Scripted::Text("noted".into())
            } else {
                call(
                    json!({"description": "r", "prompt": "child: go deeper", "agent": "reviewer", "run_in_background": false}),
                )
            }
        } else if first == "child: go deeper" && !has_tool_result(request) {
            call(json!({"description": "g", "prompt": "grandchild", "run_in_background": false}))
        } else if first == "child: go deeper" {
            let (_, text) = last_tool_result(request);
            Scripted::Text(format!("heard: {text}"))
        } else {
            Scripted::Text("grandchild ran".into())
        }
    });
    let world = role_world(responder).await;
    world.ask("lead: delegate").await;
    let (_, text) = last_tool_result(&world.lead_requests()[1]);
    assert!(text.contains("heard: No subagent was started"), "{text}");
    assert!(text.contains("depth"), "{text}");
}

#[tokio::test]
async fn b63_an_unknown_role_is_a_tool_error_listing_the_roles() {
    let world = role_world(lead_calls(json!({
        "description": "x", "prompt": "child: y", "agent": "critic"
    })))
    .await;
    world.ask("lead: delegate").await;
    let (is_error, text) = last_tool_result(&world.lead_requests()[1]);
    assert!(is_error);
    insta::assert_snapshot!(text, @"No subagent was started: there is no role `critic`. The roles are: reviewer, scout.");
    assert_eq!(world.harness.registry().len(), 1, "nothing started");
}

#[tokio::test]
async fn without_roles_an_agent_argument_is_refused() {
    let world = world_with_tool(
        lead_calls(json!({"description": "x", "prompt": "y", "agent": "reviewer"})),
        SubagentToolConfig::new("spawn"),
    )
    .await;
    world.ask("lead: delegate").await;
    let (is_error, text) = last_tool_result(&world.lead_requests()[1]);
    assert!(is_error);
    assert!(text.contains("'agent' was unexpected"), "{text}");
}
