//! Several `dsh` processes in one tree at once, all real: a holder (a
//! `dsh send lead` whose model never answers, so it holds the tree until
//! it is stopped) and three more (`dsh resume`, `dsh send lead`, `dsh
//! resume`) that each say, in one line naming the holder's pid, that they
//! wait for it. When the holder is stopped, the waiters take the tree one
//! after the other: each of them must finish, none may fail on a lock
//! another waiter took between its look at the lock table and its own
//! lock (the window the look alone left open).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::BufRead;

use rustix::process::{Pid, Signal, kill_process};
use support::model::{FakeModel, Reply};
use support::{BOUND, Scratch, fake_env, text, wait_bounded};

#[test]
fn waiters_on_a_real_holder_name_it_then_each_take_the_tree_in_turn() {
    let scratch = Scratch::new();
    scratch.demo();
    let model = FakeModel::start(vec![Reply::Hang]);
    let env = fake_env(&model);
    let holder = scratch.spawn(
        &["send", "lead", "hold the tree", "--model", "openai:fake"],
        &env,
    );
    // The holder's lead is in its model call: it holds the tree.
    model.request_containing("hold the tree", BOUND);
    let pid = holder.id();
    let waiters: Vec<_> = [
        vec!["resume", "--wait", "600"],
        vec!["send", "--wait", "600", "lead", "and you?"],
        vec!["resume", "--wait", "600"],
    ]
    .into_iter()
    .map(|args| {
        let mut child = scratch.spawn(&args, &[]);
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        assert!(
            line.starts_with("dsh: `")
                && line.ends_with(&format!(
                    "` is held by another process (pid {pid}); waiting up to 600 s for it\n"
                )),
            "{args:?}: {line:?}"
        );
        (args, child, stderr)
    })
    .collect();
    kill_process(Pid::from_child(&holder), Signal::TERM).unwrap();
    let stopped = wait_bounded(holder, BOUND, "the holder");
    assert_eq!(
        stopped.status.code(),
        Some(143),
        "{}",
        text(&stopped.stderr)
    );
    for (args, child, mut stderr) in waiters {
        let output = wait_bounded(child, BOUND, &args.join(" "));
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        assert!(output.status.success(), "{args:?}: {rest}");
        // A waiter that found the tree taken again waits again, saying so.
        assert!(
            rest.lines()
                .all(|line| line.contains("is held by another process")),
            "{args:?}: {rest}"
        );
    }
}
