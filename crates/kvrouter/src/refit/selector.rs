//! Label selectors of the RL routes (`?selector=engine=sglang,pool in (a,b)`), Kubernetes
//! style: terms joined by commas, all must hold. Terms: `k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, `k` (present), `!k` (absent). An empty selector matches all.

use std::collections::BTreeMap;

use crate::workers::Worker;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

/// A parsed selector.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    terms: Vec<Term>,
}

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced ')'".into());
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn key(k: &str) -> Result<String, String> {
    let k = k.trim();
    if k.is_empty() || k.contains(|c: char| c.is_whitespace() || "=!(),".contains(c)) {
        return Err(format!("bad label key {k:?}"));
    }
    Ok(k.to_string())
}

fn set(rest: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a (a,b) value set, got {rest:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn term(t: &str) -> Result<Term, String> {
    let t = t.trim();
    if let Some((k, v)) = t.split_once("!=") {
        return Ok(Term::NotIn(key(k)?, vec![v.trim().to_string()]));
    }
    if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
        return Ok(Term::In(key(k)?, vec![v.trim().to_string()]));
    }
    if let Some(i) = t.find(" notin ") {
        return Ok(Term::NotIn(key(&t[..i])?, set(&t[i + 7..])?));
    }
    if let Some(i) = t.find(" in ") {
        return Ok(Term::In(key(&t[..i])?, set(&t[i + 4..])?));
    }
    if let Some(k) = t.strip_prefix('!') {
        return Ok(Term::Absent(key(k)?));
    }
    Ok(Term::Exists(key(t)?))
}

impl LabelSelector {
    /// Parses `s`; the error names the offending term.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        if s.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        let terms = split_terms(s)?
            .into_iter()
            .map(|t| term(t).map_err(|e| format!("selector term {:?}: {e}", t.trim())))
            .collect::<Result<_, _>>()?;
        Ok(LabelSelector { terms })
    }

    /// True when every term holds for `labels`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|t| match t {
            Term::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Term::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Term::Exists(k) => labels.contains_key(k),
            Term::Absent(k) => !labels.contains_key(k),
        })
    }
}

/// A worker's labels as selectors see them: its registered labels plus `engine=sglang`,
/// `worker_type`, `model_id`, `id` and `url` (registered labels win).
pub(crate) fn labels_of(w: &Worker) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert("engine".into(), "sglang".into());
    l.insert("worker_type".into(), w.spec.worker_type().to_string());
    if let Some(m) = w.model_id() {
        l.insert("model_id".into(), m.to_string());
    }
    l.insert("id".into(), w.public_id.clone());
    l.insert("url".into(), w.url.clone());
    l.extend(w.spec.labels.clone());
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn terms() {
        let l = labels(&[("engine", "sglang"), ("pool", "a")]);
        for (s, want) in [
            ("", true),
            ("engine=sglang", true),
            ("engine==sglang,pool=a", true),
            ("pool=b", false),
            ("pool in (a, b)", true),
            ("pool notin (a,b)", false),
            ("pool!=b", true),
            ("zone!=x", true),
            ("pool", true),
            ("!pool", false),
            ("!zone,engine in (sglang)", true),
        ] {
            let sel = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(sel.matches(&l), want, "{s}");
        }
    }

    #[test]
    fn bad_selectors_are_refused() {
        for s in ["pool in (a", "=x", "pool in a,b", "a b"] {
            assert!(LabelSelector::parse(s).is_err(), "{s}");
        }
    }
}
