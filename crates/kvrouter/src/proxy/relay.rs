//! `RelayBody`: the worker's response body streamed to the client frame by frame.
//!
//! No buffering: each frame is polled from the upstream connection only when the client side can
//! take it (hyper's backpressure). The body owns the request's [`Booking`], so the worker's
//! in-flight count drops when the body ends or is dropped. If the client goes away first, the
//! upstream connection is dropped with the body and the worker is asked to `/abort_request` the
//! request's `rid`s, unless that abort would also match another request's rid (SGLang aborts by
//! prefix): then the worker's body is read to its end in a task instead. If the worker breaks
//! mid-body, the worker's health is told and the client sees a broken response, never a clean short
//! body: a non-SSE body ends with an error (hyper then closes the HTTP/1 connection without the
//! chunked terminator, or resets the HTTP/2 stream); an SSE stream gets one final `data:
//! {"error":...}` event and ends. A body that sends nothing for `stream_idle_timeout` while its
//! worker is unhealthy (frozen) is ended the same way and the worker asked to `/abort_request`.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::abort::abort_isolated;
use super::client::UpstreamClient;
use super::relay_error::RelayError;
use super::rids::RidGuard;
use super::stall_clock::StallClock;
use super::telemetry::RequestTelemetry;
use crate::routing::Booking;

/// Facts about the request the relay needs while it runs and when it ends.
pub struct RelayContext {
    /// What the request records: first chunk, early end, end.
    pub telemetry: RequestTelemetry,
    pub client: UpstreamClient,
    /// The request's tracked rids (held exactly as long as the response): those that name no
    /// other request are aborted on the worker if the client disconnects early.
    pub rids: Option<RidGuard>,
    /// No data for this long from an unhealthy worker ends the body (see module docs).
    pub stream_idle_timeout: Duration,
    /// Where a withheld body is drained.
    pub tasks: crate::tasks::Tasks,
}

/// Rewrites the relayed data (PD mode: the prefill's logprobs merged into the decode
/// stream) and learns how the body ended: `end` runs only when the worker's body ended
/// cleanly; a rewrite is dropped with the body either way.
pub trait FrameRewrite: Send + Sync {
    /// The bytes to send for one upstream data chunk (empty: nothing yet).
    fn data(&mut self, chunk: Bytes) -> Bytes;
    /// The upstream body ended cleanly: bytes still to send, if any.
    fn end(&mut self) -> Option<Bytes>;
    /// True when `data` returns every chunk unchanged (the body keeps its size).
    fn passthrough(&self) -> bool {
        false
    }
}

/// Streams an upstream body to the client (see module docs).
pub struct RelayBody {
    /// The worker's body (`None` once handed to a drain task, see `Drop`).
    inner: Option<Incoming>,
    rewrite: Option<Box<dyn FrameRewrite>>,
    booking: Option<Booking>,
    ctx: RelayContext,
    sse: bool,
    finished: bool,
    /// `stream_idle_timeout` without data from an unhealthy worker ends the body.
    stall: StallClock,
}

const STREAM_BROKEN_EVENT: &[u8] = b"data: {\"error\":{\"message\":\"the worker connection broke mid-stream\",\"type\":\"upstream_error\",\"code\":\"upstream_stream_broken\"}}\n\n";

impl RelayBody {
    pub fn new(inner: Incoming, booking: Booking, sse: bool, ctx: RelayContext) -> RelayBody {
        let stall = StallClock::new(ctx.stream_idle_timeout);
        RelayBody {
            inner: Some(inner),
            rewrite: None,
            booking: Some(booking),
            ctx,
            sse,
            finished: false,
            stall,
        }
    }

    /// The same body with its data passed through `rewrite` (see [`FrameRewrite`]).
    pub fn with_rewrite(mut self, rewrite: Box<dyn FrameRewrite>) -> RelayBody {
        self.rewrite = Some(rewrite);
        self
    }

