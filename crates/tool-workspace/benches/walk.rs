//! `list_files` and `grep` over a generated tree of 10,000 small files
//! (100 directories of 100 files, a `.gitignore` excluding one directory),
//! called through `Tool::execute` by a live harness agent, as the loop
//! calls them. Both walk the whole tree (the pattern keeps one file per
//! directory, so the entry bound is never hit); throughput is in files of
//! the tree per second.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::{
    AgentFactory, CallId, CancellationToken, CreateAgent, Durability, SessionHeader, SessionId,
    ToolContext,
};
use dsh_harness::{Harness, JsonlStore, ScriptedModel};
use dsh_tool_workspace::{Policy, WorkspaceTools};
use serde_json::json;

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // Under target/bench-stores, never deleted by the bench (see
    // `dsh_test_support::bench::store_dir`): its thousands of files would
    // slow the creates of the benches after it.
    let dir = dsh_test_support::bench::store_dir("walk");
    let root = dir.join("root");
    for d in 0..DIRS {
        let sub = root.join(format!("d{d:03}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..FILES_PER_DIR {
            let body = format!(
                "// file {d}/{f}\nfn item_{f}() -> usize {{\n    {f}\n}}\n\nconst NAME: &str = \"needle_{}\";\n",
                (d * FILES_PER_DIR + f) % 997
            );
            std::fs::write(sub.join(format!("f{f:03}.rs")), body).unwrap();
        }
    }
    std::fs::write(root.join(".gitignore"), "d099/\n").unwrap();
    let store = Arc::new(JsonlStore::new(dir.join("sessions"), Durability::None).unwrap());
    let harness = Harness::builder(store)
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .unwrap();
    let agent = rt
        .block_on(harness.create(CreateAgent {
            header: SessionHeader::new(SessionId::new("bench").unwrap(), &root),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        }))
        .unwrap()
        .agent()
        .clone();
    let tools = WorkspaceTools::new(&root, Policy::default()).unwrap();
    let tool = |name: &str| tools.iter().find(|t| t.name() == name).unwrap().clone();
    let (list, grep) = (tool("list_files"), tool("grep"));
    let ctx = || ToolContext {
        agent: agent.clone(),
        call_id: CallId::new("bench"),
        cancel: CancellationToken::new(),
    };

    let mut group = c.benchmark_group("workspace");
    group.throughput(Throughput::Elements((DIRS * FILES_PER_DIR) as u64));
    group.sample_size(10);
    group.bench_function("list_files_10k", |b| {
        b.iter(|| {
            rt.block_on(list.execute(json!({"patterns": ["f000.rs"]}), ctx()))
                .unwrap()
        });
    });
    group.bench_function("grep_10k_rare", |b| {
        b.iter(|| {
            rt.block_on(grep.execute(json!({"pattern": "needle_996\\b"}), ctx()))
                .unwrap()
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
