//! The one place where a [`CoreError`] becomes a Python exception of `ctxengine.errors`.

use pyo3::PyErr;

use crate::errors::CoreError;

pyo3::import_exception!(ctxengine.errors, EncodingError);
pyo3::import_exception!(ctxengine.errors, BudgetError);
pyo3::import_exception!(ctxengine.errors, FoldError);

impl From<CoreError> for PyErr {
    fn from(err: CoreError) -> PyErr {
        let msg = err.to_string();
        match err {
            CoreError::UnknownModel { .. } | CoreError::InvalidToken { .. } => {
                EncodingError::new_err(msg)
            }
            CoreError::Budget(_) => BudgetError::new_err(msg),
            CoreError::Fold(_) => FoldError::new_err(msg),
            CoreError::Value(_) => pyo3::exceptions::PyValueError::new_err(msg),
        }
    }
}

/// An `EncodingError` for text that Python holds but UTF-8 cannot (lone surrogates).
pub fn not_unicode(index: Option<usize>, cause: &PyErr) -> PyErr {
    let at = index.map(|i| format!("texts[{i}] ")).unwrap_or_default();
    EncodingError::new_err(format!(
        "{at}is not valid Unicode text (lone surrogates cannot be encoded): {cause}"
    ))
}
