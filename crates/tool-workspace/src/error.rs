//! Why a workspace tool refused or failed, as sentences the model can act
//! on. Every refusal names the path or command as the model wrote it and
//! says what to do next; [`WorkspaceError::code`] is the stable code for
//! hosts and tests.

use dsh_core::ToolError;

use crate::policy::Level;

/// A workspace tool's refusal or failure. Its `Display` text is what the
/// model reads (as an error tool result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The workspace root given to [`WorkspaceTools`](crate::WorkspaceTools)
    /// does not exist or is not a directory.
    #[error("The workspace root `{0}` is not an existing directory.")]
    BadRoot(String),
    /// A path that resolves outside the workspace root (through `..`, an
    /// absolute path or a symbolic link).
    #[error(
        "`{path}` is outside the workspace root `{root}`, so it was refused. Use a path inside the workspace."
    )]
    OutsideRoot {
        /// The path as the model wrote it.
        path: String,
        /// The workspace root.
        root: String,
    },
    /// A path naming a symbolic link whose target does not exist (writing
    /// through it could create a file anywhere).
    #[error(
        "`{0}` is a symbolic link to a missing target, so it was refused. Write to the link's target path instead."
    )]
    DanglingLink(String),
    /// A path with `..` after a component that does not exist.
    #[error(
        "`{0}` goes up (`..`) through a directory that does not exist. Write the path without `..`."
    )]
    UnresolvableParent(String),
    /// The path does not exist.
    #[error("`{0}` does not exist. Call list_files to see what is there.")]
    NotFound(String),
    /// A directory where a file was expected.
    #[error("`{0}` is a directory, not a file. Call list_files on it instead.")]
    IsDirectory(String),
    /// A file where a directory was expected.
    #[error("`{0}` is a file, not a directory. Call read_file on it instead.")]
    NotDirectory(String),
    /// A file that is not UTF-8 text.
    #[error(
        "`{0}` is a binary file (not UTF-8 text), so it was not read. Only text files can be read or edited."
    )]
    Binary(String),
    /// A line range that does not make sense for the file.
    #[error("`{path}` has {lines} lines; start_line {start} is past its end.")]
    PastEnd {
        /// The path as the model wrote it.
        path: String,
        /// The file's line count.
        lines: usize,
        /// The first line asked for.
        start: usize,
    },
    /// `edit_file` whose `old_string` is not in the file.
    #[error(
        "`old_string` was not found in `{0}`, so nothing was changed. Read the file again and copy the exact text, including whitespace."
    )]
    EditAbsent(String),
    /// `edit_file` whose `old_string` occurs more than once.
    #[error(
        "`old_string` occurs {count} times in `{path}`, so nothing was changed. Include more surrounding lines so that it matches exactly once."
    )]
    EditAmbiguous {
        /// The path as the model wrote it.
        path: String,
        /// How many times it occurs.
        count: usize,
    },
    /// `edit_file` with an empty `old_string` or one equal to `new_string`.
    #[error("{0}")]
    EditInvalid(String),
    /// A regular expression or glob that does not compile.
    #[error("The pattern `{pattern}` is invalid: {reason}. Fix it and call the tool again.")]
    BadPattern {
        /// The pattern as the model wrote it.
        pattern: String,
        /// Why it does not compile.
        reason: String,
    },
    /// An argument outside its allowed range.
    #[error("{0}")]
    BadArgument(String),
    /// An action above the policy level with no one to ask.
    #[error(
        "`{tool}` on `{subject}` needs the {needed} permission level; this session runs {level} and there is no one to approve it, so it was refused. Do not retry it: use the read-only tools, or say in your reply what should be done."
    )]
    NeedsApproval {
        /// The tool.
        tool: String,
        /// The exact path or command.
        subject: String,
        /// The level in force.
        level: Level,
        /// The level the action needs.
        needed: Level,
    },
    /// The user declined the action.
    #[error(
        "The user declined `{tool}` on `{subject}`, so it was not done. Do not retry the same action; take another approach or ask the user."
    )]
    Declined {
        /// The tool.
        tool: String,
        /// The exact path or command.
        subject: String,
    },
    /// The call was cancelled before it finished.
    #[error("The call was cancelled before it finished.")]
    Cancelled,
    /// An operating-system failure (permissions, a full disk, a failed spawn).
    #[error("`{subject}`: {reason}.")]
    Io {
        /// The path or command.
        subject: String,
        /// The system's message.
        reason: String,
    },
}

impl WorkspaceError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRoot(_) => "BAD_ROOT",
            Self::OutsideRoot { .. } => "OUTSIDE_ROOT",
            Self::DanglingLink(_) => "DANGLING_LINK",
            Self::UnresolvableParent(_) => "UNRESOLVABLE_PARENT",
            Self::NotFound(_) => "NOT_FOUND",
            Self::IsDirectory(_) => "IS_DIRECTORY",
            Self::NotDirectory(_) => "NOT_DIRECTORY",
            Self::Binary(_) => "BINARY",
            Self::PastEnd { .. } => "PAST_END",
            Self::EditAbsent(_) => "EDIT_ABSENT",
            Self::EditAmbiguous { .. } => "EDIT_AMBIGUOUS",
            Self::EditInvalid(_) => "EDIT_INVALID",
            Self::BadPattern { .. } => "BAD_PATTERN",
            Self::BadArgument(_) => "BAD_ARGUMENT",
            Self::NeedsApproval { .. } => "NEEDS_APPROVAL",
            Self::Declined { .. } => "DECLINED",
            Self::Cancelled => "CANCELLED",
            Self::Io { .. } => "IO",
        }
    }

    /// An I/O failure on `subject`, mapping "not found" to
    /// [`WorkspaceError::NotFound`].
    pub fn io(subject: &str, err: &std::io::Error) -> Self {
        match err.kind() {
            std::io::ErrorKind::NotFound => Self::NotFound(subject.to_owned()),
            std::io::ErrorKind::IsADirectory => Self::IsDirectory(subject.to_owned()),
            _ => Self::Io {
                subject: subject.to_owned(),
                reason: err.to_string(),
            },
        }
    }
}

impl From<WorkspaceError> for ToolError {
    fn from(err: WorkspaceError) -> Self {
        ToolError::new(err.to_string())
    }
}
