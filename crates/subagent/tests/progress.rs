//! Progress on the runtime bus from local children: every member's steps,
//! tool calls, text and usage arrive in the order the member made them,
//! tagged with its activation; a listener that does not read never slows a
//! child (the bus is a bounded ring: it loses the oldest events instead and
//! says how many); and the usage the child's model reported reaches its
//! result.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;

use dsh_core::{Durability, EventPayload, Usage};
use dsh_harness::Scripted;
use dsh_subagent::{PROGRESS_BUFFER, ProgressItem, ProgressKind, RuntimeConfig};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{Backing, HOST_TOOLS, World};
use serde_json::json;
use tokio::sync::Semaphore;

/// A compact line per event kind, for comparing sequences.
fn line(kind: &ProgressKind) -> String {
    match kind {
        ProgressKind::StepStarted { turn, step } => format!("step {turn}.{step}"),
        ProgressKind::ToolCallStarted { id, name } => format!("tool {name} {id}"),
        ProgressKind::ToolCallFinished { id, name, failed } => {
            format!("done {name} {id} failed={failed}")
        }
        ProgressKind::TextDelta { text } => format!("text {text}"),
        ProgressKind::Thought { text } => format!("thought {text}"),
        ProgressKind::Plan { entries } => format!("plan {}", entries.len()),
        ProgressKind::Usage { tokens, context } => {
            format!(
                "usage {}/{} {context:?}",
                tokens.input_tokens, tokens.output_tokens
            )
        }
        other => format!("{other:?}"),
    }
}

