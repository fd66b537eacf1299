//! ACP progress on the runtime's bus: a real agent process's thoughts,
//! plan, tool calls, text and usage reach `SubagentRuntime::progress` in
//! the order the agent sent them, tagged with the activation, and the usage
//! it reported at the end of its turn reaches the result.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_core::Usage;
use dsh_subagent::progress::ContextUsage;
use dsh_subagent::{ProgressItem, ProgressKind};
use support::{peers, quick, result_of, text, world};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rogue_agents_progress_and_usage_reach_the_runtime_bus_and_the_result() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&["--ignore-eof"]))]).await;
    let mut progress = world.runtime.progress();
    let activation = world
        .start(world.spec(
            "acp",
            "think pondering; plan; tool; usage 100 20; usage 5 1; say done",
        ))
        .await;
    let result = result_of(&activation).await;
    assert_eq!(text(&result), "done");
    assert_eq!(
        result.usage,
        tokens(105, 21),
        "the turn's usage reaches the result"
    );

    let mut kinds = Vec::new();
    while let Some(item) = progress.try_next() {
        let ProgressItem::Event(event) = item else {
            panic!("nothing may be lost under the buffer: {item:?}");
        };
        assert_eq!(&event.member.child_id, activation.child_id());
        assert_eq!(event.member.provider, "acp");
        assert_eq!(event.member.root.as_str(), "lead");
        kinds.push(event.kind);
    }
    let window = |used| ProgressKind::Usage {
        tokens: Usage::default(),
        context: Some(ContextUsage {
            used,
            size: 200_000,
        }),
    };
    let expected = vec![
        ProgressKind::StepStarted { turn: 0, step: 0 },
        ProgressKind::Thought {
            text: "pondering".into(),
        },
        ProgressKind::Plan {
            entries: vec![
                dsh_subagent::progress::PlanEntry {
                    content: "look around".into(),
                    status: "completed".into(),
                    priority: "high".into(),
                },
                dsh_subagent::progress::PlanEntry {
                    content: "answer".into(),
                    status: "in_progress".into(),
                    priority: "medium".into(),
                },
            ],
        },
        ProgressKind::ToolCallStarted {
            id: "t1".into(),
            name: "Listing files".into(),
        },
        ProgressKind::ToolCallFinished {
            id: "t1".into(),
            name: "Listing files".into(),
            failed: false,
        },
        window(120),
        window(6),
        ProgressKind::TextDelta {
            text: "done".into(),
        },
        ProgressKind::Usage {
            tokens: tokens(105, 21),
            context: None,
        },
    ];
    assert_eq!(kinds, expected);
    bounded_dispose(&activation).await;
    world.assert_no_process_left();
}

#[allow(
    clippy::needless_update,
    reason = "core's `Usage` may count more kinds of token than these"
)]
fn tokens(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

async fn bounded_dispose(activation: &dsh_subagent::SubagentActivation) {
    support::bounded("dispose", activation.dispose())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_acp_childs_activity_is_the_tool_call_it_left_open() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&[]))]).await;
    let mut progress = world.runtime.progress();
    let activation = world
        .start(world.spec("acp", "tool_open Reading notes; wait_cancel"))
        .await;
    // The activity is kept before the event is sent: once the listener has
    // it, the runtime answers with it.
    loop {
        match support::bounded("the tool call", progress.next()).await {
            Some(ProgressItem::Event(event))
                if matches!(event.kind, ProgressKind::ToolCallStarted { .. }) =>
            {
                break;
            }
            Some(_) => {}
            None => panic!("the runtime went away"),
        }
    }
    let activity = world
        .runtime
        .current_activity(activation.child_id())
        .expect("a live external run has an activity");
    assert_eq!(
        activity.tool.map(|tool| tool.name).as_deref(),
        Some("Reading notes")
    );
    assert_eq!(activity.tokens, 0, "nothing reported yet");
    support::bounded("dispose", activation.dispose())
        .await
        .unwrap();
    assert!(
        world
            .runtime
            .current_activity(activation.child_id())
            .is_none(),
        "a settled run has none"
    );
}
