//! The CLI's commands on a Restate cluster (`docs/distributed.md`), all
//! watched from here through one follow loop: `dsh run --engine restate`
//! ([`run`]) starts the lead with [`RestateClient::start`] (its first turn
//! then runs on whichever worker the server picks); `dsh send` and `dsh
//! resume` on the cluster (in `send.rs` and `resume.rs`) put input into an
//! inbox or re-drive a stuck member, then [`follow`] the tree the same way.
//! The loop polls every member's log with `events_since` from the seq it
//! last read, parses each line with dsh's own reader and hands the events
//! to the same [`Reporter`] a local run draws with (plain lines, the live
//! tree or `--json`). A member is the lead or a child a member's catalog
//! entry (`subagent/child`) names; it is shown started when that entry is
//! read, and settled at each of its turn ends. A tree followed after it
//! began is first read to its ends without drawing what was there
//! ([`Followed::catch_up`]): only its members are shown started.
//!
//! The tree is done when every member is idle and the server holds no
//! invocation for any of them (a turn, an accept or a notice on its way):
//! then the logs are read to their ends once more, and the command exits
//! as a local run does (a failed last turn of the lead is
//! [`CliError::LeadStopped`], see [`lead_stopped`]). A turn that keeps
//! failing ends the wait with the server's error. Ctrl-C, SIGTERM or SIGHUP
//! drains the tree on the cluster, children first, and exits 128 + the
//! signal.
//!
//! Not shown, unlike a local run: tool calls as they start (the worker
//! runs them), streamed text, and the closing summary's per-agent table.

use std::collections::HashMap;
use std::time::Duration;

use dsh_core::codec::LineReader;
use dsh_core::{EventPayload, SessionEvent, SessionHeader, SessionId, UserMessage};
use dsh_restate::client::RestateClient;
use dsh_restate::store::RestateSessionStore;
use dsh_subagent::{RunInfo, RunOutcome, SubagentResult};

use crate::config::Settings;
use crate::demo::DEMO_PROMPT;
use crate::engine::cluster_error;
use crate::error::CliError;
use crate::model::{self, ModelChoice};
use crate::observe::{Mode, Reporter, Seen};
use crate::signals::Signals;
use crate::transcript;

/// How long the command waits between two reads of the tree.
const POLL: Duration = Duration::from_millis(100);

/// The catalog entry's event type.
const CATALOG_EVENT: &str = dsh_subagent::CATALOG_EVENT;

/// What `dsh run --engine restate` is given.
pub struct ClusterRun<'a> {
    /// The cluster's client.
    pub client: RestateClient,
    /// The ingress URL, for the banner.
    pub ingress: &'a str,
    /// The lead's task (the demo's when none).
    pub prompt: Option<String>,
    /// The settings read as `dsh run` reads them.
    pub settings: &'a Settings,
    /// One JSON object per line.
    pub json: bool,
}

/// Check that the cluster answers and that its workers run this dsh: the
/// first calls of every command that runs agents there.
///
/// # Errors
/// The server does not answer ([`CliError::EngineUnavailable`]), no
/// worker answers in time ([`CliError::NoWorker`]) or the workers run
/// another version ([`CliError::Refused`]).
///
/// # Cancel safety
/// Cancel safe: it changes nothing.
pub async fn connect(client: &RestateClient) -> Result<(), CliError> {
    client.health().await.map_err(cluster_error)?;
    client.check_worker().await.map_err(cluster_error)
}

/// The cluster's sessions as a store, and the root of the tree `wanted`
/// names (the most recent root when `None`), as the read commands pick it.
///
/// # Errors
/// No sessions on the cluster, or no root `wanted` there
/// ([`CliError::NotOnCluster`]); the server does not answer.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn tree_root(
    client: &RestateClient,
    ingress: &str,
    wanted: Option<&str>,
) -> Result<(RestateSessionStore, SessionId), CliError> {
    let store = RestateSessionStore::new(client.clone());
    let scan = crate::sessions::scan(&store).await?;
    scan.warn();
    let place = std::path::PathBuf::from(format!("the Restate cluster at {ingress}"));
    let root = scan
        .pick_root(&place, wanted)
        .map_err(|error| match error {
            CliError::UnknownRoot { root, .. } => CliError::NotOnCluster(root),
            error => error,
        })?;
    Ok((store, root))
}

