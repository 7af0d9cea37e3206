//! Registration jobs: a `POST /workers` registration that has not produced a worker
//! yet (pending) or never will (failed). Owned by the registry, rendered by `views`.

use std::time::SystemTime;

use kvrouter_index::WorkerId;

use super::spec::WorkerSpec;

/// State of a registration that has not produced a worker (yet).
#[derive(Debug, Clone)]
pub(super) enum JobStatus {
    Pending,
    Failed(String),
}

/// One registration job.
#[derive(Debug, Clone)]
pub(super) struct Job {
    pub id: WorkerId,
    pub public_id: String,
    pub url: String,
    /// Split off the registered URL; applied as `Authorization: Basic`.
    pub credentials: Option<super::url::Credentials>,
    pub spec: WorkerSpec,
    pub status: JobStatus,
    pub since: SystemTime,
    /// Cancelled when the pending job is removed, so its probe stops at once (it may
    /// otherwise retry for the whole startup timeout).
    pub cancel: tokio_util::sync::CancellationToken,
}
