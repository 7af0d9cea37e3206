//! The fleet by role in PD mode: each leg's candidates, readiness (a prefill and a decode
//! worker must both be routable) and the worker that answers model questions (a prefill one,
//! as sgl-router's PD router does).

use std::sync::Arc;

use crate::workers::{Role, Worker, WorkerId};

/// The workers of `role` among `routable` (the registry's routable list) not in `tried`; when
/// every one was tried, all of the role again (a retry re-selects, as sgl-router does).
pub(crate) fn candidates(
    routable: &[Arc<Worker>],
    role: Role,
    tried: &[WorkerId],
) -> Vec<Arc<Worker>> {
    let of_role = |w: &&Arc<Worker>| w.role == role;
    let fresh: Vec<Arc<Worker>> = routable
        .iter()
        .filter(of_role)
        .filter(|w| !tried.contains(&w.id))
        .cloned()
        .collect();
    if fresh.is_empty() && !tried.is_empty() {
        routable.iter().filter(of_role).cloned().collect()
    } else {
        fresh
    }
}

/// (prefill, decode) workers among `routable` (the registry's routable list).
pub(crate) fn role_counts(routable: &[Arc<Worker>]) -> (usize, usize) {
    routable.iter().fold((0, 0), |(p, d), w| match w.role {
        Role::Prefill => (p + 1, d),
        Role::Decode => (p, d + 1),
        Role::Regular => (p, d),
    })
}

/// Why a PD router is not ready (no routable prefill or decode worker among `routable`, the
/// registry's routable list), or None.
pub(crate) fn readiness_gap(routable: &[Arc<Worker>]) -> Option<String> {
    match role_counts(routable) {
        (0, 0) => Some("insufficient healthy workers: no prefill and no decode worker".into()),
        (0, _) => Some("insufficient healthy workers: no prefill worker".into()),
        (_, 0) => Some("insufficient healthy workers: no decode worker".into()),
        _ => None,
    }
}

/// The worker `/model_info` and `/v1/models` are read from: the first prefill one among
/// `routable` (the registry's routable list).
pub(crate) fn info_worker(routable: &[Arc<Worker>]) -> Option<&Arc<Worker>> {
    routable.iter().find(|w| w.role == Role::Prefill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::WorkerInfo;

    fn fleet(roles: &[Role]) -> Vec<Arc<Worker>> {
        roles
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut w = Worker::new(
                    WorkerId(i as u32),
                    &format!("http://127.0.0.1:{}", 31000 + i),
                    WorkerInfo::default(),
                );
                w.role = *r;
                Arc::new(w)
            })
            .collect()
    }

    #[test]
    fn legs_readiness_and_info_worker() {
        let f = fleet(&[Role::Decode, Role::Prefill, Role::Prefill, Role::Regular]);
        let ids = |ws: Vec<Arc<Worker>>| ws.iter().map(|w| w.id.0).collect::<Vec<_>>();
        assert_eq!(ids(candidates(&f, Role::Prefill, &[])), [1, 2]);
        assert_eq!(ids(candidates(&f, Role::Prefill, &[WorkerId(1)])), [2]);
        assert_eq!(
            ids(candidates(&f, Role::Prefill, &[WorkerId(1), WorkerId(2)])),
            [1, 2]
        );
        assert_eq!(ids(candidates(&f, Role::Decode, &[])), [0]);
        assert_eq!(readiness_gap(&f), None);
        assert_eq!(info_worker(&f).map(|w| w.id.0), Some(1));
        assert_eq!(info_worker(&f[2..]).map(|w| w.id.0), Some(2));
        assert!(readiness_gap(&f[1..]).unwrap().contains("no decode"));
        assert!(readiness_gap(&fleet(&[Role::Decode]))
            .unwrap()
            .contains("no prefill"));
    }
}
