//! Merges the Prometheus text of several workers into one exposition, adding a
//! `worker_addr="<url>"` label to every sample and keeping each family's samples together.
//! Metric names are served as sgl-router 0.3.2 serves them: every `:` becomes `_`
//! (`sglang:num_running_reqs` -> `sglang_num_running_reqs`; its aggregator rewrites the colons
//! before parsing). Label values and help text are kept as the worker wrote them (0.3.2
//! rewrites their colons too, which garbles URLs and model names).

use std::collections::HashMap;

#[derive(Default)]
struct Family {
    meta: Vec<String>,
    samples: Vec<String>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn metric_name(line: &str) -> &str {
    let end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    &line[..end]
}

/// A metric name as sgl-router 0.3.2 serves it (`:` -> `_`).
fn served_name(name: &str) -> String {
    name.replace(':', "_")
}

fn with_label(line: &str, label: &str) -> String {
    let raw = metric_name(line);
    let rest = &line[raw.len()..];
    let name = served_name(raw);
    if let Some(inner) = rest.strip_prefix('{') {
        if inner.trim_start().starts_with('}') {
            format!("{name}{{{label}{}", inner.trim_start())
        } else {
            format!("{name}{{{label},{inner}")
        }
    } else {
        format!("{name}{{{label}}}{rest}")
    }
}

/// Merges `(worker_url, metrics_text)` pairs.
pub(crate) fn merge(sources: &[(String, String)]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut families: HashMap<String, Family> = HashMap::new();
    for (url, text) in sources {
        let label = format!("worker_addr=\"{}\"", escape(url));
        let mut current: Option<String> = None;
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.is_empty() {
                continue;
            }
            if let Some(meta) = trimmed.strip_prefix('#') {
                let mut parts = meta.split_whitespace();
                let kind = parts.next().unwrap_or("");
                let Some(raw) = parts.next() else { continue };
                if kind != "HELP" && kind != "TYPE" {
                    continue;
                }
                let name = served_name(raw);
                let name = name.as_str();
                let fam = families.entry(name.to_string()).or_insert_with(|| {
                    order.push(name.to_string());
                    Family::default()
                });
                if !fam
                    .meta
                    .iter()
                    .any(|m| m.starts_with(&format!("# {kind} ")))
                {
                    let text: Vec<&str> = parts.collect();
                    fam.meta.push(
                        format!("# {kind} {name} {}", text.join(" "))
                            .trim_end()
                            .to_string(),
                    );
                }
                current = Some(name.to_string());
                continue;
            }
            let name = served_name(metric_name(trimmed));
            let name = name.as_str();
            let family = match &current {
                Some(c) if name.starts_with(c.as_str()) => c.clone(),
                _ => {
                    current = None;
                    name.to_string()
                }
            };
            families
                .entry(family.clone())
                .or_insert_with(|| {
                    order.push(family.clone());
                    Family::default()
                })
                .samples
                .push(with_label(trimmed, &label));
        }
    }
    let mut out = String::new();
    for name in order {
        if let Some(f) = families.get(&name) {
            for m in &f.meta {
                out.push_str(m);
                out.push('\n');
            }
            for s in &f.samples {
                out.push_str(s);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_label_and_groups_families() {
        let a = "# HELP sglang:num_running_reqs r\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 3\nplain 1\n";
        let b = "# HELP sglang:num_running_reqs r\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 5\nempty{} 2\n";
        let out = merge(&[("http://a".into(), a.into()), ("http://b".into(), b.into())]);
        let expected = "# HELP sglang_num_running_reqs r\n# TYPE sglang_num_running_reqs gauge\n\
sglang_num_running_reqs{worker_addr=\"http://a\",model_name=\"m\"} 3\n\
sglang_num_running_reqs{worker_addr=\"http://b\",model_name=\"m\"} 5\n\
plain{worker_addr=\"http://a\"} 1\nempty{worker_addr=\"http://b\"} 2\n";
        assert_eq!(out, expected);
    }

    #[test]
    fn label_values_keep_their_colons() {
        let a = "sglang:token_usage{model_name=\"org/m:v1\"} 0.5\n";
        let out = merge(&[("http://a:1".into(), a.into())]);
        assert_eq!(
            out,
            "sglang_token_usage{worker_addr=\"http://a:1\",model_name=\"org/m:v1\"} 0.5\n"
        );
    }
}
