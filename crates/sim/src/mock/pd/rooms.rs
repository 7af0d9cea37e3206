//! The prefill role's room rendezvous: pairs each prefill request with the decode worker that
//! registered for the same `bootstrap_room` (SGLang: the decode's `KVReceiver` sends its KV
//! indices to the prefill's `KVSender` for that room, `disaggregation/common/conn.py`; the
//! room table is `common/bootstrap.py`). Either side may come first. A second decode receiver
//! for a room that already has one is rejected ("Duplicate decode bootstrap room",
//! `conn.py`). A room lives until its prefill ticket is dropped (transfer done, failure or
//! client gone) or its waiting decode registration is withdrawn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// What the prefill sends the decode once the KV is across.
#[derive(Debug, Clone, PartialEq)]
pub struct Transferred {
    /// The first output token the prefill sampled, and its logprob.
    pub first_token: u32,
    pub logprob: f32,
    /// Tokens whose KV was sent (the prompt less the decode's own prefix, page-rounded).
    pub tokens: usize,
    /// The prefill's prefix-cache hit, which the decode reports (`cached_tokens[0]` of the
    /// metadata buffer, `disaggregation/decode.py` `_commit_transfer_to_req`).
    pub cached_tokens: usize,
}

/// A decode worker's registration for a room.
#[derive(Debug)]
pub struct DecodeReg {
    id: u64,
    /// Tokens the decode already holds (`decode_prefix_len`; 0 without a decode radix cache).
    pub prefix_len: usize,
    /// The prefill DP rank the decode expects (`disagg_prefill_dp_rank`), if it named one.
    pub prefill_dp_rank: Option<u32>,
    /// Answered once: the transfer's outcome. Dropped unanswered = the prefill went away.
    pub reply: oneshot::Sender<Result<Transferred, String>>,
}

/// The lifecycle of one room.
#[derive(Debug)]
enum Room {
    /// The decode registered first and waits for the prefill request of the room.
    DecodeFirst(DecodeReg),
    /// The prefill request is in (computing or waiting for its peer), no decode yet.
    PrefillWaiting(oneshot::Sender<DecodeReg>),
    /// Paired: the prefill ticket holds the decode's registration.
    Paired,
}

/// Why a registration or a prefill could not take a room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoomError {
    /// A decode already registered for this room.
    DuplicateDecode,
    /// A prefill request already owns this room.
    DuplicatePrefill,
}

impl std::fmt::Display for RoomError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoomError::DuplicateDecode => f.write_str("Duplicate decode bootstrap room"),
            RoomError::DuplicatePrefill => f.write_str("Duplicate or cancelled bootstrap room"),
        }
    }
}

/// The room table of one prefill process (rooms are unique across its DP ranks).
#[derive(Debug, Default)]
pub struct Rooms {
    rooms: Mutex<HashMap<u64, Room>>,
    next_id: AtomicU64,
}

impl Rooms {
    /// Rooms currently open (any state).
    pub fn len(&self) -> usize {
        self.rooms.lock().len()
    }

    /// True when no room is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A prefill request takes `room`; the ticket frees it when dropped.
    pub fn open_prefill(self: &Arc<Self>, room: u64) -> Result<PrefillTicket, RoomError> {
        let mut rooms = self.rooms.lock();
        let peer = match rooms.remove(&room) {
            None => None,
            Some(Room::DecodeFirst(reg)) => Some(reg),
            Some(other) => {
                rooms.insert(room, other);
                return Err(RoomError::DuplicatePrefill);
            }
        };
        let waiter = if peer.is_some() {
            rooms.insert(room, Room::Paired);
            None
        } else {
            let (tx, rx) = oneshot::channel();
            rooms.insert(room, Room::PrefillWaiting(tx));
            Some(rx)
        };
        Ok(PrefillTicket {
            rooms: self.clone(),
            room,
            peer,
            waiter,
        })
    }

    /// A decode registers for `room`; the guard withdraws an unpaired registration on drop.
    pub fn register_decode(
        self: &Arc<Self>,
        room: u64,
        prefix_len: usize,
        prefill_dp_rank: Option<u32>,
    ) -> Result<DecodeWait, RoomError> {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut reg = DecodeReg {
            id,
            prefix_len,
            prefill_dp_rank,
            reply: tx,
        };
        let mut rooms = self.rooms.lock();
        match rooms.remove(&room) {
            None => {
                rooms.insert(room, Room::DecodeFirst(reg));
            }
            Some(Room::PrefillWaiting(waiter)) => match waiter.send(reg) {
                Ok(()) => {
                    rooms.insert(room, Room::Paired);
                }
                // The prefill ticket is being dropped: wait as if the decode came first.
                Err(back) => {
                    reg = back;
                    rooms.insert(room, Room::DecodeFirst(reg));
                }
            },
            Some(other) => {
                rooms.insert(room, other);
                return Err(RoomError::DuplicateDecode);
            }
        }
        Ok(DecodeWait {
            rooms: self.clone(),
            room,
            id,
            rx,
        })
    }

