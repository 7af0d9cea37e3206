//! `RelayBody`: the worker's response body streamed to the client frame by frame.
//!
//! No buffering: each frame is polled from the upstream connection only when the client side
//! can take it (hyper's backpressure). The body owns the request's [`Booking`], so the worker's
//! in-flight count drops when the body ends or is dropped. If the client goes away first, the
//! upstream connection is dropped with the body and the worker is asked to `/abort_request`
//! the request's `rid`s. If the worker breaks mid-body, the client sees a clean end (SSE
//! streams get one final `data: {"error":...}` event) and the worker's health is told.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::abort::abort_upstream;
use super::client::UpstreamClient;
use super::metrics::ProxyMetrics;
use crate::routing::Booking;

/// Facts about the request the relay needs when it ends.
pub struct RelayContext {
    pub route: &'static str,
    pub stream: bool,
    pub started: Instant,
    pub client: UpstreamClient,
    /// Request ids to abort on the worker if the client disconnects early.
    pub rids: Vec<String>,
    /// Anything that must live exactly as long as the response (e.g. the refit plane's
    /// rid -> worker entry); dropped with the body.
    pub hold: Option<Box<dyn Send + Sync>>,
}

/// Streams an upstream body to the client (see module docs).
pub struct RelayBody {
    inner: Incoming,
    booking: Option<Booking>,
    ctx: RelayContext,
    sse: bool,
    seen_first_byte: bool,
    finished: bool,
}

const STREAM_BROKEN_EVENT: &[u8] = b"data: {\"error\":{\"message\":\"the worker connection broke mid-stream\",\"type\":\"upstream_error\",\"code\":\"upstream_stream_broken\"}}\n\n";

impl RelayBody {
    pub fn new(inner: Incoming, booking: Booking, sse: bool, ctx: RelayContext) -> RelayBody {
        RelayBody {
            inner,
            booking: Some(booking),
            ctx,
            sse,
            seen_first_byte: false,
            finished: false,
        }
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.booking = None;
        ProxyMetrics::get()
            .duration
            .with_label_values(&[
                self.ctx.route,
                if self.ctx.stream { "true" } else { "false" },
            ])
            .observe(self.ctx.started.elapsed().as_secs_f64());
        crate::metrics::compat::request_duration(
            self.ctx.route,
            self.ctx.started.elapsed().as_secs_f64(),
        );
    }
}

impl Body for RelayBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => {
                // The policy's observer reads each chunk (never alters it).
                if let (Some(data), Some(b)) = (frame.data_ref(), this.booking.as_mut()) {
                    b.on_data(data);
                }
                if !this.seen_first_byte && frame.is_data() {
                    this.seen_first_byte = true;
                    if this.ctx.stream {
                        let secs = this.ctx.started.elapsed().as_secs_f64();
                        ProxyMetrics::get()
                            .first_byte
                            .with_label_values(&[this.ctx.route])
                            .observe(secs);
                        crate::metrics::compat::first_token(this.ctx.route, secs);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(b) = &this.booking {
                    let w = b.worker();
                    tracing::warn!(worker = %w.url, error = %e, "worker response broke mid-body");
                    w.record_failure();
                    ProxyMetrics::get()
                        .upstream_failures
                        .with_label_values(&[w.url.as_str(), "stream_broken"])
                        .inc();
                }
                let sse = this.sse;
                this.finish();
                if sse {
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                        STREAM_BROKEN_EVENT,
                    )))))
                } else {
                    Poll::Ready(None)
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for RelayBody {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if self.inner.is_end_stream() {
            // Fully relayed (hyper stops polling once the body reports its end).
            self.finish();
            return;
        }
        // The client went away before the body ended: dropping `inner` closes the upstream
        // connection; also ask the worker to stop generating.
        if let Some(b) = &self.booking {
            if !self.ctx.rids.is_empty() {
                abort_upstream(
                    &self.ctx.client,
                    b.worker().as_ref().into(),
                    std::mem::take(&mut self.ctx.rids),
                );
            }
        }
        self.finish();
    }
}
