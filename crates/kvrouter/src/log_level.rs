//! `--log-level` words as Python users type them (`warning`, `critical`, ...) turned into a
//! `tracing` filter directive, so sgl-router / SMG launch lines keep their logging; anything
//! that is not a level (`--log-level foo`) is refused with the list of accepted words, rather
//! than read as a target name that silently switches every line off.

/// The logging settings of the router (`Config::log`).
#[derive(Debug, Clone, PartialEq)]
pub struct LogSettings {
    /// `--log-level` as given (validated: [`validated`] accepts each part).
    pub level: String,
    /// One JSON object per line instead of text.
    pub json: bool,
}

/// The level words `--log-level` accepts (sgl-router / SMG / Python `logging` spellings).
pub const ACCEPTED: &[&str] = &[
    "trace", "debug", "notset", "info", "warn", "warning", "error", "critical", "fatal", "off",
];

/// Maps one level word to a `tracing` level, accepting Python's `logging` names.
fn level_word(word: &str) -> Option<&'static str> {
    match word.trim().to_ascii_lowercase().as_str() {
        "trace" => Some("trace"),
        "debug" | "notset" => Some("debug"),
        "info" => Some("info"),
        "warn" | "warning" => Some("warn"),
        "error" | "critical" | "fatal" => Some("error"),
        "off" => Some("off"),
        _ => None,
    }
}

fn unknown(word: &str) -> String {
    format!(
        "unknown log level {word:?} (accepted: {}; or target=level, e.g. info,kvrouter::events=debug)",
        ACCEPTED.join(", ")
    )
}

/// The `tracing_subscriber::EnvFilter` directive for `--log-level` (see [`validated`]); a part
/// that is not a level is kept as written (callers that validated first never see one).
pub fn filter_directive(log_level: &str) -> String {
    log_level
        .split(',')
        .map(|part| validated(part).unwrap_or_else(|_| part.trim().to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

/// A `tracing_subscriber::EnvFilter` directive for `--log-level`: each comma-separated part is
/// either a level word (`warning`) or `target=level` (`kvrouter::events=debug`, the target
/// kept as written); any other part is an error naming it and the accepted words.
pub fn validated(log_level: &str) -> Result<String, String> {
    let parts = log_level
        .split(',')
        .map(|part| match part.split_once('=') {
            Some((target, level)) if !target.trim().is_empty() => level_word(level)
                .map(|l| format!("{}={l}", target.trim()))
                .ok_or_else(|| unknown(level.trim())),
            _ => level_word(part)
                .map(str::to_string)
                .ok_or_else(|| unknown(part.trim())),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::{filter_directive, validated, ACCEPTED};

    #[test]
    fn python_level_words_become_tracing_levels() {
        let d = |s: &str| validated(s).unwrap();
        assert_eq!(d("warning"), "warn");
        assert_eq!(d("WARNING"), "warn");
        assert_eq!(d("critical"), "error");
        assert_eq!(d("error"), "error");
        assert_eq!(d("info"), "info");
        assert_eq!(d("debug"), "debug");
    }

    #[test]
    fn directives_keep_their_targets() {
        assert_eq!(
            validated("info,kvrouter::events=warning").unwrap(),
            "info,kvrouter::events=warn"
        );
        assert_eq!(validated("hyper=off").unwrap(), "hyper=off");
        assert_eq!(filter_directive("warning,x[y]=z"), "warn,x[y]=z");
    }

    #[test]
    fn unknown_words_are_refused_with_the_accepted_list() {
        for bad in ["foo", "info,foo", "kvrouter=loud", "=info", ""] {
            let e = validated(bad).unwrap_err();
            assert!(e.contains("unknown log level"), "{bad}: {e}");
            assert!(e.contains("warning") && e.contains("critical"), "{e}");
        }
    }

    #[test]
    fn every_accepted_word_parses_as_a_filter() {
        for w in ACCEPTED {
            let d = validated(w).unwrap();
            assert!(
                tracing_subscriber::EnvFilter::try_new(&d).is_ok(),
                "{w} -> {d}"
            );
        }
    }
}
