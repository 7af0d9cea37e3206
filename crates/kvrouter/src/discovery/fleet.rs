//! `Fleet`: turns the worker keys seen in etcd into registry calls. It remembers which URL
//! each key stands for (a delete event carries no value) and which registrations it started
//! itself: only those are drained and removed when their key goes, so workers added by hand
//! through `/workers` keep working beside discovery. The registry is reached through
//! [`FleetOps`] so the decisions are tested without a network.

use std::collections::BTreeMap;

use super::record::WorkerRecord;
use crate::workers::{Registry, WorkerSpec};

/// What the fleet needs from the worker registry.
pub(crate) trait FleetOps {
    /// Starts registering `url` (idempotent); `Ok(true)` when this call started it,
    /// `Ok(false)` when the URL was already registered.
    fn add(&self, url: &str, spec: WorkerSpec) -> Result<bool, Refusal>;
    /// Drains and removes `url` (or cancels its pending registration); false if unknown.
    fn remove(&self, url: &str) -> bool;
    /// The API key variable lookup for `api_key_env`.
    fn env(&self, name: &str) -> Option<String>;
}

impl FleetOps for Registry {
    fn add(&self, url: &str, spec: WorkerSpec) -> Result<bool, Refusal> {
        use crate::workers::AddWorkerError;
        match self.start_add_worker(url, spec) {
            Ok(accepted) => Ok(!accepted.existing),
            // Being probed already (an earlier event for the same URL): nothing to do.
            Err(AddWorkerError::AlreadyPending { .. }) => Ok(false),
            Err(e) => Err(Refusal {
                // Still draining after its key went (a sidecar restart): retry shortly.
                retry: matches!(e, AddWorkerError::Draining { .. }),
                message: e.to_string(),
            }),
        }
    }
    fn remove(&self, url: &str) -> bool {
        self.start_remove_by_url(url).is_some() || self.cancel_pending(url)
    }
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// Why the registry refused a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub message: String,
    /// Worth retrying soon (the URL is still draining from an earlier removal).
    pub retry: bool,
}

/// One worker key as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    url: String,
    /// This key's registration was started by discovery (so discovery may remove it).
    owned: bool,
}

/// What a change did (for logs and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A registration was started for the URL.
    Added(String),
    /// The URL was registered already (by hand, or by another key).
    AlreadyRegistered(String),
    /// The URL is being drained and removed.
    Removed(String),
    /// The key's URL changed: the old one is drained, the new one registered.
    Moved { from: String, to: String },
    /// Nothing to do (same value again, or a key that stood for nothing).
    Unchanged,
    /// The value was refused (bad JSON, bad URL, missing API key variable); the key is
    /// ignored (and what it stood for before is left as it was).
    Skipped(String),
    /// The registry refused the URL.
    Refused { url: String, error: String },
}

/// The worker keys discovery acts on.
#[derive(Debug, Default)]
pub(crate) struct Fleet {
    keys: BTreeMap<String, Entry>,
    /// Values refused for a passing reason, by key, retried by [`Fleet::retry`].
    pending: BTreeMap<String, Vec<u8>>,
}

impl Fleet {
    /// Number of keys that stand for a worker.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The URL `key` stands for, if any.
    #[cfg(test)]
    pub(crate) fn url_of(&self, key: &str) -> Option<&str> {
        self.keys.get(key).map(|e| e.url.as_str())
    }

    /// True when some refused value waits for [`Fleet::retry`].
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Puts again the values refused for a passing reason (a URL still draining).
    pub(crate) fn retry(&mut self, ops: &dyn FleetOps) -> Vec<(String, Outcome)> {
        let pending = std::mem::take(&mut self.pending);
        pending
            .into_iter()
            .map(|(k, v)| {
                let o = self.put(ops, &k, &v);
                (k, o)
            })
            .collect()
    }

