//! The agent's text and its own notes or warnings are kept apart in the
//! output (field run item 9: "the agent's warning text is glued to the
//! reply"): each agent message is one paragraph, a message being the chunks
//! of one `messageId`, or, from an agent that gives no ids, the chunks
//! between two other updates; the chunks of one message are joined as
//! they came.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{peers, quick, text, world};

async fn output(script: &str) -> String {
    let world = world(vec![quick(peers().rogue(&["--ignore-eof"]))]).await;
    let result = world.run("acp", script).await;
    assert!(result.stop_reason.is_completed(), "{result:?}");
    world.assert_no_process_left();
    text(&result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_with_ids_are_paragraphs_apart() {
    assert_eq!(
        output("message; say warning: the disk; say  is almost full; message; say the answer")
            .await,
        "warning: the disk is almost full\n\nthe answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ids_another_update_ends_a_message() {
    assert_eq!(
        output("say looking around; tool; say found it").await,
        "looking around\n\nfound it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chunks_of_one_message_are_joined_as_they_came() {
    assert_eq!(output("say hel; say lo").await, "hello");
}
