//! The PD fields of a generation request, read from the body on every route:
//! `bootstrap_host`, `bootstrap_port`, `bootstrap_room` (scalars or one per batch item),
//! `disagg_prefill_dp_rank`, and whether `routed_dp_rank` pins the rank. Expansion per
//! request follows `GenerateReqInput._normalize_bootstrap_params`
//! (`managers/io_struct.py`): a scalar room becomes `room + i` for request `i`, a scalar host
//! or port is repeated, a list is repeated over the `n` samples.

use serde::Deserialize;
use serde_json::Value;

use crate::mock::http::parse::OneOrMany;

/// SGLang's fake-transfer host (`FAKE_BOOTSTRAP_HOST`, `disaggregation/utils.py`).
pub const FAKE_BOOTSTRAP_HOST: &str = "2.2.2.2";

#[derive(Deserialize, Default)]
struct Raw {
    bootstrap_host: Option<OneOrMany<Option<String>>>,
    bootstrap_port: Option<OneOrMany<Option<i64>>>,
    bootstrap_room: Option<Value>,
    disagg_prefill_dp_rank: Option<OneOrMany<Option<i64>>>,
    routed_dp_rank: Option<Value>,
    data_parallel_rank: Option<Value>,
}

/// The PD fields of one call.
#[derive(Debug, Default)]
pub struct PdFields {
    host: Option<OneOrMany<Option<String>>>,
    port: Option<OneOrMany<Option<i64>>>,
    room: Option<Value>,
    prefill_rank: Option<OneOrMany<Option<i64>>>,
    /// `routed_dp_rank` (or `data_parallel_rank`) is set.
    pub pinned_rank: bool,
}

/// The PD fields of one request of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    pub room: u64,
    /// `None` when the body gave no host.
    pub host: Option<String>,
    /// `None` when null or absent: the receiving worker's own bootstrap port.
    pub port: Option<u16>,
    pub prefill_dp_rank: Option<u32>,
}

impl Bootstrap {
    /// SGLang's fake transfer (warm-ups, health checks): no peer, nothing moves.
    pub fn fake(&self) -> bool {
        self.host.as_deref() == Some(FAKE_BOOTSTRAP_HOST)
    }
}

fn pick<T: Clone>(v: &Option<OneOrMany<Option<T>>>, i: usize) -> Option<T> {
    match v.as_ref()? {
        OneOrMany::One(x) => x.clone(),
        OneOrMany::Many(xs) if xs.is_empty() => None,
        OneOrMany::Many(xs) => xs[i % xs.len()].clone(),
    }
}

impl PdFields {
    /// Reads the fields (a malformed one is a 400 message).
    pub fn parse(bytes: &[u8]) -> Result<PdFields, String> {
        let raw: Raw =
            serde_json::from_slice(bytes).map_err(|e| format!("invalid bootstrap fields: {e}"))?;
        Ok(PdFields {
            host: raw.bootstrap_host,
            port: raw.bootstrap_port,
            room: raw.bootstrap_room,
            prefill_rank: raw.disagg_prefill_dp_rank,
            pinned_rank: [raw.routed_dp_rank, raw.data_parallel_rank]
                .iter()
                .any(|v| v.as_ref().is_some_and(|v| !v.is_null())),
        })
    }

    /// The fields of request `i` of the call (rid for the error message). A missing room is
    /// SGLang's 400 (`Scheduler.handle_generate_request`, `managers/scheduler.py`).
    pub fn request(&self, i: usize, rid: &str) -> Result<Bootstrap, String> {
        let missing = || {
            format!(
                "Invalid request: Disaggregated request received without bootstrap room id. \
                 req.rid='{rid}'"
            )
        };
        let room = match self.room.as_ref() {
            None | Some(Value::Null) => return Err(missing()),
            Some(Value::Array(rooms)) if rooms.is_empty() => return Err(missing()),
            Some(Value::Array(rooms)) => match &rooms[i % rooms.len()] {
                Value::Null => return Err(missing()),
                v => room_of(v)?,
            },
            Some(v) => room_of(v)?
                .checked_add(i as u64)
                .ok_or("bootstrap_room + request index overflows")?,
        };
        let port = match pick(&self.port, i) {
            None => None,
            Some(p) => {
                Some(u16::try_from(p).map_err(|_| format!("bootstrap_port {p} is not a port"))?)
            }
        };
        let prefill_dp_rank = match pick(&self.prefill_rank, i) {
            None => None,
            Some(r) => Some(
                u32::try_from(r)
                    .map_err(|_| format!("disagg_prefill_dp_rank {r} is out of range"))?,
            ),
        };
        Ok(Bootstrap {
            room,
            host: pick(&self.host, i),
            port,
            prefill_dp_rank,
        })
    }
}

fn room_of(v: &Value) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| format!("bootstrap_room must be a non-negative integer, got {v}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_room_is_sglangs_400() {
        let f = PdFields::parse(br#"{"text":"a"}"#).unwrap();
        assert_eq!(
            f.request(0, "abc").unwrap_err(),
            "Invalid request: Disaggregated request received without bootstrap room id. req.rid='abc'"
        );
        let f = PdFields::parse(br#"{"bootstrap_room":null}"#).unwrap();
        assert!(f.request(0, "x").is_err());
    }

    #[test]
    fn scalars_expand_and_lists_index() {
        let f = PdFields::parse(
            br#"{"bootstrap_host":"10.0.0.1","bootstrap_port":null,"bootstrap_room":100}"#,
        )
        .unwrap();
        let b = f.request(2, "r").unwrap();
        assert_eq!(b.room, 102);
        assert_eq!(b.host.as_deref(), Some("10.0.0.1"));
        assert_eq!(b.port, None);
        let f = PdFields::parse(
            br#"{"bootstrap_host":["h","h"],"bootstrap_port":[8998,8998],"bootstrap_room":[5,9],
                "disagg_prefill_dp_rank":1,"routed_dp_rank":0}"#,
        )
        .unwrap();
        assert!(f.pinned_rank);
        let b = f.request(1, "r").unwrap();
        assert_eq!(
            (b.room, b.port, b.prefill_dp_rank),
            (9, Some(8998), Some(1))
        );
        assert_eq!(
            f.request(3, "r").unwrap().room,
            9,
            "repeated over n samples"
        );
    }

    #[test]
    fn fake_host_and_bad_values() {
        let f = PdFields::parse(br#"{"bootstrap_host":"2.2.2.2","bootstrap_room":1}"#).unwrap();
        assert!(f.request(0, "r").unwrap().fake());
        let f = PdFields::parse(br#"{"bootstrap_room":-1}"#).unwrap();
        assert!(f.request(0, "r").is_err());
        let f = PdFields::parse(br#"{"bootstrap_room":1,"bootstrap_port":70000}"#).unwrap();
        assert!(f.request(0, "r").is_err());
        assert!(PdFields::parse(br#"{"bootstrap_room":"x"}"#)
            .unwrap()
            .request(0, "r")
            .is_err());
    }
}