    /// A key was written (created or changed).
    pub(crate) fn put(&mut self, ops: &dyn FleetOps, key: &str, value: &[u8]) -> Outcome {
        self.pending.remove(key);
        let record = match WorkerRecord::parse(value) {
            Ok(r) => r,
            Err(e) => return Outcome::Skipped(e),
        };
        let spec = match record.spec(key, |n| ops.env(n)) {
            Ok(s) => s,
            Err(e) => return Outcome::Skipped(e),
        };
        let previous = self.keys.get(key).cloned();
        let moved_from = match &previous {
            Some(p) if p.url != record.url => {
                self.forget(ops, key);
                Some(p.url.clone())
            }
            _ => None,
        };
        let was_owned = previous
            .as_ref()
            .is_some_and(|p| p.url == record.url && p.owned);
        let url = record.url;
        match ops.add(&url, spec) {
            Ok(started) => {
                self.keys.insert(
                    key.to_string(),
                    Entry {
                        url: url.clone(),
                        owned: started || was_owned,
                    },
                );
                match (moved_from, started) {
                    (Some(from), _) => Outcome::Moved { from, to: url },
                    (None, true) => Outcome::Added(url),
                    (None, false) if previous.is_some() => Outcome::Unchanged,
                    (None, false) => Outcome::AlreadyRegistered(url),
                }
            }
            Err(refusal) => {
                if refusal.retry {
                    self.pending.insert(key.to_string(), value.to_vec());
                }
                Outcome::Refused {
                    url,
                    error: refusal.message,
                }
            }
        }
    }

    /// A key was deleted (by its writer, or by the expiry of its lease).
    pub(crate) fn delete(&mut self, ops: &dyn FleetOps, key: &str) -> Outcome {
        self.pending.remove(key);
        match self.forget(ops, key) {
            Some(url) => Outcome::Removed(url),
            None => Outcome::Unchanged,
        }
    }

    /// Replaces the whole view with `kvs` (after a start, a reconnect that lost history or a
    /// compaction): keys no longer present are deleted, the others are put. Returns each
    /// key with what was done.
    pub(crate) fn resync(
        &mut self,
        ops: &dyn FleetOps,
        kvs: &[(String, Vec<u8>)],
    ) -> Vec<(String, Outcome)> {
        let gone: Vec<String> = self
            .keys
            .keys()
            .chain(self.pending.keys())
            .filter(|k| !kvs.iter().any(|(key, _)| key == *k))
            .cloned()
            .collect();
        let mut outcomes: Vec<(String, Outcome)> = gone
            .into_iter()
            .map(|k| {
                let o = self.delete(ops, &k);
                (k, o)
            })
            .collect();
        outcomes.extend(kvs.iter().map(|(k, v)| (k.clone(), self.put(ops, k, v))));
        outcomes
    }

