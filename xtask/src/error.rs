//! The faults that stop a command before it can judge anything: a file that
//! cannot be read or written, source that does not parse, a tool spec that is
//! not the JSON the convention asks for. What the checker finds wrong with
//! the docs is not an error but a [`Problem`](crate::Problem).

use std::path::PathBuf;

/// Why a command could not run to the end.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A Rust source file does not parse.
    #[error("{path}:{line}: does not parse: {message}")]
    Parse {
        /// The file, relative to the tree's root.
        path: String,
        /// 1-based line of the parse error.
        line: usize,
        /// What the parser said.
        message: String,
    },
    /// A `mod foo;` declaration whose file exists under neither `foo.rs`
    /// nor `foo/mod.rs`.
    #[error("{path}:{line}: module `{module}` has no source file")]
    MissingModule {
        /// The declaring file.
        path: String,
        /// 1-based line of the declaration.
        line: usize,
        /// The module's name.
        module: String,
    },
    /// An invocation of one of the crate's own `macro_rules!` macros that
    /// `xtask::expand` cannot expand, so its items would be missing.
    #[error(
        "{path}:{line}: cannot expand `{name}!` ({message}); its items would be missing from the catalogue: keep the macro to the forms xtask/src/expand.rs reads"
    )]
    Macro {
        /// The file of the invocation.
        path: String,
        /// 1-based line of the invocation.
        line: usize,
        /// The macro's name.
        name: String,
        /// Why it cannot be expanded.
        message: String,
    },
    /// A tool spec file that is not `{name, description, input_schema}`.
    #[error("{path}: not a tool spec: {message}")]
    ToolSpec {
        /// The file, relative to the tree's root.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A file criterion or a bench left is not the JSON it should be.
    #[error("{}: {message}", path.display())]
    Bench {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
