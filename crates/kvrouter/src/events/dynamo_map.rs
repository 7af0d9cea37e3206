//! Which registered worker a Dynamo `worker_id` (its instance id, `RouterEvent.worker_id`)
//! stands for. Two ways, checked in this order:
//!
//! 1. `--dynamo-worker-id URL=ID` (repeatable): the worker registered under `URL`;
//! 2. the worker's registration label `dynamo_worker_id` (`POST /workers` body
//!    `{"url": ..., "labels": {"dynamo_worker_id": "ID"}}`, shown under `metadata.labels`).
//!
//! `ID` is decimal or `0x`-prefixed hex (Dynamo logs instance ids in hex). An id that maps to
//! no registered worker resolves to None: the dispatcher counts and skips its events.

use std::collections::HashMap;
use std::sync::Arc;

use crate::workers::{Worker, WorkerId};

/// Registration label carrying a worker's Dynamo instance id.
pub(crate) const WORKER_ID_LABEL: &str = "dynamo_worker_id";

/// The `--dynamo-*` settings, validated (built by `config::kv`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamoSettings {
    /// NATS subjects of Dynamo events; empty = the defaults
    /// ([`super::nats_envelope::DEFAULT_DYNAMO_SUBJECTS`]).
    pub subjects: Vec<String>,
    /// `--dynamo-worker-id` mappings.
    pub workers: DynamoWorkerMap,
    /// Dynamo ZMQ event-plane publishers to subscribe to.
    pub zmq_endpoints: Vec<String>,
}

impl DynamoSettings {
    /// Validates the raw flag values; an error is (option name, message naming the value).
    pub fn parse(
        subjects: &[String],
        worker_ids: &[String],
        zmq_endpoints: &[String],
    ) -> Result<Self, (&'static str, String)> {
        for subject in subjects {
            let bad_token = subject.split('.').any(|t| t.is_empty());
            if bad_token || subject.contains(char::is_whitespace) {
                let message = format!("{subject:?} is not a NATS subject");
                return Err(("dynamo_kv_subject", message));
            }
        }
        for endpoint in zmq_endpoints {
            let rest = endpoint.strip_prefix("tcp://").unwrap_or_default();
            if !rest.contains(':') || rest.ends_with(':') {
                let message = format!("{endpoint:?} is not tcp://HOST:PORT");
                return Err(("dynamo_zmq_endpoint", message));
            }
        }
        let workers = worker_ids
            .iter()
            .map(|p| parse_pair(p))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|pairs| DynamoWorkerMap::from_pairs(&pairs))
            .map_err(|e| ("dynamo_worker_id", e))?;
        Ok(Self {
            subjects: subjects.to_vec(),
            workers,
            zmq_endpoints: zmq_endpoints.to_vec(),
        })
    }
}

/// Parses a Dynamo id: decimal or `0x`-prefixed hex u64.
pub(crate) fn parse_dynamo_id(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// Parses one `URL=ID` pair; the URL is canonicalised as the registry keys workers
/// (`workers::url::parse_worker_address`), so it matches the registered worker.
pub(crate) fn parse_pair(text: &str) -> Result<(String, u64), String> {
    let (url, id) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("{text:?} is not URL=ID"))?;
    let url = crate::workers::url::parse_worker_address(url)
        .map_err(|e| format!("{text:?}: {url:?} is not a worker URL: {e}"))?
        .url;
    let id = parse_dynamo_id(id)
        .ok_or_else(|| format!("{text:?}: {id:?} is not a u64 (decimal or 0x hex)"))?;
    Ok((url, id))
}

/// The explicit `--dynamo-worker-id` mappings, by Dynamo id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamoWorkerMap {
    by_id: HashMap<u64, String>,
}

impl DynamoWorkerMap {
    /// The map of `pairs`; one id mapped to two URLs is an error.
    pub fn from_pairs(pairs: &[(String, u64)]) -> Result<Self, String> {
        let mut by_id = HashMap::new();
        for (url, id) in pairs {
            if let Some(other) = by_id.insert(*id, url.clone()) {
                if other != *url {
                    return Err(format!(
                        "Dynamo worker id {id} is mapped to {other} and {url}"
                    ));
                }
            }
        }
        Ok(Self { by_id })
    }

