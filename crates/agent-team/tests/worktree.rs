//! Per-teammate isolation in a git worktree of the lead's repository: a
//! branch per member, created by the team and the member's working
//! directory, removed by the team; without a repository, a clear refusal
//! before anything is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Command;

use dsh_agent_team::{MemberContext, MemberPhase, SpawnTeammate};
use dsh_core::SessionStore;
use dsh_test_support::wait::bounded;
use support::*;

fn git(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
        .status
        .success()
}

fn isolated(name: &str) -> SpawnTeammate {
    SpawnTeammate {
        name: name.into(),
        description: String::new(),
        prompt: text("work in your own checkout"),
        context: MemberContext::Fresh,
        worktree: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_works_in_its_own_worktree_which_the_team_removes() {
    let world = world().await;
    let dir = world.dir().to_path_buf();
    assert!(git(&dir, &["init", "-q"]));
    assert!(git(
        &dir,
        &[
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "user.name=t",
            "commit",
            "--allow-empty",
            "-qm",
            "init"
        ]
    ));
    let team = open(&world).await;
    let lead = lead(&world);
    let row = bounded(team.spawn_teammate(&lead, isolated("alice")))
        .await
        .unwrap();
    assert_eq!(row.phase, MemberPhase::Active);
    let worktree = row.worktree.clone().expect("the member has a worktree");
    assert!(worktree.path.join(".git").exists(), "a checkout of its own");
    assert!(git(
        &dir,
        &["rev-parse", "--verify", "-q", &worktree.branch]
    ));
    let header = world.store.header(&row.id).await.unwrap();
    assert_eq!(header.cwd, worktree.path, "its working directory");
    world.quiesce().await;

    let later = restarted(world.dir()).await;
    let reopened = open(&later).await;
    assert_eq!(
        reopened.roster()[1].worktree,
        Some(worktree.clone()),
        "durable"
    );

    let removal = bounded(team.remove_worktree(&lead, "alice")).await.unwrap();
    assert!(!worktree.path.exists());
    assert!(
        removal.branch_deleted,
        "a branch with nothing unmerged goes too"
    );
    assert!(!git(
        &dir,
        &["rev-parse", "--verify", "-q", &worktree.branch]
    ));
    let again = bounded(team.remove_worktree(&lead, "alice")).await.unwrap();
    assert!(!again.branch_deleted, "removing twice finds nothing");

    // A removal dropped once git is running still removes the worktree whole.
    let bob = bounded(team.spawn_teammate(&lead, isolated("bob")))
        .await
        .unwrap();
    world.quiesce().await;
    let bobs = bob.worktree.unwrap();
    let mut removal = Box::pin(team.remove_worktree(&lead, "bob"));
    let _ = futures::poll!(removal.as_mut());
    drop(removal);
    dsh_test_support::wait::until(|| {
        !bobs.path.exists() && !git(&dir, &["rev-parse", "--verify", "-q", &bobs.branch])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_repository_isolation_is_refused_before_anything_is_written() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    let refused = bounded(team.spawn_teammate(&lead, isolated("alice"))).await;
    let err = refused.unwrap_err();
    assert_eq!(err.code(), "TEAM_NO_GIT");
    assert!(
        err.to_string().contains("not inside a git repository"),
        "{err}"
    );
    assert!(team_records(&lead.events()).is_empty());
    assert_eq!(team.roster().len(), 1);
    let shared = bounded(team.spawn_teammate(
        &lead,
        SpawnTeammate {
            worktree: false,
            ..isolated("alice")
        },
    ))
    .await
    .unwrap();
    assert!(
        shared.worktree.is_none(),
        "the name was not used by the refusal"
    );
}
