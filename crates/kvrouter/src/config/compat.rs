//! sgl-router 0.3 / SMG launch flags that `router` accepts and ignores, in one table.
//!
//! miles, slime and NeMo-RL launch sgl-router (SMG) with flags that kvrouter has no use for
//! (the radix-tree knobs of `cache_aware`, the token-bucket rate limiter, the
//! OpenAI/gRPC-mode tokenizer settings...). So that such a command line starts `router`
//! unchanged, every flag in [`IGNORED`] is parsed (its value or values consumed, as the real
//! flag takes them) and dropped, and the router logs ONE warning line per flag at start naming
//! the kvrouter equivalent. Flags with a kvrouter meaning (`--policy`, `--disable-retries`,
//! `--retry-*`, `--cb-*`, `--disable-circuit-breaker`, `--max-concurrent-requests`,
//! `--queue-size`, `--queue-timeout-secs`, `--health-check-endpoint`,
//! `--worker-startup-timeout-secs`, `--dp-aware`, `--prometheus-host/-port`, `--max-idle-secs`)
//! are real options in `options.rs` instead.
//! PD disaggregation flags (`--pd-disaggregation`, `--prefill`, `--decode`) are deliberately
//! absent: ignoring them would route a PD deployment wrongly, so they stay errors.

use clap::{Arg, ArgAction, ArgMatches, Command};

/// How many values an ignored flag takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A switch (`--disable-circuit-breaker`).
    Nothing,
    /// Exactly one value (`--cache-threshold 0.3`).
    One,
    /// One or more values (`--cors-allowed-origins a b`).
    Many,
}

/// One accepted-and-ignored sgl-router flag.
#[derive(Debug, Clone, Copy)]
pub struct Ignored {
    /// The long flag, without `--`.
    pub flag: &'static str,
    pub takes: Takes,
    /// What kvrouter does instead (named in the warning).
    pub equivalent: &'static str,
}

const KV_COST: &str = "KV cost weights --kv-prefill-weight/--kv-decode-weight/--kv-queue-weight (and --temperature) in --mode kv";
const LOAD: &str = "--mode kv/least-load balance by load; no separate threshold";
const NO_TOKENIZER: &str = "none: kvrouter forwards the request unchanged (it tokenizes text only for routing, with --model-path / --tokenizer-path)";
const ADMISSION: &str =
    "--max-concurrent-requests/--queue-size/--queue-timeout-secs (a concurrency limit with a bounded queue; no token-bucket rate)";

