//! `cargo xtask`: the command-line face of the `xtask` library. It parses
//! the command and `--root`, runs it, prints what it found and exits
//! non-zero when the docs need attention; the work itself is in the library.

use std::process::ExitCode;

use xtask::{Tree, check_docs, report, sync_docs, write_catalog};

const USAGE: &str = "usage: cargo xtask <command> [--root DIR]

commands:
  gen-catalog   write docs/api-catalog.md from the source
  check-docs    fail when the catalogue is stale, a type-equiv block drifted
                or names no item, or a public item has no doc comment
  sync-docs     rewrite every type-equiv block from its source item
  bench         install the ACP bench's agent programs
                (crates/subagent-acp/peers/install.sh), run every bench
                (`cargo bench --workspace`), then print one table: each
                performance aim, its result, met or not; the benches'
                stores (target/bench-stores) are removed at the end
                  --quick    criterion's quick mode (a few seconds each)
                  --report   only print the table of the last run
                  -- ARGS    passed to every bench (a filter, criterion flags)

--root DIR      work on another tree laid out like the workspace (a fixture)";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut command = None;
    let mut root = None;
    let mut bench = BenchArgs::default();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => bench.quick = true,
            "--report" => bench.report_only = true,
            "--" => {
                bench.passed = args.by_ref().collect();
            }
            "--root" => match args.next() {
                Some(dir) => root = Some(dir),
                None => return usage("--root needs a directory"),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if command.is_none() => command = Some(arg),
            _ => return usage(&format!("unexpected argument `{arg}`")),
        }
    }
    let tree = match &root {
        Some(dir) => Tree::at(dir, Some(dir)),
        None => Tree::workspace(),
    };
    match command.as_deref() {
        Some("gen-catalog") => gen_catalog(&tree),
        Some("check-docs") => check(&tree),
        Some("sync-docs") => sync(&tree),
        Some("bench") => run_bench(&tree, &bench),
        Some(other) => usage(&format!("unknown command `{other}`")),
        None => usage("no command given"),
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("xtask: {why}\n\n{USAGE}");
    ExitCode::from(2)
}

fn failed(err: &xtask::Error) -> ExitCode {
    eprintln!("xtask: {err}");
    ExitCode::from(2)
}

fn gen_catalog(tree: &Tree) -> ExitCode {
    match write_catalog(tree) {
        Ok(true) => println!("wrote {}", xtask::catalog::CATALOG_PATH),
        Ok(false) => println!("{} is up to date", xtask::catalog::CATALOG_PATH),
        Err(err) => return failed(&err),
    }
    ExitCode::SUCCESS
}

fn check(tree: &Tree) -> ExitCode {
    match check_docs(tree) {
        Ok(problems) if problems.is_empty() => {
            println!(
                "check-docs: the catalogue is fresh, every type-equiv block matches, every public item is documented"
            );
            ExitCode::SUCCESS
        }
        Ok(problems) => {
            eprintln!("{}", report(&problems));
            ExitCode::FAILURE
        }
        Err(err) => failed(&err),
    }
}

fn sync(tree: &Tree) -> ExitCode {
    let synced = match sync_docs(tree) {
        Ok(synced) => synced,
        Err(err) => return failed(&err),
    };
    for page in &synced.updated {
        println!("updated {page}");
    }
    if synced.updated.is_empty() {
        println!("every type-equiv block already matches its source");
    }
    if synced.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("{}", report(&synced.problems));
        ExitCode::FAILURE
    }
}

#[derive(Default)]
struct BenchArgs {
    quick: bool,
    report_only: bool,
    passed: Vec<String>,
}

/// Run `crates/subagent-acp/peers/install.sh`, which installs the ACP
/// agent programs the ACP bench runs; whether they are in place. When they
/// are not, it says why and that the ACP rows will read "not run".
fn install_acp_peers(tree: &Tree) -> bool {
    let script = tree.root().join("crates/subagent-acp/peers/install.sh");
    if !script.is_file() {
        // A fixture tree without the ACP crate has no ACP bench either.
        return true;
    }
    let failure = match std::process::Command::new("bash").arg(&script).status() {
        Ok(status) if status.success() => return true,
        Ok(status) => format!("failed ({status}; its output above says why)"),
        Err(err) => format!("cannot be run with bash: {err}"),
    };
    eprintln!(
        "xtask: {} {failure}: the ACP bench cannot run, and its rows will read \"not run\"",
        script.display()
    );
    false
}

fn run_bench(tree: &Tree, args: &BenchArgs) -> ExitCode {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| tree.root().join("target"), std::path::PathBuf::from);
    // Whether every bench ran to its end; the table is printed either way.
    let mut complete = true;
    if !args.report_only {
        // The ACP bench runs real agent programs: install them first (the
        // script is idempotent), as the workspace's test command does. A
        // machine without Node.js or Python still runs every other bench.
        if !install_acp_peers(tree) {
            complete = false;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = std::process::Command::new(cargo);
        command.current_dir(tree.root()).args([
            "bench",
            "--workspace",
            // The bench targets only: `--benches` also runs every library
            // and binary as a libtest harness, which rejects criterion's
            // flags (`--quick` failed nine targets).
            "--bench",
            "*",
            "--locked",
            // One bench binary that fails (the ACP overhead bench without
            // its peers, say) must not keep the others from running.
            "--no-fail-fast",
            "--",
        ]);
        if args.quick {
            command.arg("--quick");
        }
        command.args(&args.passed);
        let ran = command.status();
        // The benches' stores are kept while any bench runs (deleting
        // thousands of files slows the creates of the benches after it on
        // ext4) and removed here, once the last has ended.
        let stores = target.join("bench-stores");
        if let Err(err) = std::fs::remove_dir_all(&stores)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!(
                "xtask: cannot remove the benches' stores in {}: {err}",
                stores.display()
            );
        }
        match ran {
            Ok(status) if status.success() => {}
            Ok(status) => {
                complete = false;
                eprintln!(
                    "xtask: `cargo bench` failed ({status}; its output above says which bench); \
                     the table shows what ran"
                );
            }
            Err(err) => {
                eprintln!("xtask: cannot run cargo: {err}");
                return ExitCode::from(2);
            }
        }
    }
    match xtask::bench::collect(&target) {
        Ok(results) => {
            println!("{}", xtask::bench::render(xtask::bench::AIMS, &results));
            if complete {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(err) => failed(&err),
    }
}
