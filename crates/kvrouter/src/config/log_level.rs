//! `--log-level` words as Python users type them (`warning`, `critical`, ...) turned into a
//! `tracing` filter directive, so sgl-router / SMG launch lines keep their logging.

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

/// A `tracing_subscriber::EnvFilter` directive for `--log-level`: each comma-separated part is
/// either a level word (`warning`) or `target=level` (`kvrouter::events=debug`); level words in
/// either place are translated, anything else is kept as written.
pub fn filter_directive(log_level: &str) -> String {
    log_level
        .split(',')
        .map(|part| match part.split_once('=') {
            Some((target, level)) => match level_word(level) {
                Some(l) => format!("{}={l}", target.trim()),
                None => part.trim().to_string(),
            },
            None => level_word(part)
                .map(str::to_string)
                .unwrap_or_else(|| part.trim().to_string()),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::filter_directive;

    #[test]
    fn python_level_words_become_tracing_levels() {
        assert_eq!(filter_directive("warning"), "warn");
        assert_eq!(filter_directive("WARNING"), "warn");
        assert_eq!(filter_directive("critical"), "error");
        assert_eq!(filter_directive("error"), "error");
        assert_eq!(filter_directive("info"), "info");
        assert_eq!(filter_directive("debug"), "debug");
    }

    #[test]
    fn directives_keep_their_targets() {
        assert_eq!(
            filter_directive("info,kvrouter::events=warning"),
            "info,kvrouter::events=warn"
        );
        assert_eq!(filter_directive("hyper=off"), "hyper=off");
        assert_eq!(filter_directive("kvrouter[span]=x"), "kvrouter[span]=x");
    }

    #[test]
    fn every_translated_directive_parses() {
        for w in [
            "warning", "critical", "error", "info", "debug", "trace", "notset",
        ] {
            let d = filter_directive(w);
            assert!(
                tracing_subscriber::EnvFilter::try_new(&d).is_ok(),
                "{w} -> {d}"
            );
        }
    }
}
