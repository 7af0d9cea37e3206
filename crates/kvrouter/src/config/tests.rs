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
fn cli_beats_file_and_file_beats_default() {
    let file = FileConfig::parse("page_size = 64\nport = 9\nmode = \"random\"").unwrap();
    let c = Config::from_sources(cli(&["--page-size", "32"]), file).unwrap();
    assert_eq!(c.page_size, 32);
    assert_eq!(c.port, 9);
    assert_eq!(c.mode, Mode::Random);
}

#[test]
fn worker_urls_are_normalised_and_split() {
    let c = Config::from_sources(
        cli(&["--worker-urls", "http://a:1/", "http://b:2,http://a:1"]),
        FileConfig::default(),
    )
    .unwrap();
    assert_eq!(c.worker_urls, vec!["http://a:1", "http://b:2"]);
}

#[test]
fn errors_name_the_field() {
    let e = Config::from_sources(cli(&["--page-size", "1"]), FileConfig::default()).unwrap_err();
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
    assert_eq!(c.worker_urls.len(), 2);
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
    assert_eq!(c.retry_max_retries, 0);
    assert_eq!(c.health_check_endpoint, "/health_generate");
    assert_eq!(c.worker_startup_timeout, Duration::from_secs(600));
    assert_eq!(c.sticky_ttl, Duration::from_secs(60));
    assert_eq!(c.prometheus, Some(("127.0.0.1".into(), 29000)));
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
    assert_eq!(c.port, 1, "values after ignored flags are consumed");
    assert_eq!(c.warnings.len(), 3, "{:?}", c.warnings);
    assert!(c.warnings[0].starts_with("--cache-threshold "));
}
