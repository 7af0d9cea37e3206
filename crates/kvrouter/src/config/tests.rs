//! Unit tests of merging and validation.

use super::*;

fn cli(args: &[&str]) -> Cli {
    use clap::Parser;
    let mut all = vec!["router"];
    all.extend_from_slice(args);
    Cli::try_parse_from(all).expect("flags parse")
}

#[test]
fn defaults_are_valid() {
    let c = Config::from_sources(Cli::default(), FileConfig::default()).unwrap();
    assert_eq!(c.mode, Mode::Kv);
    assert_eq!(c.page_size, 16);
}

#[test]
fn page_size_one_is_sglangs_default_and_valid() {
    let c = Config::from_sources(cli(&["--page-size", "1"]), FileConfig::default()).unwrap();
    assert_eq!(c.page_size, 1);
    let file = FileConfig::parse("page_size = 1").unwrap();
    assert_eq!(Config::from_sources(cli(&[]), file).unwrap().page_size, 1);
}

#[test]
fn cli_beats_file_and_file_beats_default() {
    let file = FileConfig::parse("page_size = 64\nport = 9\nmode = \"random\"").unwrap();
    let c = Config::from_sources(cli(&["--page-size", "32"]), file).unwrap();
    assert_eq!(c.page_size, 32);
    assert_eq!(c.server.port, 9);
    assert_eq!(c.mode, Mode::Random);
}

#[test]
fn worker_urls_are_normalised_and_split() {
    let c = Config::from_sources(
        cli(&["--worker-urls", "http://a:1/", "http://b:2,http://a:1"]),
        FileConfig::default(),
    )
    .unwrap();
    assert_eq!(c.workers.urls, vec!["http://a:1", "http://b:2"]);
}

#[test]
fn errors_name_the_field() {
    let e = Config::from_sources(cli(&["--page-size", "0"]), FileConfig::default()).unwrap_err();
    assert_eq!(e.field, "page_size");
    let e = Config::from_sources(cli(&["--mode", "fastest"]), FileConfig::default()).unwrap_err();
    assert_eq!(e.field, "mode");
    let e = Config::from_sources(cli(&["--worker-urls", "ftp://x"]), FileConfig::default())
        .unwrap_err();
    assert_eq!(e.field, "worker_urls");
    let e = Config::from_sources(cli(&["--request-timeout-secs=-1"]), FileConfig::default())
        .unwrap_err();
    assert_eq!(e.field, "request_timeout_secs");
    assert!(e.to_string().contains("request_timeout_secs"));
}

#[test]
fn env_beats_file_and_defaults_do_not() {
    // An option left at its default by the command line does not hide the file's value.
    let file = FileConfig::parse("page_size = 64\n[kv]\nkv_queue_weight = 2.0").unwrap();
    let c = Config::from_sources(cli(&[]), file.clone()).unwrap();
    assert_eq!(c.page_size, 64);
    assert_eq!(c.kv.queue_weight, 2.0);
    // An explicit flag equal to the default still beats the file.
    let c = Config::from_sources(
        cli(&["--page-size", "16", "--kv-queue-weight", "0.5"]),
        file,
    )
    .unwrap();
    assert_eq!(c.page_size, 16);
    assert_eq!(c.kv.queue_weight, 0.5);
}

#[test]
fn mistyped_file_value_is_rejected_by_name() {
    let e = FileConfig::parse("page_size = \"big\"").unwrap_err();
    assert!(e.message.contains("page_size"), "{}", e.message);
    let e = FileConfig::parse("[kv]\nkv_decode_weigth = 1.0").unwrap_err();
    assert!(e.message.contains("kv_decode_weigth"), "{}", e.message);
}

#[test]
fn unknown_file_key_is_rejected_by_name() {
    let e = FileConfig::parse("page_sise = 16").unwrap_err();
    assert!(e.message.contains("page_sise"), "{}", e.message);
}

#[test]
fn admin_key_falls_back_to_api_key() {
    let c = Config::from_sources(cli(&["--api-key", "k"]), FileConfig::default()).unwrap();
    assert_eq!(c.effective_admin_key(), Some("k"));
}

#[test]
fn repeated_worker_urls_accumulate() {
    let c = Config::from_sources(
        cli(&["--worker-urls", "http://a:1", "--worker-urls", "http://b:1"]),
        FileConfig::default(),
    )
    .unwrap();
    assert_eq!(c.workers.urls.len(), 2);
}

