//! `Role`: what a worker does in a PD-disaggregated fleet (sgl-router's `worker_type`), read
//! from its registration (`--prefill` / `--decode`, `POST /workers {"worker_type"}`, the etcd
//! record) and kept on the worker.

use std::fmt;

/// A worker's role: a whole-request worker, or one leg of prefill-decode disaggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Role {
    #[default]
    Regular,
    Prefill,
    Decode,
}

impl Role {
    /// The role for a `worker_type` value (`None`: regular); `Err` names the accepted values.
    pub fn parse(worker_type: Option<&str>) -> Result<Role, String> {
        match worker_type
            .map(|t| t.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("") | Some("regular") => Ok(Role::Regular),
            Some("prefill") => Ok(Role::Prefill),
            Some("decode") => Ok(Role::Decode),
            Some(other) => Err(format!(
                "worker_type {other:?} is not one of regular, prefill, decode"
            )),
        }
    }

    /// The `worker_type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Regular => "regular",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sgl_router_worker_types() {
        assert_eq!(Role::parse(None), Ok(Role::Regular));
        assert_eq!(Role::parse(Some("regular")), Ok(Role::Regular));
        assert_eq!(Role::parse(Some("Prefill")), Ok(Role::Prefill));
        assert_eq!(Role::parse(Some("decode")), Ok(Role::Decode));
        assert!(Role::parse(Some("prefil")).unwrap_err().contains("prefill"));
        assert_eq!(Role::Decode.to_string(), "decode");
    }
}
