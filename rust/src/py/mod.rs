//! Every PyO3 item lives below this module; the algorithms above it never see Python.

pub mod assemble;
pub mod bm25;
pub mod chat;
pub mod errors;
pub mod reading;
pub mod seq;
pub mod tokens;
pub mod tree;
