//! `loadgen`: parse the command line and run it (see `docs/loadgen.md`).

use std::process::ExitCode;

use clap::Parser;
use kvrouter_sim::loadgen::cli::{execute, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    match execute(Cli::parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::FAILURE
        }
    }
}
