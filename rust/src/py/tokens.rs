//! `Tokenizer` and the token-cache functions of `ctxengine._core`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyDict, PyString};

use super::errors::not_unicode;
use crate::tokens::{
    bare_model as bare, counter_for_encoding, counter_for_model, Counter, Encoding, TokenCache,
    PARALLEL_MIN_BYTES,
};

/// Texts at least this long are counted with the GIL released.
const DETACH_BYTES: usize = 8 * 1024;

/// A resolved tokenizer: exact for OpenAI encodings, a calibrated estimate otherwise.
#[pyclass(frozen, name = "Tokenizer", module = "ctxengine._core")]
pub struct PyTokenizer {
    counter: Counter,
}

fn as_str<'a>(text: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    text.to_str().map_err(|e| not_unicode(None, &e))
}

/// `texts[i]` as UTF-8 (CPython encodes a str on first use and keeps the bytes with it).
fn extract_text(i: usize, item: &Bound<'_, PyAny>) -> PyResult<PyBackedStr> {
    let s = item.cast::<PyString>().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "texts[{i}] must be str, got {}",
            item.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    PyBackedStr::try_from(s.clone()).map_err(|e| not_unicode(Some(i), &e))
}

/// A batch is handed to the pool in runs of texts of about this many bytes: small enough that
/// the last run, which one thread may still be counting while the other has nothing left, is a
/// small part of a batch; large enough that claiming a run (an atomic add on a line both
/// threads write) is negligible beside counting it.
const RUN_BYTES: usize = 16 * 1024;
/// ... or of at most this many texts.
const RUN_TEXTS: usize = 512;

/// A value alone on its cache line(s): the counters of a [`Stream`] are written by different
/// threads, and sharing a line would make every write of one stall the readers of the others.
#[repr(align(128))]
struct Line<T>(T);

/// Shared state of a streamed count: the texts converted so far, the runs of them published
/// for counting, and the counts.
struct Stream {
    texts: Vec<OnceLock<PyBackedStr>>,
    counts: Vec<AtomicUsize>,
    /// `runs[r]` = `(start, end)`: run `r` is `texts[start..end]`; set before `published > r`.
    runs: Vec<OnceLock<(usize, usize)>>,
    /// Runs published (written by the converting thread only).
    published: Line<AtomicUsize>,
    /// No run will be published any more.
    finished: Line<AtomicBool>,
    /// The next run to claim.
    next: Line<AtomicUsize>,
    /// Runs counted.
    done: Line<AtomicUsize>,
}

