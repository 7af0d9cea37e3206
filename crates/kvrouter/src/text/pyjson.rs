//! Python's `json.dumps` for chat templates: HF transformers replaces Jinja's `tojson` with
//! `json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)`,
//! whose default separators are `", "` and `": "` (`","` and `": "` with an indent) and which
//! escapes no HTML characters (minijinja's built-in `tojson` does, so it is replaced).

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// Formatting options of one `tojson` call.
#[derive(Debug, Clone, Default)]
pub(crate) struct DumpOptions {
    pub indent: Option<usize>,
    pub item_separator: Option<String>,
    pub key_separator: Option<String>,
    pub sort_keys: bool,
}

/// The `tojson` filter: `x | tojson`, `x | tojson(indent=2)`, `separators=(",", ":")`,
/// `sort_keys=true`.
pub(crate) fn tojson_filter(
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let mut opts = DumpOptions {
        indent: match indent {
            Some(v) if v.is_none() => None,
            Some(v) => Some(usize::try_from(v)?),
            None => None,
        },
        ..DumpOptions::default()
    };
    if let Some(seps) = kwargs.get::<Option<Vec<String>>>("separators")? {
        if seps.len() != 2 {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "separators must be a pair",
            ));
        }
        opts.item_separator = Some(seps[0].clone());
        opts.key_separator = Some(seps[1].clone());
    }
    opts.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let _ = kwargs.get::<Option<bool>>("ensure_ascii")?;
    kwargs.assert_all_used()?;
    Ok(Value::from_safe_string(dumps(value, &opts)?))
}

/// `json.dumps(value, ensure_ascii=False, ...)`.
pub(crate) fn dumps(value: &Value, opts: &DumpOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_value(&mut out, value, opts, 0)?;
    Ok(out)
}

fn newline(out: &mut String, opts: &DumpOptions, depth: usize) {
    if let Some(n) = opts.indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', n * depth));
    }
}

fn write_value(out: &mut String, v: &Value, opts: &DumpOptions, depth: usize) -> Result<(), Error> {
    let item_sep = opts
        .item_separator
        .as_deref()
        .unwrap_or(if opts.indent.is_some() { "," } else { ", " });
    let key_sep = opts.key_separator.as_deref().unwrap_or(": ");
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, v),
        ValueKind::String => write_string(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, opts, depth + 1);
                write_value(out, item, opts, depth + 1)?;
            }
            newline(out, opts, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if opts.sort_keys {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, opts, depth + 1);
                match key.as_str() {
                    Some(s) => write_string(out, s),
                    None => write_string(out, &key.to_string()),
                }
                out.push_str(key_sep);
                write_value(out, &v.get_item(key)?, opts, depth + 1)?;
            }
            newline(out, opts, depth);
            out.push('}');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot serialize a {} to JSON", v.kind()),
            ))
        }
    }
    Ok(())
}

fn write_number(out: &mut String, v: &Value) {
    if let Ok(i) = i64::try_from(v.clone()) {
        if !v.to_string().contains(['.', 'e', 'E']) {
            let _ = write!(out, "{i}");
            return;
        }
    }
    match f64::try_from(v.clone()) {
        Ok(f) if f.is_nan() => out.push_str("NaN"),
        Ok(f) if f.is_infinite() => out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" }),
        Ok(f) => out.push_str(&python_float(f)),
        Err(_) => out.push_str(&v.to_string()),
    }
}

/// Python's `repr(float)`: shortest round-trip digits, `.0` on integral values, exponent
/// form below 1e-4 and from 1e16.
fn python_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        let s = format!("{f:e}"); // 1.5e-5, 1e20
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let s = format!("{f}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn matches_python_json_dumps() {
        let o = DumpOptions::default();
        // json.dumps({"b": [1, 2.5, None, True], "a": "<é\n>"}, ensure_ascii=False)
        assert_eq!(
            dumps(&v(r#"{"b":[1,2.5,null,true],"a":"<é\n>"}"#), &o).unwrap(),
            r#"{"b": [1, 2.5, null, true], "a": "<é\n>"}"#
        );
        assert_eq!(dumps(&v("[]"), &o).unwrap(), "[]");
        assert_eq!(dumps(&v("1.0"), &o).unwrap(), "1.0");
        assert_eq!(dumps(&v("1e20"), &o).unwrap(), "1e+20");
        assert_eq!(dumps(&v("0.00001"), &o).unwrap(), "1e-05");
        let indented = DumpOptions {
            indent: Some(2),
            ..DumpOptions::default()
        };
        assert_eq!(
            dumps(&v(r#"{"a":[1],"b":{}}"#), &indented).unwrap(),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}"
        );
        let sorted = DumpOptions {
            sort_keys: true,
            item_separator: Some(",".into()),
            key_separator: Some(":".into()),
            ..DumpOptions::default()
        };
        assert_eq!(
            dumps(&v(r#"{"b":1,"a":2}"#), &sorted).unwrap(),
            r#"{"a":2,"b":1}"#
        );
    }
}
