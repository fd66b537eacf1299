//! `dsh resume [tree]`: bring a tree back after a crash or a kill with the
//! runtime's `resume_tree`, then run it as `dsh run` does until the whole
//! tree is done. The root is resumed (input it had accepted runs), every
//! member with pending input or a turn the kill cut off is resumed, parked
//! members stay parked and members with nothing to do stay cold; notices a
//! crash kept from their creators are delivered (B54). No prompt is sent:
//! what runs is what the tree had left to do, and a tree with nothing left
//! ends at once. What became of each member is printed first, one line
//! each ([`render`]).
//!
//! A tree another process holds (another `dsh` working in it) is waited
//! for, up to `--wait` seconds, after one line on stderr naming the
//! holder's pid; then the command refuses, naming it again, as `dsh send`
//! does ([`crate::held`]); a tree another waiter took first, between the
//! look at the lock table and the resume, is waited for again.
//!
//! On a Restate cluster (`--engine restate`, `on_cluster`) a tree goes
//! on by itself after a worker's death; resume re-drives the members whose
//! input waits with no turn scheduled, then follows the tree.

use std::path::PathBuf;

use dsh_subagent::{MemberResume, ResumeReason, TreeResume};

use crate::config::Settings;
use crate::error::CliError;
use crate::sessions;

/// What `dsh resume` was asked.
#[derive(Debug)]
pub struct ResumeArgs {
    /// The tree's root session id (default: the most recent root).
    pub tree: Option<String>,
    /// The session directory.
    pub dir: PathBuf,
    /// The model and limits (`dsh.toml` and the flags).
    pub settings: Settings,
    /// One JSON object per line on stdout for every event (`--json`).
    pub json: bool,
    /// Whether an action above the level asks the person (`--ask`).
    pub ask: crate::ask::AskMode,
    /// How long to wait, in seconds, for a tree another process holds
    /// (`--wait`).
    pub wait: u64,
}

/// Run the command.
///
/// # Cancel safety
/// The whole command, not meant to be dropped (Ctrl-C goes through
/// [`crate::run::stop`]), as [`crate::run::run`].
pub async fn resume(args: ResumeArgs) -> Result<(), CliError> {
    let picked = sessions::pick_tree(&args.dir, args.tree.as_deref(), &args.settings).await?;
    let mut settings = args.settings;
    settings.model = picked.model;
    let root = picked.root;
    let mut held =
        crate::held::TreeWait::new(root.as_str(), args.wait, picked.store.log_path(&root));
    held.free().await?;
    drop(picked.store);
    crate::run::run(crate::run::RunArgs {
        prompt: None,
        dir: args.dir,
        settings,
        resume: Some(root),
        whole_tree: true,
        json: args.json,
        ask: args.ask,
        held: Some(held),
    })
    .await
}

/// What `dsh resume` on a Restate cluster is given.
#[cfg(feature = "restate")]
pub struct ClusterResume<'a> {
    /// The cluster's client.
    pub client: dsh_restate::client::RestateClient,
    /// The ingress URL, for the banner and messages.
    pub ingress: &'a str,
    /// What was asked (the session directory and `--wait` are not used:
    /// the cluster holds the tree, and nothing locks it).
    pub args: ResumeArgs,
}

