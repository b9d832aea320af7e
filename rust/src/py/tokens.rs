//! `Tokenizer` and the token-cache functions of `ctxengine._core`.

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyDict, PyString};

use super::errors::not_unicode;
use crate::tokens::{counter_for_encoding, counter_for_model, Counter, Encoding, TokenCache};

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

fn extract_texts(texts: &Bound<'_, PyAny>) -> PyResult<Vec<PyBackedStr>> {
    let mut out = Vec::with_capacity(texts.len().unwrap_or(0));
    for (i, item) in texts.try_iter()?.enumerate() {
        let item = item?;
        let s = item.cast::<PyString>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "texts[{i}] must be str, got {}",
                item.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        out.push(PyBackedStr::try_from(s.clone()).map_err(|e| not_unicode(Some(i), &e))?);
    }
    Ok(out)
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
        let texts = extract_texts(texts)?;
        let counter = self.counter;
        Ok(py.detach(|| counter.count_many(&texts, cache)))
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
