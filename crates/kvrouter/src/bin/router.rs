//! `router` binary: parse configuration (or print the example configuration file), set up
//! logging, run the HTTP server; `router register ...` runs the etcd registration sidecar
//! instead (`kvrouter::discovery::register`).

// As in the library: tokio's `Instant`, parking_lot's `Mutex` (crates/kvrouter/clippy.toml).
#![warn(clippy::disallowed_types)]

use kvrouter::config::example::example_config;
use kvrouter::config::{Cli, Config};
use kvrouter::server::{self, AppState};

/// Colour only for a terminal that wants it: never in a file or pipe, never with `NO_COLOR`
/// set to anything non-empty (<https://no-color.org>).
fn log_colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

fn init_logging(config: &Config) {
    use std::io::IsTerminal;
    // `Config` validated the level words already; an unknown part cannot reach here.
    let directive = kvrouter::config::log_level::filter_directive(&config.log.level);
    let filter = tracing_subscriber::EnvFilter::try_new(&directive)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = log_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR"),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if config.log.json {
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
    let mut config = match Config::load_from(cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("router: {e}");
            std::process::exit(2);
        }
    };
    config
        .warnings
        .extend(kvrouter::config::env_check::unknown_variable_warnings(
            std::env::vars_os(),
        ));
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

#[cfg(test)]
mod tests {
    use super::log_colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(log_colour(true, None));
        assert!(log_colour(true, Some("".into())));
        assert!(!log_colour(true, Some("1".into())));
        assert!(!log_colour(false, None));
    }
}
