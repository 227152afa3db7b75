//! JSON values between Python and Rust: `None`, `bool`, `int`, `float`, `str`, lists (and
//! tuples) and dicts with string keys, both ways.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// A Python value as JSON; anything else is a `TypeError` naming where it was.
pub fn to_json(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    convert(obj, false)
}

/// A value a callable returned, as JSON: what is not JSON becomes its `str()` (the policies
/// and the audit log see that; the caller still gets the object itself back).
pub fn to_json_lenient(obj: &Bound<'_, PyAny>) -> Value {
    convert(obj, true).unwrap_or_else(|_| Value::String(describe(obj)))
}

fn describe(obj: &Bound<'_, PyAny>) -> String {
    obj.str()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "<unprintable>".into())
}

fn convert(obj: &Bound<'_, PyAny>, lenient: bool) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(PyTypeError::new_err(format!(
            "the integer {} does not fit in 64 bits",
            describe(obj)
        )));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| PyTypeError::new_err("NaN and infinity are not JSON"));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut m = Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            let key = match k.cast::<PyString>() {
                Ok(s) => s.to_str()?.to_owned(),
                Err(_) if lenient => describe(&k),
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "dict keys must be strings, not {}",
                        k.get_type().name()?
                    )));
                }
            };
            m.insert(key, convert(&v, lenient)?);
        }
        return Ok(Value::Object(m));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l
            .iter()
            .map(|v| convert(&v, lenient))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t
            .iter()
            .map(|v| convert(&v, lenient))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if lenient {
        return Ok(Value::String(describe(obj)));
    }
    Err(PyTypeError::new_err(format!(
        "{} is not JSON (None, bool, int, float, str, list, tuple or dict)",
        obj.get_type().name()?
    )))
}

/// JSON as Python values (objects become dicts, arrays lists).
pub fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for v in items {
                list.append(to_py(py, v)?)?;
            }
            list.into_any()
        }
        Value::Object(m) => dict(py, m)?.into_any(),
    })
}

pub fn dict<'py>(py: Python<'py>, m: &Map<String, Value>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in m {
        d.set_item(k, to_py(py, v)?)?;
    }
    Ok(d)
}

/// An optional mapping argument as a JSON object (`None` → empty).
pub fn object(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Map<String, Value>> {
    match obj.map(to_json).transpose()? {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(PyTypeError::new_err(format!("{what} must be a dict"))),
    }
}
