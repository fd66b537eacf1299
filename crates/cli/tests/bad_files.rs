//! One unreadable, corrupt or foreign file in a session directory affects
//! only what needs it (B57), and crash debris is reported (B54's "a child
//! log that no catalog names"): the real `dsh` binary over a directory the
//! offline demo wrote, with files broken by hand. Tests run as root, for
//! whom mode 000 is no obstacle, so an unreadable log is a path the kernel
//! refuses to read for everyone: a `*.jsonl` that is a symlink to a
//! directory (EISDIR) or to itself (ELOOP). Every listing is a snapshot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use std::path::PathBuf;

use support::{Scratch, text};

/// The header line of `id`'s log.
fn header_line(scratch: &Scratch, id: &str) -> String {
    let log = std::fs::read_to_string(scratch.sessions().join(format!("{id}.jsonl"))).unwrap();
    log.lines().next().unwrap().to_owned()
}

/// The tree ids `dsh agents` lists, oldest first.
fn trees(agents: &str) -> Vec<String> {
    agents
        .lines()
        .filter_map(|line| line.strip_prefix("tree "))
        .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
        .collect()
}

#[test]
fn a_stray_jsonl_is_skipped_by_every_command_with_one_warning_and_an_empty_one_silently() {
    let scratch = Scratch::new();
    scratch.demo();
    std::fs::write(scratch.sessions().join("README.jsonl"), "# notes\n").unwrap();
    std::fs::write(scratch.sessions().join("empty.jsonl"), "").unwrap();
    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    snapshot!(&scratch, "stray_files_warnings", &text(&agents.stderr));
    assert_eq!(trees(&text(&agents.stdout)).len(), 1);
    for args in [
        &["show", "researcher"][..],
        &["send", "researcher", "Still there?"],
        &["run"],
    ] {
        let output = scratch.dsh(args, &[]);
        assert!(
            output.status.success(),
            "dsh {args:?}: {}",
            text(&output.stderr)
        );
        assert_eq!(
            text(&output.stderr),
            text(&agents.stderr),
            "dsh {args:?} warns once per stray file"
        );
        assert!(!text(&output.stdout).is_empty());
    }
    // The stray files are left as they were.
    assert_eq!(
        std::fs::read(scratch.sessions().join("README.jsonl")).unwrap(),
        b"# notes\n"
    );
    assert!(scratch.sessions().join("empty.jsonl").exists());
}

/// What a kill between a create's file and its header leaves (an empty
/// file, or part of a header line) is the store's own debris, not a
/// stranger's file: no command warns about it, `dsh agents` lists it, and
/// `--prune-orphans` removes it, leaving a stray that is not a session.
#[test]
fn an_unfinished_create_is_listed_not_warned_about_and_pruned_on_request() {
    let scratch = Scratch::new();
    scratch.demo();
    let sessions = scratch.sessions();
    let header = header_line(&scratch, &scratch.child_id("researcher"));
    let empty = "s-00000000000000000000000000000001";
    let torn = "s-00000000000000000000000000000002";
    std::fs::write(sessions.join(format!("{empty}.jsonl")), "").unwrap();
    std::fs::write(
        sessions.join(format!("{torn}.jsonl")),
        &header[..header.len() / 2],
    )
    .unwrap();
    std::fs::write(sessions.join("README.jsonl"), "# notes\n").unwrap();
    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    let listing = text(&agents.stdout);
    let section = listing
        .split("\n\n")
        .find(|part| part.starts_with("unfinished creates"))
        .unwrap_or_else(|| panic!("no unfinished creates in:\n{listing}"));
    snapshot!(&scratch, "unfinished_creates", section);
    let warning = text(&agents.stderr);
    assert_eq!(warning.lines().count(), 1, "{warning}");
    assert!(warning.contains("README.jsonl"), "{warning}");
    for args in [
        &["show", "researcher"][..],
        &["send", "researcher", "Still there?"],
    ] {
        let output = scratch.dsh(args, &[]);
        assert!(
            output.status.success(),
            "dsh {args:?}: {}",
            text(&output.stderr)
        );
        assert_eq!(text(&output.stderr), warning, "dsh {args:?}");
    }
    let pruned = scratch.dsh(&["agents", "--prune-orphans"], &[]);
    assert!(pruned.status.success(), "{}", text(&pruned.stderr));
    let listing = text(&pruned.stdout);
    for id in [empty, torn] {
        assert!(listing.contains(&format!("  {id}: removed")), "{listing}");
        assert!(!sessions.join(format!("{id}.jsonl")).exists(), "{id}");
    }
    assert!(sessions.join("README.jsonl").exists());
    let after = scratch.dsh(&["agents"], &[]);
    assert!(
        !text(&after.stdout).contains("unfinished"),
        "{}",
        text(&after.stdout)
    );
}

