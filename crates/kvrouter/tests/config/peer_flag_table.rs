//! The sgl-router 0.3.2 and SMG 1.13 command lines against compat.rs' table: every option string
//! of both peers (tests/data/peer-flags, written by scripts/peer-flags.py from their wheels)
//! either parses, taking as many values as the peer's flag, or fails with its refusal reason;
//! none is clap's "unexpected argument". docs/migration.md's flag table is the generated one.
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

use std::process::Command;

use clap::Parser;
use kvrouter::config::compat::{self, Kind, Takes, PEER_FLAGS};
use kvrouter::config::Cli;

const PEERS: &[(&str, &str)] = &[
    (
        "sgl-router 0.3.2",
        include_str!("../data/peer-flags/sgl-router-0.3.2.txt"),
    ),
    ("SMG 1.13", include_str!("../data/peer-flags/smg-1.13.txt")),
];

/// (option string, values) of one peer's data file.
fn peer_flags(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_once('\t').unwrap())
        .collect()
}

fn takes(values: &str) -> Takes {
    match values {
        "0" => Takes::Nothing,
        "1" => Takes::One,
        "1+" => Takes::Many,
        "0+" => Takes::Any,
        other => panic!("values {other:?}: no Takes for it"),
    }
}

/// The value lists to try after a flag taking `values` (each must be accepted).
fn samples(values: &str) -> Vec<Vec<&'static str>> {
    match values {
        "0" => vec![vec![]],
        "1" => vec![vec!["1"]],
        "1+" => vec![vec!["1"], vec!["1", "2"]],
        "0+" => vec![vec![], vec!["1", "2"]],
        other => panic!("values {other:?}"),
    }
}

/// A kvrouter option no peer has, given after the peer flag's values: it must still be seen as
/// a flag (the peer flag consumed no more than its values).
const SENTINEL: [&str; 2] = ["--etcd-prefix", "/sentinel"];

#[derive(Default, Debug)]
struct Counts {
    same: usize,
    alias: usize,
    ignored: usize,
    refused: usize,
}

#[test]
fn every_peer_flag_parses_or_says_why() {
    let mut failures = Vec::new();
    for (peer, text) in PEERS {
        let mut counts = Counts::default();
        for (option, values) in peer_flags(text) {
            let flag = option.strip_prefix("--").unwrap();
            let Some(entry) = compat::find(flag) else {
                failures.push(format!("{peer} {option}: not in compat::PEER_FLAGS"));
                continue;
            };
            if entry.takes != takes(values) {
                failures.push(format!(
                    "{peer} {option}: takes {values}, the table says {:?}",
                    entry.takes
                ));
            }
            match entry.kind {
                Kind::Same(ours) if ours.replace('_', "-") == flag => counts.same += 1,
                Kind::Same(_) => counts.alias += 1,
                Kind::Ignored(_) => counts.ignored += 1,
                Kind::Refused(_) => counts.refused += 1,
            }
            for sample in samples(values) {
                let mut args = vec!["router", option];
                args.extend(&sample);
                args.extend(SENTINEL);
                let shown = args.join(" ");
                match (entry.kind, Cli::try_parse_from(args.clone())) {
                    (Kind::Refused(_), Ok(_)) => failures.push(format!("{shown}: parsed")),
                    (Kind::Refused(_), Err(e)) => {
                        let e = e.to_string();
                        if !e.contains(&compat::refusal_message(entry)) {
                            failures.push(format!("{shown}: {e}"));
                        }
                    }
                    (_, Err(e)) => failures.push(format!("{shown}: {e}")),
                    (kind, Ok(cli)) => {
                        if cli.options.etcd_prefix != "/sentinel" {
                            failures.push(format!("{shown}: the values ran over"));
                        }
                        let seen = match kind {
                            Kind::Same(ours) => cli.is_explicit(ours),
                            _ => cli.ignored.iter().any(|p| p.flag == flag),
                        };
                        if !seen {
                            failures.push(format!("{shown}: {kind:?} not recorded"));
                        }
                    }
                }
            }
        }
        let total = counts.same + counts.alias + counts.ignored + counts.refused;
        eprintln!("{peer}: {total} option strings: {counts:?}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The refusal reaches the user from the binary: exit 2, the reason, no clap tip.
#[test]
fn the_binary_refuses_epd_and_words_unknown_flags() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_router"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--epd-disaggregation", "--encode", "http://e:1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--epd-disaggregation") && err.contains("EPD"),
        "{err}"
    );
    for unknown in ["--prefil", "--enable-rll"] {
        let (code, err) = run(&[unknown]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("neither a kvrouter flag nor an sgl-router"),
            "{err}"
        );
        assert!(!err.contains("tip:") && !err.contains("similar"), "{err}");
    }
}

const BEGIN: &str = "<!-- peer-flags table: generated from src/config/compat.rs, checked by tests/config/peer_flag_table.rs -->\n";
const END: &str = "<!-- end of peer-flags table -->\n";

/// docs/migration.md carries `compat::markdown_table()` between the markers. To regenerate it:
/// `KVROUTER_BLESS_DOCS=1 cargo test -p kvrouter --test config peer_flag_table`.
#[test]
fn migration_doc_table_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/migration.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let start = doc
        .find(BEGIN)
        .expect("docs/migration.md has the table's begin marker")
        + BEGIN.len();
    let end = start
        + doc[start..]
            .find(END)
            .expect("docs/migration.md has the end marker");
    let wanted = compat::markdown_table();
    if doc[start..end] != wanted {
        if std::env::var_os("KVROUTER_BLESS_DOCS").is_some() {
            std::fs::write(path, format!("{}{wanted}{}", &doc[..start], &doc[end..])).unwrap();
            return;
        }
        panic!(
            "docs/migration.md's peer-flag table differs from compat::PEER_FLAGS; regenerate with \
             KVROUTER_BLESS_DOCS=1 cargo test -p kvrouter --test config peer_flag_table"
        );
    }
    assert!(PEER_FLAGS
        .iter()
        .all(|p| wanted.contains(&format!("`--{}`", p.flag))));
}
