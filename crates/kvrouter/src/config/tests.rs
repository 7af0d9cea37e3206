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
