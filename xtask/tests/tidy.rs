//! Workspace hygiene, checked by `cargo test --workspace` from xtask (the
//! crate that owns the workspace's checks): every Rust file opens with a
//! `//!` paragraph saying its role (a library's may be its included
//! README), no `todo!`, `unimplemented!` or `dbg!` is left behind, and no
//! test skips by printing (it calls `skip_or_fail`).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "snapshots")
            {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_file_says_what_it_is_and_nothing_is_left_unfinished() {
    let root = xtask::Tree::workspace().root().to_path_buf();
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "examples", "tests"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 10, "found only {} files", files.len());
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        // A library's opening paragraph may be its README, included as the
        // crate doc (so its examples are doctests).
        let readme = first == r#"#![doc = include_str!("../README.md")]"#
            && file.parent().is_some_and(|src| {
                std::fs::read_to_string(src.join("../README.md"))
                    .is_ok_and(|t| t.lines().filter(|l| !l.trim().is_empty()).count() > 1)
            });
        if !first.starts_with("//!") && !readme {
            problems.push(format!(
                "{}: does not open with a `//!` doc",
                file.display()
            ));
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for banned in ["todo!(", "unimplemented!(", "dbg!("] {
                if code.contains(banned) && !file.ends_with("tidy.rs") {
                    problems.push(format!(
                        "{}:{}: `{banned}` left behind",
                        file.display(),
                        n + 1
                    ));
                }
            }
            // A test that cannot run says so through `skip_or_fail`, which
            // fails under CI; a printed skip is captured by libtest and
            // passes unseen.
            if code.contains("println!(\"skipped") && !file.ends_with("tidy.rs") {
                problems.push(format!(
                    "{}:{}: a silent skip: call `dsh_test_support::skip_or_fail`",
                    file.display(),
                    n + 1
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
