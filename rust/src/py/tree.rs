//! `fresh_tree` of `ctxengine._core`: a copy of a JSON-shaped value whose every `dict` and
//! `list` is new, the other values (strings, numbers, ...) shared.
//!
//! A warm render hands out payloads built from per-message dicts it keeps for the next render;
//! the caller may edit a payload at any depth (append a block to a message's content, change a
//! tool call's arguments), so every container it receives must be its own. Copying them here
//! costs one allocation per container and no Python-level loop.

use std::cell::{Cell, OnceCell};
use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A container and its new copy, whose children still are those of the original.
enum Pending<'py> {
    Dict(Bound<'py, PyDict>, Bound<'py, PyDict>),
    List(Bound<'py, PyList>, Bound<'py, PyList>),
}

/// A new container with the same children (their copies still to be made), when `value` is a
/// `dict` or a `list` (an instance of a subclass becomes a plain one).
fn shallow<'py>(value: &Bound<'py, PyAny>) -> PyResult<Option<(Bound<'py, PyAny>, Pending<'py>)>> {
    if value.is_instance_of::<PyDict>() {
        let dict = value.cast::<PyDict>()?;
        let copy = dict.copy()?;
        return Ok(Some((
            copy.clone().into_any(),
            Pending::Dict(dict.clone(), copy),
        )));
    }
    if value.is_instance_of::<PyList>() {
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
    if value.is_instance_of::<PyDict>() {
        let dict = value.cast::<PyDict>()?;
        let copy = dict.copy()?;
        for (k, v) in dict.iter() {
            if let Some(child) = copied(&v, depth + 1)? {
                copy.set_item(k, child)?;
            }
        }
        return Ok(Some(copy.into_any()));
    }
    if value.is_instance_of::<PyList>() {
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

/// `value` with every `dict` and `list` in it (at any depth) copied, an instance of a subclass
/// as a plain `dict` or `list` (a payload is JSON: an `OrderedDict` of tool arguments must not
/// stay shared with the transcript); other values are shared. Deep values do not grow the native stack: below
/// [`RECURSION`] levels the copy goes on with an explicit stack.
#[pyfunction]
pub fn fresh_tree<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    Ok(copied(value, 0)?.unwrap_or_else(|| value.clone()))
}

/// References a copy handed out before holds when nobody but the walk of [`untouched`] and the
/// container it sits in (its parent, or the caller's list of copies) refers to it.
const UNSHARED: isize = 2;

/// The reference count of `value`. PyO3 deprecates its safe accessor in favour of the raw
/// `ffi::Py_REFCNT`, which this crate's `unsafe_code = "forbid"` rules out. The count is exact
/// while one thread at a time runs Python; on a free-threaded interpreter without its GIL the
/// caller (`ctxengine.inject.warm`) never passes `earlier`.
#[allow(deprecated)]
fn references(value: &Bound<'_, PyAny>) -> isize {
    value.get_refcnt()
}

/// Whether `copy`, a copy [`fresh_tree`] made of `original` and handed out by an earlier
/// call, can be handed out again: referred to by nobody else ([`UNSHARED`]: the caller let it
/// go, and kept no container of it), and unchanged at every depth: the same keys in the same
/// order and the same objects as `original`, or containers themselves untouched. A copy
/// deeper than [`RECURSION`] levels is not looked at (it is copied again).
fn untouched(copy: &Bound<'_, PyAny>, original: &Bound<'_, PyAny>, depth: usize) -> PyResult<bool> {
    if depth >= RECURSION || references(copy) != UNSHARED {
        return Ok(false);
    }
    let same = |c: &Bound<'_, PyAny>, o: &Bound<'_, PyAny>| -> PyResult<bool> {
        if o.is_exact_instance_of::<PyDict>() || o.is_exact_instance_of::<PyList>() {
            untouched(c, o, depth + 1)
        } else {
            Ok(c.is(o))
        }
    };
    if original.is_exact_instance_of::<PyDict>() {
        if !copy.is_exact_instance_of::<PyDict>() {
            return Ok(false);
        }
        return same_dict(copy.cast()?, original.cast()?, same);
    }
    if original.is_exact_instance_of::<PyList>() {
        if !copy.is_exact_instance_of::<PyList>() {
            return Ok(false);
        }
        let (c, o) = (copy.cast::<PyList>()?, original.cast::<PyList>()?);
        if c.len() != o.len() {
            return Ok(false);
        }
        for (cv, ov) in c.iter().zip(o.iter()) {
            if !same(&cv, &ov)? {
                return Ok(false);
            }
        }
        return Ok(true);
    }
    Ok(false)
}

/// Whether two dicts hold the same keys (the same objects) in the same order, bound to values
/// `same` finds the same.
fn same_dict(
    copy: &Bound<'_, PyDict>,
    original: &Bound<'_, PyDict>,
    same: impl Fn(&Bound<'_, PyAny>, &Bound<'_, PyAny>) -> PyResult<bool>,
) -> PyResult<bool> {
    if copy.len() != original.len() {
        return Ok(false);
    }
    for ((ck, cv), (ok, ov)) in copy.iter().zip(original.iter()) {
        if !ck.is(&ok) || !same(&cv, &ov)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether `copy`, a copy of a dict holding no container, is unchanged: the same keys in the
/// same order, bound to the same objects.
fn flat_same(copy: &Bound<'_, PyAny>, original: &Bound<'_, PyAny>) -> PyResult<bool> {
    same_dict(copy.cast()?, original.cast()?, |c, o| Ok(c.is(o)))
}

/// Items looked at ahead of the expected one before the copies are indexed by address.
const LOOKAHEAD: usize = 32;

/// The copies an earlier call handed out, found by the address of the item each was made from:
/// in order first (a render keeps most of the previous one's messages, in the same order, after
/// dropping a few), by an index of all the addresses when that fails.
struct Handed<'py> {
    copies: Bound<'py, PyList>,
    addresses: Vec<usize>,
    next: Cell<usize>,
    index: OnceCell<HashMap<usize, usize, ahash::RandomState>>,
}

impl<'py> Handed<'py> {
    fn new(items: &Bound<'py, PyList>, copies: &Bound<'py, PyList>) -> PyResult<Self> {
        if items.len() != copies.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "the earlier call has {} copies of {} items; expected one copy per item",
                copies.len(),
                items.len()
            )));
        }
        Ok(Self {
            copies: copies.clone(),
            addresses: items.iter().map(|item| item.as_ptr() as usize).collect(),
            next: Cell::new(0),
            index: OnceCell::new(),
        })
    }

    /// The position of the item at `address` in the earlier call.
    fn find(&self, address: usize) -> Option<usize> {
        let from = self.next.get();
        let ahead = self.addresses.get(from..).unwrap_or_default();
        let j = match ahead.iter().take(LOOKAHEAD).position(|&a| a == address) {
            Some(k) => from + k,
            // past the earlier call's last item: the items appended since (a warm render's
            // new messages), copied without indexing every address for them
            None if ahead.is_empty() => return None,
            None => *self
                .index
                .get_or_init(|| {
                    let mut at = HashMap::with_capacity_and_hasher(
                        self.addresses.len(),
                        ahash::RandomState::new(),
                    );
                    for (j, &a) in self.addresses.iter().enumerate() {
                        at.insert(a, j);
                    }
                    at
                })
                .get(&address)?,
        };
        self.next.set(j + 1);
        Some(j)
    }

    /// The copy of `item` this generation handed out, when it can be handed out again
    /// (`deep`: `item` may hold containers, looked at in depth; else a flat dict).
    fn reusable(
        &self,
        item: &Bound<'py, PyAny>,
        deep: bool,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(j) = self.find(item.as_ptr() as usize) else {
            return Ok(None);
        };
        let copy = self.copies.get_item(j)?;
        let ok = if deep {
            untouched(&copy, item, 0)?
        } else {
            references(&copy) == UNSHARED
                && copy.is_exact_instance_of::<PyDict>()
                && flat_same(&copy, item)?
        };
        Ok(ok.then_some(copy))
    }
}