/// Script `steps` steps calling `tools` host tools each for the next agent
/// that asks, then a final answer.
fn script(world: &World, steps: usize, tools: usize, answer: &str) {
    for n in 0..steps {
        world.model.push(Scripted::ToolCalls {
            text: Some(format!("step {n}")),
            calls: HOST_TOOLS[..tools]
                .iter()
                .map(|tool| ((*tool).to_owned(), json!({})))
                .collect(),
        });
    }
    world.model.push(Scripted::Text(answer.to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_childs_steps_tools_text_and_usage_arrive_in_order() {
    let world = World::new(Backing::Jsonl(Durability::None), RuntimeConfig::default()).await;
    let mut progress = world.runtime.progress();
    script(&world, 2, 1, "found it");
    let activation = bounded(world.runtime.start_activation(world.spec(Some("scout"))))
        .await
        .unwrap();
    let result = bounded(activation.result()).await.unwrap();
    world.quiesce().await;

    let mut lines = Vec::new();
    let mut usage = Usage::default();
    while let Some(item) = progress.try_next() {
        let ProgressItem::Event(event) = item else {
            panic!("nothing may be lost under the buffer: {item:?}");
        };
        if event.member.child_id != *activation.child_id() {
            continue;
        }
        assert_eq!(event.member.name, "scout");
        assert_eq!(event.member.provider, "local");
        assert_eq!(event.member.root.as_str(), "lead");
        if let ProgressKind::Usage { tokens, .. } = &event.kind {
            usage += *tokens;
        }
        lines.push(line(&event.kind));
    }
    let shape: Vec<String> = lines
        .iter()
        .map(|line| {
            if line.starts_with("usage") {
                "usage".to_owned()
            } else {
                line.clone()
            }
        })
        .collect();
    assert_eq!(
        shape,
        [
            "step 0.0",
            "text step 0",
            "tool alpha call-1",
            "usage",
            "done alpha call-1 failed=false",
            "step 0.1",
            "text step 1",
            "tool alpha call-2",
            "usage",
            "done alpha call-2 failed=false",
            "step 0.2",
            "text found it",
            "usage",
        ],
        "{lines:#?}"
    );
    assert!(usage.input_tokens > 0 && usage.output_tokens > 0);
    assert_eq!(
        result.usage, usage,
        "the result counts what progress reported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_does_not_read_never_slows_a_child_and_learns_what_it_lost() {
    let world = World::new(Backing::Jsonl(Durability::None), RuntimeConfig::default()).await;
    // Subscribed, then never read while the child runs: far more events than
    // the buffer holds.
    let mut stalled = world.runtime.progress();
    // Nine events a step (start, text, three calls, usage, three results).
    let steps = PROGRESS_BUFFER / 6;
    script(&world, steps, 3, "all done");
    let activation = bounded(world.runtime.start_activation(world.spec(Some("busy"))))
        .await
        .unwrap();
    // The child finishes although nobody reads: emitting never waits.
    let result = bounded(activation.result()).await.unwrap();
    assert!(result.stop_reason.is_completed(), "{result:?}");
    world.quiesce().await;

    let mut missed = 0;
    let mut steps_seen = Vec::new();
    let mut per_member: HashMap<u64, Vec<String>> = HashMap::new();
    while let Some(item) = stalled.try_next() {
        match item {
            ProgressItem::Missed(count) => {
                assert!(
                    steps_seen.is_empty(),
                    "a loss is reported before what follows it"
                );
                missed += count;
            }
            ProgressItem::Event(event) => {
                if event.member.child_id != *activation.child_id() {
                    continue;
                }
                if let ProgressKind::StepStarted { step, .. } = event.kind {
                    steps_seen.push(step);
                }
                per_member
                    .entry(event.member.activation)
                    .or_default()
                    .push(line(&event.kind));
            }
        }
    }
    assert!(missed > 0, "the ring must have overflowed");
    assert_eq!(
        per_member.len(),
        1,
        "one activation: {:?}",
        per_member.keys()
    );
    // What is left is the newest events, in order, ending with the answer.
    assert!(!steps_seen.is_empty());
    assert!(
        steps_seen.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "{steps_seen:?}"
    );
    assert_eq!(*steps_seen.last().unwrap(), steps as u64);
    let lines = per_member.into_values().next().unwrap();
    assert!(lines.len() <= PROGRESS_BUFFER);
    assert_eq!(
        lines.iter().rev().nth(1).map(String::as_str),
        Some("text all done")
    );
}

/// A listener that subscribes while a child is already running, with no
/// one listening before it, hears the child's progress while the child still
/// runs, not only once it has finished: a reporter that set no timer while
/// nobody listened starts again when someone subscribes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_arrives_mid_run_hears_the_child_before_it_finishes() {
    let world = World::new(Backing::Jsonl(Durability::None), RuntimeConfig::default()).await;
    let gate = Arc::new(Semaphore::new(0));
    world.model.push(Scripted::ToolCalls {
        text: Some("looking".into()),
        calls: vec![(HOST_TOOLS[0].to_owned(), json!({}))],
    });
    world.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("late".into())),
    });
    let activation = bounded(world.runtime.start_activation(world.spec(Some("late"))))
        .await
        .unwrap();
    // The first step is done (its tool answered) and the second waits at the gate.
    let child = activation.child_id().clone();
    bounded(until(|| {
        world.registry().get(&child).is_some_and(|agent| {
            agent
                .events()
                .iter()
                .filter(|event| matches!(event.payload, EventPayload::StepStart(_)))
                .count()
                == 2
        })
    }))
    .await;

    let mut progress = world.runtime.progress();
    let mut heard = Vec::new();
    bounded(async {
        while !heard.iter().any(|line: &String| line == "step 0.1") {
            match progress.next().await {
                Some(ProgressItem::Event(event)) if event.member.child_id == child => {
                    heard.push(line(&event.kind));
                }
                Some(_) => {}
                None => panic!("the runtime went away"),
            }
        }
    })
    .await;
    // Everything the child did before anyone listened arrives too, in order.
    assert_eq!(
        heard,
        [
            "step 0.0",
            "text looking",
            "tool alpha call-1",
            "usage 2/1 None",
            "done alpha call-1 failed=false",
            "step 0.1"
        ],
    );

    gate.add_permits(1);
    let result = bounded(activation.result()).await.unwrap();
    assert!(result.stop_reason.is_completed(), "{result:?}");
    world.quiesce().await;
}