    /// The `WorkerId` of Dynamo worker `id` among `workers` (flag first, then the label).
    pub fn resolve(&self, workers: &[Arc<Worker>], id: u64) -> Option<WorkerId> {
        if let Some(url) = self.by_id.get(&id) {
            return workers.iter().find(|w| w.url == *url).map(|w| w.id);
        }
        workers
            .iter()
            .find(|w| {
                w.spec
                    .labels
                    .get(WORKER_ID_LABEL)
                    .and_then(|v| parse_dynamo_id(v))
                    == Some(id)
            })
            .map(|w| w.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::WorkerInfo;

    fn worker(id: u32, url: &str, label: Option<&str>) -> Arc<Worker> {
        let mut w = Worker::new(WorkerId(id), url, WorkerInfo::default());
        if let Some(l) = label {
            w.spec.labels.insert(WORKER_ID_LABEL.into(), l.into());
        }
        Arc::new(w)
    }

    #[test]
    fn ids_and_pairs_parse() {
        assert_eq!(parse_dynamo_id("42"), Some(42));
        assert_eq!(
            parse_dynamo_id(" 0x694d9a2e5fe8e7b1"),
            Some(0x694d9a2e5fe8e7b1)
        );
        assert_eq!(parse_dynamo_id("0x"), None);
        assert_eq!(parse_dynamo_id("-1"), None);
        assert_eq!(
            parse_pair("http://10.0.0.1:8000/=7"),
            Ok(("http://10.0.0.1:8000".into(), 7))
        );
        assert!(parse_pair("http://10.0.0.1:8000").is_err());
        assert!(parse_pair("=7").is_err());
        assert!(parse_pair("http://10.0.0.1:8000=seven").is_err());
        let dup = [("http://a:1".to_owned(), 1), ("http://b:1".to_owned(), 1)];
        assert!(DynamoWorkerMap::from_pairs(&dup).is_err());
        let same = [("http://a:1".to_owned(), 1), ("http://a:1".to_owned(), 1)];
        assert!(DynamoWorkerMap::from_pairs(&same).is_ok());
    }

    #[test]
    fn settings_validate() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let ok = DynamoSettings::parse(
            &s(&["namespace.dyn.component.*.endpoint.*.kv-events"]),
            &s(&["http://10.0.0.1:8000=0x10"]),
            &s(&["tcp://10.0.0.1:5557"]),
        )
        .unwrap();
        assert_eq!(ok.workers.resolve(&[], 16), None);
        assert_eq!(ok.zmq_endpoints, s(&["tcp://10.0.0.1:5557"]));
        for subject in ["", "a..b", "a b", "a."] {
            assert!(
                DynamoSettings::parse(&s(&[subject]), &[], &[]).is_err(),
                "{subject:?}"
            );
        }
        for endpoint in ["10.0.0.1:5557", "tcp://10.0.0.1", "tcp://h:", "ipc:///x"] {
            assert!(
                DynamoSettings::parse(&[], &[], &s(&[endpoint])).is_err(),
                "{endpoint:?}"
            );
        }
        assert!(DynamoSettings::parse(&[], &s(&["nope"]), &[]).is_err());
    }

    #[test]
    fn flag_wins_over_label_and_unknown_is_none() {
        let workers = vec![
            worker(1, "http://10.0.0.1:8000", Some("7")),
            worker(2, "http://10.0.0.2:8000", Some("0x8")),
            worker(3, "http://10.0.0.3:8000", None),
        ];
        let map = DynamoWorkerMap::from_pairs(&[("http://10.0.0.3:8000".into(), 7)]).unwrap();
        assert_eq!(map.resolve(&workers, 7), Some(WorkerId(3)), "flag first");
        assert_eq!(map.resolve(&workers, 8), Some(WorkerId(2)), "hex label");
        assert_eq!(map.resolve(&workers, 9), None);
        let flagged_gone = DynamoWorkerMap::from_pairs(&[("http://10.9.9.9:1".into(), 8)]).unwrap();
        assert_eq!(
            flagged_gone.resolve(&workers, 8),
            None,
            "an explicit mapping to an unregistered URL does not fall back to labels"
        );
        assert_eq!(
            DynamoWorkerMap::default().resolve(&workers, 7),
            Some(WorkerId(1))
        );
    }
}
