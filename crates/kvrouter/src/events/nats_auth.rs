//! How the router authenticates to NATS (`--nats-creds`, `--nats-nkey-seed-file`,
//! `--nats-user`/`--nats-password`, `--nats-token`, `--nats-tls-ca`): the one place a NATS
//! connection is opened, for the KV event feed, the relay, JetStream and shared predictions
//! alike. On a shared network this is what keeps other processes from publishing KV events
//! (or predictions) the router believes: the NATS server grants the router's account the
//! subjects it reads, and only the workers' relays may publish them (docs/events.md). Secrets
//! never appear in `Debug`, logs or errors; credentials written into the URL
//! (`nats://user:pass@host`) are split off at configuration ([`NatsAuth::split_url`]), so the
//! URL can be logged.

use std::path::PathBuf;

use async_nats::{Client, ConnectOptions};

/// A secret string: compared, cloned, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// One way of proving who the router is to the NATS server (at most one is configured).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NatsCredentials {
    /// No credentials (a NATS server without authorization).
    #[default]
    None,
    /// A `.creds` file (user JWT + NKey seed, the decentralized JWT auth of NATS accounts).
    CredsFile(PathBuf),
    /// A file holding an NKey seed (`SU...`), for servers configured with `nkey` users.
    NkeySeedFile(PathBuf),
    /// `user` / `password`.
    UserPassword { user: String, password: Secret },
    /// A bearer token.
    Token(Secret),
}

/// NATS connection security: credentials and the TLS roots to trust.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NatsAuth {
    pub credentials: NatsCredentials,
    /// Extra root certificates (PEM) for `tls://` servers; also makes TLS required.
    pub tls_ca: Option<PathBuf>,
}

impl NatsAuth {
    /// What is configured, for logs: `none`, `creds file`, `nkey`, `user/password`, `token`.
    pub fn kind(&self) -> &'static str {
        match self.credentials {
            NatsCredentials::None => "none",
            NatsCredentials::CredsFile(_) => "creds file",
            NatsCredentials::NkeySeedFile(_) => "nkey",
            NatsCredentials::UserPassword { .. } => "user/password",
            NatsCredentials::Token(_) => "token",
        }
    }

    /// Splits `user:password@` (or a lone `token@`) off a NATS URL list: the URLs without
    /// credentials, and the credentials found (the first URL that has some).
    pub fn split_url(urls: &str) -> (String, NatsCredentials) {
        let mut found = NatsCredentials::None;
        let cleaned: Vec<String> = urls
            .split(',')
            .map(|u| {
                let u = u.trim();
                let Some((scheme, rest)) = u.split_once("://") else {
                    return u.to_string();
                };
                let (authority, path) = match rest.find('/') {
                    Some(i) => rest.split_at(i),
                    None => (rest, ""),
                };
                let Some((userinfo, host)) = authority.rsplit_once('@') else {
                    return u.to_string();
                };
                if found == NatsCredentials::None {
                    found = match userinfo.split_once(':') {
                        Some((user, password)) => NatsCredentials::UserPassword {
                            user: user.to_string(),
                            password: Secret::new(password),
                        },
                        None => NatsCredentials::Token(Secret::new(userinfo)),
                    };
                }
                format!("{scheme}://{host}{path}")
            })
            .collect();
        (cleaned.join(","), found)
    }

    /// The connect options carrying these credentials (files are read now).
    pub async fn options(&self) -> std::io::Result<ConnectOptions> {
        let options = match &self.credentials {
            NatsCredentials::None => ConnectOptions::new(),
            NatsCredentials::CredsFile(path) => ConnectOptions::new()
                .credentials_file(path)
                .await
                .map_err(|e| {
                    std::io::Error::new(e.kind(), format!("--nats-creds {}: {e}", path.display()))
                })?,
            NatsCredentials::NkeySeedFile(path) => {
                let seed = tokio::fs::read_to_string(path).await.map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("--nats-nkey-seed-file {}: {e}", path.display()),
                    )
                })?;
                ConnectOptions::with_nkey(seed.trim().to_string())
            }
            NatsCredentials::UserPassword { user, password } => {
                ConnectOptions::with_user_and_password(user.clone(), password.expose().to_string())
            }
            NatsCredentials::Token(token) => ConnectOptions::with_token(token.expose().to_string()),
        };
        Ok(match &self.tls_ca {
            Some(ca) => options.add_root_certificates(ca.clone()).require_tls(true),
            None => options,
        })
    }

    /// Connects to `url` with these credentials.
    pub async fn connect(&self, url: &str) -> anyhow::Result<Client> {
        Ok(self.options().await?.connect(url).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_are_split_off() {
        let (url, c) = NatsAuth::split_url("nats://router:s3cret@10.0.0.1:4222");
        assert_eq!(url, "nats://10.0.0.1:4222");
        assert_eq!(
            c,
            NatsCredentials::UserPassword {
                user: "router".into(),
                password: Secret::new("s3cret")
            }
        );
        let (url, c) = NatsAuth::split_url("nats://tok3n@a:1, nats://b:2");
        assert_eq!(url, "nats://a:1,nats://b:2");
        assert_eq!(c, NatsCredentials::Token(Secret::new("tok3n")));
        let (url, c) = NatsAuth::split_url("nats://a:1");
        assert_eq!((url.as_str(), c), ("nats://a:1", NatsCredentials::None));
    }

    #[test]
    fn secrets_are_never_printed() {
        let auth = NatsAuth {
            credentials: NatsCredentials::UserPassword {
                user: "router".into(),
                password: Secret::new("s3cret"),
            },
            tls_ca: None,
        };
        let shown = format!("{auth:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("router"),
            "{shown}"
        );
        let token = NatsCredentials::Token(Secret::new("tok3n"));
        assert!(!format!("{token:?}").contains("tok3n"));
        assert_eq!(auth.kind(), "user/password");
    }
}