    fn withdraw_decode(&self, room: u64, id: u64) {
        let mut rooms = self.rooms.lock();
        if matches!(rooms.get(&room), Some(Room::DecodeFirst(r)) if r.id == id) {
            rooms.remove(&room);
        }
    }

    fn close_prefill(&self, room: u64) {
        let mut rooms = self.rooms.lock();
        if matches!(
            rooms.get(&room),
            Some(Room::Paired) | Some(Room::PrefillWaiting(_))
        ) {
            rooms.remove(&room);
        }
    }
}

/// A prefill request's hold on its room.
#[derive(Debug)]
pub struct PrefillTicket {
    rooms: Arc<Rooms>,
    room: u64,
    peer: Option<DecodeReg>,
    waiter: Option<oneshot::Receiver<DecodeReg>>,
}

impl PrefillTicket {
    /// The room.
    pub fn room(&self) -> u64 {
        self.room
    }

    /// Waits until the decode peer registers, or `deadline` (the bootstrap timeout);
    /// `None` when the deadline passed (or the peer was already taken).
    pub async fn peer(&mut self, deadline: Instant) -> Option<DecodeReg> {
        if let Some(p) = self.peer.take() {
            return Some(p);
        }
        let rx = self.waiter.as_mut()?;
        match tokio::time::timeout_at(deadline.into(), rx).await {
            Ok(Ok(reg)) => {
                self.waiter = None;
                Some(reg)
            }
            Ok(Err(_)) | Err(_) => None,
        }
    }
}

impl Drop for PrefillTicket {
    fn drop(&mut self) {
        // An unanswered peer registration is dropped with the ticket: its decode sees the
        // prefill go away.
        self.rooms.close_prefill(self.room);
    }
}

/// A decode registration waiting for its transfer.
#[derive(Debug)]
pub struct DecodeWait {
    rooms: Arc<Rooms>,
    room: u64,
    id: u64,
    rx: oneshot::Receiver<Result<Transferred, String>>,
}

impl DecodeWait {
    /// The transfer's outcome (an error when the prefill went away unanswered).
    pub async fn outcome(&mut self) -> Result<Transferred, String> {
        match (&mut self.rx).await {
            Ok(r) => r,
            Err(_) => Err("the prefill request of this room ended before the transfer".into()),
        }
    }
}

impl Drop for DecodeWait {
    fn drop(&mut self) {
        self.rooms.withdraw_decode(self.room, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t() -> Transferred {
        Transferred {
            first_token: 300,
            logprob: -0.5,
            tokens: 16,
            cached_tokens: 0,
        }
    }

    #[tokio::test]
    async fn decode_first_then_prefill() {
        let rooms = Arc::new(Rooms::default());
        let mut wait = rooms.register_decode(7, 16, Some(1)).unwrap();
        let mut ticket = rooms.open_prefill(7).unwrap();
        let peer = ticket
            .peer(Instant::now() + Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!((peer.prefix_len, peer.prefill_dp_rank), (16, Some(1)));
        peer.reply.send(Ok(t())).unwrap();
        assert_eq!(wait.outcome().await.unwrap(), t());
        drop(ticket);
        drop(wait);
        assert!(rooms.is_empty());
    }

    #[tokio::test]
    async fn prefill_first_then_decode_and_duplicates() {
        let rooms = Arc::new(Rooms::default());
        let mut ticket = rooms.open_prefill(9).unwrap();
        assert_eq!(
            rooms.open_prefill(9).unwrap_err(),
            RoomError::DuplicatePrefill
        );
        let mut wait = rooms.register_decode(9, 0, None).unwrap();
        assert_eq!(
            rooms.register_decode(9, 0, None).unwrap_err(),
            RoomError::DuplicateDecode
        );
        let peer = ticket
            .peer(Instant::now() + Duration::from_secs(5))
            .await
            .unwrap();
        drop(peer);
        assert!(wait.outcome().await.is_err(), "unanswered = prefill gone");
        drop(ticket);
        assert!(rooms.is_empty());
    }

    #[tokio::test]
    async fn bootstrap_timeout_and_client_drop_free_the_room() {
        let rooms = Arc::new(Rooms::default());
        let mut ticket = rooms.open_prefill(3).unwrap();
        assert!(ticket.peer(Instant::now()).await.is_none());
        drop(ticket);
        assert!(rooms.is_empty());
        let wait = rooms.register_decode(4, 0, None).unwrap();
        assert_eq!(rooms.len(), 1);
        drop(wait);
        assert!(rooms.is_empty());
    }
}