    /// Drops `key`; removes its URL from the registry when discovery owned it and no other
    /// key stands for the same URL (then that key inherits the ownership). Returns the
    /// removed URL.
    fn forget(&mut self, ops: &dyn FleetOps, key: &str) -> Option<String> {
        let entry = self.keys.remove(key)?;
        if let Some(other) = self.keys.values_mut().find(|e| e.url == entry.url) {
            other.owned |= entry.owned;
            return None;
        }
        if entry.owned && ops.remove(&entry.url) {
            return Some(entry.url);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    use super::*;

    /// A registry stand-in: the set of registered URLs and the calls made.
    #[derive(Default)]
    struct FakeOps {
        registered: RefCell<BTreeSet<String>>,
        draining: RefCell<BTreeSet<String>>,
        calls: RefCell<Vec<String>>,
    }

    impl FleetOps for FakeOps {
        fn add(&self, url: &str, _spec: WorkerSpec) -> Result<bool, Refusal> {
            self.calls.borrow_mut().push(format!("add {url}"));
            if self.draining.borrow().contains(url) {
                return Err(Refusal {
                    message: "draining".into(),
                    retry: true,
                });
            }
            Ok(self.registered.borrow_mut().insert(url.to_string()))
        }
        fn remove(&self, url: &str) -> bool {
            self.calls.borrow_mut().push(format!("remove {url}"));
            self.registered.borrow_mut().remove(url)
        }
        fn env(&self, _name: &str) -> Option<String> {
            None
        }
    }

    fn rec(url: &str) -> Vec<u8> {
        format!(r#"{{"url":"{url}"}}"#).into_bytes()
    }

    #[test]
    fn keys_appear_change_and_expire() {
        let ops = FakeOps::default();
        let mut f = Fleet::default();
        assert_eq!(
            f.put(&ops, "k1", &rec("http://a:1")),
            Outcome::Added("http://a:1".into())
        );
        assert_eq!(f.put(&ops, "k1", &rec("http://a:1")), Outcome::Unchanged);
        assert_eq!(
            f.put(&ops, "k1", &rec("http://b:1")),
            Outcome::Moved {
                from: "http://a:1".into(),
                to: "http://b:1".into()
            }
        );
        assert!(!ops.registered.borrow().contains("http://a:1"));
        assert_eq!(f.delete(&ops, "k1"), Outcome::Removed("http://b:1".into()));
        assert!(ops.registered.borrow().is_empty());
        assert_eq!(f.delete(&ops, "k1"), Outcome::Unchanged);
    }

    #[test]
    fn bad_values_are_skipped_and_keep_the_old_state() {
        let ops = FakeOps::default();
        let mut f = Fleet::default();
        f.put(&ops, "k1", &rec("http://a:1"));
        assert!(matches!(f.put(&ops, "k1", b"{oops"), Outcome::Skipped(_)));
        assert!(matches!(f.put(&ops, "k2", b"[]"), Outcome::Skipped(_)));
        assert_eq!(f.url_of("k1"), Some("http://a:1"));
        let missing_key = br#"{"url":"http://c:1","api_key_env":"KVROUTER_WORKER_API_KEY_X"}"#;
        assert!(matches!(
            f.put(&ops, "k3", missing_key),
            Outcome::Skipped(_)
        ));
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn a_url_still_draining_is_retried() {
        let ops = FakeOps::default();
        ops.draining.borrow_mut().insert("http://a:1".into());
        let mut f = Fleet::default();
        assert!(matches!(
            f.put(&ops, "k", &rec("http://a:1")),
            Outcome::Refused { .. }
        ));
        assert!(f.has_pending());
        ops.draining.borrow_mut().clear();
        assert_eq!(
            f.retry(&ops),
            vec![("k".to_string(), Outcome::Added("http://a:1".into()))]
        );
        assert!(!f.has_pending());
        // A pending key deleted before its retry is dropped.
        ops.draining.borrow_mut().insert("http://b:1".into());
        f.put(&ops, "k2", &rec("http://b:1"));
        f.delete(&ops, "k2");
        assert!(!f.has_pending());
    }

    #[test]
    fn manual_workers_are_never_removed_by_discovery() {
        let ops = FakeOps::default();
        ops.registered.borrow_mut().insert("http://m:1".into());
        let mut f = Fleet::default();
        assert_eq!(
            f.put(&ops, "k", &rec("http://m:1")),
            Outcome::AlreadyRegistered("http://m:1".into())
        );
        assert_eq!(f.delete(&ops, "k"), Outcome::Unchanged);
        assert!(ops.registered.borrow().contains("http://m:1"));
    }

    #[test]
    fn two_keys_one_url_and_resync() {
        let ops = FakeOps::default();
        let mut f = Fleet::default();
        f.put(&ops, "k1", &rec("http://a:1"));
        f.put(&ops, "k2", &rec("http://a:1"));
        assert_eq!(f.delete(&ops, "k1"), Outcome::Unchanged);
        assert!(ops.registered.borrow().contains("http://a:1"));
        // k2 inherited the ownership: a resync without it removes the worker.
        let out = f.resync(&ops, &[("k3".into(), rec("http://c:1"))]);
        assert_eq!(
            out,
            vec![
                ("k2".to_string(), Outcome::Removed("http://a:1".into())),
                ("k3".to_string(), Outcome::Added("http://c:1".into()))
            ]
        );
        assert_eq!(f.len(), 1);
    }
}
