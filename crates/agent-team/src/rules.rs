//! Pure rules: member names (lowercase kebab-case, at most 64 characters,
//! never `lead`) and write scopes (normalised workspace-relative path
//! prefixes, and when two overlap).

use crate::error::TeamError;
use crate::record::LEAD_NAME;

/// The longest member name.
pub const MAX_NAME_LEN: usize = 64;

/// Check a teammate name: lowercase ASCII words of letters and digits joined
/// by single hyphens, starting with a letter, at most [`MAX_NAME_LEN`]
/// characters, and not the lead's name.
///
/// # Errors
/// [`TeamError::InvalidName`] saying which rule the name breaks.
pub fn validate_member_name(name: &str) -> Result<(), TeamError> {
    let reason = if name.is_empty() {
        Some("a name needs at least one character")
    } else if name.len() > MAX_NAME_LEN {
        Some("a name has at most 64 characters")
    } else if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some("a name starts with a lowercase letter")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Some("a name uses only lowercase letters, digits and hyphens")
    } else if name.ends_with('-') || name.contains("--") {
        Some("hyphens separate words: none at the end, never two in a row")
    } else if name == LEAD_NAME {
        Some("`lead` is the lead's name")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(TeamError::InvalidName {
            name: name.to_owned(),
            reason,
        }),
    }
}

/// Normalise a write scope: `/`-separated, relative to the workspace, with
/// no `.` or empty segments and no trailing slash; the whole workspace is
/// `.`.
///
/// # Errors
/// [`TeamError::InvalidScope`] for an empty, absolute or escaping (`..`) path.
pub fn normalise_scope(scope: &str) -> Result<String, TeamError> {
    let refuse = |reason| TeamError::InvalidScope {
        scope: scope.to_owned(),
        reason,
    };
    let text = scope.trim().replace('\\', "/");
    if text.is_empty() {
        return Err(refuse("a scope is a path prefix; it cannot be empty"));
    }
    if text.starts_with('/') || text.get(1..2) == Some(":") {
        return Err(refuse("a scope is relative to the workspace"));
    }
    let mut parts = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(refuse("a scope stays inside the workspace")),
            part => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Ok(".".into());
    }
    Ok(parts.join("/"))
}

/// Whether two normalised scopes overlap: one is a path prefix of the other
/// (by whole segments), or either is the whole workspace.
pub fn scopes_overlap(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        inner == outer
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    a == "." || b == "." || within(a, b) || within(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_kebab_case() {
        for good in ["alice", "code-reviewer", "w2", &"a".repeat(64)] {
            assert!(validate_member_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Alice",
            "2nd",
            "a_b",
            "a--b",
            "a-",
            "lead",
            &"a".repeat(65),
        ] {
            assert_eq!(
                validate_member_name(bad).map_err(|err| err.code()),
                Err("TEAM_INVALID_NAME"),
                "{bad}"
            );
        }
    }

    #[test]
    fn scopes_normalise_and_overlap_by_segments() {
        assert_eq!(normalise_scope("./src//a/").unwrap(), "src/a");
        assert_eq!(normalise_scope("src\\b").unwrap(), "src/b");
        assert_eq!(normalise_scope("./").unwrap(), ".");
        for bad in ["", "  ", "/etc", "a/../../b", "C:/x"] {
            assert!(normalise_scope(bad).is_err(), "{bad}");
        }
        assert!(scopes_overlap("src", "src/a"));
        assert!(scopes_overlap("src/a", "src"));
        assert!(scopes_overlap(".", "docs"));
        assert!(!scopes_overlap("src", "src2"));
        assert!(!scopes_overlap("src/a", "src/b"));
    }
}
