//! Messaging and interrupts within one tree (B30, B31) and cold resume
//! (B35), against the real harness and JSONL store. The tree used by the
//! matrices: `lead` with children `a` and `b`, `a` with `a1`, `a1` with
//! `a1x`, `b` with `b1`, plus an unrelated root `other`. Every child's model
//! holds its first turn behind a gate, so the whole tree is live.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_test_support::logs::agent_messages;
use dsh_test_support::wait::settle;
use std::collections::HashMap;
use std::sync::Arc;

use dsh_core::{
    Agent, CancellationToken, ContentBlock, EventPayload, Message, MessageSource, SessionId,
    SessionStore,
};
use dsh_harness::Scripted;
use dsh_subagent::{
    ActivationSpec, Delivery, InterruptAuthority, RuntimeConfig, StartRequest, SubagentRuntime,
};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::world::{World, WorldBuilder, models, named_spec, sid};
use tokio::sync::Semaphore;

/// A kit world (logs in `sessions/`, roots in `project/`) with `spawn`
/// registered, the gate every child's first turn waits on, and the tree's
/// agents by name.
struct Tree {
    world: World<dyn SessionStore>,
    gate: Arc<Semaphore>,
    agents: HashMap<&'static str, Arc<dyn Agent>>,
}

impl std::ops::Deref for Tree {
    type Target = World<dyn SessionStore>;

    fn deref(&self) -> &Self::Target {
        &self.world
    }
}

impl Tree {
    /// A model-authored message from `sender` to `target`, as `send_message`
    /// delivers it under a token nobody cancels.
    async fn send(
        &self,
        sender: &Arc<dyn Agent>,
        target: &SessionId,
        text: impl Into<String>,
    ) -> Result<dsh_core::MessageId, dsh_subagent::SubagentError> {
        self.runtime
            .send_message(
                sender,
                target,
                vec![ContentBlock::text(text)],
                &CancellationToken::new(),
            )
            .await
    }
}

async fn child(tree: &Tree, parent: &Arc<dyn Agent>, name: &str) -> Arc<dyn Agent> {
    let activation = tree
        .runtime
        .start_activation(named_spec(parent, "spawn", name, &format!("hold {name}")))
        .await
        .unwrap();
    tree.runtime.registry().get(activation.child_id()).unwrap()
}

async fn tree() -> Tree {
    let gate = Arc::new(Semaphore::new(0));
    let (model, _scripts) = models::keyed(&gate);
    let world = WorldBuilder::project()
        .model(model)
        .provider(Arc::new(SpawnProvider::new()))
        .build()
        .await;
    let other = world.agent("other-session").await.agent().clone();
    let lead = world.lead();
    let mut tree = Tree {
        gate,
        agents: HashMap::new(),
        world,
    };
    let a = child(&tree, &lead, "a").await;
    let b = child(&tree, &lead, "b").await;
    let a1 = child(&tree, &a, "a1").await;
    let a1x = child(&tree, &a1, "a1x").await;
    let b1 = child(&tree, &b, "b1").await;
    for (name, agent) in [
        ("lead", lead),
        ("other", other),
        ("a", a),
        ("b", b),
        ("a1", a1),
        ("a1x", a1x),
        ("b1", b1),
    ] {
        tree.agents.insert(name, agent);
    }
    tree
}

/// An agent object whose epoch is no longer live: created, disposed, and its
/// session resumed under a new epoch.
async fn stale(tree: &Tree) -> Arc<dyn Agent> {
    let id = sid("stale-session");
    let handle = tree.agent(id.as_str()).await;
    let old = handle.agent().clone();
    handle.dispose().await;
    tree.resume(id.as_str()).await;
    old
}

