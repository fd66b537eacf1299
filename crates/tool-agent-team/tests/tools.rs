//! The ten team tools: their specs (snapshots, and each schema inside the
//! subset a model client accepts), the policy section, who is offered them,
//! and rendered results and refusals against a real team (harness, JSONL
//! store, spawn provider).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_agent_team::{Role, Team, TeamConfig};
use dsh_core::{Agent, CallId, CancellationToken, Durability, Tool, ToolContext};
use dsh_subagent::RuntimeConfig;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::specs::{assert_committed_specs, spec};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{Backing, Op, Point, When, World};
use dsh_tool_agent_team::{TeamDirectory, TeamTool, TeamToolKind, policy_section};
use serde_json::{Value, json};

#[test]
fn the_ten_tools_in_order_with_their_specs() {
    let tools = TeamTool::all(&TeamDirectory::new());
    let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
    assert_eq!(
        names,
        [
            "spawn_teammate",
            "send_message",
            "followup_task",
            "list_agents",
            "wait_agent",
            "interrupt_agent",
            "team_task_create",
            "team_task_get",
            "team_task_list",
            "team_task_update",
        ]
    );
    for tool in tools {
        dsh_core::schema::check_object_schema(&tool.input_schema())
            .unwrap_or_else(|err| panic!("{}: {err}", tool.name()));
        insta::assert_json_snapshot!(format!("spec_{}", tool.name()), spec(tool.as_ref()));
    }
}

/// The committed `tools/<name>.json` equals the live tool (the API
/// catalogue reads them). Run with `UPDATE_TOOL_SPECS=1` to rewrite them
/// after a reviewed wording change.
#[test]
fn committed_specs_match_live_tools() {
    assert_committed_specs(
        env!("CARGO_MANIFEST_DIR"),
        &TeamTool::all(&TeamDirectory::new()),
        "cargo test -p dsh-tool-agent-team --test tools",
    );
}

/// Every schema accepts a valid call and refuses unknown fields, and the
/// tool's own parser agrees (an unknown field is an input error result).
#[test]
fn schemas_accept_valid_calls_and_refuse_unknown_fields() {
    let valid = [
        (
            TeamToolKind::SpawnTeammate,
            json!({"name": "a", "description": "d", "prompt": "p", "context": "fork", "worktree": true}),
        ),
        (
            TeamToolKind::SendMessage,
            json!({"target": "lead", "message": "m"}),
        ),
        (
            TeamToolKind::FollowupTask,
            json!({"target": "a", "message": "m"}),
        ),
        (TeamToolKind::ListAgents, json!({})),
        (TeamToolKind::WaitAgent, json!({"timeout_ms": 10_000})),
        (TeamToolKind::InterruptAgent, json!({"target": "a"})),
        (
            TeamToolKind::TaskCreate,
            json!({"subject": "s", "description": "d", "blocked_by": ["task-1"], "write_scopes": ["src"]}),
        ),
        (TeamToolKind::TaskGet, json!({"task_id": "task-1"})),
        (
            TeamToolKind::TaskList,
            json!({"status": "pending", "owner": "unowned", "ready": true}),
        ),
        (
            TeamToolKind::TaskUpdate,
            json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"}),
        ),
    ];
    for (kind, input) in valid {
        let tool = TeamTool::new(kind, TeamDirectory::new());
        let schema = dsh_core::schema::JsonSchema::compile(tool.input_schema()).unwrap();
        assert!(schema.is_valid(&input), "{}: {input}", kind.name());
        let mut extra = input.clone();
        extra["unexpected"] = json!(1);
        assert!(!schema.is_valid(&extra), "{}", kind.name());
    }
}

struct Fixture {
    world: World,
    team: Team,
    directory: TeamDirectory,
}

async fn fixture() -> Fixture {
    let world = World::new(Backing::Jsonl(Durability::None), RuntimeConfig::default()).await;
    world
        .runtime
        .register(Arc::new(SpawnProvider::new()))
        .unwrap();
    let (team, _) = bounded(Team::open(
        world.root.agent().clone(),
        world.runtime.clone(),
        world.store.clone(),
        TeamConfig::default(),
    ))
    .await
    .unwrap();
    let directory = TeamDirectory::new();
    directory.insert(team.clone());
    Fixture {
        world,
        team,
        directory,
    }
}

impl Fixture {
    fn lead(&self) -> Arc<dyn Agent> {
        self.world.root.agent().clone()
    }

    async fn call(
        &self,
        agent: &Arc<dyn Agent>,
        kind: TeamToolKind,
        input: Value,
    ) -> (bool, String) {
        let tool = TeamTool::new(kind, self.directory.clone());
        let output = bounded(tool.execute(
            input,
            ToolContext {
                agent: agent.clone(),
                call_id: CallId::new("call-1"),
                cancel: CancellationToken::new(),
            },
        ))
        .await
        .unwrap();
        let text = output
            .content
            .iter()
            .map(|block| match block {
                dsh_core::ContentBlock::Text { text } => text.clone(),
                dsh_core::ContentBlock::Image { .. } => String::new(),
            })
            .collect::<String>();
        (output.is_error, text)
    }
}

