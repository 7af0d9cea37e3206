//! `router` binary: parse configuration (or print the example configuration file), set up
//! logging, run the HTTP server; `router register ...` runs the etcd registration sidecar
//! instead (`kvrouter::discovery::register`).

use kvrouter::config::example::example_config;
use kvrouter::config::{Cli, Config};
use kvrouter::server::{self, AppState};

fn init_logging(config: &Config) {
    let directive = kvrouter::config::log_level::filter_directive(&config.log_level);
    let filter = tracing_subscriber::EnvFilter::try_new(&directive)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if config.json_log {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() {
    if std::env::args_os().nth(1).is_some_and(|a| a == "register") {
        let status = kvrouter::discovery::register::main(std::env::args_os().skip(1)).await;
        std::process::exit(status);
    }
    let cli = <Cli as clap::Parser>::parse();
    if cli.options.print_example_config {
        print!("{}", example_config());
        return;
    }
    let config = match Config::load_from(cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("router: {e}");
            std::process::exit(2);
        }
    };
    init_logging(&config);
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    if let Some(warning) = config.admin_warning() {
        tracing::warn!("{warning}");
    }
    let state = AppState::new(config);
    if let Err(e) = server::run(state).await {
        eprintln!("router: {e:#}");
        std::process::exit(1);
    }
}