// B30: who may message whom.
#[tokio::test]
async fn messaging_matrix() {
    let tree = tree().await;
    let target = sid("s-a1");
    let cancel = CancellationToken::new();
    let cases: [(&str, Option<&str>); 7] = [
        ("lead", None),                  // root
        ("a", None),                     // parent
        ("a1x", None),                   // a child of the target
        ("b", None),                     // parent's sibling
        ("b1", None),                    // cousin
        ("other", Some("NOT_IN_TREE")),  // another tree
        ("a1", Some("MESSAGE_TO_SELF")), // self
    ];
    for (sender, refusal) in cases {
        let agent = &tree.agents[sender];
        let outcome = tree
            .runtime
            .send_message(
                agent,
                &target,
                vec![ContentBlock::text(format!("from {sender}"))],
                &cancel,
            )
            .await;
        match (refusal, outcome) {
            (None, Ok(_)) => {}
            (Some(code), Err(err)) => assert_eq!(err.code(), code, "{sender}: {err}"),
            (expected, outcome) => panic!("{sender}: expected {expected:?}, got {outcome:?}"),
        }
    }
    // A grandparent is a member too.
    tree.send(&tree.agents["lead"], &sid("s-a1x"), "deep")
        .await
        .unwrap();
    let got: Vec<String> = relayed_to(&tree.agents["a1"])
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    assert_eq!(
        got,
        [
            "hold a1",
            "from lead",
            "from a",
            "from a1x",
            "from b",
            "from b1"
        ]
    );
    // Attribution is the sender's session id.
    let senders: Vec<String> = relayed_to(&tree.agents["a1"])
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(
        senders[1..],
        ["lead-session", "s-a", "s-a1x", "s-b", "s-b1"]
    );

    // A stale reference is refused, though its session is live again.
    let stale = stale(&tree).await;
    let err = tree.send(&stale, &target, "stale").await.unwrap_err();
    assert_eq!(err.code(), "NOT_LIVE");
    tree.gate.add_permits(100);
}

// B31: who may interrupt whom.
#[tokio::test]
async fn interrupt_matrix() {
    let tree = tree().await;
    let target = sid("s-a1x");
    let ancestor = |name: &str| InterruptAuthority::Ancestor(tree.agents[name].clone());
    let cases = [
        ("user", InterruptAuthority::User, None),
        ("root", ancestor("lead"), None),
        ("grandparent", ancestor("a"), None),
        ("parent", ancestor("a1"), None),
        ("sibling of parent", ancestor("b"), Some("UNAUTHORIZED")),
        ("cousin", ancestor("b1"), Some("UNAUTHORIZED")),
        ("unrelated", ancestor("other"), Some("UNAUTHORIZED")),
        ("self", ancestor("a1x"), Some("UNAUTHORIZED")),
    ];
    for (who, authority, refusal) in cases {
        let outcome = tree.runtime.interrupt(&target, &authority).await;
        match (refusal, outcome) {
            (None, Ok(())) => {}
            (Some(code), Err(err)) => assert_eq!(err.code(), code, "{who}: {err}"),
            (expected, outcome) => panic!("{who}: expected {expected:?}, got {outcome:?}"),
        }
    }
    let stale = stale(&tree).await;
    assert_eq!(
        tree.runtime
            .interrupt(&target, &InterruptAuthority::Ancestor(stale))
            .await
            .unwrap_err()
            .code(),
        "UNAUTHORIZED"
    );
    // Refused even when the target is absent; a user interrupt of an absent target is a no-op.
    let missing = sid("nobody");
    assert_eq!(
        tree.runtime
            .interrupt(&missing, &ancestor("b"))
            .await
            .unwrap_err()
            .code(),
        "UNAUTHORIZED"
    );
    tree.runtime
        .interrupt(&missing, &InterruptAuthority::User)
        .await
        .unwrap();
    tree.gate.add_permits(100);
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_child_stays_parked_until_a_waking_send() {
    let tree = tree().await;
    let a1x = tree.agents["a1x"].clone();
    let cancel = CancellationToken::new();
    // Queue a message behind the held first turn, then interrupt.
    tree.runtime
        .send_message(
            &tree.agents["lead"],
            a1x.id(),
            vec![ContentBlock::text("queued")],
            &cancel,
        )
        .await
        .unwrap();
    tree.runtime
        .interrupt(
            a1x.id(),
            &InterruptAuthority::Ancestor(tree.agents["a"].clone()),
        )
        .await
        .unwrap();
    a1x.wait_idle().await;
    let requests_before = tree.model.requests().len();
    // The steered message was claimed or parked; either way nothing runs by itself.
    settle().await;
    assert_eq!(
        tree.model.requests().len(),
        requests_before,
        "no turn started by itself"
    );
    assert!(
        tree.runtime.registry().get(a1x.id()).is_some(),
        "the activation is kept"
    );
    // A waking send releases it.
    tree.runtime
        .send_message(
            &tree.agents["lead"],
            a1x.id(),
            vec![ContentBlock::text("wake")],
            &cancel,
        )
        .await
        .unwrap();
    a1x.wait_idle().await;
    assert!(tree.model.requests().len() > requests_before);
    tree.gate.add_permits(100);
}

#[tokio::test]
async fn many_concurrent_messages_to_one_child_arrive_in_order_per_sender_and_each_once() {
    let tree = tree().await;
    let target = tree.agents["b1"].clone();
    let cancel = CancellationToken::new();
    let sends = (0..50).map(|n| {
        let runtime = tree.runtime.clone();
        let lead = tree.agents["lead"].clone();
        let cancel = cancel.clone();
        let id = target.id().clone();
        async move {
            runtime
                .send_message(
                    &lead,
                    &id,
                    vec![ContentBlock::text(format!("m{n}"))],
                    &cancel,
                )
                .await
                .unwrap()
        }
    });
    let ids = futures::future::join_all(sends).await;
    // Every accepted id is in the log exactly once, in acceptance order.
    let accepted: Vec<_> = target
        .events()
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::InboxAccepted(a) => Some(a.message.id.clone()),
            _ => None,
        })
        .collect();
    for id in &ids {
        assert_eq!(accepted.iter().filter(|a| *a == id).count(), 1);
    }
    tree.gate.add_permits(100);
    target.wait_idle().await;
    // FIFO: claims follow acceptance order.
    let claimed: Vec<_> = target
        .events()
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::InboxClaimed(c) => Some(c.message_ids.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let accepted_ids: Vec<_> = accepted.into_iter().filter(|id| ids.contains(id)).collect();
    let claimed_ids: Vec<_> = claimed.into_iter().filter(|id| ids.contains(id)).collect();
    assert_eq!(claimed_ids, accepted_ids);
}

