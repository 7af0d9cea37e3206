//! `GET /routers`: the router replicas registered under `<prefix>/routers/`, read from etcd
//! on each call (a replica that stopped without revoking its lease is listed until the lease
//! TTL runs out).

use etcd_client::GetOptions;
use serde_json::{json, Value};

use super::client::timed;
use super::keys::routers_prefix;
use super::record::RouterRecord;
use super::Discovery;

/// `{"routers":[{id,url,mode,version,started_at,self}],"total":n,"self":id}`; an error
/// message when etcd cannot be read.
pub(crate) async fn routers_json(discovery: &Discovery) -> Result<Value, String> {
    let Some(mut client) = discovery.client() else {
        return Err("not connected to etcd yet".to_string());
    };
    let prefix = routers_prefix(&discovery.config.prefix);
    let resp = timed(client.get(prefix.as_str(), Some(GetOptions::new().with_prefix()))).await?;
    let mut routers = Vec::new();
    for kv in resp.kvs() {
        match serde_json::from_slice::<RouterRecord>(kv.value()) {
            Ok(r) => {
                let mut v = serde_json::to_value(&r).unwrap_or(Value::Null);
                if let Some(o) = v.as_object_mut() {
                    o.insert("self".into(), json!(r.id == discovery.me.id));
                }
                routers.push(v);
            }
            Err(e) => tracing::warn!(
                key = %String::from_utf8_lossy(kv.key()),
                error = %e,
                "skipping a router key whose value is not a router record"
            ),
        }
    }
    Ok(json!({
        "total": routers.len(),
        "routers": routers,
        "self": discovery.me.id,
    }))
}