/// Two members running at once with their text streamed token by token,
/// and a listener that reads nothing until both have finished: neither
/// child waits for it, and each member's events arrive in the order it
/// made them, its text as several deltas right after its step's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_text_arrives_token_by_token_in_order_per_member_past_a_slow_listener() {
    use dsh_core::Message;
    use dsh_test_support::requests::user_texts;
    use dsh_test_support::world::{WorldBuilder, caller_spec};

    let model = std::sync::Arc::new(dsh_harness::ScriptedModel::new().responder(|request| {
        let key = user_texts(&request.messages)
            .first()
            .cloned()
            .unwrap_or_default();
        let done = request
            .messages
            .iter()
            .filter(|message| matches!(message, Message::Assistant { .. }))
            .count();
        if done < 2 {
            Scripted::ToolCalls {
                text: Some(format!("{key} step {done}")),
                calls: vec![("alpha".to_owned(), json!({}))],
            }
        } else {
            Scripted::Text(format!("{key} is done"))
        }
    }));
    let world = WorldBuilder::new()
        .host_tools()
        .local()
        .model(model)
        .stream_text()
        .build()
        .await;
    // Subscribed, and not read until both children are done.
    let mut slow = world.runtime.progress();
    let lead = world.lead();
    let mut children = Vec::new();
    for prompt in ["one", "two"] {
        children.push(
            bounded(
                world
                    .runtime
                    .start_activation(caller_spec(&lead, "local", prompt)),
            )
            .await
            .unwrap(),
        );
    }
    for child in &children {
        let result = bounded(child.result()).await.unwrap();
        assert!(result.stop_reason.is_completed(), "{result:?}");
    }
    world.quiesce().await;

    let mut per_member: HashMap<String, Vec<String>> = HashMap::new();
    let mut deltas: HashMap<String, usize> = HashMap::new();
    while let Some(item) = slow.try_next() {
        let ProgressItem::Event(event) = item else {
            panic!("nothing may be lost under the buffer: {item:?}");
        };
        let lines = per_member
            .entry(event.member.child_id.to_string())
            .or_default();
        match &event.kind {
            // Consecutive deltas are joined to compare what was said.
            ProgressKind::TextDelta { text } => {
                *deltas.entry(event.member.child_id.to_string()).or_default() += 1;
                match lines.last_mut() {
                    Some(last) if last.starts_with("text ") => last.push_str(text),
                    _ => lines.push(format!("text {text}")),
                }
            }
            ProgressKind::Usage { .. } => lines.push("usage".to_owned()),
            kind => lines.push(line(kind)),
        }
    }
    assert_eq!(per_member.len(), 2, "{per_member:#?}");
    for (child, prompt) in children.iter().zip(["one", "two"]) {
        let id = child.child_id().to_string();
        let lines = &per_member[&id];
        let shape: Vec<String> = lines
            .iter()
            .map(|line| {
                // Call ids are numbered across both children.
                line.split(" call-").next().unwrap_or(line).to_owned()
            })
            .collect();
        assert_eq!(
            shape,
            [
                "step 0.0".to_owned(),
                format!("text {prompt} step 0"),
                "tool alpha".to_owned(),
                "usage".to_owned(),
                "done alpha".to_owned(),
                "step 0.1".to_owned(),
                format!("text {prompt} step 1"),
                "tool alpha".to_owned(),
                "usage".to_owned(),
                "done alpha".to_owned(),
                "step 0.2".to_owned(),
                format!("text {prompt} is done"),
                "usage".to_owned(),
            ],
            "{lines:#?}"
        );
        // Three messages, each streamed as three chunks: token by token,
        // not one event per message.
        assert_eq!(deltas[&id], 9, "{lines:#?}");
    }
}
