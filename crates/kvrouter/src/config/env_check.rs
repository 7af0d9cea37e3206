//! Unknown `KVROUTER_*` environment variables: every option reads one
//! (`KVROUTER_<OPTION>`), so a mistyped name (`KVROUTER_HEALTH_CHECK_INTERVAL`) would be
//! ignored without a word. At start the router warns once per unknown variable, with the
//! closest known name when there is one near enough.

use std::ffi::OsString;

use clap::CommandFactory;

/// `KVROUTER_*` variables read outside the option declaration (tools and tests).
const OTHER_KNOWN: &[&str] = &["KVROUTER_WRITE_EXAMPLE_CONFIG", "KVROUTER_SMG_PYTHON"];

/// Every `KVROUTER_*` name the router reads.
pub fn known_variables() -> Vec<String> {
    let cmd = super::Cli::command();
    let mut names: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .filter_map(|e| e.to_str())
        .map(str::to_string)
        .collect();
    names.extend(OTHER_KNOWN.iter().map(|s| s.to_string()));
    names.sort();
    names.dedup();
    names
}

/// One warning per variable of `vars` that starts with `KVROUTER_` and is not known.
pub fn unknown_variable_warnings(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<String> {
    let known = known_variables();
    let mut unknown: Vec<String> = vars
        .into_iter()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("KVROUTER_") && !known.contains(k))
        .collect();
    unknown.sort();
    unknown
        .into_iter()
        .map(|name| match closest(&name, &known) {
            Some(near) => format!(
                "environment variable {name} is not a kvrouter setting and is ignored; did you mean {near}?"
            ),
            None => format!("environment variable {name} is not a kvrouter setting and is ignored"),
        })
        .collect()
}

/// The known name nearest to `name` (edit distance at most a third of its length, or a
/// known name that starts with it / that it starts with).
fn closest<'a>(name: &str, known: &'a [String]) -> Option<&'a str> {
    let best = known
        .iter()
        .map(|k| (distance(name, k), k))
        .min_by_key(|(d, _)| *d)?;
    let body = name.len().saturating_sub("KVROUTER_".len()).max(1);
    if best.0 <= (body / 3).max(2) {
        return Some(best.1.as_str());
    }
    known
        .iter()
        .filter(|k| k.starts_with(name) || name.starts_with(k.as_str()))
        .min_by_key(|k| k.len().abs_diff(name.len()))
        .map(String::as_str)
}

/// Levenshtein distance over bytes.
fn distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(names: &[&str]) -> Vec<(OsString, OsString)> {
        names
            .iter()
            .map(|n| (OsString::from(n), OsString::from("1")))
            .collect()
    }

    /// Issue 25 finding 6: a mistyped `KVROUTER_*` variable was silently ignored.
    #[test]
    fn mistyped_variables_are_warned_with_the_closest_name() {
        let w = unknown_variable_warnings(vars(&[
            "KVROUTER_HEALTH_CHECK_INTERVAL",
            "KVROUTER_POLCY",
            "KVROUTER_PORT",
            "PATH",
            "KVROUTER_ZZZZZZZZZZZZZZZZZZZZ",
        ]));
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].contains("KVROUTER_HEALTH_CHECK_INTERVAL ")
                && w[0].ends_with("did you mean KVROUTER_HEALTH_CHECK_INTERVAL_SECS?"),
            "{w:?}"
        );
        assert!(w[1].ends_with("did you mean KVROUTER_POLICY?"), "{w:?}");
        assert!(!w[2].contains("did you mean"), "{w:?}");
    }

    #[test]
    fn every_option_variable_is_known() {
        let known = known_variables();
        for name in [
            "KVROUTER_PORT",
            "KVROUTER_WORKER_URLS",
            "KVROUTER_NATS_URL",
            "KVROUTER_NATS_CREDS",
            "KVROUTER_FORWARD_REQUEST_HEADER",
            "KVROUTER_CONFIG",
        ] {
            assert!(known.iter().any(|k| k == name), "{name}");
        }
        assert!(
            unknown_variable_warnings(vars(&["KVROUTER_PORT", "KVROUTER_NATS_URL"])).is_empty()
        );
    }
}
