//! The live view's drawing: the tree of agents as lines that fit a
//! terminal's width ([`render_tree`]), and the focus line under it
//! ([`focus_line`]). Pure functions of the rows and the clock, so every
//! width can be snapshotted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use dsh_core::{Agent, SessionId};

use crate::config::Price;

/// One agent as the live view shows it.
pub(super) struct Row {
    pub(super) id: SessionId,
    pub(super) parent: Option<SessionId>,
    pub(super) name: String,
    pub(super) provider: String,
    pub(super) status: String,
    pub(super) activity: String,
    pub(super) input_tokens: u64,
    pub(super) output_tokens: u64,
    /// Of the input tokens, those served from the backend's prompt cache.
    pub(super) cached_tokens: u64,
    /// Tool calls in progress, oldest first.
    pub(super) tools: Vec<Call>,
    /// Events of the live agent already folded into this row.
    pub(super) seen: u64,
    /// Whether the row follows a log (the lead, a local child); a row
    /// without one (an external child) follows the progress bus.
    pub(super) from_log: bool,
    /// The live agent, kept until it settles (its events stay readable).
    pub(super) agent: Option<Arc<dyn Agent>>,
}

/// One tool call in progress, as a row shows it.
pub(super) struct Call {
    /// The call's id, when the progress bus reported it.
    pub(super) id: Option<String>,
    /// What the call is.
    pub(super) label: String,
    /// When it began.
    pub(super) since: Instant,
}

/// The live view's last line: the agent in focus and the end of what its
/// model streamed, on one line of at most `width` characters (the start
/// of the text gives way, so the newest words stay in sight).
pub(super) fn focus_line(name: &str, streamed: &str, width: usize) -> String {
    let head = format!("› {name}: ");
    let room = width.saturating_sub(head.chars().count()).max(1);
    let text = streamed.split_whitespace().collect::<Vec<_>>().join(" ");
    let count = text.chars().count();
    let tail: String = if count <= room {
        text
    } else {
        let kept: String = text.chars().skip(count - room + 1).collect();
        format!("…{kept}")
    };
    let line = format!("{head}{tail}");
    line.chars().take(width.max(1)).collect()
}

/// Tokens as the view shows them: exact below 10 000, else `12.3k`,
/// `4.5M`.
fn short(n: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let f = n as f64;
    match n {
        0..10_000 => n.to_string(),
        10_000..1_000_000 => format!("{:.1}k", f / 1_000.0),
        _ => format!("{:.1}M", f / 1_000_000.0),
    }
}

/// What a row is doing at `now`: its oldest tool call in progress with
/// its elapsed seconds (and how many more run), else its last activity.
fn activity(row: &Row, now: Instant) -> String {
    match row.tools.first() {
        Some(Call { label, since, .. }) => {
            let more = match row.tools.len() {
                1 => String::new(),
                n => format!(" +{}", n - 1),
            };
            format!(
                "{label} {}s{more}",
                now.saturating_duration_since(*since).as_secs()
            )
        }
        None => row.activity.clone(),
    }
}

