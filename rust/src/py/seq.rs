//! `differing` of `ctxengine._core`: where two runs of two tuples hold other objects.
//!
//! A warm render's messages are mostly the previous render's, at shifted positions
//! (`ctxengine/inject/align.py`); checking that is a comparison of object identities over the
//! whole window on every render. Done here it reads the tuples' item arrays only, never the
//! objects (a Python loop increments and decrements each object's reference count: a write to
//! every message).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// A `ValueError` unless `t[start..start + count]` is in range.
fn in_range(t: &Bound<'_, PyTuple>, start: usize, count: usize, name: &str) -> PyResult<()> {
    let len = t.len();
    if start.checked_add(count).is_none_or(|end| end > len) {
        return Err(PyValueError::new_err(format!(
            "{name}[{start}:{start}+{count}] is out of range for a tuple of {len} items"
        )));
    }
    Ok(())
}

/// The address of `t[i]` (the stable ABI has no item array to read: one call per item; the
/// full API's item arrays are compared directly in [`differing`]).
#[cfg(feature = "abi3")]
fn address(t: &Bound<'_, PyTuple>, i: usize) -> PyResult<usize> {
    Ok(t.get_borrowed_item(i)?.as_ptr() as usize)
}

/// The offsets `j < count` at which `new[new_start + j]` is not the object
/// `old[old_start + j]`, in order; `None` when more than `limit` of them differ.
///
/// Raises `ValueError` when a run is out of its tuple's range.
#[pyfunction]
pub fn differing(
    new: &Bound<'_, PyTuple>,
    new_start: usize,
    old: &Bound<'_, PyTuple>,
    old_start: usize,
    count: usize,
    limit: usize,
) -> PyResult<Option<Vec<usize>>> {
    in_range(new, new_start, count, "new")?;
    in_range(old, old_start, count, "old")?;
    let mut out = Vec::new();
    #[cfg(not(feature = "abi3"))]
    {
        // the two runs of item arrays, side by side: a tight loop to each mismatch
        let (Some(a), Some(b)) = (
            new.as_slice().get(new_start..new_start + count),
            old.as_slice().get(old_start..old_start + count),
        ) else {
            return Err(PyValueError::new_err("a run is out of its tuple's range"));
        };
        let mut j = 0;
        while let Some(k) = a
            .get(j..)
            .unwrap_or_default()
            .iter()
            .zip(b.get(j..).unwrap_or_default())
            .position(|(x, y)| x.as_ptr() != y.as_ptr())
        {
            if out.len() == limit {
                return Ok(None);
            }
            out.push(j + k);
            j += k + 1;
        }
    }
    #[cfg(feature = "abi3")]
    for j in 0..count {
        if address(new, new_start + j)? != address(old, old_start + j)? {
            if out.len() == limit {
                return Ok(None);
            }
            out.push(j);
        }
    }
    Ok(Some(out))
}