impl Stream {
    /// Claim and count runs until every published run is claimed and no more will come.
    fn work(&self, counter: Counter, cache: bool) {
        loop {
            let r = self.next.0.fetch_add(1, Ordering::AcqRel);
            // Wait for run `r` to be published (the converting thread is ~5-10x faster than a
            // counting one, so this spins only at the start of a batch).
            while r >= self.published.0.load(Ordering::Acquire) {
                if self.finished.0.load(Ordering::Acquire)
                    && r >= self.published.0.load(Ordering::Acquire)
                {
                    return;
                }
                std::thread::yield_now();
            }
            if let Some(&(start, end)) = self.runs[r].get() {
                for i in start..end {
                    if let Some(t) = self.texts[i].get() {
                        self.counts[i].store(counter.count(t, cache), Ordering::Relaxed);
                    }
                }
            }
            self.done.0.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Count `items` on every core while this thread is still converting them to UTF-8.
///
/// The conversion needs the GIL, so it runs on this thread, one text after another; done for
/// the whole batch before counting, it was ~9% of the work done serially (a ceiling of ~1.8x
/// on 2 cores). Instead, runs of converted texts (~16 KB each) are published as they are
/// ready to `cores - 1` pool workers, and this thread, once it has converted the last text,
/// releases the GIL and counts beside them: one counting thread per core.
///
/// With `cache`, a text whose count the cache holds is answered as it is converted, and only
/// the others are published for counting: a batch of texts counted before (a compaction's
/// message counts after the session counted the same texts) wakes no worker, which cost
/// more than its hashing.
fn count_streamed(
    py: Python<'_>,
    counter: Counter,
    items: &[Bound<'_, PyAny>],
    cache: bool,
) -> PyResult<Vec<usize>> {
    let n = items.len();
    if n == 0 {
        return Ok(Vec::new()); // no scope to open, no GIL to release
    }
    let stream = Stream {
        texts: (0..n).map(|_| OnceLock::new()).collect(),
        counts: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        runs: (0..n).map(|_| OnceLock::new()).collect(),
        published: Line(AtomicUsize::new(0)),
        finished: Line(AtomicBool::new(false)),
        next: Line(AtomicUsize::new(0)),
        done: Line(AtomicUsize::new(0)),
    };
    let stream = &stream;
    let mut failed: Option<PyErr> = None;
    rayon::in_place_scope(|scope| {
        let mut workers = rayon::current_num_threads().saturating_sub(1);
        let (mut start, mut bytes, mut total, mut runs) = (0usize, 0usize, 0usize, 0usize);
        for (i, item) in items.iter().enumerate() {
            let text = match extract_text(i, item) {
                Ok(t) => t,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            match if cache { counter.cached(&text) } else { None } {
                // a count the cache holds is answered here: its text, left unset, is skipped
                // by the run that covers it (a batch of hits wakes no worker)
                Some(n) => stream.counts[i].store(n, Ordering::Relaxed),
                None => {
                    bytes += text.len();
                    total += text.len();
                    // Set once, here, before any published run covers `i`.
                    let _ = stream.texts[i].set(text);
                }
            }
            if bytes >= RUN_BYTES || i + 1 - start >= RUN_TEXTS || i + 1 == n {
                let _ = stream.runs[runs].set((start, i + 1));
                runs += 1;
                stream.published.0.store(runs, Ordering::Release);
                // Workers join once the batch has `PARALLEL_MIN_BYTES` and more is coming, as in
                // `Counter::count_many`: waking the pool costs more than counting a small batch.
                if workers > 0 && total >= PARALLEL_MIN_BYTES && i + 1 < n {
                    workers -= 1;
                    scope.spawn(move |_| stream.work(counter, cache));
                }
                (start, bytes) = (i + 1, 0);
            }
        }
        stream.finished.0.store(true, Ordering::Release);
        py.detach(|| {
            stream.work(counter, cache);
            // Wait, without the GIL, for the runs the workers are still counting.
            while stream.done.0.load(Ordering::Acquire) < runs {
                std::thread::yield_now();
            }
        });
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(stream
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()),
    }
}

impl PyTokenizer {
    /// Resolve a model or encoding name.
    pub fn resolve(model: Option<&str>, encoding: Option<&str>) -> PyResult<Self> {
        let counter = match (model, encoding) {
            (_, Some(enc)) => counter_for_encoding(enc)?,
            (Some(m), None) => counter_for_model(m)?,
            (None, None) => counter_for_encoding(Encoding::O200kBase.name())?,
        };
        Ok(Self { counter })
    }

    /// The underlying counter (for other binding modules).
    pub fn counter(&self) -> Counter {
        self.counter
    }
}

#[pymethods]
impl PyTokenizer {
    #[new]
    #[pyo3(signature = (model_or_encoding))]
    fn py_new(model_or_encoding: &str) -> PyResult<Self> {
        match Encoding::from_name(model_or_encoding.trim()) {
            Some(_) => Self::resolve(None, Some(model_or_encoding)),
            None => Self::resolve(Some(model_or_encoding), None),
        }
    }

    /// `cl100k_base`, `o200k_base`, or `<family>~o200k_base` for an estimate.
    #[getter]
    fn name(&self) -> String {
        self.counter.name()
    }

    /// The exact encoding underneath.
    #[getter]
    fn encoding(&self) -> &'static str {
        self.counter.encoding.name()
    }

    /// True when counts are exact.
    #[getter]
    fn exact(&self) -> bool {
        self.counter.exact()
    }

    /// Multiplier applied to the exact count (1.0 when exact).
    #[getter]
    fn factor(&self) -> f64 {
        self.counter.estimator.map_or(1.0, |e| e.factor)
    }

    #[pyo3(signature = (text, *, cache = true))]
    fn count(&self, py: Python<'_>, text: &Bound<'_, PyString>, cache: bool) -> PyResult<usize> {
        let s = as_str(text)?;
        let counter = self.counter;
        if s.len() < DETACH_BYTES {
            return Ok(counter.count(s, cache));
        }
        Ok(py.detach(|| counter.count(s, cache)))
    }

    #[pyo3(signature = (texts, *, cache = true))]
    fn count_many(
        &self,
        py: Python<'_>,
        texts: &Bound<'_, PyAny>,
        cache: bool,
    ) -> PyResult<Vec<usize>> {
        let items = texts
            .try_iter()?
            .collect::<PyResult<Vec<Bound<'_, PyAny>>>>()?;
        count_streamed(py, self.counter, &items, cache)
    }

    /// For each group of OpenAI Chat message dicts (the dicts of one message), its tokens by
    /// the rule of `count_messages` (without the reply priming), or None when a dict has a
    /// shape the exporters do not make (see `py::chat`).
    #[pyo3(signature = (groups, *, cache = true))]
    fn count_chat(
        &self,
        py: Python<'_>,
        groups: &Bound<'_, PyAny>,
        cache: bool,
    ) -> PyResult<Vec<Option<usize>>> {
        super::chat::count_groups(py, self.counter, groups, cache)
    }

    fn encode(&self, py: Python<'_>, text: &Bound<'_, PyString>) -> PyResult<Vec<u32>> {
        if let Some(e) = self.counter.estimator {
            return Err(super::errors::EncodingError::new_err(format!(
                "{} models have no public tokenizer: token ids are unavailable (counts are \
                 estimated from o200k_base x {}); pass an OpenAI model or encoding to encode",
                e.family, e.factor
            )));
        }
        let s = as_str(text)?;
        let encoding = self.counter.encoding;
        Ok(py.detach(|| encoding.encode(s)))
    }

    fn decode(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<String> {
        let encoding = self.counter.encoding;
        let bytes = py.detach(|| encoding.decode_bytes(&ids))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn truncate(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyString>,
        max_tokens: usize,
    ) -> PyResult<String> {
        let s = as_str(text)?;
        let counter = self.counter;
        Ok(py.detach(|| counter.truncate(s, max_tokens))?.to_string())
    }

    fn __repr__(&self) -> String {
        format!(
            "<ctxengine.Tokenizer {} exact={}>",
            self.counter.name(),
            self.counter.exact()
        )
    }
}

/// Counters of the process-wide token-count cache.
#[pyfunction]
pub fn cache_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = TokenCache::global().stats();
    let d = PyDict::new(py);
    d.set_item("hits", s.hits)?;
    d.set_item("misses", s.misses)?;
    d.set_item("evictions", s.evictions)?;
    d.set_item("size", s.size)?;
    d.set_item("capacity", s.capacity)?;
    Ok(d)
}

/// Set how many counts the cache may hold (0 disables it).
#[pyfunction]
pub fn set_cache_capacity(capacity: usize) {
    TokenCache::global().set_capacity(capacity);
}

/// Empty the cache and reset its counters.
#[pyfunction]
pub fn clear_cache() {
    TokenCache::global().clear();
}

/// A model name as its family is looked up: lower case, without a provider path, a
/// fine-tune's `ft:` or a Bedrock vendor prefix (the counter's and the context window's rule).
#[pyfunction]
pub fn bare_model(model: &str) -> String {
    bare(model)
}
