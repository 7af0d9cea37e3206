//! `agent`: S concurrent multi-turn sessions of T turns. Every turn resends the
//! whole context (shared system prefix, the session's task, then per earlier turn
//! the model's output ids and new tool-output tokens) with `X-SMG-Routing-Key:
//! <session id>`, as miles' session server does. Between turns a session waits the
//! tool latency plus an exponential think time, long enough for idle sessions'
//! prefixes to be evicted on a loaded fleet.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};

use crate::loadgen::config::AgentConfig;
use crate::loadgen::dist::{self, ExpWait, Stream};
use crate::loadgen::request::RequestSpec;
use crate::loadgen::response::ResponseInfo;
use crate::loadgen::runner::Runner;
use crate::loadgen::synth::{self, Domain};

/// The routing key of session `index`: a UUID derived from the seed.
pub fn session_id(seed: u64, index: u32) -> String {
    use xxhash_rust::xxh3::xxh3_64_with_seed;
    let hi = xxh3_64_with_seed(&index.to_le_bytes(), seed);
    let lo = xxh3_64_with_seed(&index.to_be_bytes(), !seed);
    uuid::Uuid::from_u64_pair(hi, lo).to_string()
}

/// One agent session's state between turns.
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    pub index: u32,
    pub id: String,
    /// Everything sent so far plus the last turn's output and tool result.
    pub context: Vec<u32>,
    /// Turns completed.
    pub turn: u32,
    /// Lengths of the messages in `context`: system prefix, task, then per turn the model's
    /// output and the tool output (what `--text` sends as separate messages).
    pub segments: Vec<u32>,
}

impl Session {
    /// Session `index` before its first turn: shared system prefix + its own task.
    pub fn new(cfg: &AgentConfig, seed: u64, index: u32) -> Session {
        let mut context = synth::block(
            seed,
            Domain::SystemPrefix,
            1,
            cfg.system_prefix_len as usize,
        );
        synth::extend(
            &mut context,
            seed,
            Domain::AgentPrompt,
            u64::from(index),
            cfg.first_prompt_len as usize,
        );
        Session {
            index,
            id: session_id(seed, index),
            context,
            turn: 0,
            segments: vec![cfg.system_prefix_len, cfg.first_prompt_len],
        }
    }

    /// The request of the current turn.
    pub fn request(&self, seed: u64, max_new_tokens: u32, scheduled: Duration) -> RequestSpec {
        RequestSpec {
            tag: format!("sess{}/t{}", self.index, self.turn),
            input_ids: Arc::from(self.context.as_slice()),
            max_new_tokens,
            sampling_seed: Some(seed.wrapping_add(u64::from(self.turn))),
            routing_key: Some(self.id.clone()),
            affinity: u64::from(self.index),
            scheduled,
            batch: None,
            text_segments: Some(Arc::from(self.segments.as_slice())),
        }
    }

    /// Appends the turn's model output (the response's token ids, or stand-in tokens
    /// of its completion length when it carries none) and the next tool output.
    pub fn absorb(
        &mut self,
        cfg: &AgentConfig,
        seed: u64,
        max_new_tokens: u32,
        reply: &ResponseInfo,
    ) {
        let turn_id = u64::from(self.index) << 32 | u64::from(self.turn);
        let before = self.context.len();
        match &reply.output_ids {
            Some(ids) => self.context.extend_from_slice(ids),
            None => {
                let len = reply.completion_tokens.unwrap_or(u64::from(max_new_tokens));
                synth::extend(
                    &mut self.context,
                    seed,
                    Domain::ModelOutput,
                    turn_id,
                    len as usize,
                );
            }
        }
        synth::extend(
            &mut self.context,
            seed,
            Domain::ToolOutput,
            turn_id,
            cfg.tool_output_len as usize,
        );
        let output = (self.context.len() - before) as u32 - cfg.tool_output_len;
        self.segments.extend([output, cfg.tool_output_len]);
        self.turn += 1;
    }
}

/// The waits of session `index` between its turns (simulated time): the fixed tool
/// latency plus an exponential think time of mean `think_time_ms`, from the session's
/// own random stream.
pub fn waits(cfg: &AgentConfig, seed: u64, index: u32) -> impl Iterator<Item = Duration> {
    let fixed = Duration::from_millis(cfg.tool_latency_ms);
    let think = ExpWait::new(cfg.think_time_ms / 1000.0);
    let mut rng = dist::rng(seed, Stream::Think, u64::from(index));
    std::iter::repeat_with(move || fixed + think.map_or(Duration::ZERO, |t| t.sample(&mut rng)))
}