fn load(args: &[&str], file: &str) -> Result<Config, ConfigError> {
    Config::from_sources(cli(args), FileConfig::parse(file).unwrap())
}

#[test]
fn policy_maps_onto_mode_and_conflicts_with_a_given_mode() {
    assert_eq!(
        load(&["--policy", "round_robin"], "").unwrap().mode,
        Mode::RoundRobin
    );
    let c = load(&["--policy", "manual"], "").unwrap();
    assert_eq!(c.mode, Mode::LeastLoad);
    assert_eq!(c.warnings.len(), 1);
    // Agreeing is fine; disagreeing (flag or file) names both.
    assert_eq!(
        load(&["--mode", "kv", "--policy", "cache_aware"], "")
            .unwrap()
            .mode,
        Mode::Kv
    );
    let e = load(&["--policy", "random"], "mode = \"kv\"").unwrap_err();
    assert_eq!(e.field, "policy");
    assert!(e.message.contains("--mode kv") && e.message.contains("--policy random"));
    assert_eq!(
        load(&["--policy", "bucket"], "").unwrap_err().field,
        "policy"
    );
}

#[test]
fn sgl_router_working_flags() {
    let c = load(
        &[
            "--disable-retries",
            "--health-check-endpoint",
            "/health_generate",
            "--worker-startup-timeout-secs",
            "600",
            "--max-idle-secs",
            "60",
            "--prometheus-port",
            "29000",
        ],
        "",
    )
    .unwrap();
    assert_eq!(c.retry.max_retries, 0);
    assert_eq!(c.health.endpoint, "/health_generate");
    assert_eq!(c.health.startup_timeout, Duration::from_secs(600));
    assert_eq!(c.sticky_ttl, Duration::from_secs(60));
    assert_eq!(c.server.prometheus, Some(("127.0.0.1".into(), 29000)));
    assert!(
        c.server.prometheus_port_given,
        "a busy port given explicitly stops the start"
    );
    assert!(c.warnings.is_empty());
    assert_eq!(
        load(&["--health-check-endpoint", "health"], "")
            .unwrap_err()
            .field,
        "health_check_endpoint"
    );
}

#[test]
fn ignored_flags_become_one_warning_each() {
    let c = load(
        &[
            "--cache-threshold",
            "0.3",
            "--balance-abs-threshold",
            "10",
            "--enable-igw",
            "--port",
            "1",
        ],
        "",
    )
    .unwrap();
    assert_eq!(c.server.port, 1, "values after ignored flags are consumed");
    assert_eq!(c.warnings.len(), 3, "{:?}", c.warnings);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.starts_with("--cache-threshold ")),
        "{:?}",
        c.warnings
    );
}

/// SMG's names for kvrouter options (compat.rs `Kind::Same`) set those options.
#[test]
fn smg_names_set_kvrouter_options() {
    let c = load(
        &[
            "--log-json",
            "--policy",
            "least_load",
            "--model",
            "/models/qwen3",
            "--block-size",
            "32",
            "--sticky-key-idle-secs",
            "60",
            "--enable-rl",
        ],
        "",
    )
    .unwrap();
    assert!(c.log.json);
    assert_eq!(c.mode, Mode::LeastLoad);
    assert_eq!(
        c.text.tokenizer_path.as_deref(),
        Some(std::path::Path::new("/models/qwen3"))
    );
    assert_eq!(c.page_size, 32);
    assert_eq!(c.sticky_ttl, Duration::from_secs(60));
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].starts_with("--enable-rl "),
        "{:?}",
        c.warnings
    );
}

