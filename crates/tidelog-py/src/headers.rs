//! Record headers between Python and the engine: in, a list of `(str, bytes | str | None)`
//! pairs (or a dict); out, a list of `(str, bytes | None)` tuples.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::buffer::InputBytes;
use crate::error::to_py;

/// Builds the engine's headers from `obj`: a list or iterable of `(key, value)` pairs, or a
/// mapping. A key is `str`; a value is bytes-like, `str` (stored as UTF-8) or `None` (null).
pub fn extract(obj: Option<&Bound<'_, PyAny>>) -> PyResult<tidelog::Headers> {
    let mut headers = tidelog::Headers::new();
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(headers);
    };
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(
            "headers must be a list of (key, value) pairs or a dict, not a string",
        ));
    }
    let items = match obj.cast::<PyDict>() {
        Ok(dict) => dict.items().into_any(),
        Err(_) => obj.clone(),
    };
    let iter = items.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "headers must be a list of (key, value) pairs or a dict, not {}",
            type_name(obj)
        ))
    })?;
    for item in iter {
        let item = item?;
        let (key, value) = pair(&item)?;
        let key = key.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!("a header key must be str, not {}", type_name(&key)))
        })?;
        let key = key.to_str()?;
        if value.is_none() {
            headers.push(key, None).map_err(to_py)?;
        } else if let Ok(text) = value.cast::<PyString>() {
            headers
                .push(key, Some(text.to_str()?.as_bytes()))
                .map_err(to_py)?;
        } else {
            let bytes = InputBytes::extract(&value, "a header value")?;
            headers.push(key, Some(bytes.as_slice())).map_err(to_py)?;
        }
    }
    Ok(headers)
}

/// The headers as a list of `(str, bytes | None)` tuples (empty when there are none).
pub fn to_list<'py>(
    py: Python<'py>,
    headers: tidelog::HeaderIter<'_>,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for (key, value) in headers {
        let value = value.map(|v| PyBytes::new(py, v));
        list.append((key, value))?;
    }
    Ok(list)
}

/// The two items of a `(key, value)` tuple or list.
fn pair<'py>(item: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let wrong = |what: String| {
        PyTypeError::new_err(format!(
            "each header must be a (key, value) pair, not {what}"
        ))
    };
    if let Ok(t) = item.cast::<PyTuple>() {
        if t.len() != 2 {
            return Err(wrong(format!("a tuple of {}", t.len())));
        }
        return Ok((t.get_item(0)?, t.get_item(1)?));
    }
    if let Ok(l) = item.cast::<PyList>() {
        if l.len() != 2 {
            return Err(wrong(format!("a list of {}", l.len())));
        }
        return Ok((l.get_item(0)?, l.get_item(1)?));
    }
    Err(wrong(type_name(item)))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}