/// Runs all sessions concurrently; a session ends after its last turn, on a failed
/// turn, or when the run stops.
pub async fn run(runner: &Runner, cfg: &AgentConfig, seed: u64, max_new_tokens: u32) {
    stream::iter(0..cfg.sessions)
        .map(|index| async move {
            let mut session = Session::new(cfg, seed, index);
            let mut waits = waits(cfg, seed, index);
            while session.turn < cfg.turns && !runner.expired() {
                let spec = session.request(seed, max_new_tokens, runner.start().elapsed());
                let Some(reply) = runner.send(spec).await else {
                    break;
                };
                session.absorb(cfg, seed, max_new_tokens, &reply);
                if session.turn < cfg.turns {
                    let wait = waits.next().unwrap_or_default();
                    if !runner.sleep_sim(wait).await {
                        break;
                    }
                }
            }
        })
        .buffer_unordered(cfg.sessions as usize)
        .collect::<()>()
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> AgentConfig {
        AgentConfig {
            sessions: 3,
            turns: 3,
            system_prefix_len: 32,
            first_prompt_len: 16,
            tool_output_len: 8,
            tool_latency_ms: 0,
            think_time_ms: 0.0,
        }
    }

    #[test]
    fn waits_are_the_tool_latency_plus_exponential_think_time() {
        let none: Vec<Duration> = waits(&cfg(), 1, 0).take(3).collect();
        assert_eq!(none, vec![Duration::ZERO; 3]);
        let c = AgentConfig {
            tool_latency_ms: 100,
            think_time_ms: 2000.0,
            ..cfg()
        };
        let a: Vec<Duration> = waits(&c, 1, 0).take(4000).collect();
        assert_eq!(a[..10], waits(&c, 1, 0).take(10).collect::<Vec<_>>()[..]);
        assert_ne!(a[..10], waits(&c, 1, 1).take(10).collect::<Vec<_>>()[..]);
        assert!(a.iter().all(|w| *w >= Duration::from_millis(100)));
        let mean = a.iter().map(Duration::as_secs_f64).sum::<f64>() / a.len() as f64;
        assert!((2.0..2.2).contains(&mean), "mean {mean}");
    }

    #[test]
    fn session_ids_are_stable_uuids_and_distinct() {
        assert_eq!(session_id(1, 0), session_id(1, 0));
        assert_ne!(session_id(1, 0), session_id(1, 1));
        assert_ne!(session_id(1, 0), session_id(2, 0));
        assert!(uuid::Uuid::parse_str(&session_id(1, 0)).is_ok());
    }

    #[test]
    fn sessions_share_only_the_system_prefix() {
        let a = Session::new(&cfg(), 5, 0);
        let b = Session::new(&cfg(), 5, 1);
        assert_eq!(a.context.len(), 48);
        assert_eq!(a.context[..32], b.context[..32]);
        assert_ne!(a.context[32..], b.context[32..]);
    }

    #[test]
    fn each_turn_resends_the_whole_context() {
        let c = cfg();
        let mut s = Session::new(&c, 5, 2);
        let first = s.request(5, 4, Duration::ZERO);
        assert_eq!(first.routing_key.as_deref(), Some(s.id.as_str()));
        assert_eq!(first.tag, "sess2/t0");
        let reply = ResponseInfo {
            output_ids: Some(vec![7, 8, 9, 10]),
            completion_tokens: Some(4),
            ..ResponseInfo::default()
        };
        s.absorb(&c, 5, 4, &reply);
        let second = s.request(5, 4, Duration::ZERO);
        assert_eq!(second.input_ids.len(), 48 + 4 + 8);
        assert_eq!(second.input_ids[..48], first.input_ids[..]);
        assert_eq!(second.input_ids[48..52], [7, 8, 9, 10]);
        assert_eq!(second.tag, "sess2/t1");
    }

    #[test]
    fn outputs_without_ids_become_deterministic_stand_ins() {
        let c = cfg();
        let reply = ResponseInfo {
            completion_tokens: Some(3),
            ..ResponseInfo::default()
        };
        let mut a = Session::new(&c, 5, 0);
        let mut b = Session::new(&c, 5, 0);
        a.absorb(&c, 5, 4, &reply);
        b.absorb(&c, 5, 4, &reply);
        assert_eq!(a, b);
        assert_eq!(a.context.len(), 48 + 3 + 8);
        let mut none = Session::new(&c, 5, 0);
        none.absorb(&c, 5, 4, &ResponseInfo::default());
        assert_eq!(
            none.context.len(),
            48 + 4 + 8,
            "falls back to max_new_tokens"
        );
    }
}
