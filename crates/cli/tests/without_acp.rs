//! `dsh` built without its `acp` feature (`cargo test -p dsh-cli
//! --no-default-features --test without_acp`, as CI runs it): a `dsh.toml`
//! with an `[acp]` table, or an `--acp-*` flag, is refused with one line
//! naming the feature (exit 2, not a parse error), before anything runs;
//! the commands that need no ACP agent still work. Built with the feature
//! (the default) this file holds nothing: the ACP suites cover that build.

#![cfg(not(feature = "acp"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use std::process::{Output, Stdio};

use support::{Scratch, text, wait_bounded};

/// `dsh providers` (which takes no `--dir`).
fn providers(scratch: &Scratch) -> Output {
    let child = scratch
        .bare(&["providers"], &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bounded(child, std::time::Duration::from_secs(60), "dsh providers")
}

#[test]
fn acp_tables_and_flags_are_refused_naming_the_feature() {
    let scratch = Scratch::new();
    let file = scratch.dir.path().join("dsh.toml");
    std::fs::write(&file, "[acp]\ncommand = \"codex-acp\"\n").unwrap();
    let refused = providers(&scratch);
    let mut errors = vec![text(&refused.stderr)];
    assert_eq!(refused.status.code(), Some(2), "{}", errors[0]);
    for args in [&["run"][..], &["send", "researcher", "hi"]] {
        errors.push(scratch.refused(args, &[], 2));
    }
    for err in errors {
        assert!(
            err.starts_with("dsh: the `[acp]` table of ")
                && err
                    .contains("dsh.toml needs the `acp` feature, which this dsh was built without"),
            "{err}"
        );
    }
    std::fs::remove_file(&file).unwrap();
    for (flag, value) in [
        ("--acp-command", "codex-acp"),
        ("--acp-permission", "allow"),
        ("--acp-env", "CODEX_HOME"),
    ] {
        let err = scratch.refused(&["run", flag, value], &[], 2);
        assert!(
            err.contains(&format!("{flag} needs the `acp` feature")),
            "{flag}: {err}"
        );
    }
    assert!(scratch.listing().is_empty(), "a refused run wrote files");
    let listed = providers(&scratch);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listed = text(&listed.stdout);
    assert!(
        listed.contains("spawn") && !listed.contains("acp"),
        "{listed}"
    );
}
