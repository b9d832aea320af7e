//! The core's one error type. `py/errors.rs` turns it into the Python tree of
//! `ctxengine.errors` in a single `From` impl.

use std::fmt;

/// Every failure the pure core can report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// Unknown model or encoding name; carries the name and a hint listing valid ones.
    UnknownModel { name: String, hint: String },
    /// Token ids that the encoding cannot decode.
    InvalidToken { token: u32, encoding: &'static str },
    /// Protected content alone exceeds the budget.
    Budget(String),
    /// A malformed tree (cycle, missing parent).
    Fold(String),
    /// An argument with an invalid value; the message names it and what was expected.
    Value(String),
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownModel { name, hint } => {
                write!(f, "unknown model or encoding {name:?}; {hint}")
            }
            Self::InvalidToken { token, encoding } => {
                write!(f, "token id {token} is not in the {encoding} vocabulary")
            }
            Self::Budget(msg) | Self::Fold(msg) | Self::Value(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for CoreError {}

/// Result alias used across the core.
pub type CoreResult<T> = Result<T, CoreError>;
