//! The deployment to copy (`Dockerfile`, `deploy/kubernetes/`, docs/deployment.md) checked
//! without Docker or a cluster: every manifest parses and names itself, the kustomization lists
//! exactly the files present, the router pods probe `/readiness` and `/health` on the port they
//! listen on, every router flag and `KVROUTER_*` variable they set is one the real `router`
//! binary accepts, exactly one replica relays events, and the Dockerfile builds in stages, runs
//! as a non-root user and starts the binary it copies.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kube_dir() -> PathBuf {
    repo_root().join("deploy/kubernetes")
}

/// Every `*.yaml` / `*.yml` file under deploy/kubernetes (file name, documents).
fn manifests() -> Vec<(String, Vec<Yaml>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(kube_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests under deploy/kubernetes");
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let docs = YamlLoader::load_from_str(&text)
                .unwrap_or_else(|e| panic!("{name}: not YAML: {e}"))
                .into_iter()
                .filter(|d| !d.is_null())
                .collect();
            (name, docs)
        })
        .collect()
}

fn all_documents() -> Vec<(String, Yaml)> {
    manifests()
        .into_iter()
        .flat_map(|(name, docs)| docs.into_iter().map(move |d| (name.clone(), d)))
        .collect()
}

fn str_at<'a>(doc: &'a Yaml, path: &[&str]) -> Option<&'a str> {
    path.iter().fold(doc, |node, key| &node[*key]).as_str()
}

/// The router Deployments: the label `app.kubernetes.io/name: kvrouter` on a Deployment.
fn router_deployments() -> Vec<Yaml> {
    let deployments: Vec<Yaml> = all_documents()
        .into_iter()
        .map(|(_, d)| d)
        .filter(|d| {
            d["kind"].as_str() == Some("Deployment")
                && str_at(d, &["metadata", "labels", "app.kubernetes.io/name"]) == Some("kvrouter")
        })
        .collect();
    assert!(!deployments.is_empty(), "no router Deployment");
    deployments
}

/// The container named `router` of a Deployment.
fn router_container(deployment: &Yaml) -> &Yaml {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str() == Some("router"))
        .expect("a container named router")
}

fn args_of(container: &Yaml) -> Vec<String> {
    container["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| match a {
            Yaml::String(s) => s.clone(),
            Yaml::Integer(i) => i.to_string(),
            other => panic!("argument {other:?} is not a string"),
        })
        .collect()
}

/// The value following `flag` in `args` (`--flag value` or `--flag=value`).
fn arg_value(args: &[String], flag: &str) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix(&format!("{flag}=")).map(str::to_owned)
        }
    })
}

/// A probe's or annotation's port (a name or a number) resolved to the container's port number.
fn resolve_port(container: &Yaml, port: &Yaml) -> i64 {
    let ports = container["ports"].as_vec().unwrap();
    match port {
        Yaml::Integer(n) => {
            assert!(
                ports
                    .iter()
                    .any(|p| p["containerPort"].as_i64() == Some(*n)),
                "port {n} is not a containerPort"
            );
            *n
        }
        Yaml::String(name) => ports
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_else(|| panic!("no containerPort named {name:?}")),
        other => panic!("port {other:?} is neither a name nor a number"),
    }
}

/// `router --help` of the binary this package builds.
fn router_help() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_router"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "router --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The long flags `router --help` lists (`--page-size`, ...).
fn help_flags(help: &str) -> BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == ',')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.split(['<', '=']).next().unwrap().to_owned())
        .collect()
}

#[test]
fn every_document_has_api_version_kind_and_name() {
    let docs = all_documents();
    assert!(
        docs.len() >= 6,
        "expected the router, NATS and etcd objects"
    );
    for (file, doc) in &docs {
        for path in [&["apiVersion"][..], &["kind"], &["metadata", "name"]] {
            let value = str_at(doc, path);
            assert!(
                value.is_some_and(|v| !v.is_empty()),
                "{file}: a document has no {}",
                path.join(".")
            );
        }
    }
}

#[test]
fn kustomization_lists_exactly_the_manifests() {
    let kustomization = std::fs::read_to_string(kube_dir().join("kustomization.yaml")).unwrap();
    let doc = &YamlLoader::load_from_str(&kustomization).unwrap()[0];
    assert_eq!(doc["kind"].as_str(), Some("Kustomization"));
    let listed: BTreeSet<String> = doc["resources"]
        .as_vec()
        .expect("resources: a list")
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    for resource in &listed {
        assert!(
            kube_dir().join(resource).is_file(),
            "kustomization.yaml lists {resource}, which does not exist"
        );
    }
    let present: BTreeSet<String> = manifests()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present, "kustomization.yaml resources vs files");
}