#[test]
fn an_unreadable_log_is_an_unavailable_row_and_the_rest_of_the_tree_works() {
    let scratch = Scratch::new();
    scratch.demo();
    let researcher = scratch.child_id("researcher");
    let log = scratch.sessions().join(format!("{researcher}.jsonl"));
    std::fs::remove_file(&log).unwrap();
    let elsewhere = scratch.dir.path().join("not-a-file");
    std::fs::create_dir(&elsewhere).unwrap();
    // Reading it fails with EISDIR, for root too.
    std::os::unix::fs::symlink(&elsewhere, &log).unwrap();
    // A log that no catalog names and that cannot be read: ELOOP.
    let looped: PathBuf = scratch.sessions().join("s-looped.jsonl");
    std::os::unix::fs::symlink("s-looped.jsonl", &looped).unwrap();

    let before = scratch.listing();
    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    assert_eq!(text(&agents.stderr), "");
    snapshot!(&scratch, "unreadable_rows", &text(&agents.stdout));
    assert!(before == scratch.listing(), "agents changed the directory");

    // The reviewer needs neither log.
    let show = scratch.dsh(&["show", "reviewer"], &[]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    let send = scratch.dsh(&["send", "reviewer", "Anything to add?"], &[]);
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert!(
        text(&send.stdout).starts_with("reviewer: "),
        "{}",
        text(&send.stdout)
    );
    assert_eq!(text(&send.stderr), "");
    // The researcher needs its own: one line naming the OS error.
    let err = scratch.refused(&["show", "researcher"], &[], 1);
    assert!(err.contains("Is a directory"), "{err}");
    let err = scratch.refused(&["show", "lead", "--root", "s-looped"], &[], 1);
    assert!(err.contains("Too many levels of symbolic links"), "{err}");
    let run = scratch.dsh(&["run"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
}

#[test]
fn garbage_in_one_root_log_refuses_that_tree_only() {
    let scratch = Scratch::new();
    scratch.demo();
    scratch.demo();
    let listed = trees(&text(&scratch.dsh(&["agents"], &[]).stdout));
    let (broken, intact) = (&listed[0], &listed[1]);
    let log = scratch.sessions().join(format!("{broken}.jsonl"));
    let mut bytes = std::fs::read(&log).unwrap();
    // A whole line of garbage, not a torn tail: the log is corrupt.
    bytes.extend_from_slice(b"this is not an event\n");
    std::fs::write(&log, bytes).unwrap();

    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    snapshot!(&scratch, "corrupt_root", &text(&agents.stdout));
    assert_eq!(trees(&text(&agents.stdout)), listed);

    // The most recent tree is the intact one: show and send work there.
    let show = scratch.dsh(&["show", "researcher", "--root", intact], &[]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    let send = scratch.dsh(&["send", "researcher", "One more thing?"], &[]);
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert_eq!(text(&send.stderr), "");
    // The broken tree is refused, in one line naming the file and line.
    let err = scratch.refused(&["show", "researcher", "--root", broken], &[], 4);
    assert!(err.contains(&format!("{broken}.jsonl:")), "{err}");
    let err = scratch.refused(&["send", "researcher", "hi", "--root", broken], &[], 4);
    assert!(err.contains("corrupt"), "{err}");
    let run = scratch.dsh(&["run"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(text(&run.stderr), "");
}

#[test]
fn an_orphan_child_log_is_listed_and_removed_only_on_request() {
    let scratch = Scratch::new();
    scratch.demo();
    let reviewer = scratch.child_id("reviewer");
    let header = header_line(&scratch, &reviewer);
    // A crash between creating a child and recording it in the catalog
    // leaves a log with only its header.
    let unrecorded = "s-unrecorded";
    std::fs::write(
        scratch.sessions().join(format!("{unrecorded}.jsonl")),
        format!("{}\n", header.replace(&reviewer, unrecorded)),
    )
    .unwrap();
    // A child whose parent's log is gone.
    let mut value: serde_json::Value = serde_json::from_str(&header).unwrap();
    let parentless = "s-parentless";
    value["id"] = parentless.into();
    value["parent_session"] = "s-gone".into();
    std::fs::write(
        scratch.sessions().join(format!("{parentless}.jsonl")),
        format!("{value}\n"),
    )
    .unwrap();
    // A third orphan that another process holds open for writing.
    let held = "s-held";
    let held_path = scratch.sessions().join(format!("{held}.jsonl"));
    std::fs::write(&held_path, format!("{}\n", header.replace(&reviewer, held))).unwrap();
    let lock = std::fs::File::open(&held_path).unwrap();
    lock.lock().unwrap();

    let before = scratch.listing();
    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    snapshot!(&scratch, "orphans_listed", &text(&agents.stdout));
    assert!(before == scratch.listing(), "a listing removed something");

    let pruned = scratch.dsh(&["agents", "--prune-orphans"], &[]);
    assert!(pruned.status.success(), "{}", text(&pruned.stderr));
    snapshot!(&scratch, "orphans_pruned", &text(&pruned.stdout));
    let mut expected = before.clone();
    for id in [unrecorded, parentless] {
        expected.remove(&scratch.sessions().join(format!("{id}.jsonl")));
    }
    assert!(
        expected == scratch.listing(),
        "--prune-orphans removed exactly the unheld orphans"
    );
    drop(lock);
    let agents = text(&scratch.dsh(&["agents"], &[]).stdout);
    assert!(
        agents.contains(held) && !agents.contains(unrecorded),
        "{agents}"
    );
    assert!(!agents.contains(parentless), "{agents}");
}

#[test]
fn a_message_to_a_corrupt_child_is_refused_in_words_for_a_person() {
    let scratch = Scratch::new();
    scratch.demo();
    let researcher = scratch.child_id("researcher");
    let log = scratch.sessions().join(format!("{researcher}.jsonl"));
    let text_of_log = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = text_of_log.lines().collect();
    lines[2] = "garbage";
    std::fs::write(&log, format!("{}\n", lines.join("\n"))).unwrap();

    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    assert!(
        text(&agents.stdout).contains("(corrupt: "),
        "{}",
        text(&agents.stdout)
    );
    // Refused (1) when the runtime finds the log unresumable, or corrupt (4)
    // when the store's error reaches the command as it is: the same line
    // either way, naming the child as the person did, and the file and line.
    let err = scratch.refused_with(&["send", "researcher", "hello"], &[], &[1, 4]);
    assert!(
        err.starts_with("dsh: `researcher` cannot be resumed: "),
        "{err}"
    );
    snapshot!(&scratch, "send_to_corrupt_child", &err);
    for model_words in ["Do not retry", "start a new agent", "instead"] {
        assert!(!err.contains(model_words), "{err}");
    }
    // The reviewer, whose log is intact, still answers.
    let send = scratch.dsh(&["send", "reviewer", "Still sound?"], &[]);
    assert!(send.status.success(), "{}", text(&send.stderr));
}

#[test]
fn a_crash_leftover_that_cannot_be_removed_is_named_and_nothing_else_stops() {
    let scratch = Scratch::new();
    scratch.demo();
    // A temporary file's name whose writer (pid 0) is gone, but a directory:
    // removing it as a file fails for root too (EISDIR).
    let leftover = scratch.sessions().join(".s-leftover.0-1-0.tmp");
    std::fs::create_dir(&leftover).unwrap();
    for args in [&["agents"][..], &["show", "researcher"], &["run"]] {
        let output = scratch.dsh(args, &[]);
        assert!(
            output.status.success(),
            "dsh {args:?}: {}",
            text(&output.stderr)
        );
        let stderr = text(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "dsh {args:?}: {stderr}");
        assert!(
            stderr.starts_with("dsh: warning: cannot remove a crash leftover: ")
                && stderr.contains(".s-leftover.0-1-0.tmp"),
            "dsh {args:?}: {stderr}"
        );
    }
}
