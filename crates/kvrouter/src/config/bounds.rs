//! Validated bounds on state that clients grow (`Config::bounds`): the sticky-key cap and the
//! memory budget of request bodies in flight. The flags are declared in options.rs.

use super::{invalid, ConfigError, Options};

/// 1 GiB: the floor of the automatic `max_inflight_body_bytes`.
const AUTO_BODY_BUDGET_FLOOR: usize = 1 << 30;

/// Bounds on client-grown state (docs/router.md, "Limits").
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds {
    /// Sticky keys held at most (LRU eviction beyond).
    pub sticky_max_keys: usize,
    /// Request-body bytes held by all requests in flight at once (resolved, never 0).
    pub max_inflight_body_bytes: usize,
}

impl Bounds {
    pub(super) fn from_options(o: &Options) -> Result<Bounds, ConfigError> {
        if o.sticky_max_keys == 0 {
            return Err(invalid("sticky_max_keys", "must be at least 1"));
        }
        let max_inflight_body_bytes = match o.max_inflight_body_bytes {
            0 => AUTO_BODY_BUDGET_FLOOR.max(o.max_payload_size.saturating_mul(2)),
            n if n < o.max_payload_size => {
                return Err(invalid(
                    "max_inflight_body_bytes",
                    format!(
                    "must be 0 (auto) or at least max_payload_size ({}), got {n}: a body of the \
                         largest accepted size could never be read",
                    o.max_payload_size
                ),
                ))
            }
            n => n,
        };
        Ok(Bounds {
            sticky_max_keys: o.sticky_max_keys,
            max_inflight_body_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_and_the_automatic_body_budget() {
        let mut o = Options::default();
        let b = Bounds::from_options(&o).expect("defaults");
        assert_eq!(b.sticky_max_keys, 262_144);
        assert_eq!(b.max_inflight_body_bytes, 1 << 30);
        o.max_payload_size = 1 << 30;
        assert_eq!(
            Bounds::from_options(&o)
                .expect("auto")
                .max_inflight_body_bytes,
            2 << 30
        );
        o.max_inflight_body_bytes = 1 << 20;
        assert!(Bounds::from_options(&o).is_err());
        o.max_payload_size = 1 << 20;
        assert_eq!(
            Bounds::from_options(&o)
                .expect("valid")
                .max_inflight_body_bytes,
            1 << 20
        );
        o.sticky_max_keys = 0;
        assert!(Bounds::from_options(&o).is_err());
    }
}