/// Every accepted-and-ignored sgl-router / SMG flag.
pub const IGNORED: &[Ignored] = &[
    Ignored { flag: "cache-threshold", takes: Takes::One, equivalent: KV_COST },
    Ignored { flag: "balance-abs-threshold", takes: Takes::One, equivalent: LOAD },
    Ignored { flag: "balance-rel-threshold", takes: Takes::One, equivalent: LOAD },
    Ignored { flag: "eviction-interval", takes: Takes::One, equivalent: "none: the KV index follows worker KV events (no approximate tree to evict)" },
    Ignored { flag: "eviction-interval-secs", takes: Takes::One, equivalent: "none: the KV index follows worker KV events (no approximate tree to evict)" },
    Ignored { flag: "max-tree-size", takes: Takes::One, equivalent: KV_COST },
    Ignored { flag: "assignment-mode", takes: Takes::One, equivalent: "new X-SMG-Routing-Key keys are placed by --mode (least-load for manual/consistent_hashing)" },
    Ignored { flag: "prefix-token-count", takes: Takes::One, equivalent: KV_COST },
    Ignored { flag: "prefix-hash-load-factor", takes: Takes::One, equivalent: KV_COST },
    Ignored { flag: "bucket-adjust-interval-secs", takes: Takes::One, equivalent: LOAD },
    Ignored { flag: "disable-health-check", takes: Takes::Nothing, equivalent: "none: health checks always run (tune --health-check-interval-secs)" },
    Ignored { flag: "worker-startup-check-interval", takes: Takes::One, equivalent: "--health-check-interval-secs" },
    Ignored { flag: "rate-limit-tokens-per-second", takes: Takes::One, equivalent: ADMISSION },
    Ignored { flag: "request-id-headers", takes: Takes::Many, equivalent: "none: request headers are forwarded to the worker unchanged" },
    Ignored { flag: "cors-allowed-origins", takes: Takes::Many, equivalent: "none: no CORS handling" },
    Ignored { flag: "log-dir", takes: Takes::One, equivalent: "logs go to stderr (--log-level, --json-log)" },
    Ignored { flag: "prometheus-duration-buckets", takes: Takes::Many, equivalent: "fixed buckets on /metrics" },
    Ignored { flag: "enable-igw", takes: Takes::Nothing, equivalent: "none: one model per router" },
    Ignored { flag: "mini-lb", takes: Takes::Nothing, equivalent: "none" },
    Ignored { flag: "chat-template", takes: Takes::One, equivalent: NO_TOKENIZER },
    Ignored { flag: "reasoning-parser", takes: Takes::One, equivalent: NO_TOKENIZER },
    Ignored { flag: "tool-call-parser", takes: Takes::One, equivalent: NO_TOKENIZER },
    Ignored { flag: "backend", takes: Takes::One, equivalent: "SGLang HTTP workers only" },
    Ignored { flag: "history-backend", takes: Takes::One, equivalent: "none: no conversation storage" },
    Ignored { flag: "enable-trace", takes: Takes::Nothing, equivalent: "none: no OpenTelemetry export (logs and /metrics)" },
    Ignored { flag: "otlp-traces-endpoint", takes: Takes::One, equivalent: "none: no OpenTelemetry export (logs and /metrics)" },
];

/// The clap arguments for [`IGNORED`] (hidden from `--help`; the id is the kebab-case flag,
/// which no snake_case option id can clash with).
pub fn args() -> impl Iterator<Item = Arg> {
    IGNORED.iter().map(|i| {
        let arg = Arg::new(i.flag).long(i.flag).hide(true);
        match i.takes {
            Takes::Nothing => arg.action(ArgAction::Count),
            Takes::One => arg
                .num_args(1)
                .allow_negative_numbers(true)
                .action(ArgAction::Append),
            Takes::Many => arg
                .num_args(1..)
                .allow_negative_numbers(true)
                .action(ArgAction::Append),
        }
    })
}

/// `cmd` with the ignored flags added.
pub fn with_ignored(cmd: Command) -> Command {
    cmd.args(args())
}

/// The ignored flags given in `m`, in table order.
pub fn given(m: &ArgMatches) -> Vec<&'static Ignored> {
    IGNORED
        .iter()
        .filter(|i| {
            matches!(
                m.value_source(i.flag),
                Some(clap::parser::ValueSource::CommandLine)
            )
        })
        .collect()
}

/// The startup warning line for `i`.
pub fn warning(i: &Ignored) -> String {
    format!(
        "--{} is an sgl-router flag that kvrouter accepts and ignores; kvrouter equivalent: {}",
        i.flag, i.equivalent
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn flags_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for i in IGNORED {
            assert!(seen.insert(i.flag), "{} twice", i.flag);
        }
    }

    #[test]
    fn values_are_consumed() {
        let cmd = with_ignored(Command::new("t").no_binary_name(true));
        let m = cmd
            .try_get_matches_from([
                "--cache-threshold",
                "0.3",
                "--disable-health-check",
                "--rate-limit-tokens-per-second",
                "60",
                "--cors-allowed-origins",
                "a",
                "b",
            ])
            .unwrap();
        let flags: Vec<_> = given(&m).iter().map(|i| i.flag).collect();
        assert_eq!(
            flags,
            [
                "cache-threshold",
                "disable-health-check",
                "rate-limit-tokens-per-second",
                "cors-allowed-origins"
            ]
        );
        assert!(warning(IGNORED.first().unwrap()).contains("--cache-threshold"));
    }
}
