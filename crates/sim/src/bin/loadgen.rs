//! `loadgen`: parse the command line and run it (see `docs/loadgen.md`).

use std::process::ExitCode;

use clap::Parser;
use kvrouter_sim::demo;
use kvrouter_sim::loadgen::cli::{execute, Cli, WorkloadArgs};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = match &cli.workload {
        WorkloadArgs::Demo(d) => demo::execute(d, cli.common.json.as_deref()).await,
        _ => execute(cli).await,
    };
    match run {
        Ok(code) => code,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::FAILURE
        }
    }
}
