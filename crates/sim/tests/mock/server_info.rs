//! `sglang-mock`'s `/server_info` against the body SGLang 0.5.23's own code built for the
//! same settings (`tests/data/server_info/*.json`, from `gen.py`): same key set at the top
//! and in `internal_states[0]`, and the `kv_events` block built by the same rules; and the
//! launch marker (`random_seed` drawn per launch when unset, measured `startup_time`).
#![allow(clippy::unwrap_used)] // tests: an unwrap is an assertion

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::procs::mock;
use crate::support::raw::get;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/data/server_info/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn server_info_matches_sglang_0_5_23_for_the_same_settings() {
    let kv = r#"{"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}"#;
    let m = mock(&[
        "--kv-events-config",
        kv,
        "--load-publish-endpoint",
        "auto",
        "--dp-size",
        "2",
    ]);
    let (status, body) = get(m.addr(), "/server_info");
    assert_eq!(status, 200, "{body}");
    let info: Value = serde_json::from_str(&body).unwrap();
    let want = fixture("load_auto_dp2");
    assert_eq!(keys(&info), keys(&want), "top-level key set");
    assert_eq!(
        keys(&info["internal_states"][0]),
        keys(&want["internal_states"][0]),
        "internal_states[0] key set"
    );
    assert_eq!(info["internal_states"].as_array().unwrap().len(), 2);
    assert_eq!(info["version"], "0.5.23");
    assert!(info["max_running_requests"].is_null());
    assert_eq!(
        info["internal_states"][0]["effective_max_running_requests_per_dp"],
        256
    );
    // kv_events: same keys and rules as SGLang's (ports are the mock's actual ones).
    let (got, exp) = (&info["kv_events"], &want["kv_events"]);
    assert_eq!(keys(got), keys(exp), "{got} vs {exp}");
    for k in [
        "publisher",
        "endpoint_host",
        "topic",
        "block_size",
        "dp_size",
        "load_topic",
    ] {
        assert_eq!(got[k], exp[k], "kv_events.{k}");
    }
    let kv_base = got["endpoint_port_base"].as_u64().unwrap();
    let replay = got["replay_endpoint_port_base"].as_u64().unwrap();
    let load = got["load_endpoint_port_base"].as_u64().unwrap();
    // auto: KV base + dp_size, moved past the replay range when they overlap.
    let mut auto = kv_base + 2;
    if auto < replay + 2 && replay < auto + 2 {
        auto = replay + 2;
    }
    assert_eq!(load, auto);
    // 0.5.23 has no /get_load.
    assert_eq!(get(m.addr(), "/get_load").0, 404);
}

#[test]
fn default_settings_match_and_0_5_9_keeps_the_old_body() {
    let m = mock(&[]);
    let info: Value = serde_json::from_str(&get(m.addr(), "/server_info").1).unwrap();
    let want = fixture("default");
    assert_eq!(keys(&info), keys(&want));
    assert!(info["kv_events"].is_null());
    let old = mock(&["--sglang-version", "0.5.9"]);
    let info: Value = serde_json::from_str(&get(old.addr(), "/server_info").1).unwrap();
    assert_eq!(info["version"], "0.5.9");
    assert_eq!(info.as_object().unwrap().len(), 34);
    assert_eq!(info["max_running_requests"], 256);
    assert_eq!(get(old.addr(), "/get_load").0, 200);
}

/// Two launches with the same flags differ in `random_seed` (drawn per launch when unset, as
/// SGLang's `arg_groups/serving_hook.py` does) and in `startup_time` (measured); an explicit
/// `--seed` is reported as given. Before, every launch reported `--seed` (0) and all-zero
/// phases, so a relaunch behind the same URL looked like the same process.
#[test]
fn each_launch_reports_its_own_marker() {
    let info = |extra: &[&str]| -> Value {
        let m = mock(extra);
        serde_json::from_str(&get(m.addr(), "/server_info").1).unwrap()
    };
    let (a, b) = (info(&[]), info(&[]));
    let seed = |v: &Value| v["random_seed"].as_u64().unwrap();
    assert!(seed(&a) <= 1 << 30, "{}", a["random_seed"]);
    assert_ne!(
        (seed(&a), &a["startup_time"]),
        (seed(&b), &b["startup_time"])
    );
    let e2e = a["startup_time"]["scheduler_e2e"].as_f64().unwrap();
    assert!(e2e > 0.0, "{}", a["startup_time"]);
    assert_eq!(
        a["internal_states"][0]["startup_time"], a["startup_time"],
        "one launch, one measurement"
    );
    assert_eq!(seed(&info(&["--seed", "7"])), 7);
    let old = info(&["--sglang-version", "0.5.9", "--random-seed", "9"]);
    assert_eq!(old["random_seed"], 9);
}