/// Run the lead's tree on the cluster and watch it until it is done.
///
/// # Errors
/// As [`connect`], then as [`follow`]; a failed last turn of the lead
/// ([`CliError::LeadStopped`]).
///
/// # Cancel safety
/// Dropped, the command stops watching; the tree goes on on the cluster.
pub async fn run(args: ClusterRun<'_>) -> Result<(), CliError> {
    let ClusterRun {
        client,
        ingress,
        prompt,
        settings,
        json,
    } = args;
    connect(&client).await?;
    let mut signals = Signals::install()?;
    let cwd = std::env::current_dir()?;
    let reporter = Reporter::new(Mode::choose(json), settings.price());
    let prompt = prompt.unwrap_or_else(|| DEMO_PROMPT.to_owned());
    run_started(&reporter, settings, ingress);
    // The tree remembers its model, as a local run's does.
    let mut header = SessionHeader::new(SessionId::generate(), cwd);
    header.extensions.insert(
        model::RUN_EXTENSION.to_owned(),
        model::record(&settings.model),
    );
    let lead = header.id.clone();
    reporter.root(&lead);
    reporter.show(Seen::Lead {
        id: lead.clone(),
        agent: None,
        prompt: prompt.clone(),
    });
    client
        .start(&header, UserMessage::user_text(prompt))
        .await
        .map_err(cluster_error)?;
    let mut tree = Followed::new(lead);
    let outcome = follow(&client, &mut tree, &reporter, &mut signals).await;
    let outcome = outcome.and_then(|()| lead_stopped(&tree));
    ended(&reporter, &tree, outcome).await
}

/// Follow `tree` until it is done, drawing what its logs accept; on a
/// signal, drain it on the cluster (children first) instead.
///
/// # Errors
/// The server does not answer, a turn keeps failing, a log line does not
/// parse, or a signal came ([`CliError::Interrupted`]).
///
/// # Cancel safety
/// Dropped, the command stops watching; the tree goes on on the cluster.
pub async fn follow(
    client: &RestateClient,
    tree: &mut Followed,
    reporter: &Reporter,
    signals: &mut Signals,
) -> Result<(), CliError> {
    let lead = tree.lead().clone();
    tokio::select! {
        watched = watch(client, tree, reporter) => watched,
        signal = signals.recv() => {
            dsh_restate::tree::drain(client, &lead)
                .await
                .map_err(|error| CliError::Refused(error.to_string()))?;
            Err(CliError::Interrupted(signal))
        }
    }
}

/// [`CliError::LeadStopped`] when the lead's last turn, as read, failed.
///
/// # Errors
/// As said.
pub fn lead_stopped(tree: &Followed) -> Result<(), CliError> {
    match transcript::finished_turns(tree.events(tree.lead())).last() {
        Some(turn) if transcript::failed(&turn.end.stop_reason) => Err(CliError::LeadStopped {
            reason: turn.end.stop_reason.to_string(),
            diagnostic: turn.end.diagnostic.clone(),
        }),
        _ => Ok(()),
    }
}

/// Close the view of a command that ran the lead: its last frame, the
/// run's end (the lead's last stop, or the command's error), everything
/// written; returns `outcome`.
///
/// # Cancel safety
/// Cancel safe: a drop stops only the wait for the writing.
pub async fn ended(
    reporter: &Reporter,
    tree: &Followed,
    outcome: Result<(), CliError>,
) -> Result<(), CliError> {
    let lead = tree.lead();
    reporter.show(Seen::Refresh);
    reporter.show(Seen::RunEnded {
        lead: lead.clone(),
        stop_reason: dsh_subagent::result::last_stop(tree.events(lead))
            .map(|(reason, _)| reason.to_string()),
        error: outcome.as_ref().err().map(ToString::to_string),
    });
    reporter.flush().await;
    outcome
}

/// Show the run's start: its banner, model and where its sessions are.
pub fn run_started(reporter: &Reporter, settings: &Settings, ingress: &str) {
    reporter.show(Seen::RunStarted {
        banner: banner(settings, ingress),
        model: settings.model.spec(),
        sessions: format!("the Restate cluster at {ingress}"),
    });
}

