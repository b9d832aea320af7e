//! `fresh_tree` of `ctxengine._core`: a copy of a JSON-shaped value whose every `dict` and
//! `list` is new, the other values (strings, numbers, ...) shared.
//!
//! A warm render hands out payloads built from per-message dicts it keeps for the next render;
//! the caller may edit a payload at any depth (append a block to a message's content, change a
//! tool call's arguments), so every container it receives must be its own. Copying them here
//! costs one allocation per container and no Python-level loop.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A container and its new copy, whose children still are those of the original.
enum Pending<'py> {
    Dict(Bound<'py, PyDict>, Bound<'py, PyDict>),
    List(Bound<'py, PyList>, Bound<'py, PyList>),
}

/// A new container with the same children (their copies still to be made), when `value` is
/// exactly a `dict` or a `list`.
fn shallow<'py>(value: &Bound<'py, PyAny>) -> PyResult<Option<(Bound<'py, PyAny>, Pending<'py>)>> {
    if value.is_exact_instance_of::<PyDict>() {
        let dict = value.cast::<PyDict>()?;
        let copy = dict.copy()?;
        return Ok(Some((
            copy.clone().into_any(),
            Pending::Dict(dict.clone(), copy),
        )));
    }
    if value.is_exact_instance_of::<PyList>() {
        let list = value.cast::<PyList>()?;
        let copy = PyList::new(value.py(), list.iter())?;
        return Ok(Some((
            copy.clone().into_any(),
            Pending::List(list.clone(), copy),
        )));
    }
    Ok(None)
}

/// `value` with every `dict` and `list` in it (at any depth) copied; other values, and the
/// instances of subclasses, are shared. Iterative: deep values do not grow the native stack.
#[pyfunction]
pub fn fresh_tree<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let Some((root, first)) = shallow(value)? else {
        return Ok(value.clone());
    };
    let mut stack = vec![first];
    while let Some(pending) = stack.pop() {
        match pending {
            Pending::Dict(original, copy) => {
                for (k, v) in original.iter() {
                    if let Some((child, next)) = shallow(&v)? {
                        copy.set_item(k, child)?;
                        stack.push(next);
                    }
                }
            }
            Pending::List(original, copy) => {
                for (i, v) in original.iter().enumerate() {
                    if let Some((child, next)) = shallow(&v)? {
                        copy.set_item(i, child)?;
                        stack.push(next);
                    }
                }
            }
        }
    }
    Ok(root)
}
