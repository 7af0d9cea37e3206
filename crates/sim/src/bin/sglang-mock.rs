//! `sglang-mock`: a simulated SGLang server (see `docs/mock.md`).

use clap::Parser;
use kvrouter_sim::mock::{run, MockArgs};

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = MockArgs::parse();
    let threads = args.worker_threads.max(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?
        .block_on(run(args))
}
