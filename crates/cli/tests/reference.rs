//! `docs/cli.md`, the `dsh` reference, is generated and checked here so it
//! cannot drift: every command's flags are the binary's own `--help` text
//! (the clap definition), and the exit codes are the `EXIT_*` constants of
//! `src/error.rs` with their doc comments, then the roles and budgets
//! sections of `docs/roles-and-budgets.md`. A stale page fails with the
//! command that rewrites it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

/// Every subcommand, in the order `dsh --help` lists them (checked by
/// [`every_subcommand_has_its_section`]).
const COMMANDS: [&str; 12] = [
    "run",
    "agents",
    "send",
    "resume",
    "acp",
    "providers",
    "mcp",
    "show",
    "replay",
    "export",
    "worker",
    "team",
];

fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert!(output.status.success(), "dsh {args:?} --help failed");
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_owned()
}

/// `(name, value, doc)` of every `pub const EXIT_*` in `src/error.rs`.
fn exit_codes() -> Vec<(String, String, String)> {
    let source =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/error.rs"))
            .unwrap();
    let mut codes = Vec::new();
    let mut doc = Vec::new();
    for line in source.lines().map(str::trim) {
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("pub const EXIT_") {
            let (name, value) = rest.split_once(": u8 = ").unwrap();
            let text = doc.join(" ");
            let text = text.strip_prefix("Exit code").unwrap_or(&text);
            let text = text.trim_start_matches([':', ' ']);
            codes.push((
                format!("EXIT_{name}"),
                value.trim_end_matches(';').to_owned(),
                text.to_owned(),
            ));
            doc.clear();
        } else {
            doc.clear();
        }
    }
    codes
}

fn page() -> String {
    let mut out = String::from(
        "# The `dsh` command\n\n\
         Generated from the clap definition, `crates/cli/src/error.rs` and\n\
         `crates/cli/docs/roles-and-budgets.md` by\n\
         `crates/cli/tests/reference.rs`; never edit it by hand (run\n\
         `UPDATE_DOCS=1 cargo test -p dsh-cli --test reference`).\n\n",
    );
    out.push_str(&format!("```text\n$ dsh --help\n{}\n```\n", help(&[])));
    for command in COMMANDS {
        out.push_str(&format!(
            "\n## `dsh {command}`\n\n```text\n$ dsh {command} --help\n{}\n```\n",
            help(&[command])
        ));
    }
    out.push_str(
        "\n## Exit codes\n\n`0` on success. Every failure prints one line on stderr, \
         `dsh: <what went wrong>`, and exits with:\n\n| code | constant | when |\n|---|---|---|\n",
    );
    for (name, value, doc) in exit_codes() {
        out.push_str(&format!("| {value} | `{name}` | {doc} |\n"));
    }
    out.push_str(
        "| 1 | | any other failure (a refused request, a failed write, a store or agent error) |\n",
    );
    // The prose sections the flags' help cannot hold.
    out.push_str(include_str!("../docs/roles-and-budgets.md"));
    out
}

#[test]
fn the_reference_page_is_the_clap_definition() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli.md");
    let page = page();
    assert!(exit_codes().len() >= 5, "{:?}", exit_codes());
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &page).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == page,
        "docs/cli.md is stale: run `UPDATE_DOCS=1 cargo test -p dsh-cli --test reference`"
    );
}

/// The subcommands `dsh --help` lists (clap's own `help` left out).
fn listed_commands() -> Vec<String> {
    help(&[])
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// A new subcommand gets its section of docs/cli.md: COMMANDS is exactly
/// the list `dsh --help` gives, in its order, so the page above names them
/// all.
#[test]
fn every_subcommand_has_its_section() {
    let listed = listed_commands();
    assert!(listed.len() >= 8, "{listed:?}");
    assert_eq!(
        listed, COMMANDS,
        "add the subcommand to COMMANDS in crates/cli/tests/reference.rs"
    );
}
