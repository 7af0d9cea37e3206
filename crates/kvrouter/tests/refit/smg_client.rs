//! The RL routes against SMG's real Python client (`smg.rl` from PyPI `smg` 1.13): runs
//! `tests/smg_client/refit_smg.py` against a router over two mocks.
//!
//! The interpreter is `$KVROUTER_SMG_PYTHON`, else `target/smg-venv/bin/python` (what
//! `.ci/run` creates). It must import `smg.rl`: when
//! none does, the test fails with the install command (it never skips).
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use support::procs::{mock, start_router};
use support::wait::wait_for;

fn smg_python() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates: Vec<PathBuf> = std::env::var_os("KVROUTER_SMG_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([manifest.join("target/smg-venv/bin/python")])
        .collect();
    for c in &candidates {
        let ok = Command::new(c)
            .args(["-c", "import smg.rl"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return c.clone();
        }
    }
    panic!(
        "no Python with SMG's RL client found (tried {candidates:?}). Install it with:\n  \
         python3 -m venv target/smg-venv && target/smg-venv/bin/pip install --no-deps smg==1.13.0\n\
         or point KVROUTER_SMG_PYTHON at an interpreter that can `import smg.rl`."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smg_rl_client_drives_a_refit() {
    let python = smg_python();
    let a = mock(&["--speedup", "0", "--weight-version", "v1"]);
    let b = mock(&["--speedup", "0", "--weight-version", "v1"]);
    let joined = format!("{},{}", a.url, b.url);
    let r = start_router(&["--worker-urls", &joined, "--admin-api-key", "k"]);
    wait_for("both workers routable", || {
        let u = r.url.clone();
        async move {
            let resp = support::http::client()
                .get(format!("{u}/refit/state"))
                .bearer_auth("k")
                .send()
                .await;
            let Ok(resp) = resp else { return false };
            let st: serde_json::Value = resp.json().await.unwrap_or_default();
            st["workers"]
                .as_array()
                .is_some_and(|ws| ws.len() == 2 && ws.iter().all(|w| w["routable"] == true))
        }
    })
    .await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/smg_client/refit_smg.py");
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .args([r.url.as_str(), "k", b.url.as_str()])
        .output()
        .await
        .expect("run the smg client script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "smg client script failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}
