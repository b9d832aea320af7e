//! Every PyO3 item lives below this module; the algorithms above it never see Python.

pub mod assemble;
pub mod errors;
pub mod tokens;
