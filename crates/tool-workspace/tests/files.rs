//! The file tools on real files: `read_file`, `list_files`, `grep`,
//! `edit_file` and `write_file` called as the loop calls them, by live
//! agents of a real harness. Bounds and their markers, refusals (escaping
//! paths, symbolic links out of the root, binary files, absent and
//! ambiguous edits) and per-agent cwd resolution; rendered results are
//! snapshots.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{World, ok, refused};
use dsh_tool_workspace::{Level, MAX_READ_BYTES};
use serde_json::json;

#[tokio::test]
async fn read_file_numbers_lines_and_takes_ranges() {
    let w = World::new().await;
    w.file("src/lib.rs", "fn a() {}\nfn b() {}\n\nfn c() {}\n");
    let read = w.tool(Level::ReadOnly, "read_file");
    insta::assert_snapshot!(
        "read_whole",
        ok(&read, &w.lead, json!({"path": "src/lib.rs"})).await
    );
    insta::assert_snapshot!(
        "read_range",
        ok(
            &read,
            &w.lead,
            json!({"path": "src/lib.rs", "start_line": 2, "line_count": 2})
        )
        .await
    );
    let err = refused(
        &read,
        &w.lead,
        json!({"path": "src/lib.rs", "start_line": 9}),
    )
    .await;
    assert!(err.contains("has 4 lines"), "{err}");
}

#[tokio::test]
async fn read_file_is_bounded_with_a_marker() {
    let w = World::new().await;
    let line = "x".repeat(99);
    let lines: Vec<String> = (0..2000).map(|_| line.clone()).collect();
    w.file("big.txt", lines.join("\n"));
    let read = w.tool(Level::ReadOnly, "read_file");
    let out = ok(&read, &w.lead, json!({"path": "big.txt"})).await;
    assert!(out.len() < MAX_READ_BYTES + 20 * 700, "{}", out.len());
    let last = out.lines().last().unwrap();
    insta::assert_snapshot!("read_truncated_marker", last);
    // The marker's start line continues exactly where the output stopped.
    let shown = out.lines().filter(|l| l.contains('\t')).count();
    assert!(
        last.contains(&format!("start_line={}", shown + 1)),
        "{last}"
    );
    let next = ok(
        &read,
        &w.lead,
        json!({"path": "big.txt", "start_line": shown + 1}),
    )
    .await;
    assert!(
        next.starts_with(&format!("{:>6}\t", shown + 1)),
        "{next:.40}"
    );

    w.file("one.txt", "y".repeat(MAX_READ_BYTES * 2));
    let out = ok(&read, &w.lead, json!({"path": "one.txt"})).await;
    insta::assert_snapshot!("read_long_line_marker", out.lines().last().unwrap());
}

