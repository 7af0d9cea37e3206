//! The process's SIGTERM and SIGINT handlers, shared by the server's drain
//! (`server::shutdown`) and the `router register` sidecar (`discovery::register`).

/// Which signal started the drain.
pub(crate) type SignalName = &'static str;

/// The installed SIGTERM and SIGINT handlers. Install them before announcing readiness so
/// a signal sent right after the `listening on` line is not lost.
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers (needs a tokio runtime).
    pub(crate) fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the first SIGTERM or SIGINT.
    pub(crate) async fn recv(&mut self) -> SignalName {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
