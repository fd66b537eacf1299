//! An external (ACP) child as a user meets it through `dsh` (field run item
//! 9, the command's part): the real binary, driven by a loopback
//! OpenAI-compatible server whose lead starts the ACP suite's test-only
//! agent in the background. The run waits for that child to settle (the
//! runtime cannot join an external member, which has no local agent); its
//! summary names the child `external`
//! (its transcript is the agent program's, not an unreadable log);
//! `dsh agents` lists it; `dsh show` prints what its creator heard; `dsh
//! send` refuses it in one line that says why, in English a person reads
//! ("an external child").

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::model::{FakeModel, Reply};
use support::{Scratch, text};

#[test]
fn an_external_child_is_listed_summarised_and_refused_in_words_for_a_person() {
    let Some((python, rogue)) = support::rogue_agent() else {
        println!("skipped: no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let mut replies = vec![Reply::ToolCall {
        name: "acp".to_owned(),
        arguments: serde_json::json!({
            "description": "say hello",
            "name": "helper",
            // The agent's pause only makes it outlive the lead's turn (as
            // any real agent would), so a run that does not wait for it
            // fails for certain; nothing here waits on time.
            "prompt": "sleep 0.3; say hello from the helper",
            "run_in_background": true,
        }),
    }];
    replies.extend((0..8).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let env = support::fake_env(&model);
    let run = support::run_with_rogue(&scratch, &model, (&python, &rogue));
    let stdout = text(&run.stdout);
    assert!(run.status.success(), "{}{stdout}", text(&run.stderr));
    // The run waited for the background child: it finished, and the lead
    // heard of it, before the summary.
    let finished = stdout
        .find("finished helper: completed")
        .unwrap_or(usize::MAX);
    let tree = stdout.find("\ntree:").unwrap();
    assert!(
        finished < tree,
        "the run returned before its external child settled:\n{stdout}"
    );
    let summary = stdout
        .lines()
        .find(|line| line.trim_start().starts_with("helper "))
        .unwrap_or_else(|| panic!("no helper in the summary:\n{stdout}"));
    assert!(summary.contains(" external "), "{summary}");
    assert!(!summary.contains("unreadable"), "{summary}");

    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    let listing = text(&agents.stdout);
    assert!(
        listing
            .lines()
            .any(|line| line.trim_start().starts_with("helper ") && line.contains(" external ")),
        "{listing}"
    );

    // `show` prints what is known of it (tests/external.rs has the text).
    let show = scratch.dsh(&["show", "helper"], &[]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    assert!(text(&show.stdout).contains("hello from the helper"));
    // `send` uses the tree's recorded model (`openai:fake`), so its key.
    let err = scratch.refused(&["send", "helper", "hi"], &env, 1);
    assert!(
        err.contains("`helper` is an external child and cannot receive messages"),
        "{err}"
    );
}
