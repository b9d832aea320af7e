//! `Tokenizer.count_chat`: OpenAI Chat message dicts counted in one native walk.
//!
//! The rule is `ctxengine.tokens.count_messages`'s (OpenAI's documented one): 3 tokens of
//! framing per message, the tokens of each string value (role, content, name...), 1 more for a
//! `name`, a tool call's function name and arguments, a content part's text, and an image part
//! as a fixed count. A payload recount walks every kept message's dicts; in Python that walk
//! was a fifth of a cold render. Only the shapes an exporter makes are walked here (string
//! values, `None`, a list of tool calls whose function name and arguments are strings, a list
//! of content parts); a group holding any other shape is answered `None`, and the caller counts
//! it by the Python rule, which handles every shape.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::errors::not_unicode;
use crate::tokens::Counter;

/// Framing tokens of every message (`ctxengine.tokens.TOKENS_PER_MESSAGE`).
const TOKENS_PER_MESSAGE: usize = 3;
/// Extra tokens of a `name` value (`ctxengine.tokens.TOKENS_PER_NAME`).
const TOKENS_PER_NAME: usize = 1;
/// Tokens of an image content part (`ctxengine.tokens.IMAGE_TOKENS`).
const IMAGE_TOKENS: usize = 765;
/// Part types counted as an image.
const IMAGE_PARTS: [&str; 3] = ["image_url", "input_image", "image"];
/// Text bytes from which the count runs without the GIL.
const DETACH_BYTES: usize = 8 * 1024;

/// `value` when it is exactly a `str`.
fn exact_str<'py>(value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyString>> {
    if value.is_exact_instance_of::<PyString>() {
        value.cast::<PyString>().ok().cloned()
    } else {
        None
    }
}

/// The function name and arguments of each call of `calls`, pushed to `out`; false when a
/// call is not a dict of the exported shape.
fn tool_calls<'py>(calls: &Bound<'py, PyList>, out: &mut Vec<Bound<'py, PyString>>) -> bool {
    for call in calls.iter() {
        if !call.is_exact_instance_of::<PyDict>() {
            return false;
        }
        let Ok(call) = call.cast_into::<PyDict>() else {
            return false;
        };
        let function = match call.get_item("function") {
            Ok(Some(f)) => f,
            Ok(None) => continue, // no function: an empty name and arguments
            Err(_) => return false,
        };
        if !function.is_exact_instance_of::<PyDict>() {
            return false;
        }
        let Ok(function) = function.cast_into::<PyDict>() else {
            return false;
        };
        for key in ["name", "arguments"] {
            match function.get_item(key) {
                Ok(None) => {}
                Ok(Some(v)) => match exact_str(&v) {
                    Some(s) => out.push(s),
                    None => return false,
                },
                Err(_) => return false,
            }
        }
    }
    true
}

/// The texts of content parts pushed to `out`; the images' tokens, or None when a part is
/// not a dict of the exported shape.
fn parts<'py>(list: &Bound<'py, PyList>, out: &mut Vec<Bound<'py, PyString>>) -> Option<usize> {
    let mut images = 0;
    for part in list.iter() {
        if !part.is_exact_instance_of::<PyDict>() {
            return None;
        }
        let part = part.cast_into::<PyDict>().ok()?;
        match part.get_item("text").ok()? {
            Some(text) if text.is_instance_of::<PyString>() => {
                out.push(exact_str(&text)?);
                continue;
            }
            _ => {}
        }
        let image = match part.get_item("type").ok()? {
            None => false,
            Some(kind) => IMAGE_PARTS.contains(&exact_str(&kind)?.to_str().ok()?),
        };
        if image {
            images += IMAGE_TOKENS;
        }
    }
    Some(images)
}

/// The strings of one message dict pushed to `out`, and its framing tokens; None when the
/// dict holds a shape the exporters do not make.
fn message<'py>(d: &Bound<'py, PyAny>, out: &mut Vec<Bound<'py, PyString>>) -> Option<usize> {
    if !d.is_exact_instance_of::<PyDict>() {
        return None;
    }
    let d = d.cast::<PyDict>().ok()?;
    let mut overhead = TOKENS_PER_MESSAGE;
    for (key, value) in d.iter() {
        let key = exact_str(&key)?;
        let key = key.to_str().ok()?;
        if value.is_none() {
            continue;
        }
        if key == "tool_calls" {
            if !value.is_exact_instance_of::<PyList>() || !tool_calls(value.cast().ok()?, out) {
                return None;
            }
        } else if let Some(s) = exact_str(&value) {
            out.push(s);
            if key == "name" {
                overhead += TOKENS_PER_NAME;
            }
        } else if key != "function_call" && value.is_exact_instance_of::<PyList>() {
            overhead += parts(value.cast().ok()?, out)?;
        } else {
            return None;
        }
    }
    Some(overhead)
}

/// For each group of message dicts, its tokens by the chat rule (framing and strings), or
/// None when one of its dicts has another shape. Raises `EncodingError` for a string with
/// lone surrogates.
pub fn count_groups(
    py: Python<'_>,
    counter: Counter,
    groups: &Bound<'_, PyAny>,
    cache: bool,
) -> PyResult<Vec<Option<usize>>> {
    let mut strings: Vec<Bound<'_, PyString>> = Vec::new();
    // per group: (framing tokens, end of its strings), None when it holds another shape
    let mut spans: Vec<Option<(usize, usize)>> = Vec::new();
    for group in groups.try_iter()? {
        let group = group?;
        let start = strings.len();
        let mut framing = Some(0);
        for d in group.try_iter()? {
            framing = framing.zip(message(&d?, &mut strings)).map(|(a, b)| a + b);
            if framing.is_none() {
                break;
            }
        }
        match framing {
            Some(f) => spans.push(Some((f, strings.len()))),
            None => {
                strings.truncate(start);
                spans.push(None);
            }
        }
    }
    let texts = strings
        .iter()
        .map(|s| s.to_str().map_err(|e| not_unicode(None, &e)))
        .collect::<PyResult<Vec<&str>>>()?;
    let bytes: usize = texts.iter().map(|t| t.len()).sum();
    let counts = if bytes < DETACH_BYTES {
        counter.count_many(&texts, cache)
    } else {
        py.detach(|| counter.count_many(&texts, cache))
    };
    let mut at = 0;
    Ok(spans
        .into_iter()
        .map(|span| {
            span.map(|(framing, end)| {
                let total = framing + counts[at..end].iter().sum::<usize>();
                at = end;
                total
            })
        })
        .collect())
}
