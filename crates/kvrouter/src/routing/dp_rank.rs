//! DP-rank routing: SGLang places a request on a DP rank given by `routed_dp_rank` in the body.
//!
//! Policy (docs/kv-routing.md): the KV policy scores every (worker, rank) unit. For a worker
//! with `dp_size > 1` the chosen rank is injected as `"routed_dp_rank": N` **only when the
//! body has no `routed_dp_rank` key**; the only change is those bytes inserted before the
//! closing `}`. A body that already names a rank is forwarded untouched (the client's choice
//! wins; the prediction may then sit on another rank until its TTL). `dp_size == 1`: never
//! touched, byte-exact.

use bytes::{Bytes, BytesMut};

/// True when the top level of `body` has a `routed_dp_rank` key.
fn has_rank(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(borrow, default)]
        routed_dp_rank: Option<&'a serde_json::value::RawValue>,
    }
    serde_json::from_slice::<Probe<'_>>(body).is_ok_and(|p| p.routed_dp_rank.is_some())
}

/// `body` with `"routed_dp_rank": rank` appended to its top-level object, or `None` when the
/// body already has one (or is not an object).
pub(crate) fn with_routed_rank(body: &Bytes, rank: u32) -> Option<Bytes> {
    if has_rank(body) {
        return None;
    }
    let end = body.iter().rposition(|b| *b == b'}')?;
    let inner_empty = body[..end]
        .iter()
        .rev()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    let field = format!(
        "{}\"routed_dp_rank\":{rank}",
        if inner_empty { "" } else { "," }
    );
    let mut out = BytesMut::with_capacity(body.len() + field.len());
    out.extend_from_slice(&body[..end]);
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(&body[end..]);
    Some(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injects_only_when_absent() {
        let b = Bytes::from_static(br#"{"input_ids":[1,2,3]} "#);
        let out = with_routed_rank(&b, 2).unwrap();
        assert_eq!(&out[..], br#"{"input_ids":[1,2,3],"routed_dp_rank":2} "#);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["routed_dp_rank"], 2);
        let has = Bytes::from_static(br#"{"input_ids":[1],"routed_dp_rank":0}"#);
        assert!(with_routed_rank(&has, 1).is_none());
        let empty = Bytes::from_static(b"{ }");
        assert_eq!(
            &with_routed_rank(&empty, 1).unwrap()[..],
            br#"{ "routed_dp_rank":1}"#
        );
    }
}
