//! `read_identifiers`, `read_identifier_kinds`, `read_prose`, `read_first_line` and
//! `read_shell_files` of `ctxengine._core`: the bindings of [`crate::reading`] and
//! [`crate::shell`] (ASCII text only; `None` for any other, which the caller reads in Python).

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::{reading, shell};

/// The text of `text`; `None` for one UTF-8 cannot hold (a lone surrogate: not ASCII either,
/// so the caller's Python reading takes it, as any other text that is not ASCII).
fn ascii_or_none<'a>(text: &'a Bound<'_, PyString>) -> Option<&'a str> {
    text.to_str().ok()
}

/// The identifiers in `text` (URLs, UUIDs, hashes, paths, ticket ids: `_read_identifiers`),
/// `None` when `text` is not ASCII.
#[pyfunction]
pub fn read_identifiers<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    ascii_or_none(text)
        .and_then(reading::identifiers)
        .map(|found| PyTuple::new(py, found))
        .transpose()
}

/// [`read_identifiers`] by kind: `(urls, uuids, hashes, paths, tickets)`, each in text
/// order; `None` when `text` is not ASCII.
#[pyfunction]
pub fn read_identifier_kinds<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Some(kinds) = ascii_or_none(text).and_then(reading::identifier_kinds) else {
        return Ok(None);
    };
    let tuples = kinds
        .into_iter()
        .map(|kind| PyTuple::new(py, kind))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, tuples).map(Some)
}

/// `(decision lines, first line)` of an assistant message's text (`_prose`), `None` when
/// `text` is not ASCII.
#[pyfunction]
pub fn read_prose<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyString>,
    max_line: usize,
) -> PyResult<Option<(Bound<'py, PyTuple>, String)>> {
    match ascii_or_none(text).and_then(|t| reading::prose(t, max_line)) {
        Some((found, first)) => Ok(Some((PyTuple::new(py, found)?, first))),
        None => Ok(None),
    }
}

/// The first non-blank line of `text`, whitespace collapsed, cut to `limit` characters
/// (`first_line`), `None` when `text` is not ASCII or `limit` is 0.
#[pyfunction]
pub fn read_first_line(text: &Bound<'_, PyString>, limit: usize) -> Option<String> {
    ascii_or_none(text).and_then(|t| reading::first_line(t, limit))
}

/// `(files read, files modified)` by the shell command line `command` (`_read_shell_files`),
/// `None` when `command` is not ASCII.
#[pyfunction]
pub fn read_shell_files(command: &Bound<'_, PyString>) -> Option<(Vec<String>, Vec<String>)> {
    ascii_or_none(command).and_then(shell::files)
}
