//! Chat templates rendered as HF transformers renders them for SGLang
//! (`transformers.utils.chat_template_utils._compile_jinja_template` and `render_jinja_template`):
//! a sandboxed Jinja environment with `trim_blocks` and `lstrip_blocks`, the globals
//! `raise_exception` and `strftime_now`, `tojson` as Python's `json.dumps` (see `pyjson`),
//! Python string/dict methods (`.strip()`, `.startswith()`, `.items()`, ... via
//! minijinja-contrib's pycompat), and the variables `messages`, `tools`, `documents`,
//! `add_generation_prompt`, the tokenizer's special tokens (`bos_token`, `eos_token`, ...) and
//! the request's template kwargs (which override the special tokens, as in HF).

use minijinja::value::Value;
use minijinja::{Environment, Error, ErrorKind};

use super::TextError;

const NAME: &str = "chat_template";

/// One compiled chat template plus the special-token variables it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    special_tokens: Vec<(String, Value)>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .finish()
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current UTC time with the common `strftime` codes
/// (`%Y %m %d %B %b %A %a %H %M %S %p %I %j %y %%`).
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    strftime(&format, secs)
}

pub(crate) fn strftime(format: &str, unix_secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cumulative = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cumulative[(m - 1) as usize] + d + i64::from(leap && m > 2);
    let month = MONTHS[(m - 1) as usize];
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y % 100)),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(&month[..3]),
            Some('A') => out.push_str(weekday),
            Some('a') => out.push_str(&weekday[..3]),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('I') => out.push_str(&format!("{:02}", if h % 12 == 0 { 12 } else { h % 12 })),
            Some('p') => out.push_str(if h < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

impl ChatTemplate {
    /// Compiles `source`; `special_tokens` are the `bos_token`-like variables.
    pub fn new(source: String, special_tokens: Vec<(String, String)>) -> Result<Self, TextError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", super::pyjson::tojson_filter);
        env.add_template_owned(NAME, source.clone())
            .map_err(|e| TextError::Template(format!("chat template does not compile: {e:#}")))?;
        Ok(ChatTemplate {
            env,
            source,
            special_tokens: special_tokens
                .into_iter()
                .map(|(k, v)| (k, Value::from(v)))
                .collect(),
        })
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` with `add_generation_prompt=True` (as SGLang always asks), `tools`
    /// (`None` renders as `none`) and extra template kwargs.
    pub fn render(
        &self,
        messages: Value,
        tools: Option<Value>,
        kwargs: Vec<(String, Value)>,
    ) -> Result<String, TextError> {
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| TextError::Template(e.to_string()))?;
        let mut vars: Vec<(String, Value)> = vec![
            ("messages".into(), messages),
            ("tools".into(), tools.unwrap_or(Value::from(()))),
            ("documents".into(), Value::from(())),
            ("add_generation_prompt".into(), Value::from(true)),
        ];
        vars.extend(self.special_tokens.iter().cloned());
        vars.extend(kwargs);
        // Later keys win, as `{**special_tokens_map, **kwargs}` in HF.
        let ctx: Value = vars
            .into_iter()
            .collect::<indexmap_like::Ordered>()
            .into_value();
        tmpl.render(ctx)
            .map_err(|e| TextError::Template(format!("chat template failed: {e:#}")))
    }
}

/// A tiny ordered map with "last write wins" for building the render context.
mod indexmap_like {
    use minijinja::value::Value;

    #[derive(Default)]
    pub(super) struct Ordered(Vec<(String, Value)>);

    impl FromIterator<(String, Value)> for Ordered {
        fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
            let mut out = Ordered::default();
            for (k, v) in iter {
                match out.0.iter_mut().find(|(key, _)| *key == k) {
                    Some(slot) => slot.1 = v,
                    None => out.0.push((k, v)),
                }
            }
            out
        }
    }

    impl Ordered {
        pub(super) fn into_value(self) -> Value {
            Value::from_iter(self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(json: &str) -> Value {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn trims_blocks_and_uses_python_methods_like_hf() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content.strip() }}]\n  {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}>{% endif %}".into(),
            vec![("bos_token".into(), "<s>".into())],
        )
        .unwrap();
        let out = t
            .render(msgs(r#"[{"role":"user","content":"  hi "}]"#), None, vec![])
            .unwrap();
        assert_eq!(out, "<s>[hi]\n>");
    }

    #[test]
    fn tojson_is_pythons_and_raise_exception_fails() {
        let t = ChatTemplate::new(
            "{{ tools | tojson }}{% if messages[0].role != 'user' %}{{ raise_exception('no') }}{% endif %}".into(),
            vec![],
        )
        .unwrap();
        let tools = msgs(r#"[{"a":"<b>","c":[1,2]}]"#);
        assert_eq!(
            t.render(msgs(r#"[{"role":"user"}]"#), Some(tools), vec![])
                .unwrap(),
            r#"[{"a": "<b>", "c": [1, 2]}]"#
        );
        assert!(t
            .render(msgs(r#"[{"role":"system"}]"#), None, vec![])
            .is_err());
    }

    #[test]
    fn kwargs_override_special_tokens() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{{ x }}".into(),
            vec![("bos_token".into(), "<s>".into())],
        )
        .unwrap();
        let out = t
            .render(
                msgs("[]"),
                None,
                vec![
                    ("bos_token".into(), Value::from("B")),
                    ("x".into(), Value::from(1)),
                ],
            )
            .unwrap();
        assert_eq!(out, "B1");
    }

    #[test]
    fn strftime_formats_a_known_date() {
        // 2024-07-26 13:05:09 UTC was a Friday.
        assert_eq!(
            strftime("%d %b %Y %H:%M:%S %A %j", 1_722_000_309),
            "26 Jul 2024 13:25:09 Friday 208"
        );
    }
}