// B35: a cold member is resumed under the live root and gets the message.
#[tokio::test]
async fn a_cold_member_is_resumed_once_and_gets_its_messages() {
    let tree = tree().await;
    // Let the whole tree finish: every child settles and is torn down.
    tree.gate.add_permits(100);
    let lead = tree.agents["lead"].clone();
    for _ in 0..10_000 {
        if tree.runtime.live_activations() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(tree.runtime.live_activations(), 0);
    lead.wait_idle().await;
    let target = sid("s-a1x");
    assert!(tree.runtime.registry().get(&target).is_none(), "cold");
    tree.runtime.remove("spawn");
    let cancel = CancellationToken::new();
    // Hold the resumed child's first step, so its activation can be inspected.
    let held = Arc::new(Semaphore::new(0));
    tree.model.push(Scripted::Gated {
        gate: held.clone(),
        then: Box::new(Scripted::Text("back".into())),
    });
    // Concurrent messages to the cold child coalesce into one activation.
    let sends = (0..5).map(|n| {
        let runtime = tree.runtime.clone();
        let lead = lead.clone();
        let cancel = cancel.clone();
        let target = target.clone();
        async move {
            runtime
                .send_message(
                    &lead,
                    &target,
                    vec![ContentBlock::text(format!("cold {n}"))],
                    &cancel,
                )
                .await
        }
    });
    let results = futures::future::join_all(sends).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let agent = tree.runtime.registry().get(&target).unwrap();
    assert_eq!(tree.runtime.names_of(&agent).unwrap().self_name, "a/a1/a1x");
    assert_eq!(
        tree.runtime.names_of(&agent).unwrap().parent.as_deref(),
        Some("a/a1")
    );
    held.add_permits(1);
    agent.wait_idle().await;
    let log = tree.store.load(&target).await.unwrap();
    let texts: Vec<String> = log
        .events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::InboxAccepted(a) => {
                Some(dsh_core::content::joined_text(&a.message.content))
            }
            _ => None,
        })
        .collect();
    assert_eq!(texts.len(), 6, "{texts:?}");
    // The resumed child kept its lineage from its own log.
    assert_eq!(agent.header().parent_session.as_ref(), Some(&sid("s-a1")));
}