    /// Fails the body: tells the worker's health (and the telemetry), then either the SSE
    /// error event (and a clean end after it) or `error` itself for the client's connection.
    fn fail(&mut self, error: RelayError) -> Poll<Option<Result<Frame<Bytes>, RelayError>>> {
        if let Some(b) = &self.booking {
            let w = b.worker();
            tracing::warn!(worker = %w.url, %error, "worker response ended early");
            w.record_failure();
            self.ctx.telemetry.relay_failed(w, &error);
        }
        let sse = self.sse;
        self.finish();
        if sse {
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                STREAM_BROKEN_EVENT,
            )))))
        } else {
            Poll::Ready(Some(Err(error)))
        }
    }

    /// Pending upstream: ends the body when the stall clock says so (module docs).
    fn poll_idle(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RelayError>>> {
        let booking = &self.booking;
        let unhealthy = || booking.as_ref().is_some_and(|b| !b.worker().is_healthy());
        if self.stall.poll_stalled(cx, unhealthy).is_pending() {
            return Poll::Pending;
        }
        if let Some(b) = &self.booking {
            abort_isolated(
                &self.ctx.tasks,
                &self.ctx.client,
                b.worker(),
                self.ctx.rids.as_ref(),
            );
        }
        self.fail(RelayError::Stalled(self.stall.after()))
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.ctx.telemetry.relay_ended(self.booking.take());
    }
}

impl Body for RelayBody {
    type Data = Bytes;
    type Error = RelayError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RelayError>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        loop {
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(inner).poll_frame(cx) {
                Poll::Pending => return this.poll_idle(cx),
                Poll::Ready(Some(Ok(mut frame))) => {
                    this.stall.data();
                    // The policy's observer reads each chunk (never alters it).
                    if let (Some(data), Some(b)) = (frame.data_ref(), this.booking.as_mut()) {
                        b.on_data(data);
                    }
                    if frame.is_data() {
                        this.ctx.telemetry.body_chunk();
                    }
                    if let Some(rw) = this.rewrite.as_mut() {
                        if let Ok(data) = frame.into_data() {
                            let out = rw.data(data);
                            if out.is_empty() {
                                continue;
                            }
                            frame = Frame::data(out);
                        } else {
                            continue;
                        }
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(None) => {
                    if let Some(rest) = this.rewrite.as_mut().and_then(|rw| rw.end()) {
                        this.rewrite = None;
                        if !rest.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(rest))));
                        }
                    }
                    this.finish();
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => return this.fail(RelayError::Broken(e.to_string())),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished
            || (self.rewrite.is_none() && self.inner.as_ref().is_none_or(Body::is_end_stream))
    }

    fn size_hint(&self) -> SizeHint {
        if self.rewrite.as_ref().is_some_and(|rw| !rw.passthrough()) {
            return SizeHint::default();
        }
        self.inner
            .as_ref()
            .map_or_else(SizeHint::default, Body::size_hint)
    }
}

impl Drop for RelayBody {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if self.inner.as_ref().is_none_or(Body::is_end_stream) && self.rewrite.is_none() {
            // Fully relayed (hyper stops polling once the body reports its end).
            self.finish();
            return;
        }
        // The client went away before the body ended: dropping `inner` closes the upstream
        // connection; also ask the worker to stop generating. When an abort was withheld
        // (another request's rid extends this one's), the worker's body is drained instead:
        // SGLang aborts a disconnected request by its rid as a prefix too.
        if let Some(b) = &self.booking {
            let withheld = abort_isolated(
                &self.ctx.tasks,
                &self.ctx.client,
                b.worker(),
                self.ctx.rids.as_ref(),
            );
            if withheld {
                if let Some(body) = self.inner.take() {
                    super::forward::drain_detached(
                        &self.ctx.tasks,
                        body,
                        Box::new(self.ctx.rids.clone()),
                    );
                }
            }
        }
        self.finish();
    }
}
