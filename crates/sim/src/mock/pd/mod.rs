//! PD disaggregation roles of the mock (SGLang `--disaggregation-mode null|prefill|decode`,
//! `python/sglang/srt/disaggregation/`). See docs/mock.md "PD disaggregation".
//!
//! Layout: `fields` (the request's bootstrap fields and SGLang's 400), `rooms` (the prefill's
//! room rendezvous), `bootstrap` (the prefill's bootstrap listener), `client` (the decode's
//! registration), `transfer` (the link model), `prefill` / `decode` (the two roles' request
//! paths), `gauges` (`/v1/loads` disaggregation section), `state` (the role and the process's PD
//! state, built at start), `dispatch` (the generation routes call it instead of submitting
//! their requests directly).

pub mod bootstrap;
pub mod client;
mod decode;
pub mod dispatch;
pub mod fields;
pub mod gauges;
pub mod prefill;
pub mod rooms;
pub mod state;
pub mod transfer;
