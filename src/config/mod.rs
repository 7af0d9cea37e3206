//! Router configuration: CLI flags, environment variables and a TOML file merged into one validated `Config`.
