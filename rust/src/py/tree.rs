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

/// Depth to which [`fresh_tree`] copies by recursion (the common, shallow values); below it
/// the copy goes on with an explicit stack.
const RECURSION: usize = 64;

/// The copy of `value` (see [`fresh_tree`]) when it is a container, by recursion to
/// [`RECURSION`] levels.
fn copied<'py>(value: &Bound<'py, PyAny>, depth: usize) -> PyResult<Option<Bound<'py, PyAny>>> {
    if depth >= RECURSION {
        return Ok(match shallow(value)? {
            Some((copy, pending)) => {
                finish(vec![pending])?;
                Some(copy)
            }
            None => None,
        });
    }
    if value.is_exact_instance_of::<PyDict>() {
        let dict = value.cast::<PyDict>()?;
        let copy = dict.copy()?;
        for (k, v) in dict.iter() {
            if let Some(child) = copied(&v, depth + 1)? {
                copy.set_item(k, child)?;
            }
        }
        return Ok(Some(copy.into_any()));
    }
    if value.is_exact_instance_of::<PyList>() {
        let list = value.cast::<PyList>()?;
        let mut items = Vec::with_capacity(list.len());
        for v in list.iter() {
            items.push(copied(&v, depth + 1)?.unwrap_or(v));
        }
        return Ok(Some(PyList::new(value.py(), items)?.into_any()));
    }
    Ok(None)
}

/// Copy the children of the pending containers, and theirs, with an explicit stack.
fn finish<'py>(mut stack: Vec<Pending<'py>>) -> PyResult<()> {
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
    Ok(())
}

/// `value` with every `dict` and `list` in it (at any depth) copied; other values, and the
/// instances of subclasses, are shared. Deep values do not grow the native stack: below
/// [`RECURSION`] levels the copy goes on with an explicit stack.
#[pyfunction]
pub fn fresh_tree<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    Ok(copied(value, 0)?.unwrap_or_else(|| value.clone()))
}

/// `[fresh_tree(d) if deep[i] else d.copy() for i, d in enumerate(items)]`, in one native
/// loop: the dicts a caller knows hold no container are copied without looking inside.
#[pyfunction]
pub fn fresh_items<'py>(
    items: &Bound<'py, PyList>,
    deep: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    if deep.len() != items.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "deep has {} flags for {} items; expected one per item",
            deep.len(),
            items.len()
        )));
    }
    let mut out = Vec::with_capacity(items.len());
    for (item, flag) in items.iter().zip(deep.iter()) {
        let copy = if flag.is_truthy()? {
            copied(&item, 0)?
        } else if item.is_exact_instance_of::<PyDict>() {
            Some(item.cast::<PyDict>()?.copy()?.into_any())
        } else {
            copied(&item, 0)?
        };
        out.push(copy.unwrap_or(item));
    }
    PyList::new(items.py(), out)
}
