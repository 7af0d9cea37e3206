//! The etcd key layout: `<prefix>/workers/<worker id>` (one per worker, written by
//! `router register`) and `<prefix>/routers/<router id>` (one per router replica). Every key
//! is attached to its writer's lease, so it disappears when the writer stops renewing it.

/// `<prefix>/workers/`: the watched prefix of worker keys.
pub(crate) fn workers_prefix(prefix: &str) -> String {
    format!("{prefix}/workers/")
}

/// `<prefix>/routers/`: the prefix of router replica keys.
pub(crate) fn routers_prefix(prefix: &str) -> String {
    format!("{prefix}/routers/")
}

/// The key of one worker.
pub(crate) fn worker_key(prefix: &str, worker_id: &str) -> String {
    format!("{}{worker_id}", workers_prefix(prefix))
}

/// The key of one router replica.
pub(crate) fn router_key(prefix: &str, router_id: &str) -> String {
    format!("{}{router_id}", routers_prefix(prefix))
}

/// The default worker id of a canonical worker URL: the URL without its scheme, `/` as `_`
/// (`http://10.0.0.5:30000` -> `10.0.0.5:30000`), so one worker has one key whoever
/// registers it.
pub(crate) fn default_worker_id(canonical_url: &str) -> String {
    let rest = canonical_url
        .split_once("://")
        .map_or(canonical_url, |(_, r)| r);
    rest.replace('/', "_")
}

/// A worker id must be one non-empty key segment.
pub(crate) fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.contains('/') || id.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "{id:?} must be one non-empty key segment (no '/', no whitespace)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        assert_eq!(workers_prefix("/kvrouter"), "/kvrouter/workers/");
        assert_eq!(
            worker_key("/kvrouter", "10.0.0.5:30000"),
            "/kvrouter/workers/10.0.0.5:30000"
        );
        assert_eq!(router_key("/k", "abc"), "/k/routers/abc");
        assert_eq!(default_worker_id("http://10.0.0.5:30000"), "10.0.0.5:30000");
        assert_eq!(default_worker_id("http://[::1]:1/sub"), "[::1]:1_sub");
        assert!(check_id("a/b").is_err());
        assert!(check_id("").is_err());
        assert!(check_id("w-1").is_ok());
    }
}
