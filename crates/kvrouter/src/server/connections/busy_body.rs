//! A response body that keeps its connection marked busy ([`BusyGuard`]) until the body is sent
//! or dropped, and otherwise is its inner body: its size hint and end-of-stream pass through,
//! so hyper still writes `content-length` where the inner body knows it.

use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, SizeHint};

use super::table::BusyGuard;

/// `inner`, holding `guard` for as long as it lives.
pub struct BusyBody<B> {
    inner: B,
    _guard: BusyGuard,
}

impl<B> BusyBody<B> {
    pub fn new(inner: B, guard: BusyGuard) -> BusyBody<B> {
        BusyBody {
            inner,
            _guard: guard,
        }
    }
}

impl<B: Body + Unpin> Body for BusyBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::server::connections::table::{ConnTable, Phase};
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};

    #[tokio::test]
    async fn the_size_is_the_inner_bodys_and_the_connection_is_busy_until_the_body_drops() {
        let t = ConnTable::new(2);
        let c = t.admit().unwrap();
        let body = BusyBody::new(Full::new(Bytes::from_static(b"OK")), c.conn.begin());
        assert_eq!(body.size_hint().exact(), Some(2));
        assert_eq!(c.conn.phase(), Phase::Busy(1));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"OK");
        assert!(matches!(c.conn.phase(), Phase::Idle(_)));
    }
}