/// Replace minted ids with placeholders, so a rendering is stable.
fn stable(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("m-") {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let hex = tail[2..].bytes().take_while(u8::is_ascii_hexdigit).count();
        if hex == 32 {
            out.push_str("[message-id]");
            rest = &tail[2 + hex..];
        } else {
            out.push_str("m-");
            rest = &tail[2..];
        }
    }
    out.push_str(rest);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_results_and_refusals() {
    let fx = fixture().await;
    let lead = fx.lead();
    let (error, spawned) = fx
        .call(
            &lead,
            TeamToolKind::SpawnTeammate,
            json!({"name": "alice", "description": "reviews the parser", "prompt": "review src/parse.rs"}),
        )
        .await;
    assert!(!error, "{spawned}");
    fx.world.quiesce().await;
    until(|| !fx.team.is_busy()).await;
    let (_, listed) = fx.call(&lead, TeamToolKind::ListAgents, json!({})).await;
    insta::assert_snapshot!("list_agents", listed);

    let (_, created) = fx
        .call(
            &lead,
            TeamToolKind::TaskCreate,
            json!({"subject": "parse", "description": "write the parser", "write_scopes": ["./src/parse"]}),
        )
        .await;
    insta::assert_snapshot!("team_task_create", created);
    fx.call(
        &lead,
        TeamToolKind::TaskCreate,
        json!({"subject": "docs", "description": "document it", "blocked_by": ["task-1"], "write_scopes": ["src"]}),
    )
    .await;
    let (_, claimed) = fx
        .call(
            &lead,
            TeamToolKind::TaskUpdate,
            json!({"task_id": "task-1", "expected_revision": 1, "action": "reassign", "owner": "alice"}),
        )
        .await;
    insta::assert_snapshot!("team_task_update_reassign", claimed);
    let (error, stale) = fx
        .call(
            &lead,
            TeamToolKind::TaskUpdate,
            json!({"task_id": "task-1", "expected_revision": 1, "action": "complete"}),
        )
        .await;
    assert!(error);
    insta::assert_snapshot!("team_task_update_stale", stale);
    let (_, listed) = fx
        .call(&lead, TeamToolKind::TaskList, json!({"owner": "unowned"}))
        .await;
    insta::assert_snapshot!("team_task_list_unowned", listed);
    let (_, got) = fx
        .call(&lead, TeamToolKind::TaskGet, json!({"task_id": "task-2"}))
        .await;
    insta::assert_snapshot!("team_task_get", got);

    let (_, queued) = fx
        .call(
            &lead,
            TeamToolKind::SendMessage,
            json!({"target": "alice", "message": "the grammar is in docs/"}),
        )
        .await;
    insta::assert_snapshot!("send_message_queued", stable(&queued));
    let (_, woke) = fx
        .call(
            &lead,
            TeamToolKind::FollowupTask,
            json!({"target": "alice", "message": "start on task-1"}),
        )
        .await;
    insta::assert_snapshot!("followup_task_delivered", stable(&woke));
    fx.world.quiesce().await;
    until(|| !fx.team.is_busy()).await;

    let (_, waited) = fx.call(&lead, TeamToolKind::WaitAgent, json!({})).await;
    insta::assert_snapshot!("wait_agent_no_progress", waited);
    let (error, bad) = fx
        .call(
            &lead,
            TeamToolKind::WaitAgent,
            json!({"timeout_ms": 10, "extra": 1}),
        )
        .await;
    assert!(error);
    insta::assert_snapshot!("wait_agent_bad_input", bad);
    let (error, unknown) = fx
        .call(
            &lead,
            TeamToolKind::InterruptAgent,
            json!({"target": "nobody"}),
        )
        .await;
    assert!(error);
    insta::assert_snapshot!("interrupt_agent_unknown", unknown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_members_are_offered_the_tools_and_authority_is_the_teams() {
    let fx = fixture().await;
    let lead = fx.lead();
    fx.world.model.push(dsh_harness::Scripted::Hang);
    fx.call(
        &lead,
        TeamToolKind::SpawnTeammate,
        json!({"name": "alice", "description": "d", "prompt": "p"}),
    )
    .await;
    let id = fx.team.state().member("alice").unwrap().record.id.clone();
    until(|| fx.world.runtime.registry().get(&id).is_some()).await;
    let alice = fx.world.runtime.registry().get(&id).unwrap();
    let tool = TeamTool::new(TeamToolKind::ListAgents, fx.directory.clone());
    assert!(tool.offered_to(lead.as_ref()));
    assert!(tool.offered_to(alice.as_ref()));

    let (error, refused) = fx
        .call(
            &alice,
            TeamToolKind::SpawnTeammate,
            json!({"name": "bob", "description": "d", "prompt": "p"}),
        )
        .await;
    assert!(error);
    insta::assert_snapshot!("spawn_teammate_by_a_teammate", refused);
    let (error, refused) = fx
        .call(
            &alice,
            TeamToolKind::InterruptAgent,
            json!({"target": "alice"}),
        )
        .await;
    assert!(
        error && refused.starts_with("TEAM_UNAUTHORIZED"),
        "{refused}"
    );
    fx.call(
        &alice,
        TeamToolKind::TaskCreate,
        json!({"subject": "s", "description": "d"}),
    )
    .await;
    let (error, refused) = fx
        .call(
            &alice,
            TeamToolKind::TaskUpdate,
            json!({"task_id": "task-1", "expected_revision": 1, "action": "reassign", "owner": "alice"}),
        )
        .await;
    assert!(
        error && refused.starts_with("TEAM_UNAUTHORIZED"),
        "{refused}"
    );

    // The lead waits while alice runs; the interrupt is the change it sees.
    let waiter = {
        let tool = TeamTool::new(TeamToolKind::WaitAgent, fx.directory.clone());
        let lead = lead.clone();
        tokio::spawn(async move {
            tool.execute(
                json!({"timeout_ms": 600_000}),
                ToolContext {
                    agent: lead,
                    call_id: CallId::new("call-2"),
                    cancel: CancellationToken::new(),
                },
            )
            .await
        })
    };
    let (_, interrupted) = fx
        .call(
            &lead,
            TeamToolKind::InterruptAgent,
            json!({"target": "alice"}),
        )
        .await;
    insta::assert_snapshot!("interrupt_agent", interrupted);
    let waited = bounded(waiter).await.unwrap().unwrap();
    assert!(!waited.is_error);

    // A root with no team in the directory is offered nothing.
    fx.directory.remove(lead.id());
    assert!(!tool.offered_to(lead.as_ref()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_section_names_role_name_and_team() {
    let fx = fixture().await;
    insta::assert_snapshot!("policy_lead", policy_section(&fx.team, &Role::Lead));
    insta::assert_snapshot!(
        "policy_member",
        policy_section(&fx.team, &Role::Member("alice".into()))
    );
}

/// A teammate runs its first step as soon as the runtime has published it,
/// which can be before its `active` record is written: a team tool it calls
/// there is offered and waits for that record instead of refusing it, and
/// its records follow the `active` one in the lead's log. The lead's append
/// of `active` is held until the teammate's call is under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammates_first_step_may_use_the_team_tools() {
    let fx = fixture().await;
    for tool in TeamTool::all(&fx.directory) {
        fx.world.harness.add_tool(tool).unwrap();
    }
    let lead = fx.lead();
    fx.world.model.push(dsh_harness::Scripted::ToolCalls {
        text: None,
        calls: vec![(
            "team_task_create".to_owned(),
            json!({"subject": "mine", "description": "made at my first step"}),
        )],
    });
    fx.world
        .model
        .push(dsh_harness::Scripted::Text("done".into()));
    let lead_append = || Point {
        op: Op::Append,
        id: lead.id().clone(),
        when: When::Before,
    };
    let mut hold = fx.world.hold(&lead_append());
    let spawning = {
        let tool = TeamTool::new(TeamToolKind::SpawnTeammate, fx.directory.clone());
        let lead = lead.clone();
        tokio::spawn(async move {
            tool.execute(
                json!({"name": "alice", "description": "d", "prompt": "p"}),
                ToolContext {
                    agent: lead,
                    call_id: CallId::new("call-1"),
                    cancel: CancellationToken::new(),
                },
            )
            .await
        })
    };
    // Release the lead's appends one by one until the held one comes after
    // the teammate took its first message: that is its `active` record.
    let alice = loop {
        bounded(hold.reached()).await;
        let live = fx
            .team
            .state()
            .members()
            .first()
            .and_then(|member| fx.world.runtime.registry().get(&member.record.id));
        if let Some(alice) = live.filter(|alice| {
            alice
                .events()
                .iter()
                .any(|event| matches!(event.payload, dsh_core::EventPayload::InboxAccepted(_)))
        }) {
            break alice;
        }
        let next = fx.world.hold(&lead_append());
        hold.release();
        hold = next;
    };
    assert_eq!(
        fx.team.state().members()[0].record.phase,
        dsh_agent_team::MemberPhase::Provisioning
    );
    // Its first step calls a team tool while it is still provisioning.
    until(|| {
        alice
            .events()
            .iter()
            .any(|event| matches!(event.payload, dsh_core::EventPayload::ToolCall(_)))
    })
    .await;
    hold.release();
    let spawned = bounded(spawning).await.unwrap().unwrap();
    assert!(!spawned.is_error);
    until(|| !fx.team.state().tasks().is_empty()).await;
    let task = fx.team.state().tasks()[0].clone();
    assert_eq!((task.subject.as_str(), task.by.as_str()), ("mine", "alice"));
    let kinds: Vec<String> = lead
        .events()
        .iter()
        .filter_map(|event| match &event.payload {
            dsh_core::EventPayload::Extension { kind, payload } if kind.starts_with("team/") => {
                let value: Value = payload.parse().unwrap();
                Some(format!(
                    "{kind} {}",
                    value["phase"].as_str().unwrap_or_default()
                ))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "team/member provisioning",
            "team/member active",
            "team/task "
        ]
    );
}
