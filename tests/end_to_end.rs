//! Issue 5's end-to-end run: the real harness on the JSONL store, the spawn
//! and fork providers, the `subagent` and `fork` tools and the five control
//! tools, with a scripted model playing every agent. The lead (after one
//! completed turn, so that the fork has something to inherit) starts a spawn
//! child and a fork child in the background in one step, lists its agents,
//! messages the fork by name, and waits for both settlement notices; the
//! spawn child starts a grandchild of its own, which reports upward before
//! it finishes. Every child's first model call is held behind a gate that
//! the lead's script opens, so the order of what the lead sees does not
//! depend on scheduling. The lead's whole model-visible transcript is one
//! snapshot: any wording change in any tool is a reviewed diff.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_test_support::requests::user_texts;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dsh_core::content::joined_text;
use dsh_core::{CancellationToken, Message, MessageSource, ModelRequest, UserMessage};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::world::WorldBuilder;
use dsh_tool_subagent::{SubagentTool, SubagentToolConfig};
use dsh_tool_subagent_control::ControlTools;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// Which agent a request belongs to, from the task marker in its prompt.
fn role(request: &ModelRequest) -> &'static str {
    let texts = user_texts(&request.messages);
    for role in ["digger", "reviewer", "researcher"] {
        let marker = format!("[{role}]");
        if texts.iter().any(|text| text.starts_with(&marker)) {
            return role;
        }
    }
    "lead"
}

/// How many calls of `tool` the request's history holds.
fn calls_of(request: &ModelRequest, tool: &str) -> usize {
    request
        .messages
        .iter()
        .map(|m| match m {
            Message::Assistant { tool_calls, .. } => {
                tool_calls.iter().filter(|c| c.name == tool).count()
            }
            _ => 0,
        })
        .sum()
}

fn tool_calls(calls: Vec<(&str, Value)>) -> Scripted {
    Scripted::ToolCalls {
        text: None,
        calls: calls
            .into_iter()
            .map(|(name, input)| (name.to_owned(), input))
            .collect(),
    }
}

struct Gates {
    researcher: Arc<Semaphore>,
    reviewer: Arc<Semaphore>,
}

fn lead(request: &ModelRequest, gates: &Gates) -> Scripted {
    if user_texts(&request.messages).len() == 1 {
        return Scripted::Text("Hello. Tell me what to plan.".into());
    }
    if calls_of(request, "subagent") == 0 {
        return tool_calls(vec![
            (
                "subagent",
                json!({
                    "description": "research risks",
                    "prompt": "[researcher] Find the open risks for the release.",
                    "name": "researcher"
                }),
            ),
            (
                "fork",
                json!({
                    "description": "review the plan",
                    "prompt": "[reviewer] Review the plan we discussed.",
                    "name": "reviewer"
                }),
            ),
        ]);
    }
    if calls_of(request, "list_agents") == 0 {
        return tool_calls(vec![("list_agents", json!({}))]);
    }
    if calls_of(request, "send_message") == 0 {
        return tool_calls(vec![(
            "send_message",
            json!({"to": "reviewer", "message": "Also check the rollback plan."}),
        )]);
    }
    match calls_of(request, "wait") {
        0 => {
            gates.researcher.add_permits(1);
            tool_calls(vec![("wait", json!({"timeout_ms": 30000}))])
        }
        1 => {
            gates.reviewer.add_permits(1);
            tool_calls(vec![("wait", json!({"timeout_ms": 30000}))])
        }
        _ => Scripted::Text(
            "Summary: the researcher found three timeouts and the reviewer approved the plan with its rollback.".into(),
        ),
    }
}

fn researcher(request: &ModelRequest, gate: &Arc<Semaphore>) -> Scripted {
    if calls_of(request, "subagent") == 0 {
        let start = tool_calls(vec![(
            "subagent",
            json!({
                "description": "dig into logs",
                "prompt": "[digger] Dig through the deploy logs.",
                "name": "digger"
            }),
        )]);
        // Held until the lead is waiting.
        return Scripted::Gated {
            gate: gate.clone(),
            then: Box::new(start),
        };
    }
    // Wait (for the digger's report, then its settlement) until the notice
    // of its settlement is in view.
    let settled = request.messages.iter().any(|m| {
        matches!(
            m,
            Message::User {
                source: MessageSource::SubagentSettled { .. },
                ..
            }
        )
    });
    if !settled {
        return tool_calls(vec![("wait", json!({"timeout_ms": 30000}))]);
    }
    Scripted::Text("Open risks: three deploy timeouts (reported by digger).".into())
}

fn reviewer(request: &ModelRequest, gate: &Arc<Semaphore>) -> Scripted {
    // The lead's message may be in the first request or steered in later,
    // depending on when the reviewer's loop first ran; the answer is the same.
    let answer = if user_texts(&request.messages)
        .iter()
        .any(|t| t == "Also check the rollback plan.")
    {
        Scripted::Text("The plan is sound, and so is its rollback.".into())
    } else {
        Scripted::Text("Reading the plan.".into())
    };
    // A fork's history starts with the lead's inherited turns: its own
    // steps are the ones after its prompt.
    let own = request
        .messages
        .iter()
        .skip_while(|m| match m {
            Message::User { content, .. } => !joined_text(content).starts_with("[reviewer]"),
            _ => true,
        })
        .skip(1);
    let first_step = !own.clone().any(|m| matches!(m, Message::Assistant { .. }));
    if first_step {
        // Held until the lead waits for it.
        return Scripted::Gated {
            gate: gate.clone(),
            then: Box::new(answer),
        };
    }
    answer
}

fn digger(request: &ModelRequest) -> Scripted {
    if calls_of(request, "report") == 0 {
        return tool_calls(vec![(
            "report",
            json!({"message": "Found three timeouts in the deploy logs."}),
        )]);
    }
    Scripted::Text("Done digging.".into())
}