#[tokio::test]
async fn read_file_refuses_binary_directories_and_escapes() {
    let w = World::new().await;
    w.file("image.png", [0x89, b'P', b'N', b'G', 0, 0, 1, 2]);
    w.file("latin1.txt", [b'c', b'a', b'f', 0xe9]);
    w.file("src/a.rs", "a");
    std::fs::write(w.dir.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(w.dir.path().join("secret"), w.root.join("link")).unwrap();
    let read = w.tool(Level::Full, "read_file");
    let mut refusals = Vec::new();
    for path in [
        "image.png",
        "latin1.txt",
        "src",
        "missing.rs",
        "../secret",
        "link",
        "/etc/passwd",
    ] {
        let err = refused(&read, &w.lead, json!({"path": path})).await;
        refusals.push(format!(
            "{path}: {}",
            err.replace(&w.root.display().to_string(), "[ROOT]")
        ));
    }
    insta::assert_snapshot!("read_refusals", refusals.join("\n"));
    // A file too large to load is refused before it is read (sparse here).
    let huge = std::fs::File::create(w.root.join("huge.log")).unwrap();
    huge.set_len(17 * 1024 * 1024).unwrap();
    let err = refused(&read, &w.lead, json!({"path": "huge.log"})).await;
    assert!(err.contains("Use grep to find the part you need"), "{err}");
}

#[tokio::test]
async fn paths_resolve_against_each_agents_cwd() {
    let w = World::new().await;
    w.file("a/notes.txt", "in a\n");
    w.file("notes.txt", "at root\n");
    let child = w.agent(&w.root.join("a")).await;
    let read = w.tool(Level::ReadOnly, "read_file");
    assert_eq!(
        ok(&read, &w.lead, json!({"path": "notes.txt"})).await,
        "     1\tat root\n"
    );
    assert_eq!(
        ok(&read, &child, json!({"path": "notes.txt"})).await,
        "     1\tin a\n"
    );
    assert_eq!(
        ok(&read, &child, json!({"path": "../notes.txt"})).await,
        "     1\tat root\n"
    );
    // Out and back in is inside; out is not.
    assert_eq!(
        ok(&read, &w.lead, json!({"path": "../root/notes.txt"})).await,
        "     1\tat root\n"
    );
    let err = refused(&read, &child, json!({"path": "../../notes.txt"})).await;
    assert!(err.contains("outside the workspace root"), "{err}");
    // An agent whose cwd is outside the root reaches only the root.
    std::fs::write(w.dir.path().join("secret"), "s").unwrap();
    let outsider = w.agent(w.dir.path()).await;
    assert_eq!(
        ok(&read, &outsider, json!({"path": "root/notes.txt"})).await,
        "     1\tat root\n"
    );
    let err = refused(&read, &outsider, json!({"path": "secret"})).await;
    assert!(err.contains("outside the workspace root"), "{err}");
}

#[tokio::test]
async fn list_files_respects_gitignore_patterns_and_bounds() {
    let w = World::new().await;
    w.file(".gitignore", "target/\n*.log\n");
    w.file("src/main.rs", "");
    w.file("src/lib.rs", "");
    w.file("src/deep/mod.rs", "");
    w.file("README.md", "");
    w.file("build.log", "");
    w.file("target/debug/out", "");
    w.file(".hidden/x", "");
    w.file("docs/guide.md", "");
    std::fs::write(w.dir.path().join("secret.rs"), "").unwrap();
    std::os::unix::fs::symlink(w.dir.path().join("secret.rs"), w.root.join("src/out.rs")).unwrap();
    std::os::unix::fs::symlink(w.root.join("README.md"), w.root.join("docs/readme.md")).unwrap();
    let list = w.tool(Level::ReadOnly, "list_files");
    insta::assert_snapshot!("list_all", ok(&list, &w.lead, json!({})).await);
    insta::assert_snapshot!(
        "list_patterns",
        ok(&list, &w.lead, json!({"patterns": ["*.rs"]})).await
    );
    insta::assert_snapshot!(
        "list_limit",
        ok(&list, &w.lead, json!({"path": "src", "limit": 2})).await
    );
    let child = w.agent(&w.root.join("src")).await;
    assert_eq!(
        ok(&list, &child, json!({"path": "deep"})).await,
        "deep/mod.rs\n"
    );
    let err = refused(&list, &w.lead, json!({"path": ".."})).await;
    assert!(err.contains("outside the workspace root"), "{err}");
    let err = refused(&list, &w.lead, json!({"path": "README.md"})).await;
    assert!(err.contains("is a file"), "{err}");
    let err = refused(&list, &w.lead, json!({"patterns": ["a[b"]})).await;
    assert!(err.contains("is invalid"), "{err}");
}

#[tokio::test]
async fn grep_finds_with_context_globs_and_bounds() {
    let w = World::new().await;
    w.file(".gitignore", "ignored/\n");
    w.file(
        "src/lib.rs",
        "use std::io;\n\nfn alpha() {}\nfn beta() {}\n// TODO: gamma\n\n\n\nfn delta() { todo() }\n",
    );
    w.file("src/notes.md", "fn alpha in prose\n");
    w.file("ignored/x.rs", "fn alpha() {}\n");
    w.file("blob.bin", b"fn alpha\0\x01\x02");
    let grep = w.tool(Level::ReadOnly, "grep");
    insta::assert_snapshot!(
        "grep_context",
        ok(
            &grep,
            &w.lead,
            json!({"pattern": "fn (alpha|delta)", "context": 1})
        )
        .await
    );
    insta::assert_snapshot!(
        "grep_globs_case",
        ok(
            &grep,
            &w.lead,
            json!({"pattern": "todo", "globs": ["*.rs"], "case_insensitive": true})
        )
        .await
    );
    insta::assert_snapshot!(
        "grep_bounded",
        ok(&grep, &w.lead, json!({"pattern": "fn", "max_matches": 2})).await
    );
    insta::assert_snapshot!(
        "grep_none",
        ok(
            &grep,
            &w.lead,
            json!({"pattern": "nothing-here", "path": "src"})
        )
        .await
    );
    // A file path searches that file alone, named as given.
    assert_eq!(
        ok(
            &grep,
            &w.lead,
            json!({"pattern": "beta", "path": "src/lib.rs"})
        )
        .await,
        "src/lib.rs:4:fn beta() {}\n"
    );
    let err = refused(&grep, &w.lead, json!({"pattern": "fn (", "path": "src"})).await;
    assert!(err.contains("is invalid"), "{err}");
    let err = refused(&grep, &w.lead, json!({"pattern": "x", "path": "../"})).await;
    assert!(err.contains("outside the workspace root"), "{err}");
    // A link out of the root is not followed by the walk.
    std::fs::write(w.dir.path().join("secret.rs"), "fn alpha_secret() {}\n").unwrap();
    std::os::unix::fs::symlink(w.dir.path().join("secret.rs"), w.root.join("src/s.rs")).unwrap();
    let out = ok(&grep, &w.lead, json!({"pattern": "alpha_secret"})).await;
    assert!(out.starts_with("[no matches"), "{out}");
}

#[tokio::test]
async fn edit_file_replaces_one_exact_match_and_shows_the_diff() {
    let w = World::new().await;
    w.file(
        "src/lib.rs",
        "fn one() -> u32 {\n    1\n}\n\nfn two() -> u32 {\n    2\n}\n",
    );
    let edit = w.tool(Level::WorkspaceWrite, "edit_file");
    let out = ok(
        &edit,
        &w.lead,
        json!({"path": "src/lib.rs", "old_string": "    2\n", "new_string": "    1 + 1\n"}),
    )
    .await;
    insta::assert_snapshot!("edit_diff", out);
    assert_eq!(
        std::fs::read_to_string(w.root.join("src/lib.rs")).unwrap(),
        "fn one() -> u32 {\n    1\n}\n\nfn two() -> u32 {\n    1 + 1\n}\n"
    );
}

#[tokio::test]
async fn edit_file_refuses_absent_ambiguous_and_invalid_edits_unchanged() {
    let w = World::new().await;
    let original = "a = 1\nb = 1\nc = aaa\n";
    w.file("conf.txt", original);
    w.file("bin.dat", [0u8, 1, 2]);
    let edit = w.tool(Level::WorkspaceWrite, "edit_file");
    let mut refusals = Vec::new();
    for (old, new) in [
        ("z = 9", "z = 0"),
        ("= 1", "= 2"),
        ("aa", "b"),
        ("", "x"),
        ("a = 1", "a = 1"),
    ] {
        let err = refused(
            &edit,
            &w.lead,
            json!({"path": "conf.txt", "old_string": old, "new_string": new}),
        )
        .await;
        refusals.push(format!("{old:?}: {err}"));
    }
    let err = refused(
        &edit,
        &w.lead,
        json!({"path": "bin.dat", "old_string": "x", "new_string": "y"}),
    )
    .await;
    refusals.push(format!("bin.dat: {err}"));
    insta::assert_snapshot!("edit_refusals", refusals.join("\n"));
    assert_eq!(
        std::fs::read_to_string(w.root.join("conf.txt")).unwrap(),
        original
    );
}

#[tokio::test]
async fn write_file_creates_replaces_and_stays_inside() {
    let w = World::new().await;
    let write = w.tool(Level::WorkspaceWrite, "write_file");
    assert_eq!(
        ok(
            &write,
            &w.lead,
            json!({"path": "new/dir/f.txt", "content": "a\nb\n"})
        )
        .await,
        "Created `new/dir/f.txt` (4 bytes, 2 lines)."
    );
    assert_eq!(
        ok(
            &write,
            &w.lead,
            json!({"path": "new/dir/f.txt", "content": "c"})
        )
        .await,
        "Replaced `new/dir/f.txt` (1 bytes, 1 lines)."
    );
    assert_eq!(
        std::fs::read_to_string(w.root.join("new/dir/f.txt")).unwrap(),
        "c"
    );

    std::os::unix::fs::symlink(w.dir.path(), w.root.join("up")).unwrap();
    std::os::unix::fs::symlink(w.dir.path().join("made-by-link"), w.root.join("dangling")).unwrap();
    for path in [
        "../escaped.txt",
        "up/escaped.txt",
        "up/sub/escaped.txt",
        "dangling",
    ] {
        let err = refused(&write, &w.lead, json!({"path": path, "content": "x"})).await;
        assert!(
            err.contains("outside the workspace root") || err.contains("missing target"),
            "{path}: {err}"
        );
    }
    assert!(!w.dir.path().join("escaped.txt").exists());
    assert!(!w.dir.path().join("sub").exists());
    assert!(!w.dir.path().join("made-by-link").exists());
    let err = refused(&write, &w.lead, json!({"path": "new", "content": "x"})).await;
    assert!(err.contains("is a directory"), "{err}");
}
