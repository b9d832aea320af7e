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

/// References a copy handed out before holds when nobody but the walk of [`fits`] and the
/// container it sits in (its parent, or the list of copies) refers to it.
const UNSHARED: isize = 2;

/// The reference count of `value`. PyO3 deprecates its safe accessor in favour of the raw
/// `ffi::Py_REFCNT`, which this crate's `unsafe_code = "forbid"` rules out. The count is exact
/// while one thread at a time runs Python; on a free-threaded interpreter without its GIL the
/// caller (`ctxengine.inject.warm`) never passes `earlier`.
#[allow(deprecated)]
fn references(value: &Bound<'_, PyAny>) -> isize {
    value.get_refcnt()
}

/// Items looked at ahead of the expected one before the copies are indexed by address.
const LOOKAHEAD: usize = 32;

/// Tag bits of a word of a [`Handout`]'s shapes. An object's address (a leaf, or a dict key)
/// has them clear: Python objects are aligned to at least 8 bytes.
const TAG: usize = 3;
/// A `dict` of `word >> 2` keys, each key's address followed by its value's shape.
const DICT: usize = 1;
/// A `list` of `word >> 2` items, each item's shape in turn.
const LIST: usize = 2;
/// A value whose copy is never handed out again: an instance of a `dict` or `list` subclass
/// (its copy is a plain one), or one deeper than [`RECURSION`] levels.
const OPAQUE: usize = 3;

/// Push the shape of `value` to `out`: the addresses of its keys and leaves and the lengths of
/// its containers, which a copy of it must have to be handed out again.
fn shape(value: &Bound<'_, PyAny>, depth: usize, out: &mut Vec<usize>) -> PyResult<()> {
    if value.is_exact_instance_of::<PyDict>() {
        if depth >= RECURSION {
            out.push(OPAQUE);
            return Ok(());
        }
        let dict = value.cast::<PyDict>()?;
        out.push((dict.len() << 2) | DICT);
        for (k, v) in dict.iter() {
            out.push(leaf(&k));
            shape(&v, depth + 1, out)?;
        }
    } else if value.is_exact_instance_of::<PyList>() {
        if depth >= RECURSION {
            out.push(OPAQUE);
            return Ok(());
        }
        let list = value.cast::<PyList>()?;
        out.push((list.len() << 2) | LIST);
        for v in list.iter() {
            shape(&v, depth + 1, out)?;
        }
    } else if value.is_instance_of::<PyDict>() || value.is_instance_of::<PyList>() {
        out.push(OPAQUE);
    } else {
        out.push(leaf(value));
    }
    Ok(())
}

/// The word of a leaf: its address ([`OPAQUE`] should one ever have a tag bit set).
fn leaf(value: &Bound<'_, PyAny>) -> usize {
    let address = value.as_ptr() as usize;
    if address & TAG == 0 {
        address
    } else {
        OPAQUE
    }
}

/// Whether `copy` has the shape `words[*at..]` begins with, each container in it referred to
/// by nobody but its parent (or the list of copies) and this walk ([`UNSHARED`]); `*at` moves
/// past the words read. The same keys in the same order bound to the same objects: an edit
/// at any depth, a container kept by the receiver or one of another type makes it False.
fn fits(copy: &Bound<'_, PyAny>, words: &[usize], at: &mut usize) -> PyResult<bool> {
    let Some(&word) = words.get(*at) else {
        return Ok(false);
    };
    *at += 1;
    match word & TAG {
        DICT => {
            if references(copy) != UNSHARED || !copy.is_exact_instance_of::<PyDict>() {
                return Ok(false);
            }
            let dict = copy.cast::<PyDict>()?;
            if dict.len() != word >> 2 {
                return Ok(false);
            }
            for (k, v) in dict.iter() {
                if words.get(*at) != Some(&(k.as_ptr() as usize)) {
                    return Ok(false);
                }
                *at += 1;
                if !fits_child(&v, words, at)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        LIST => {
            if references(copy) != UNSHARED || !copy.is_exact_instance_of::<PyList>() {
                return Ok(false);
            }
            let list = copy.cast::<PyList>()?;
            if list.len() != word >> 2 {
                return Ok(false);
            }
            for v in list.iter() {
                if !fits_child(&v, words, at)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        OPAQUE => Ok(false),
        _ => Ok(copy.as_ptr() as usize == word),
    }
}

/// [`fits`] of a container's child, a leaf (most of them: the strings of a message) compared
/// here without a call.
#[inline(always)]
fn fits_child(child: &Bound<'_, PyAny>, words: &[usize], at: &mut usize) -> PyResult<bool> {
    match words.get(*at) {
        Some(&word) if word & TAG == 0 => {
            *at += 1;
            Ok(child.as_ptr() as usize == word)
        }
        _ => fits(child, words, at),
    }
}

/// What one call of [`hand_out`] handed out, for a later call to hand out again: the items
/// (held, so that their addresses name them, and the keys and leaves of the shapes live), the
/// copies (in a list of its own: the one returned is its receiver's), and the shape of each
/// copy as it was handed out.
///
/// The shapes stand for the items: an item must not be changed once handed out (the warm
/// renders' exported dicts never are), or a copy equal to it as it was could be handed out
/// again for it.
#[pyclass(frozen, name = "Handout", module = "ctxengine._core")]
pub struct Handout {
    items: Py<PyList>,
    copies: Py<PyList>,
    addresses: Vec<usize>,
    words: Vec<usize>,
    /// Item `i`'s shape is `words[starts[i]..starts[i + 1]]`.
    starts: Vec<usize>,
}

#[pymethods]
impl Handout {
    /// The items handed out, in order (a new list: the one kept is never changed).
    #[getter]
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.items.bind(py).iter())
    }

    /// Their copies, in the same order (a new list: the one kept is never changed, and the
    /// one returned by [`hand_out`] is its receiver's).
    #[getter]
    fn copies<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.copies.bind(py).iter())
    }

    fn __len__(&self) -> usize {
        self.addresses.len()
    }
}