/// `[fresh_tree(d) if deep[i] else d.copy() for i, d in enumerate(items)]`, in one native
/// loop: the dicts a caller knows hold no container are copied without looking inside.
///
/// `earlier` is an earlier call's `(items, copies)`: its items, still alive (the caller holds
/// them, so that their addresses name them), and the list it returned, which only the caller's
/// own list of it holds now. A copy of the same item that its receiver let go of and left
/// unchanged ([`untouched`], [`flat_same`]) is handed out again instead of a new copy: no
/// object is ever in two results someone else holds, and an edit of one never shows in
/// another.
#[pyfunction]
#[pyo3(signature = (items, deep, earlier = None))]
pub fn fresh_items<'py>(
    items: &Bound<'py, PyList>,
    deep: &Bound<'py, PyList>,
    earlier: Option<(Bound<'py, PyList>, Bound<'py, PyList>)>,
) -> PyResult<Bound<'py, PyList>> {
    if deep.len() != items.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "deep has {} flags for {} items; expected one per item",
            deep.len(),
            items.len()
        )));
    }
    let handed = match &earlier {
        Some((items, copies)) => Some(Handed::new(items, copies)?),
        None => None,
    };
    let mut out = Vec::with_capacity(items.len());
    for (item, flag) in items.iter().zip(deep.iter()) {
        let deep = flag.is_truthy()?;
        // handing a copy out again allocates nothing: a new copy, even of a flat dict, counts
        // towards the collector's next pass, whose cost grows with the session's heap
        if let Some(handed) = &handed {
            if let Some(copy) = handed.reusable(&item, deep)? {
                out.push(copy);
                continue;
            }
        }
        let copy = if deep {
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
