//! The `sglang-mock` binary's SGLang observability with the non-default models
//! (`--timing-model roofline --schedule-policy lpm`): `meta_info` timings and retraction
//! count, `/metrics` gauges per DP rank, `/get_load` and `/server_info` fields.
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use std::process::Command;

use serde_json::{json, Value};

use crate::support::procs::mock;
use crate::support::raw::http;

#[test]
fn roofline_lpm_mock_reports_sglang_timings_and_load() {
    let m = mock(&[
        "--timing-model",
        "roofline",
        "--schedule-policy",
        "lpm",
        "--speedup",
        "1000",
        "--dp-size",
        "2",
    ]);
    let ids: Vec<u32> = (300..400).collect();
    let body =
        json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 4}, "routed_dp_rank": 1});
    let (status, text) = http(m.addr(), "POST", "/generate", Some(&body));
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let meta = &v["meta_info"];
    assert_eq!(meta["total_retractions"], 0);
    assert_eq!(meta["dp_rank"], 1);
    assert!(meta["queue_time"].as_f64().unwrap() >= 0.0, "{meta}");
    assert_eq!(meta["prefill_launch_delay"].as_f64(), Some(0.0));
    // roofline prefill of 100 new tokens on a cold cache: 8 + 0.023 x 100 + 1.3e-6 x 100 x 50 ms, divided by --speedup, in seconds.
    let want = (8.0 + 0.023 * 100.0 + 1.3e-6 * 100.0 * 50.0) / 1000.0 / 1000.0;
    let got = meta["prefill_launch_latency"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    assert!(meta["e2e_latency"].as_f64().is_some());

    let (_, metrics) = http(m.addr(), "GET", "/metrics", None);
    for gauge in [
        "sglang:token_usage",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:gen_throughput",
        "sglang:cache_hit_rate",
    ] {
        for rank in ["0", "1"] {
            let labelled = format!("dp_rank=\"{rank}\"");
            assert!(
                metrics
                    .lines()
                    .any(|l| l.starts_with(&format!("{gauge}{{")) && l.contains(&labelled)),
                "{gauge} for rank {rank} missing"
            );
        }
    }

    let (status, _) = http(m.addr(), "GET", "/get_load", None);
    assert_eq!(status, 404, "SGLang 0.5.23 has no /get_load");
    let (_, load) = http(m.addr(), "GET", "/v1/loads", None);
    let load: Value = serde_json::from_str(&load).unwrap();
    let load = &load["loads"];
    assert_eq!(load.as_array().unwrap().len(), 2);
    for r in load.as_array().unwrap() {
        for k in [
            "dp_rank",
            "num_running_reqs",
            "num_waiting_reqs",
            "max_total_num_tokens",
        ] {
            assert!(r[k].is_u64(), "{k} in {r}");
        }
    }
    let (_, info) = http(m.addr(), "GET", "/server_info", None);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["max_total_num_tokens"], 65536);
}

#[test]
fn unknown_models_are_rejected_at_startup() {
    for flags in [["--timing-model", "linear"], ["--schedule-policy", "lof"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_sglang-mock"))
            .args(["--port", "0"])
            .args(flags)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flags:?} accepted");
    }
}