#[test]
fn router_pods_probe_and_expose_the_port_they_listen_on() {
    for deployment in router_deployments() {
        let name = deployment["metadata"]["name"].as_str().unwrap();
        let pod = &deployment["spec"]["template"];
        let container = router_container(&deployment);
        let http = resolve_port(container, &Yaml::String("http".into()));

        let readiness = &container["readinessProbe"]["httpGet"];
        assert_eq!(readiness["path"].as_str(), Some("/readiness"), "{name}");
        assert_eq!(resolve_port(container, &readiness["port"]), http, "{name}");
        let liveness = &container["livenessProbe"]["httpGet"];
        assert_eq!(liveness["path"].as_str(), Some("/health"), "{name}");
        assert_eq!(resolve_port(container, &liveness["port"]), http, "{name}");

        let args = args_of(container);
        let port = arg_value(&args, "--port").map_or(30000, |p| p.parse().unwrap());
        assert_eq!(port, http, "{name}: --port vs containerPort");
        assert_eq!(
            arg_value(&args, "--host").as_deref(),
            Some("0.0.0.0"),
            "{name}: the router binds 127.0.0.1 unless told otherwise"
        );

        let annotations = &pod["metadata"]["annotations"];
        assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
        assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
        let scrape_port: i64 = annotations["prometheus.io/port"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(scrape_port, http, "{name}: prometheus.io/port");

        assert_eq!(
            pod["spec"]["securityContext"]["runAsNonRoot"].as_bool(),
            Some(true),
            "{name}"
        );
        for kind in ["requests", "limits"] {
            assert!(
                !container["resources"][kind].is_badvalue(),
                "{name}: no resources.{kind}"
            );
        }
    }
}

#[test]
fn exactly_one_router_replica_relays_events() {
    let mut relays = 0;
    for deployment in router_deployments() {
        let args = args_of(router_container(&deployment));
        assert_eq!(
            arg_value(&args, "--nats-url").as_deref(),
            Some("nats://nats:4222"),
            "every replica shares events over the nats Service"
        );
        assert_eq!(
            arg_value(&args, "--kv-blind-threshold").as_deref(),
            Some("0.5"),
            "replicas behind one Service agree on blind placements"
        );
        if args.iter().any(|a| a == "--publish-events") {
            relays += deployment["spec"]["replicas"].as_i64().unwrap();
            assert_eq!(
                deployment["spec"]["strategy"]["type"].as_str(),
                Some("Recreate"),
                "a rolling update would run two relays at once"
            );
        }
    }
    assert_eq!(relays, 1, "one relay per worker stream");
}

#[test]
fn router_args_and_env_are_flags_the_binary_accepts() {
    let help = router_help();
    let flags = help_flags(&help);
    assert!(flags.contains("--nats-url"), "help parsed: {flags:?}");
    for deployment in router_deployments() {
        let container = router_container(&deployment);
        for arg in args_of(container).iter().filter(|a| a.starts_with("--")) {
            let flag = arg.split('=').next().unwrap();
            assert!(
                flags.contains(flag),
                "{flag} is not a flag of `router` (known: {flags:?})"
            );
        }
        if let Some(env) = container["env"].as_vec() {
            for var in env {
                let var = var["name"].as_str().unwrap();
                assert!(help.contains(&format!("[env: {var}=")), "{var} unknown");
            }
        }
    }
    // The ConfigMap's keys become KVROUTER_* variables through envFrom.
    for (file, doc) in all_documents() {
        if doc["kind"].as_str() != Some("ConfigMap") {
            continue;
        }
        for key in doc["data"].as_hash().unwrap().keys() {
            let key = key.as_str().unwrap();
            assert!(
                help.contains(&format!("[env: {key}=")),
                "{file}: {key} is not a variable `router` reads"
            );
        }
    }
}

/// Dockerfile instructions, continuation lines joined and comments dropped.
fn dockerfile_instructions() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (op, rest) = current.split_once(' ').unwrap_or((&current, ""));
        instructions.push((op.to_ascii_uppercase(), rest.trim().to_owned()));
        current.clear();
    }
    instructions
}

#[test]
fn dockerfile_builds_in_stages_runs_unprivileged_and_starts_what_it_copies() {
    let instructions = dockerfile_instructions();
    let of = |op: &str| -> Vec<&str> {
        instructions
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, rest)| rest.as_str())
            .collect()
    };
    assert!(of("FROM").len() >= 2, "a builder and a runtime stage");
    assert!(
        of("RUN").iter().any(|r| r
            .contains("cargo build --release --locked -p kvrouter --features etcd --bin router")),
        "the builder builds the router binary with etcd discovery"
    );
    assert!(
        of("RUN")
            .iter()
            .any(|r| r.contains("objcopy --strip-all") && r.contains("/out/router")),
        "the shipped binary is stripped"
    );

    // The last USER of the final stage is neither root nor uid 0.
    let last_from = instructions.iter().rposition(|(o, _)| o == "FROM").unwrap();
    let user = instructions[last_from..]
        .iter()
        .rev()
        .find(|(o, _)| o == "USER")
        .map(|(_, u)| u.split(':').next().unwrap().to_owned())
        .expect("a USER in the runtime stage");
    assert!(user != "root" && user != "0", "runs as {user}");

    let entrypoint: Vec<String> = serde_json::from_str(of("ENTRYPOINT").last().unwrap())
        .expect("ENTRYPOINT in exec (JSON) form");
    let copied: Vec<&str> = instructions[last_from..]
        .iter()
        .filter(|(o, rest)| o == "COPY" && rest.starts_with("--from="))
        .map(|(_, rest)| rest.split_whitespace().last().unwrap())
        .collect();
    assert!(
        copied.contains(&entrypoint[0].as_str()),
        "ENTRYPOINT {} is not a file copied from the builder ({copied:?})",
        entrypoint[0]
    );

    // The exposed port is the router's default and the one the manifests listen on.
    let exposed: Vec<i64> = of("EXPOSE").iter().map(|p| p.parse().unwrap()).collect();
    for deployment in router_deployments() {
        let http = resolve_port(router_container(&deployment), &Yaml::String("http".into()));
        assert!(exposed.contains(&http), "EXPOSE {exposed:?} vs {http}");
    }
}
