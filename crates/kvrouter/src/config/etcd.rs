//! The `--etcd-*` options validated into `discovery::EtcdConfig` (None without endpoints).

use super::{invalid, ConfigError, Options};
use crate::discovery::settings::parse_endpoints;
use crate::discovery::EtcdConfig;

impl EtcdConfig {
    /// The etcd settings of `o`, or None when no endpoint is given.
    pub fn from_options(o: &Options) -> Result<Option<EtcdConfig>, ConfigError> {
        let endpoints =
            parse_endpoints(&o.etcd_endpoints).map_err(|e| invalid("etcd_endpoints", e))?;
        if endpoints.is_empty() {
            return Ok(None);
        }
        #[cfg(not(feature = "etcd"))]
        return Err(invalid("etcd_endpoints", crate::discovery::NOT_BUILT));
        #[cfg(feature = "etcd")]
        Self::validated(o, endpoints)
    }

    #[cfg(feature = "etcd")]
    fn validated(o: &Options, endpoints: Vec<String>) -> Result<Option<EtcdConfig>, ConfigError> {
        let advertise_url = match &o.etcd_advertise_url {
            None => None,
            Some(u) => Some(
                crate::workers::url::parse_worker_url(u)
                    .map_err(|e| invalid("etcd_advertise_url", format!("{u:?}: {e}")))?
                    .url,
            ),
        };
        Ok(Some(EtcdConfig {
            endpoints,
            prefix: crate::discovery::settings::normalize_prefix(&o.etcd_prefix)
                .map_err(|e| invalid("etcd_prefix", e))?,
            lease_ttl_secs: crate::discovery::settings::check_ttl(o.etcd_lease_ttl_secs)
                .map_err(|e| invalid("etcd_lease_ttl_secs", e))?,
            advertise_url,
        }))
    }
}
