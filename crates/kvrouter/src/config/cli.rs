//! The command line and `KVROUTER_*` environment as one source: [`Cli`] is the parsed
//! [`Options`] plus the names of the options given explicitly (flag or variable), so that the
//! `--config` file fills only the others. The options themselves are declared in `options.rs`,
//! the sgl-router / SMG flags in `compat.rs`: parsing adds them, refuses the refused ones and
//! words clap's unknown-argument error without its misleading "similar argument" tip.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches, Parser};

use super::Options;

/// Parsed `router` flags and environment (`Cli::parse()`, `Cli::try_parse_from(args)`).
/// `Cli::default()` is "nothing given": every option at its declared default.
#[derive(Debug, Clone, Default)]
pub struct Cli {
    /// Flag/environment values, declared defaults elsewhere.
    pub options: Options,
    /// Option names (snake_case, as in the file) set by a flag or an environment variable.
    explicit: BTreeSet<String>,
    /// The accepted-and-ignored sgl-router / SMG flags given (compat.rs), in table order.
    pub ignored: Vec<&'static super::compat::PeerFlag>,
}

impl Cli {
    /// The `--config` file to read, if any.
    pub fn config_path(&self) -> Option<&Path> {
        self.options.config.as_deref()
    }

    /// Whether `name` (snake_case) was given on the command line or in the environment.
    pub fn is_explicit(&self, name: &str) -> bool {
        self.explicit.contains(name)
    }
}

fn explicit_ids(m: &ArgMatches) -> impl Iterator<Item = String> + '_ {
    m.ids()
        .filter(|id| {
            matches!(
                m.value_source(id.as_str()),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
        .map(|id| id.as_str().to_string())
}

impl CommandFactory for Cli {
    fn command() -> Command {
        super::compat::with_peer_flags(Options::command())
    }
    fn command_for_update() -> Command {
        super::compat::with_peer_flags(Options::command_for_update())
    }
}

/// `--prefill URL [PORT]` occurrences as one `"URL [PORT]"` string each (clap flattens them).
fn group_prefill(m: &ArgMatches, options: &mut Options) {
    if let Ok(Some(occurrences)) = m.try_get_occurrences::<String>("prefill") {
        options.prefill = occurrences
            .map(|values| values.cloned().collect::<Vec<_>>().join(" "))
            .collect();
    }
}

impl FromArgMatches for Cli {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        if let Some(e) = super::compat::refusal(m) {
            return Err(e);
        }
        let mut options = Options::from_arg_matches(m)?;
        group_prefill(m, &mut options);
        Ok(Cli {
            options,
            explicit: explicit_ids(m).collect(),
            ignored: super::compat::given(m),
        })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        if let Some(e) = super::compat::refusal(m) {
            return Err(e);
        }
        self.options.update_from_arg_matches(m)?;
        if matches!(m.value_source("prefill"), Some(ValueSource::CommandLine)) {
            group_prefill(m, &mut self.options);
        }
        self.explicit.extend(explicit_ids(m));
        self.ignored.extend(super::compat::given(m));
        Ok(())
    }
}

/// clap's provided `parse*` methods, with the peer-flag errors (`compat::explain_unknown`,
/// `compat::refusal`) in their place; `--help` / `--version` unchanged.
impl Parser for Cli {
    fn try_parse_from<I, T>(itr: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut cmd = Self::command();
        let m = cmd
            .try_get_matches_from_mut(itr)
            .map_err(|e| super::compat::explain_unknown(e, &mut cmd))?;
        Self::from_arg_matches(&m).map_err(|e| e.format(&mut cmd))
    }
    fn parse_from<I, T>(itr: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Self::try_parse_from(itr).unwrap_or_else(|e| e.exit())
    }
    fn try_parse() -> Result<Self, clap::Error> {
        Self::try_parse_from(std::env::args_os())
    }
    fn parse() -> Self {
        Self::parse_from(std::env::args_os())
    }
}
