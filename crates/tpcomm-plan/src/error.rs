//! The planner's error type. Every message names what is wrong and where
//! (file, entry, field) so a bad catalog or config can be fixed without a debugger.

use tpcomm::ByteSize;

pub type Result<T, E = PlanError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A catalog file is not valid TOML.
    #[error("{file}: not valid TOML: {detail}")]
    Toml { file: String, detail: String },

    /// A catalog entry has a missing, mistyped or out-of-range field; `line`
    /// is where the field (or, when it is missing, the entry) starts.
    #[error("{file}{}: entry {entry:?}, field `{field}`: {problem}", line_suffix(*.line))]
    Field {
        file: String,
        line: Option<usize>,
        entry: String,
        field: String,
        problem: String,
    },

    /// A name that is not in the catalog.
    #[error("no {kind} named {name:?} in the catalog; known: {known}")]
    UnknownName {
        kind: &'static str,
        name: String,
        known: String,
    },

    /// A Hugging Face config.json that cannot be used.
    #[error("{path}: {problem}")]
    HfConfig { path: String, problem: String },

    /// An all-reduce table (bench JSON or catalog) that cannot be used.
    #[error("all-reduce table {source_name}: {problem}")]
    Table {
        source_name: String,
        problem: String,
    },

    /// A memory term does not fit in what is left of the GPU.
    #[error(
        "{term} needs {needed} per GPU but only {available} is left (short by {short}); {hint}"
    )]
    DoesNotFit {
        term: String,
        needed: ByteSize,
        available: ByteSize,
        short: ByteSize,
        hint: String,
    },

    /// An option or combination of options that cannot be planned.
    #[error("invalid {what}: {detail}")]
    Invalid { what: String, detail: String },

    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// Drawing a plot.
    #[error("plot {path}: {detail}")]
    Plot { path: String, detail: String },

    /// A planner formula overflowed 64-bit integers (an absurd size in a
    /// model, a config.json or an option); never wrapped silently.
    #[error("{what} does not fit in 64-bit arithmetic (is a size in the model or an option absurdly large?)")]
    Overflow { what: String },

    /// Byte arithmetic overflowed (from tpcomm's ByteSize).
    #[error(transparent)]
    Core(#[from] tpcomm::Error),
}

fn line_suffix(line: Option<usize>) -> String {
    line.map(|l| format!(":{l}")).unwrap_or_default()
}

/// Byte arithmetic's own error reaches the planner as the library's.
impl From<tpcomm::units::UnitsError> for PlanError {
    fn from(e: tpcomm::units::UnitsError) -> Self {
        PlanError::Core(e.into())
    }
}

impl PlanError {
    pub fn invalid(what: impl Into<String>, detail: impl Into<String>) -> Self {
        PlanError::Invalid {
            what: what.into(),
            detail: detail.into(),
        }
    }
}
