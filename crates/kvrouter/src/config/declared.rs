//! [`declared_defaults`]: a clap-declared options struct at its declared defaults, which
//! `options.rs` (every option) and `kv.rs` (the KV options alone) build their `Default` from.

use clap::{Command, FromArgMatches};

/// The declared defaults of `cmd`'s arguments, ignoring the process environment and arguments.
pub(crate) fn declared_defaults<T: FromArgMatches>(cmd: Command) -> Result<T, clap::Error> {
    let cmd = cmd
        .no_binary_name(true)
        .mut_args(|a| a.env(None::<&'static str>));
    T::from_arg_matches(&cmd.try_get_matches_from(std::iter::empty::<String>())?)
}
