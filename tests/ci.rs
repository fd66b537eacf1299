//! `.ci/run` cannot pass having run less than it says: it runs the README's
//! test commands, each as its own command line (bash's `set -e` does not
//! stop at a failure on the left of `&&` or `||`, so `install.sh && cargo
//! test` under it skipped the tests and went on when the install failed),
//! and it sets `CI=true`, which turns a test that cannot run on that machine
//! into a failure (`dsh_test_support::skip_or_fail`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)).unwrap()
}

/// The script's command lines: comments (whole lines, and a `#` that
/// opens a word to the end of its line) and blank lines dropped, a line
/// continued with `\` joined to the next.
fn commands(script: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut pending = String::new();
    for line in script.lines() {
        let line = line.split_once(" #").map_or(line, |(command, _)| command);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(line);
        commands.push(std::mem::take(&mut pending));
    }
    commands
}

/// The README's test commands: the lines after `# the tests:` in its
/// first `sh` block.
fn readme_test_commands(readme: &str) -> Vec<String> {
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README.md opens with an sh block");
    let tests = block
        .split_once("# the tests:")
        .expect("the README's sh block has a `# the tests:` part")
        .1;
    commands(tests.split_once('\n').unwrap().1)
}

#[test]
fn ci_runs_the_readmes_test_commands_each_on_its_own() {
    let readme = readme_test_commands(&read("README.md"));
    assert!(readme.len() >= 2, "{readme:?}");
    let ci = commands(&read(".ci/run"));
    // CI adds --locked to cargo; otherwise each README command is a whole
    // command of the script.
    let unlocked: Vec<String> = ci.iter().map(|c| c.replace(" --locked", "")).collect();
    for command in &readme {
        assert!(
            unlocked.contains(command),
            "the README's test command {command:?} is not a command of .ci/run"
        );
    }
}

#[test]
fn no_command_of_ci_can_fail_without_stopping_it() {
    let script = read(".ci/run");
    assert!(script.contains("\nset -euo pipefail\n"), "{script}");
    for command in commands(&script) {
        for list in ["&&", "||"] {
            assert!(
                !command.contains(list),
                "`set -e` does not stop at a failure left of `{list}`: {command}"
            );
        }
    }
}

#[test]
fn ci_turns_a_skipped_test_into_a_failure() {
    assert!(commands(&read(".ci/run")).contains(&"export CI=true".to_owned()));
}