/// `dsh resume` on a Restate cluster. A tree there goes on by itself when
/// a worker dies, so nothing needs bringing back; what can be stuck is a
/// member whose input waits with no turn scheduled (its last turn failed
/// before it started: its session could not be loaded or composed on the
/// worker). Each such member is re-driven (its inbox schedules a turn for
/// the waiting input); parked (interrupted) and draining members stay as
/// they are, as a local resume keeps parked members parked. One line per
/// member says what became of it ([`render`]), then the tree is followed
/// until it is done, as `dsh run --engine restate` follows it.
///
/// # Errors
/// The tree not on the cluster; as [`crate::cluster::follow`]; a failed
/// last turn of the lead ([`CliError::LeadStopped`]).
///
/// # Cancel safety
/// The whole command, not meant to be dropped; dropped, the members
/// re-driven so far run on.
#[cfg(feature = "restate")]
pub async fn on_cluster(resume: ClusterResume<'_>) -> Result<(), CliError> {
    use crate::cluster::{self, Followed};
    use crate::engine::cluster_error;
    use crate::observe::{Mode, Reporter, Seen};

    let ClusterResume {
        client,
        ingress,
        args,
    } = resume;
    cluster::connect(&client).await?;
    let mut signals = crate::signals::Signals::install()?;
    let (store, root) = cluster::tree_root(&client, ingress, args.tree.as_deref()).await?;
    let reporter = Reporter::new(Mode::choose(args.json), args.settings.price());
    cluster::run_started(&reporter, &args.settings, ingress);
    reporter.root(&root);
    let mut tree = Followed::new(root.clone());
    tree.catch_up(&client, &reporter).await?;
    let paths: std::collections::HashMap<_, _> = sessions::descendants(&store, &root)
        .await?
        .iter()
        .map(|row| (row.entry.child_id.clone(), sessions::display_name(row)))
        .collect();
    let mut members = Vec::new();
    for id in tree.ids() {
        let status = client.status(id).await.map_err(cluster_error)?;
        let inbox = &status.inbox;
        let outcome = if inbox.parked {
            MemberResume::Parked
        } else if !status.is_idle() {
            MemberResume::Live
        } else if inbox.draining || inbox.queued + inbox.steering == 0 {
            MemberResume::Cold
        } else {
            // Not parked: unpark only schedules the turn its input needs.
            client.unpark(id).await.map_err(cluster_error)?;
            MemberResume::Resumed(ResumeReason::PendingInput)
        };
        let path = match paths.get(id) {
            Some(path) => path.clone(),
            None => dsh_subagent::ROOT_NAME.to_owned(),
        };
        members.push(dsh_subagent::ResumedMember {
            child_id: id.clone(),
            path: Some(path),
            outcome,
        });
    }
    for line in render(&TreeResume {
        members,
        root_notices: 0,
    }) {
        reporter.line(&line);
    }
    reporter.show(Seen::Lead {
        id: root.clone(),
        agent: None,
        prompt: String::new(),
    });
    let outcome = cluster::follow(&client, &mut tree, &reporter, &mut signals).await;
    let outcome = outcome.and_then(|()| cluster::lead_stopped(&tree));
    cluster::ended(&reporter, &tree, outcome).await
}

/// One line per member of a resumed tree: its name (path or id) and what
/// was done with it; external and one-shot children are not listed.
pub fn render(tree: &TreeResume) -> Vec<String> {
    let mut lines = Vec::new();
    if tree.root_notices > 0 {
        lines.push(format!(
            "resume: lead: {} notice(s) a crash kept from it delivered",
            tree.root_notices
        ));
    }
    for member in &tree.members {
        let name = member
            .path
            .clone()
            .unwrap_or_else(|| member.child_id.to_string());
        let what = match &member.outcome {
            MemberResume::Resumed(ResumeReason::PendingInput) => {
                "resumed: it continues with the input it had queued".to_owned()
            }
            MemberResume::Resumed(ResumeReason::InterruptedTurn) => {
                "resumed: its turn cut off by the stop is closed as aborted and its creator is told"
                    .to_owned()
            }
            MemberResume::Resumed(ResumeReason::OwedNotices) => {
                "resumed: to take the notices its children owed it".to_owned()
            }
            MemberResume::Parked => "parked: its input waits for a message to wake it".to_owned(),
            MemberResume::Cold => "idle: nothing to do".to_owned(),
            MemberResume::Live => "already running".to_owned(),
            MemberResume::NotContinuable => continue,
            MemberResume::Failed(reason) => {
                format!("not resumed: {}", crate::observe::compact(reason, 200))
            }
        };
        lines.push(format!("resume: {name}: {what}"));
    }
    if lines.is_empty() {
        lines.push("resume: the tree has no members".to_owned());
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::SessionId;
    use dsh_subagent::ResumedMember;

    fn member(id: &str, path: Option<&str>, outcome: MemberResume) -> ResumedMember {
        ResumedMember {
            child_id: SessionId::new(id).unwrap(),
            path: path.map(str::to_owned),
            outcome,
        }
    }

    #[test]
    fn every_outcome_is_one_line_naming_the_member() {
        let tree = TreeResume {
            members: vec![
                member(
                    "s-a",
                    Some("a"),
                    MemberResume::Resumed(ResumeReason::PendingInput),
                ),
                member(
                    "s-b",
                    Some("a/b"),
                    MemberResume::Resumed(ResumeReason::InterruptedTurn),
                ),
                member(
                    "s-c",
                    Some("c"),
                    MemberResume::Resumed(ResumeReason::OwedNotices),
                ),
                member("s-d", Some("d"), MemberResume::Parked),
                member("s-e", None, MemberResume::Cold),
                member("s-f", Some("f"), MemberResume::Live),
                member("s-g", Some("g"), MemberResume::NotContinuable),
                member(
                    "s-h",
                    Some("h"),
                    MemberResume::Failed("its log is\ncorrupt".to_owned()),
                ),
            ],
            root_notices: 2,
        };
        insta::assert_snapshot!(render(&tree).join("\n"));
        assert_eq!(
            render(&TreeResume::default()),
            ["resume: the tree has no members"]
        );
    }
}