/// Session ids are random: name them by order of appearance.
fn redact(text: &str, ids: &mut BTreeMap<String, String>) -> String {
    // A notice's usage line counts the tokens of what the scripted model was
    // shown, which includes what `list_agents` said each running child was
    // doing at that moment: timing, not behaviour.
    let text = text
        .lines()
        .map(|line| {
            if line.starts_with("Usage: ") {
                "Usage: [usage]"
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let text = text.as_str();
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("s-") {
        let candidate = &rest[at..];
        let len = candidate
            .char_indices()
            .skip(2)
            .take_while(|(_, c)| c.is_ascii_hexdigit())
            .count();
        out.push_str(&rest[..at]);
        if len == 32 {
            let id = &candidate[..34];
            let next = ids.len() + 1;
            let name = ids
                .entry(id.to_owned())
                .or_insert_with(|| format!("<child-{next}>"));
            out.push_str(name);
            rest = &candidate[34..];
        } else {
            out.push_str("s-");
            rest = &candidate[2..];
        }
    }
    out.push_str(rest);
    out
}

/// The transcript as the lead's model saw it, one block per message.
fn transcript(messages: &dsh_core::Transcript, answer: &str) -> String {
    let mut ids = BTreeMap::new();
    let mut out = String::new();
    for message in messages {
        let block = match message {
            Message::User { content, source } => {
                let from = match source {
                    MessageSource::User | MessageSource::UserPrompt(_) => "user".to_owned(),
                    MessageSource::AgentMessage { sender_session_id } => {
                        format!("agent message from {sender_session_id}")
                    }
                    MessageSource::SubagentSettled { summary, .. } => {
                        format!("settlement notice ({summary})")
                    }
                    MessageSource::Other { kind, .. } => kind.clone(),
                };
                format!("[{from}]\n{}", joined_text(content))
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut text = format!("[assistant]\n{}", joined_text(content));
                for call in tool_calls {
                    text.push_str(&format!(
                        "\n-> {}({})",
                        call.name,
                        // Sorted keys, under either serde_json map.
                        dsh_test_support::specs::canonical(call.input.to_value().unwrap())
                    ));
                }
                text
            }
            Message::Tool {
                content, is_error, ..
            } => {
                let tag = if *is_error { "tool error" } else { "tool" };
                format!("[{tag}]\n{}", joined_text(content))
            }
        };
        out.push_str(&redact(&block, &mut ids));
        out.push_str("\n\n");
    }
    out.push_str(&format!("[assistant]\n{answer}\n"));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_delegates_lists_messages_waits_and_a_grandchild_reports() {
    let gates = Arc::new(Gates {
        researcher: Arc::new(Semaphore::new(0)),
        reviewer: Arc::new(Semaphore::new(0)),
    });
    let script = gates.clone();
    let model = Arc::new(
        ScriptedModel::new().responder(move |request| match role(request) {
            "lead" => lead(request, &script),
            "researcher" => researcher(request, &script.researcher),
            "reviewer" => reviewer(request, &script.reviewer),
            _ => digger(request),
        }),
    );
    let world = WorldBuilder::project()
        .model(model.clone())
        .provider(Arc::new(SpawnProvider::new()))
        .provider(Arc::new(ForkProvider::new()))
        .setup(|harness, runtime| {
            harness
                .add_tool(SubagentTool::install(runtime, SubagentToolConfig::new("spawn")).unwrap())
                .unwrap();
            harness
                .add_tool(
                    SubagentTool::install(
                        runtime,
                        SubagentToolConfig {
                            tool_name: "fork".into(),
                            ..SubagentToolConfig::new("fork")
                        },
                    )
                    .unwrap(),
                )
                .unwrap();
            for tool in ControlTools::new(runtime.clone()) {
                harness.add_tool(tool).unwrap();
            }
        })
        .build()
        .await;
    let (_harness, runtime, _store) = (&world.harness, &world.runtime, &world.store);
    let lead_handle = world.root.clone();
    let lead_agent = lead_handle.agent().clone();

    for prompt in ["hello", "plan the release"] {
        lead_agent
            .followup(UserMessage::user_text(prompt))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(30), lead_agent.wait_idle())
            .await
            .expect("the lead's turn timed out");
    }
    // The run is over when the whole tree is (B33).
    while tokio::time::timeout(
        Duration::from_secs(30),
        runtime.wait_for_tree_work(&lead_agent),
    )
    .await
    .expect("the tree's work timed out")
    {
        lead_agent.wait_idle().await;
    }

    let lead_requests: Vec<ModelRequest> = model
        .requests()
        .into_iter()
        .filter(|request| role(request) == "lead")
        .collect();
    let last = lead_requests.last().unwrap();
    let answer = "Summary: the researcher found three timeouts and the reviewer approved the plan with its rollback.";
    insta::assert_snapshot!(transcript(&last.messages, answer));

    // The tree as it is left: every child settled, the grandchild under the
    // researcher, and the digger's report reached the researcher.
    let rows = runtime
        .list_descendants(lead_agent.id(), &CancellationToken::new())
        .await
        .unwrap();
    let paths: Vec<String> = rows.iter().filter_map(|row| row.path.clone()).collect();
    assert_eq!(paths, ["researcher", "researcher/digger", "reviewer"]);
    let researcher_saw_report = model.requests().iter().any(|request| {
        role(request) == "researcher"
            && user_texts(&request.messages)
                .iter()
                .any(|text| text == "Found three timeouts in the deploy logs.")
    });
    assert!(
        researcher_saw_report,
        "the digger's report never reached its parent"
    );
    runtime.shutdown().await;
    lead_handle.dispose().await;
}
