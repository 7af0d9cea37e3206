//! The decode role's side of the room rendezvous: one HTTP/1 request to the prefill's
//! bootstrap listener (`bootstrap.rs`) held open until the transfer is done. A refused or
//! broken connection (the prefill process is gone) fails at once, the way SGLang's decode
//! learns it from its heartbeat to the prefill's bootstrap server
//! (`SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` 5 s, `..._MAX_FAILURE` 2), only sooner.

use bytes::Bytes;
use http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::bootstrap::{RegisterBody, RegisterReply, ROOM_PATH};

/// `host:port` for a connection (an IPv6 host is bracketed, as routers send it or not).
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Registers for `room` at the prefill's bootstrap listener and waits for the transfer.
pub async fn register(
    authority: &str,
    room: u64,
    body: &RegisterBody,
) -> Result<RegisterReply, String> {
    let stream = TcpStream::connect(authority)
        .await
        .map_err(|e| format!("cannot reach the prefill bootstrap server {authority}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("bootstrap handshake with {authority}: {e}"))?;
    let payload = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    let req = Request::post(format!("{ROOM_PATH}{room}"))
        .header(header::HOST, authority)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(payload)))
        .map_err(|e| e.to_string())?;
    let exchange = async {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("bootstrap server {authority} went away: {e}"))?;
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), 64 * 1024)
            .collect()
            .await
            .map_err(|e| format!("bootstrap server {authority} went away: {e}"))?
            .to_bytes();
        if status != StatusCode::OK {
            let msg = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
                .unwrap_or_else(|| format!("bootstrap server answered {status}"));
            return Err(msg);
        }
        serde_json::from_slice::<RegisterReply>(&bytes)
            .map_err(|e| format!("bad bootstrap answer: {e}"))
    };
    tokio::pin!(exchange);
    tokio::select! {
        biased;
        r = &mut exchange => r,
        // The connection ended (the prefill process died, or closed it): whatever the
        // exchange already received settles it, a cut-off answer is an error.
        _ = conn => exchange.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities() {
        assert_eq!(authority("10.0.0.1", 8998), "10.0.0.1:8998");
        assert_eq!(authority("::1", 8998), "[::1]:8998");
        assert_eq!(authority("[::1]", 8998), "[::1]:8998");
    }
}