// B32: drain stops only the selected tree, child-first, and closes admission.
#[tokio::test]
async fn drain_stops_the_selected_tree_and_closes_admission() {
    let tree = tree().await;
    let other = tree.agents["other"].clone();
    let outsider = child(&tree, &other, "outsider").await;
    let lead = tree.agents["lead"].clone();
    tree.runtime
        .drain_descendants(std::slice::from_ref(&lead))
        .await
        .unwrap();
    for name in ["a", "b", "a1", "a1x", "b1"] {
        assert!(
            tree.runtime
                .registry()
                .get(tree.agents[name].id())
                .is_none(),
            "{name} was stopped"
        );
    }
    assert!(
        tree.runtime.registry().get(outsider.id()).is_some(),
        "other trees keep running"
    );
    let refused = tree
        .runtime
        .start_activation(ActivationSpec {
            provider: "spawn".into(),
            label: "late".into(),
            name: None,
            child_id: None,
            cancel: CancellationToken::new(),
            delivery: Delivery::Parent,
            request: StartRequest::new(lead.clone(), vec![ContentBlock::text("late")]),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "DRAINING");
    let refused = tree.send(&lead, &sid("s-a"), "late").await.unwrap_err();
    assert_eq!(refused.code(), "DRAINING");
    // The drained children told their creators without waking them.
    for event in lead.events() {
        if let EventPayload::InboxAccepted(accepted) = &event.payload
            && matches!(
                accepted.message.source,
                MessageSource::SubagentSettled { .. }
            )
        {
            assert!(!accepted.wake, "a draining root is not woken");
        }
    }
    tree.gate.add_permits(100);
}

// B33: joining tree work.
#[tokio::test(start_paused = true)]
async fn wait_for_tree_work_joins_running_members_and_skips_parked_ones() {
    let tree = tree().await;
    let lead = tree.agents["lead"].clone();
    // Park one member; the rest are running behind the gate.
    tree.runtime
        .interrupt(tree.agents["b1"].id(), &InterruptAuthority::User)
        .await
        .unwrap();
    let waiting = {
        let runtime = tree.runtime.clone();
        let lead = lead.clone();
        tokio::spawn(async move { runtime.wait_for_tree_work(&lead).await })
    };
    settle().await;
    assert!(!waiting.is_finished(), "running members hold it");
    tree.gate.add_permits(100);
    assert!(waiting.await.unwrap(), "it joined work");
    assert!(
        tree.runtime
            .registry()
            .get(tree.agents["b1"].id())
            .is_some(),
        "the parked member stays resident"
    );
    let other = tree.agents["other"].clone();
    assert!(
        !tree.runtime.wait_for_tree_work(&other).await,
        "nothing to join"
    );
}

/// Refuses every session but one.
struct OnlyFor(SessionId);

impl dsh_subagent::SessionAuthoriser for OnlyFor {
    fn authorise(&self, session: &SessionId) -> Result<(), String> {
        if session == &self.0 {
            Ok(())
        } else {
            Err(format!("no access to `{session}`"))
        }
    }
}

// B36: the user-authored prompt and interrupt.
#[tokio::test]
async fn user_prompts_are_authorised_on_the_child_and_keep_their_request_id() {
    let tree = tree().await;
    let cancel = CancellationToken::new();
    let a1 = tree.agents["a1"].clone();
    let accepted_before = a1.events().len();
    let request = |text: &str, delivery| dsh_subagent::UserPrompt {
        child: a1.id().clone(),
        request_id: dsh_core::MessageId::new(format!("req-{text}")),
        content: vec![ContentBlock::text(text)],
        attachments: Vec::new(),
        client_time_zone: None,
        delivery,
    };
    // Refused before any work.
    let err = tree
        .runtime
        .prompt(
            request("denied", dsh_subagent::PromptDelivery::Queue),
            &OnlyFor(sid("s-b")),
            &cancel,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "UNAUTHORIZED");
    assert_eq!(a1.events().len(), accepted_before, "nothing was accepted");
    let err = tree
        .runtime
        .interrupt_by_user(a1.id(), &OnlyFor(sid("s-b")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "UNAUTHORIZED");

    // Queue and steer keep the caller's id and the user source.
    let id = tree
        .runtime
        .prompt(
            request("queued", dsh_subagent::PromptDelivery::Queue),
            &dsh_subagent::TrustedHost,
            &cancel,
        )
        .await
        .unwrap();
    assert_eq!(id.message_id.as_str(), "req-queued");
    let id = tree
        .runtime
        .prompt(
            request("steered", dsh_subagent::PromptDelivery::Steer),
            &OnlyFor(a1.id().clone()),
            &cancel,
        )
        .await
        .unwrap();
    assert_eq!(id.message_id.as_str(), "req-steered");
    let user_messages: Vec<(String, dsh_core::InboxTarget)> = a1
        .events()
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::InboxAccepted(a) if a.message.source == MessageSource::User => {
                Some((a.message.id.to_string(), a.target))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        user_messages,
        [
            ("req-queued".to_owned(), dsh_core::InboxTarget::NextTurn),
            ("req-steered".to_owned(), dsh_core::InboxTarget::NextStep)
        ]
    );
    // Images need a model that accepts them.
    let mut image = request("image", dsh_subagent::PromptDelivery::Queue);
    image.content = vec![ContentBlock::Image {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    }];
    let err = tree
        .runtime
        .prompt(image, &dsh_subagent::TrustedHost, &cancel)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_REQUEST");
    // A root is not a child.
    let mut to_root = request("root", dsh_subagent::PromptDelivery::Queue);
    to_root.child = sid("lead-session");
    assert_eq!(
        tree.runtime
            .prompt(to_root, &dsh_subagent::TrustedHost, &cancel)
            .await
            .unwrap_err()
            .code(),
        "NOT_A_CHILD"
    );
    tree.runtime
        .interrupt_by_user(a1.id(), &dsh_subagent::TrustedHost)
        .await
        .unwrap();
    tree.gate.add_permits(100);
}

#[tokio::test]
async fn a_user_prompt_resumes_a_cold_child() {
    let tree = tree().await;
    tree.gate.add_permits(100);
    for _ in 0..10_000 {
        if tree.runtime.live_activations() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(tree.runtime.live_activations(), 0);
    let target = sid("s-b1");
    let id = tree
        .runtime
        .prompt(
            dsh_subagent::UserPrompt {
                child: target.clone(),
                request_id: dsh_core::MessageId::new("req-cold"),
                content: vec![ContentBlock::text("are you there?")],
                attachments: Vec::new(),
                client_time_zone: None,
                delivery: dsh_subagent::PromptDelivery::Queue,
            },
            &dsh_subagent::TrustedHost,
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(id.message_id.as_str(), "req-cold");
    // The resumed turn sees the prompt (it may settle and go cold at once).
    dsh_test_support::wait::until(|| {
        tree.model.requests().iter().any(|r| r.messages.iter().any(|m| matches!(
            m, Message::User { content, .. } if dsh_core::content::joined_text(content) == "are you there?"
        )))
    })
    .await;
}

// B35: refusals a model can act on.
#[tokio::test]
async fn resume_refusals_are_distinct() {
    let tree = tree().await;
    tree.gate.add_permits(100);
    for _ in 0..10_000 {
        if tree.runtime.live_activations() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let lead = tree.agents["lead"].clone();
    lead.wait_idle().await;
    let cancel = CancellationToken::new();
    // A child whose log is corrupt cannot be resumed; the message says not to retry.
    let path = tree.sessions_dir().join("s-b1.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{not json";
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let err = tree.send(&lead, &sid("s-b1"), "hello").await.unwrap_err();
    assert_eq!(err.code(), "NOT_RESUMABLE", "{err}");
    assert!(err.to_string().contains("Do not retry"), "{err}");

    // At capacity, resume is a distinct, retryable refusal.
    let small = SubagentRuntime::new(
        Arc::new(tree.harness.clone()),
        tree.store.clone(),
        RuntimeConfig {
            max_live_children_per_tree: 0,
        },
    );
    let err = small
        .send_message(
            &lead,
            &sid("s-a"),
            vec![ContentBlock::text("hello")],
            &cancel,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "DELIVERY_UNAVAILABLE", "{err}");
    assert!(err.to_string().contains("try again"), "{err}");
}

/// The messages other agents relayed to `agent`: `(sender, text)`.
fn relayed_to(agent: &Arc<dyn Agent>) -> Vec<(String, String)> {
    agent_messages(&agent.events())
}
