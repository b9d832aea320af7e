//! ctxengine's Rust core: the pure algorithms (`tokens`, ...) plus one binding module (`py`,
//! behind the default `python` feature) that exposes them as `ctxengine._core`.
//!
//! `cargo test --no-default-features` builds and tests the algorithms without Python.

pub mod assemble;
pub mod bm25;
pub mod errors;
pub mod reading;
pub mod shell;
pub mod tokens;

#[cfg(feature = "python")]
mod py;

/// The native module `ctxengine._core`; see `python/ctxengine/_core.pyi` for its surface.
#[cfg(feature = "python")]
#[pyo3::pymodule(gil_used = false)]
mod _core {
    use pyo3::prelude::*;

    #[pymodule_export]
    use crate::py::assemble::{fuse, PyAssembly, PyPlan};
    #[pymodule_export]
    use crate::py::bm25::{bm25_tokenize, bm25_words, PyBm25Index};
    #[pymodule_export]
    use crate::py::reading::{
        read_first_line, read_identifier_kinds, read_identifiers, read_prose, read_shell_files,
    };
    #[pymodule_export]
    use crate::py::seq::differing;
    #[pymodule_export]
    use crate::py::tokens::{bare_model, cache_info, clear_cache, set_cache_capacity, PyTokenizer};
    #[pymodule_export]
    use crate::py::tree::{fresh_tree, hand_out, Handout};

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        crate::py::assemble::add_constants(m)
    }
}