/// `[fresh_tree(d) if deep[i] else d.copy() for i, d in enumerate(items)]`, in one native
/// loop (the dicts a caller knows hold no container are copied without looking inside),
/// handing out again the copies of an `earlier` call that their receiver let
/// go of and left unchanged, checked against the shape each item had when copied (one walk of
/// the copy, none of the item); returns the copies and what this call handed out, for a later
/// call. Raises `ValueError` unless one flag per item.
#[pyfunction]
#[pyo3(signature = (items, deep, earlier = None))]
pub fn hand_out<'py>(
    items: &Bound<'py, PyList>,
    deep: &Bound<'py, PyList>,
    earlier: Option<&Bound<'py, Handout>>,
) -> PyResult<(Bound<'py, PyList>, Handout)> {
    if deep.len() != items.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "deep has {} flags for {} items; expected one per item",
            deep.len(),
            items.len()
        )));
    }
    let py = items.py();
    let earlier = earlier.map(|h| h.get());
    let finder = earlier.map(|h| Finder::new(&h.addresses));
    let n = items.len();
    let mut out = Vec::with_capacity(n);
    let mut addresses = Vec::with_capacity(n);
    let mut words = Vec::with_capacity(earlier.map_or(n * 8, |h| h.words.len() + 64));
    let mut starts = Vec::with_capacity(n + 1);
    for (i, item) in items.iter().enumerate() {
        let address = item.as_ptr() as usize;
        starts.push(words.len());
        addresses.push(address);
        if let (Some(h), Some(finder)) = (earlier, &finder) {
            let found = finder.find(address).and_then(|j| {
                let (&from, &to) = h.starts.get(j).zip(h.starts.get(j + 1))?;
                Some((j, h.words.get(from..to)?))
            });
            if let Some((j, shape)) = found {
                let copy = h.copies.bind(py).get_item(j)?;
                let mut at = 0;
                if fits(&copy, shape, &mut at)? && at == shape.len() {
                    words.extend_from_slice(shape);
                    out.push(copy);
                    continue;
                }
            }
        }
        let copy = if deep.get_item(i)?.is_truthy()? {
            copied(&item, 0)?
        } else if item.is_exact_instance_of::<PyDict>() {
            Some(item.cast::<PyDict>()?.copy()?.into_any())
        } else {
            copied(&item, 0)?
        };
        let copy = copy.unwrap_or(item);
        // the shape of the copy just made (in cache), whose keys and leaves are the item's
        shape(&copy, 0, &mut words)?;
        out.push(copy);
    }
    starts.push(words.len());
    let handed = PyList::new(py, out)?;
    let handout = Handout {
        // every item, in order: held so that their addresses name them
        items: items.get_slice(0, n).unbind(),
        copies: handed.get_slice(0, n).unbind(),
        addresses,
        words,
        starts,
    };
    Ok((handed, handout))
}

/// The position of an item of an earlier call by its address: in order first (a render keeps
/// most of the previous one's messages, in the same order, after dropping a few), by an index
/// of all the addresses when that fails.
struct Finder<'a> {
    addresses: &'a [usize],
    next: Cell<usize>,
    index: OnceCell<HashMap<usize, usize, ahash::RandomState>>,
}

impl<'a> Finder<'a> {
    fn new(addresses: &'a [usize]) -> Self {
        Self {
            addresses,
            next: Cell::new(0),
            index: OnceCell::new(),
        }
    }

    /// The position of the item at `address` in the earlier call.
    fn find(&self, address: usize) -> Option<usize> {
        let from = self.next.get();
        if self.addresses.get(from) == Some(&address) {
            // the common case: the earlier call's items in the same order
            self.next.set(from + 1);
            return Some(from);
        }
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
}
