//! `Bm25Index` of `ctxengine._core`: the binding of [`crate::bm25::Bm25Index`].

use parking_lot::RwLock;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::bm25::{Bm25Index, Cjk};

/// Documents whose total size is at least this many bytes are indexed with the GIL released.
const DETACH_BYTES: usize = 64 * 1024;
/// Indexes with at least this many documents are searched with the GIL released.
const DETACH_DOCS: usize = 2_000;

struct State {
    index: Bm25Index,
    ids: Vec<String>,
}

/// An Okapi BM25 full-text index over string-identified documents.
///
/// The handle is frozen (shareable between threads); a read-write lock inside guards the index,
/// so searches run in parallel and `add` waits for them.
#[pyclass(frozen, name = "Bm25Index", module = "ctxengine._core")]
pub struct PyBm25Index {
    state: RwLock<State>,
}

#[pymethods]
impl PyBm25Index {
    /// `Bm25Index(k1=1.2, b=0.75, *, cjk="chars")`; raises `ValueError` for a negative or
    /// non-finite `k1`, a `b` outside `[0, 1]`, or a `cjk` other than `"chars"` (each CJK
    /// ideograph or kana a term) or `"pairs"` (runs of CJK, Hangul, Thai, Lao, Myanmar or Khmer
    /// as overlapping character pairs; see `crate::bm25::Cjk`).
    #[new]
    #[pyo3(signature = (k1 = 1.2, b = 0.75, *, cjk = "chars"))]
    fn py_new(k1: f32, b: f32, cjk: &str) -> PyResult<Self> {
        let cjk = match cjk {
            "chars" => Cjk::Chars,
            "pairs" => Cjk::Pairs,
            other => {
                return Err(PyValueError::new_err(format!(
                    "cjk must be \"chars\" or \"pairs\"; got {other:?}"
                )))
            }
        };
        if !k1.is_finite() || k1 < 0.0 {
            return Err(PyValueError::new_err(format!(
                "k1 must be a finite number >= 0; got {k1}"
            )));
        }
        if !(0.0..=1.0).contains(&b) {
            return Err(PyValueError::new_err(format!(
                "b must be between 0 and 1; got {b}"
            )));
        }
        Ok(Self {
            state: RwLock::new(State {
                index: Bm25Index::with_params(k1, b).with_cjk(cjk),
                ids: Vec::new(),
            }),
        })
    }

    /// Add documents: `ids[i]` names `texts[i]`. Raises `ValueError` when the lengths differ.
    fn add(&self, py: Python<'_>, ids: Vec<String>, texts: Vec<String>) -> PyResult<()> {
        if ids.len() != texts.len() {
            return Err(PyValueError::new_err(format!(
                "ids and texts must have the same length; got {} ids and {} texts",
                ids.len(),
                texts.len()
            )));
        }
        let bytes: usize = texts.iter().map(String::len).sum();
        let work = move || {
            let mut state = self.state.write();
            for (id, text) in ids.into_iter().zip(texts) {
                let slot = state.ids.len();
                state.index.add(slot, &text);
                state.ids.push(id);
            }
        };
        if bytes >= DETACH_BYTES {
            py.detach(work);
        } else {
            work();
        }
        Ok(())
    }

    /// The `k` best documents for `query` as `(id, score)` pairs, best first; only documents
    /// sharing a term with the query are returned.
    fn search(&self, py: Python<'_>, query: &str, k: usize) -> Vec<(String, f32)> {
        let work = || {
            let state = self.state.read();
            state
                .index
                .search(query, k)
                .into_iter()
                .filter_map(|(slot, score)| state.ids.get(slot).map(|id| (id.clone(), score)))
                .collect()
        };
        if self.state.read().index.len() >= DETACH_DOCS {
            py.detach(work)
        } else {
            work()
        }
    }

    /// `(matched, total)`: distinct query terms found in the index, out of distinct query terms.
    fn coverage(&self, query: &str) -> (usize, usize) {
        self.state.read().index.coverage(query)
    }

    /// The distinct terms `search` scores for `query`, in first-seen order.
    fn terms(&self, query: &str) -> Vec<String> {
        self.state.read().index.terms(query)
    }

    /// The terms a document's `text` is indexed under, repeats included.
    fn document_terms(&self, text: &str) -> Vec<String> {
        self.state.read().index.cjk().document_terms(text)
    }

    /// Number of documents containing `term` (compared lowercase).
    fn doc_freq(&self, term: &str) -> usize {
        self.state.read().index.doc_freq(&term.to_lowercase())
    }

    fn __len__(&self) -> usize {
        self.state.read().index.len()
    }

    fn __repr__(&self) -> String {
        let state = self.state.read();
        format!(
            "Bm25Index(documents={}, terms={})",
            state.index.len(),
            state.index.vocabulary_size()
        )
    }
}

/// Tokenize text exactly as the index does (lowercase Unicode words, CJK per character).
#[pyfunction]
pub fn bm25_tokenize(text: &str) -> Vec<String> {
    crate::bm25::tokenize(text)
}

/// The words of `text` that an index with `cjk="pairs"` cuts into pairs: lowercase Unicode
/// words, a run of CJK, Hangul, Thai, Lao, Myanmar or Khmer characters one word.
#[pyfunction]
pub fn bm25_words(text: &str) -> Vec<String> {
    crate::bm25::words(text)
}