/// A refused peer flag is a parse error naming why, not clap's "unexpected argument"; PD
/// disaggregation (issue 24) parses.
#[test]
fn refused_flags_say_why() {
    use clap::Parser;
    let e = Cli::try_parse_from([
        "router",
        "--epd-disaggregation",
        "--encode",
        "http://e:1",
        "9000",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--epd-disaggregation") && e.contains("EPD"),
        "{e}"
    );
    assert!(!e.contains("unexpected argument"), "{e}");
    let c = load(
        &[
            "--pd-disaggregation",
            "--prefill",
            "http://p:1",
            "9000",
            "--decode",
            "http://d:1",
        ],
        "",
    )
    .unwrap();
    let pd = c.workers.pd.expect("PD mode");
    assert_eq!(pd.prefill[0].bootstrap_port, Some(9000));
    assert_eq!(pd.decode, ["http://d:1"]);
    let e = Cli::try_parse_from(["router", "--prefil"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("neither a kvrouter flag nor an sgl-router"),
        "{e}"
    );
    assert!(!e.contains("similar") && !e.contains("tip:"), "{e}");
}

/// The options shared with sgl-router keep its defaults (docs/migration.md lists the
/// deliberate differences).
#[test]
fn shared_options_default_to_sgl_routers_values() {
    let c = load(&[], "").unwrap();
    assert_eq!(c.health.startup_timeout, Duration::from_secs(1800));
    assert_eq!(
        c.retry.max_retries, 4,
        "--retry-max-retries 5: 5 attempts in all"
    );
    assert_eq!(c.retry.backoff.min(), Duration::from_millis(50));
    assert_eq!(c.retry.backoff.max(), Duration::from_secs(30));
    assert_eq!(c.server.prometheus, Some(("127.0.0.1".into(), 29000)));
    assert!(
        !c.server.prometheus_port_given,
        "the default port may be busy"
    );
    assert_eq!(c.limits.queue_timeout, Duration::from_secs(60));
    assert_eq!(c.retry.breaker, crate::workers::BreakerConfig::default());
    assert_eq!(c.upstream.request_timeout, Duration::from_secs(1800));
    assert_eq!(c.server.shutdown_grace_period, Duration::from_secs(180));
    assert_eq!(c.limits.queue_size, 100);
}

/// The `--cb-*`, `--queue-timeout-secs` and retry backoff flags are real options now.
#[test]
fn breaker_queue_and_backoff_flags_are_read() {
    let c = load(
        &[
            "--cb-failure-threshold",
            "4",
            "--cb-success-threshold",
            "1",
            "--cb-timeout-duration-secs",
            "5",
            "--cb-window-duration-secs",
            "30",
            "--disable-circuit-breaker",
            "--queue-timeout-secs",
            "2.5",
            "--retry-backoff-multiplier",
            "2",
            "--retry-jitter-factor",
            "0",
            "--retry-max-retries",
            "2",
        ],
        "",
    )
    .unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let b = c.retry.breaker;
    assert_eq!(
        (
            b.failure_threshold,
            b.success_threshold,
            b.timeout,
            b.disabled
        ),
        (4, 1, Duration::from_secs(5), true)
    );
    assert_eq!(c.limits.queue_timeout, Duration::from_millis(2500));
    assert_eq!(c.retry.max_retries, 1);
    assert_eq!(c.retry.backoff.delay(2), Duration::from_millis(200));
    assert_eq!(
        load(&["--retry-jitter-factor", "2"], "").unwrap_err().field,
        "retry_jitter_factor"
    );
}

#[test]
fn a_pd_router_weighs_prefill_at_four_unless_told() {
    let pd = [
        "--mode",
        "kv",
        "--pd-disaggregation",
        "--prefill",
        "http://p:1",
        "--decode",
        "http://d:1",
    ];
    let weight = |args: &[&str], file: &str| load(args, file).unwrap().kv.prefill_weight;
    assert_eq!(weight(&pd, ""), crate::pd::PD_PREFILL_WEIGHT);
    assert_eq!(weight(&["--mode", "kv"], ""), 1.0, "aggregated keeps 1");
    let mut given = pd.to_vec();
    given.extend(["--kv-prefill-weight", "1"]);
    assert_eq!(
        weight(&given, ""),
        1.0,
        "an explicit flag wins, even at the default"
    );
    assert_eq!(weight(&pd, "[kv]\nkv_prefill_weight = 2.0"), 2.0);
    // The example file's value (the default) does not count as given.
    assert_eq!(
        weight(&pd, "[kv]\nkv_prefill_weight = 1.0"),
        crate::pd::PD_PREFILL_WEIGHT
    );
    let o = crate::config::Options {
        pd_disaggregation: true,
        prefill: vec!["http://p:1".into()],
        decode: vec!["http://d:1".into()],
        ..Default::default()
    };
    assert_eq!(
        Config::from_options(o).unwrap().kv.prefill_weight,
        crate::pd::PD_PREFILL_WEIGHT
    );
}

#[test]
fn a_kv_router_warns_when_told_to_ignore_the_work_in_flight() {
    let warned = |args: &[&str]| {
        load(args, "")
            .unwrap()
            .warnings
            .iter()
            .any(|w| w.contains("--kv-decode-weight 0"))
    };
    assert!(warned(&["--mode", "kv", "--kv-decode-weight", "0"]));
    assert!(!warned(&["--mode", "kv"]));
    assert!(!warned(&[
        "--mode",
        "round_robin",
        "--kv-decode-weight",
        "0"
    ]));
}