/// The run's first line, as a local run words it.
fn banner(settings: &Settings, ingress: &str) -> String {
    let what = match &settings.model {
        ModelChoice::Demo => "offline demo: a scripted model plays every agent (no network; its words are fixed and do not follow your task), the workspace tools are real".to_owned(),
        choice => format!("model {}", choice.spec()),
    };
    format!("dsh: {what}; sessions on the Restate cluster at {ingress}")
}

/// Read the tree until it is done, showing what its logs accept.
async fn watch(
    client: &RestateClient,
    tree: &mut Followed,
    reporter: &Reporter,
) -> Result<(), CliError> {
    loop {
        // Quiet first, then read: whatever was written before the quiet
        // moment is read below, and a member it reveals is asked again.
        let quiet = tree.quiet(client).await?;
        let members = tree.members.len();
        tree.read(client, reporter, true).await?;
        if quiet && tree.members.len() == members {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One member of the tree as read so far.
struct Member {
    id: SessionId,
    reader: LineReader,
    events: Vec<SessionEvent>,
    /// How many of its finished turns were shown.
    shown_turns: usize,
    /// Its start as shown (`None` for the lead).
    info: Option<RunInfo>,
}

/// The tree as read so far: the lead first, then each child in the order
/// its catalog entry was read.
pub struct Followed {
    members: Vec<Member>,
    index: HashMap<SessionId, usize>,
}

impl Followed {
    /// The tree of `lead`, nothing read yet.
    pub fn new(lead: SessionId) -> Self {
        Self {
            members: vec![Member {
                id: lead.clone(),
                reader: LineReader::new(),
                events: Vec::new(),
                shown_turns: 0,
                info: None,
            }],
            index: HashMap::from([(lead, 0)]),
        }
    }

    /// The tree's lead (its root).
    pub fn lead(&self) -> &SessionId {
        &self.members[0].id
    }

    /// Every member found so far, the lead first.
    pub fn ids(&self) -> impl Iterator<Item = &SessionId> {
        self.members.iter().map(|member| &member.id)
    }

    /// Read every member's log to its end (members found on the way too)
    /// without drawing it: the children are shown started, their turns
    /// so far are taken as shown. What the logs accept from now on is
    /// drawn by [`follow`].
    ///
    /// # Errors
    /// The server does not answer, or a log line does not parse.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn catch_up(
        &mut self,
        client: &RestateClient,
        reporter: &Reporter,
    ) -> Result<(), CliError> {
        self.read(client, reporter, false).await
    }

    /// The events read of `id`.
    pub fn events(&self, id: &SessionId) -> &[SessionEvent] {
        self.index
            .get(id)
            .map(|&at| self.members[at].events.as_slice())
            .unwrap_or_default()
    }

    /// Whether every member is idle and nothing is on its way to one.
    async fn quiet(&self, client: &RestateClient) -> Result<bool, CliError> {
        let ids: Vec<SessionId> = self
            .members
            .iter()
            .map(|member| member.id.clone())
            .collect();
        for id in &ids {
            client.check_turns(id).await.map_err(cluster_error)?;
            if !client.status(id).await.map_err(cluster_error)?.is_idle() {
                return Ok(false);
            }
        }
        Ok(client.in_flight(&ids).await.map_err(cluster_error)? == 0)
    }

    /// Read every member's new lines (members found on the way too) and,
    /// when `draw`, show them and the turns they end.
    async fn read(
        &mut self,
        client: &RestateClient,
        reporter: &Reporter,
        draw: bool,
    ) -> Result<(), CliError> {
        let mut at = 0;
        while at < self.members.len() {
            let fresh = self.read_member(client, at).await?;
            if draw {
                reporter.logged(&self.members[at].id, &fresh);
            }
            let parent = self.members[at].id.clone();
            let root = self.members[0].id.clone();
            for event in &fresh {
                if let Some(info) = catalog_entry(&parent, &root, event)
                    && self.add(&info)
                {
                    reporter.show(Seen::Started { info, agent: None });
                }
            }
            if draw {
                self.show_turns(at, reporter);
            } else {
                let member = &mut self.members[at];
                member.shown_turns = transcript::finished_turns(&member.events).len();
            }
            at += 1;
        }
        Ok(())
    }

    /// The lines of member `at` past those read, parsed.
    async fn read_member(
        &mut self,
        client: &RestateClient,
        at: usize,
    ) -> Result<Vec<SessionEvent>, CliError> {
        let member = &mut self.members[at];
        let mut fresh = Vec::new();
        loop {
            let from = u64::try_from(member.events.len() + fresh.len()).unwrap_or(u64::MAX);
            let page = client
                .events_since(&member.id, from)
                .await
                .map_err(cluster_error)?;
            for line in page.lines.lines() {
                let event = member.reader.read(line).map_err(|error| {
                    CliError::Refused(format!(
                        "session {} on the cluster: a log line does not parse: {error}",
                        member.id
                    ))
                })?;
                fresh.push(event);
            }
            if page.complete || page.next_seq <= from {
                break;
            }
        }
        member.events.extend(fresh.iter().cloned());
        Ok(fresh)
    }

    /// Follow the child `info` starts from now on; false when it is
    /// followed already.
    fn add(&mut self, info: &RunInfo) -> bool {
        if self.index.contains_key(&info.child_id) {
            return false;
        }
        self.index.insert(info.child_id.clone(), self.members.len());
        self.members.push(Member {
            id: info.child_id.clone(),
            reader: LineReader::new(),
            events: Vec::new(),
            shown_turns: 0,
            info: Some(info.clone()),
        });
        true
    }

    /// Show member `at`'s turns that ended since last shown: the lead's
    /// answers, a child's settlements.
    fn show_turns(&mut self, at: usize, reporter: &Reporter) {
        let member = &mut self.members[at];
        let turns = transcript::finished_turns(&member.events);
        for (n, turn) in turns.iter().enumerate().skip(member.shown_turns) {
            let Some(info) = &member.info else {
                reporter.show(Seen::LeadTurn {
                    stop_reason: turn.end.stop_reason.to_string(),
                    failed: transcript::failed(&turn.end.stop_reason),
                    diagnostic: turn.end.diagnostic.clone(),
                    answer: turn.answer.clone(),
                });
                continue;
            };
            {
                let upto = turn_end_index(&member.events, n + 1);
                let events = &member.events[..upto];
                reporter.show(Seen::Ended(
                    info.clone(),
                    RunOutcome::Settled(SubagentResult {
                        output: dsh_subagent::result::final_output(events),
                        structured: None,
                        diagnostic: turn.end.diagnostic.clone(),
                        stop_reason: turn.end.stop_reason.clone(),
                        usage: dsh_core::Usage::default(),
                        subtree_usage: dsh_core::Usage::default(),
                    }),
                ));
            }
        }
        member.shown_turns = turns.len().max(member.shown_turns);
    }
}

/// The index just past the `n`th turn end of `events` (all of them when
/// fewer).
fn turn_end_index(events: &[SessionEvent], n: usize) -> usize {
    events
        .iter()
        .enumerate()
        .filter(|(_, event)| matches!(event.payload, EventPayload::TurnEnd(_)))
        .nth(n.saturating_sub(1))
        .map_or(events.len(), |(at, _)| at + 1)
}

/// The child a catalog entry of `parent` names, as a start to show.
fn catalog_entry(parent: &SessionId, root: &SessionId, event: &SessionEvent) -> Option<RunInfo> {
    let EventPayload::Extension { kind, payload } = &event.payload else {
        return None;
    };
    if kind != CATALOG_EVENT {
        return None;
    }
    let entry = payload.to_value();
    let child_id = SessionId::new(entry["child_id"].as_str()?).ok()?;
    let label = entry["label"].as_str().unwrap_or_default().to_owned();
    // A fork's seed repeats its parent's entries; each names a child
    // already followed under the parent read before it, so `add` passes
    // over it.
    let name = entry["name"]
        .as_str()
        .map_or_else(|| child_id.to_string(), str::to_owned);
    Some(RunInfo {
        provider: entry["provider"].as_str().unwrap_or("restate").to_owned(),
        name,
        label,
        child_id,
        parent_session_id: parent.clone(),
        root: root.clone(),
        local: false,
    })
}
