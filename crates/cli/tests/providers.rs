//! `dsh providers` run as a process: the providers `dsh run` registers
//! under the configuration in force, as the `subagent_survey` tool renders
//! them: `spawn` and `fork` alone, then with the `acp` provider a
//! `dsh.toml` names (its program is never started).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use std::process::Stdio;
use support::{Scratch, text, wait_bounded};

fn providers(scratch: &Scratch, args: &[&str]) -> String {
    let child = scratch
        .bare(args, &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = wait_bounded(child, std::time::Duration::from_secs(60), "dsh providers");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stderr), "");
    text(&output.stdout)
}

#[test]
fn the_providers_of_a_run_with_and_without_an_acp_agent() {
    let scratch = Scratch::new();
    let plain = providers(&scratch, &["providers"]);
    let config = scratch.dir.path().join("with-acp.toml");
    std::fs::write(&config, "[acp]\ncommand = \"/bin/true\"\n").unwrap();
    let with_acp = providers(
        &scratch,
        &["--config", config.to_str().unwrap(), "providers"],
    );
    assert!(with_acp.starts_with(&plain), "{with_acp}");
    snapshot!(
        &scratch,
        "providers",
        &format!("== default\n{plain}\n== with [acp]\n{with_acp}")
    );
}