/// Cut `text` to `max` characters, marking the cut with `…`.
fn fit(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// The tree as lines: pre-order from the roots, children in start order;
/// columns agent, provider, status, tokens in/out, cached (when any row has
/// cached tokens), cost (with a `price`) and activity. Every line is
/// shorter than `width`, so none wraps. On a narrow terminal the columns
/// degrade in order (cost, cached, provider, tokens, then status go, the
/// agent column narrows to its longest name, then names and activity are
/// cut with `…`) so that what stays is whole and aligned.
pub(super) fn render_tree(
    rows: &[Row],
    width: usize,
    now: Instant,
    price: Option<Price>,
) -> Vec<String> {
    let mut children: HashMap<Option<&SessionId>, Vec<&Row>> = HashMap::new();
    let known: Vec<&SessionId> = rows.iter().map(|r| &r.id).collect();
    for row in rows {
        // A parent the view never saw is shown as a root.
        let parent = row.parent.as_ref().filter(|p| known.contains(p));
        children.entry(parent).or_default().push(row);
    }
    // Pre-order: each row with its label (tree glyphs and its own name).
    fn walk<'a>(
        row: &'a Row,
        prefix: &str,
        last: bool,
        top: bool,
        children: &HashMap<Option<&SessionId>, Vec<&'a Row>>,
        out: &mut Vec<(String, &'a Row)>,
    ) {
        let branch = if top {
            ""
        } else if last {
            "└─ "
        } else {
            "├─ "
        };
        let name = row.name.rsplit('/').next().unwrap_or(&row.name);
        out.push((format!("{prefix}{branch}{name}"), row));
        let next = if top {
            String::new()
        } else if last {
            format!("{prefix}   ")
        } else {
            format!("{prefix}│  ")
        };
        if let Some(kids) = children.get(&Some(&row.id)) {
            for (i, kid) in kids.iter().enumerate() {
                walk(kid, &next, i + 1 == kids.len(), false, children, out);
            }
        }
    }
    let mut ordered = Vec::new();
    if let Some(roots) = children.get(&None) {
        for root in roots {
            walk(root, "", true, true, &children, &mut ordered);
        }
    }
    // The cells of every optional column, header first.
    let cached = rows.iter().any(|row| row.cached_tokens > 0);
    let mut columns: Vec<(&str, Vec<String>, bool)> = vec![
        (
            "provider",
            ordered
                .iter()
                .map(|(_, row)| row.provider.clone())
                .collect(),
            true,
        ),
        (
            "status",
            ordered.iter().map(|(_, row)| row.status.clone()).collect(),
            true,
        ),
        (
            "tokens in/out",
            ordered
                .iter()
                .map(|(_, row)| format!("{}/{}", short(row.input_tokens), short(row.output_tokens)))
                .collect(),
            true,
        ),
        (
            "cached",
            ordered
                .iter()
                .map(|(_, row)| short(row.cached_tokens))
                .collect(),
            cached,
        ),
        (
            "cost",
            ordered
                .iter()
                .map(|(_, row)| {
                    price.map_or_else(String::new, |price| {
                        format!("${:.4}", price.cost(row.input_tokens, row.output_tokens))
                    })
                })
                .collect(),
            price.is_some(),
        ),
    ];
    let cell_width = |header: &str, cells: &[String]| {
        cells
            .iter()
            .map(|cell| cell.chars().count())
            .chain([header.chars().count()])
            .max()
            .unwrap_or(0)
    };
    let name_width = ordered
        .iter()
        .map(|(label, _)| label.chars().count())
        .chain(["agent".len()])
        .max()
        .unwrap_or(0)
        .min(32);
    // The room a line may take, and the least the activity should keep.
    let room = width.saturating_sub(1);
    const ACTIVITY: usize = 12;
    let used = |columns: &[(&str, Vec<String>, bool)]| {
        name_width
            + columns
                .iter()
                .filter(|(_, _, shown)| *shown)
                .map(|(header, cells, _)| 1 + cell_width(header, cells))
                .sum::<usize>()
            + 2
    };
    for drop in ["cost", "cached", "provider", "tokens in/out", "status"] {
        if used(&columns) + ACTIVITY <= room {
            break;
        }
        if let Some(column) = columns.iter_mut().find(|(header, _, _)| *header == drop) {
            column.2 = false;
        }
    }
    let name_width = name_width.min(
        room.saturating_sub(used(&columns) - name_width + ACTIVITY)
            .max(6),
    );
    let line = |label: &str, cells: Vec<&str>, activity: &str| {
        let mut text = format!("{:<name_width$}", fit(label, name_width));
        for ((header, all, _), cell) in columns.iter().filter(|c| c.2).zip(cells) {
            let w = cell_width(header, all);
            // Numbers right-aligned, words left.
            if matches!(*header, "tokens in/out" | "cached" | "cost") {
                text.push_str(&format!(" {cell:>w$}"));
            } else {
                text.push_str(&format!(" {cell:<w$}"));
            }
        }
        text.push_str("  ");
        let left = room.saturating_sub(text.chars().count());
        text.push_str(&fit(activity, left));
        fit(text.trim_end(), room)
    };
    let mut lines = vec![line(
        "agent",
        columns
            .iter()
            .filter(|c| c.2)
            .map(|(header, _, _)| *header)
            .collect(),
        "activity",
    )];
    for (i, (label, row)) in ordered.iter().enumerate() {
        let cells: Vec<&str> = columns
            .iter()
            .filter(|c| c.2)
            .map(|(_, cells, _)| cells[i].as_str())
            .collect();
        lines.push(line(label, cells, &activity(row, now)));
    }
    lines
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    pub(in crate::observe) fn row(
        id: &str,
        parent: Option<&str>,
        name: &str,
        provider: &str,
        activity: &str,
    ) -> Row {
        Row {
            id: SessionId::new(id).unwrap(),
            parent: parent.map(|p| SessionId::new(p).unwrap()),
            name: name.to_owned(),
            provider: provider.to_owned(),
            status: "running".to_owned(),
            activity: activity.to_owned(),
            input_tokens: 12_345,
            output_tokens: 678,
            cached_tokens: 0,
            tools: Vec::new(),
            seen: 0,
            from_log: true,
            agent: None,
        }
    }

    #[test]
    fn the_focus_line_keeps_the_newest_words_in_the_width() {
        let streamed =
            "I read the crate map first.\nThen the runtime:   its admission and drain look sound.";
        let frames: Vec<String> = [20, 40, 80, 120]
            .iter()
            .map(|width| {
                let line = focus_line("researcher", streamed, *width);
                assert!(line.chars().count() <= *width, "{width}: {line}");
                format!("{width:>3} |{line}|")
            })
            .collect();
        insta::assert_snapshot!(frames.join("\n"));
    }

    fn call(label: &str, since: Instant) -> Call {
        Call {
            id: None,
            label: label.to_owned(),
            since,
        }
    }

    /// A tree mid-run: the lead waits on two tools, a researcher greps
    /// (for 7 s), a grandchild thinks, a reviewer is done.
    fn tree(now: Instant) -> Vec<Row> {
        let ago = |secs| now - std::time::Duration::from_secs(secs);
        let mut lead = row("s-lead", None, "lead", "root", "calling subagent");
        lead.tools = vec![call("subagent", ago(3)), call("subagent", ago(2))];
        let mut researcher = row(
            "s-a",
            Some("s-lead"),
            "researcher",
            "spawn",
            "calling grep over the whole workspace for every use of the catalog",
        );
        researcher.tools = vec![call("grep", ago(7))];
        researcher.cached_tokens = 8_192;
        let deep = row(
            "s-b",
            Some("s-a"),
            "researcher/deep-reader",
            "fork",
            "thinking",
        );
        let mut reviewer = row(
            "s-c",
            Some("s-lead"),
            "reviewer",
            "acp",
            "turn ended: completed",
        );
        reviewer.status = "done".to_owned();
        reviewer.input_tokens = 2_400_000;
        vec![lead, researcher, deep, reviewer]
    }

    /// Frames of the same tree at fixed widths, with and without a price:
    /// no line reaches the width (so none wraps, and redrawing `drawn`
    /// lines up clears exactly the frame); as the width shrinks, whole
    /// columns go in order (cost, cached, provider, tokens) and what stays
    /// is aligned, never cut mid-column; at 40 columns every agent keeps
    /// its name, status and what it is doing.
    #[test]
    fn the_tree_degrades_column_by_column_and_never_wraps() {
        let now = Instant::now();
        let rows = tree(now);
        let price = Price {
            input: 0.27,
            output: 1.10,
        };
        let mut frames = Vec::new();
        for price in [None, Some(price)] {
            for width in [20, 40, 60, 80, 120] {
                let lines = render_tree(&rows, width, now, price);
                for line in &lines {
                    assert!(line.chars().count() < width, "{width}: {line:?}");
                }
                if width == 40 {
                    assert!(lines[0].starts_with("agent") && lines[0].contains("status"));
                    assert!(lines[2].contains("researcher") && lines[2].contains("grep 7s"));
                    assert!(lines[1].contains("subagent 3s"), "{}", lines[1]);
                }
                frames.push(format!(
                    "width {width}, price {}:\n{}",
                    price.is_some(),
                    lines.join("\n")
                ));
            }
        }
        insta::assert_snapshot!(frames.join("\n\n"));
    }

    #[test]
    fn token_counts_are_short_and_exact_below_ten_thousand() {
        assert_eq!(short(9_999), "9999");
        assert_eq!(short(12_345), "12.3k");
        assert_eq!(short(2_400_000), "2.4M");
    }
}
