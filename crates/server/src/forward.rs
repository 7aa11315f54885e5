//! Forwarding between workers: a request for a key another worker's partition owns travels to
//! that worker in a batch over a bounded queue, is executed there, and its reply comes back in
//! the same batch over the reverse queue (MICA's software request forwarding, done in bulk so a
//! queue operation and a wake-up are shared by many requests).
//!
//! Every ordered pair of workers has its own channel, written by one worker and read by the
//! other. A worker may have at most `MAX_BATCHES_IN_FLIGHT` request batches out to each other
//! worker; past that it stops taking requests that need forwarding (back-pressure) until
//! replies return, so the channels never fill and nothing is dropped or reordered. Batches are
//! recycled, so a warm worker forwards without allocating.

use crate::limits::{BATCH_BYTES, BATCH_ENTRIES, KEEP_BATCH_BYTES, MAX_BATCHES_IN_FLIGHT, POOL_BATCHES};
use crate::pending::Pending;
use mio::Waker;
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// Requests for one worker, and then its replies.
#[derive(Default)]
pub(crate) struct Batch {
    pub requests: Vec<u8>,
    pub entries: Vec<Pending>,
    pub replies: Vec<u8>,
}

impl Batch {
    /// The request bytes and reply bytes of each entry, in order.
    pub(crate) fn ranges(
        &self,
    ) -> impl Iterator<Item = (Pending, std::ops::Range<usize>, std::ops::Range<usize>)> + '_ {
        let mut request_start = 0;
        let mut reply_start = 0;
        self.entries.iter().map(move |entry| {
            let request = request_start..entry.request_end;
            let reply = reply_start..entry.reply_end.max(reply_start);
            request_start = entry.request_end;
            reply_start = reply.end;
            (*entry, request, reply)
        })
    }
}

pub(crate) enum Message {
    /// Requests to execute; send the batch back as `Replies`.
    Requests(Box<Batch>),
    /// The replies to a batch this worker sent.
    Replies(Box<Batch>),
    /// Replies to requests the owner deferred (`Kind::Deferred`) for a flash read.
    Late(Box<Batch>),
}

/// What other workers may touch of a worker: its wake-up and whether it needs one.
pub(crate) struct Peer {
    /// Set while the worker may block in its poll; senders wake it then.
    pub sleeping: AtomicBool,
    pub waker: Waker,
}

/// One worker's ends of the channels to and from every other worker.
pub(crate) struct Links {
    id: usize,
    to: Vec<Option<SyncSender<Message>>>,
    from: Vec<Option<Receiver<Message>>>,
    peers: Arc<Vec<Peer>>,
    /// The batch being filled for each worker.
    open: Vec<Option<Box<Batch>>>,
    /// Request batches out to each worker (the open one included).
    in_flight: Vec<usize>,
    /// Messages a full channel refused (never expected: the in-flight limit keeps channels
    /// from filling), sent again later.
    outbox: Vec<VecDeque<Message>>,
    woken: Vec<bool>,
    #[allow(clippy::vec_box)] // batches travel boxed; the pool keeps them boxed to reuse
    pool: Vec<Box<Batch>>,
}

/// Channels for `workers` workers: the `Links` of each, in worker order.
pub(crate) fn connect(peers: &Arc<Vec<Peer>>) -> Vec<Links> {
    let workers = peers.len();
    let mut to: Vec<Vec<Option<SyncSender<Message>>>> = (0..workers).map(|_| Vec::new()).collect();
    let mut from: Vec<Vec<Option<Receiver<Message>>>> = (0..workers).map(|_| Vec::new()).collect();
    for (sender, senders) in to.iter_mut().enumerate() {
        for (receiver, receivers) in from.iter_mut().enumerate() {
            if sender == receiver {
                senders.push(None);
                receivers.push(None);
            } else {
                // Requests from `sender` plus replies to `receiver`'s requests: each at most
                // MAX_BATCHES_IN_FLIGHT.
                let (tx, rx) = std::sync::mpsc::sync_channel(2 * MAX_BATCHES_IN_FLIGHT);
                senders.push(Some(tx));
                receivers.push(Some(rx));
            }
        }
    }
    to.into_iter()
        .zip(from)
        .enumerate()
        .map(|(id, (to, from))| Links {
            id,
            to,
            from,
            peers: Arc::clone(peers),
            open: (0..workers).map(|_| None).collect(),
            in_flight: vec![0; workers],
            outbox: (0..workers).map(|_| VecDeque::new()).collect(),
            woken: vec![false; workers],
            pool: Vec::new(),
        })
        .collect()
}

impl Links {
    pub(crate) fn workers(&self) -> usize {
        self.to.len()
    }

    /// Whether a request for `owner` can be taken now (a batch is open or may be opened).
    pub(crate) fn can_forward(&self, owner: usize) -> bool {
        self.open[owner].is_some() || self.in_flight[owner] < MAX_BATCHES_IN_FLIGHT
    }

    /// Whether a request for every other worker can be taken now.
    pub(crate) fn can_forward_to_all(&self) -> bool {
        (0..self.workers()).all(|owner| owner == self.id || self.can_forward(owner))
    }

    /// Adds a request (the concatenation of `parts`) for `owner`; false, changing nothing,
    /// when `owner` already has the most batches in flight.
    pub(crate) fn forward(&mut self, owner: usize, mut entry: Pending, parts: &[&[u8]]) -> bool {
        if !self.can_forward(owner) {
            return false;
        }
        let batch = match &mut self.open[owner] {
            Some(batch) => batch,
            open @ None => {
                self.in_flight[owner] += 1;
                open.insert(self.pool.pop().unwrap_or_default())
            }
        };
        for part in parts {
            batch.requests.extend_from_slice(part);
        }
        entry.request_end = batch.requests.len();
        batch.entries.push(entry);
        if batch.requests.len() >= BATCH_BYTES || batch.entries.len() >= BATCH_ENTRIES {
            self.send_open(owner);
        }
        true
    }

    fn send_open(&mut self, owner: usize) {
        if let Some(batch) = self.open[owner].take() {
            self.send(owner, Message::Requests(batch));
        }
    }

    /// Sends a batch of executed requests back to the worker that sent it.
    pub(crate) fn reply(&mut self, to: usize, batch: Box<Batch>) {
        self.send(to, Message::Replies(batch));
    }

    /// Sends replies of deferred requests back to the worker that forwarded them.
    pub(crate) fn send_late(&mut self, to: usize, batch: Box<Batch>) {
        self.send(to, Message::Late(batch));
    }

    fn send(&mut self, to: usize, message: Message) {
        self.outbox[to].push_back(message);
        self.pump(to);
    }

    fn pump(&mut self, to: usize) {
        let Some(sender) = &self.to[to] else { return };
        while let Some(message) = self.outbox[to].pop_front() {
            match sender.try_send(message) {
                Ok(()) => self.woken[to] = true,
                Err(TrySendError::Full(message)) => {
                    self.outbox[to].push_front(message);
                    break;
                }
                // The other worker has stopped: the server is shutting down.
                Err(TrySendError::Disconnected(_)) => self.outbox[to].clear(),
            }
        }
    }

    /// Sends every open batch and wakes the workers that got messages and may be asleep.
    /// Wakes worker `to` (something other than a batch waits for it).
    pub(crate) fn wake(&self, to: usize) {
        let _ = self.peers[to].waker.wake();
    }

    pub(crate) fn send_all(&mut self) {
        for owner in 0..self.workers() {
            self.send_open(owner);
            self.pump(owner);
        }
        // Pairs with the fence in `may_sleep`: either this sees the flag set, or the other
        // worker sees the message before it sleeps.
        fence(Ordering::SeqCst);
        for to in 0..self.workers() {
            if std::mem::take(&mut self.woken[to]) && self.peers[to].sleeping.load(Ordering::Relaxed) {
                let _ = self.peers[to].waker.wake();
            }
        }
    }

    /// Moves every message waiting for this worker into `inbox` as (sender, message).
    pub(crate) fn receive(&mut self, inbox: &mut Vec<(usize, Message)>) {
        for (sender, receiver) in self.from.iter().enumerate() {
            let Some(receiver) = receiver else { continue };
            // Empty or disconnected (the server is stopping) both end the collection.
            while let Ok(message) = receiver.try_recv() {
                inbox.push((sender, message));
            }
        }
    }

    /// Announces that this worker is about to block, then collects what arrived meanwhile;
    /// true if it may block (nothing arrived). `awake` must be called after the block.
    pub(crate) fn may_sleep(&mut self, inbox: &mut Vec<(usize, Message)>) -> bool {
        self.peers[self.id].sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.receive(inbox);
        if inbox.is_empty() {
            true
        } else {
            self.awake();
            false
        }
    }

    pub(crate) fn awake(&self) {
        self.peers[self.id].sleeping.store(false, Ordering::Relaxed);
    }

    /// Takes back a batch whose replies were delivered.
    pub(crate) fn returned(&mut self, from: usize, mut batch: Box<Batch>) {
        self.in_flight[from] -= 1;
        if self.pool.len() < POOL_BATCHES
            && batch.requests.capacity() <= KEEP_BATCH_BYTES
            && batch.replies.capacity() <= KEEP_BATCH_BYTES
        {
            batch.requests.clear();
            batch.entries.clear();
            batch.replies.clear();
            self.pool.push(batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pending::Kind;

    fn links(workers: usize) -> (Vec<Links>, Vec<mio::Poll>) {
        let polls: Vec<mio::Poll> = (0..workers).map(|_| mio::Poll::new().unwrap()).collect();
        let peers: Vec<Peer> = polls
            .iter()
            .map(|poll| Peer {
                sleeping: AtomicBool::new(false),
                waker: Waker::new(poll.registry(), mio::Token(0)).unwrap(),
            })
            .collect();
        (connect(&Arc::new(peers)), polls)
    }

    fn entry(seq: u64) -> Pending {
        Pending::new(3, 9, -1, seq, Kind::Request, crate::pending::Learned::default())
    }

    #[test]
    fn batches_travel_in_order_and_come_back() {
        let (mut all, _polls) = links(2);
        let mut b = all.pop().unwrap();
        let mut a = all.pop().unwrap();
        assert!(a.forward(1, entry(0), &[b"get x\r\n"]));
        assert!(a.forward(1, entry(1), &[b"get ", b"y\r\n"]));
        a.send_all();
        let mut inbox = Vec::new();
        b.receive(&mut inbox);
        assert_eq!(inbox.len(), 1);
        let (from, Message::Requests(mut batch)) = inbox.pop().unwrap() else { panic!("expected requests") };
        assert_eq!(from, 0);
        let requests: Vec<Vec<u8>> = batch.ranges().map(|(_, r, _)| batch.requests[r].to_vec()).collect();
        assert_eq!(requests, vec![b"get x\r\n".to_vec(), b"get y\r\n".to_vec()]);
        for (i, reply) in [&b"END\r\n"[..], b"VALUE y 0 1\r\nz\r\nEND\r\n"].iter().enumerate() {
            batch.replies.extend_from_slice(reply);
            batch.entries[i].reply_end = batch.replies.len();
        }
        b.reply(0, batch);
        b.send_all();
        a.receive(&mut inbox);
        let (_, Message::Replies(batch)) = inbox.pop().unwrap() else { panic!("expected replies") };
        let replies: Vec<(u64, Vec<u8>)> = batch.ranges().map(|(e, _, r)| (e.seq, batch.replies[r].to_vec())).collect();
        assert_eq!(replies[0], (0, b"END\r\n".to_vec()));
        assert_eq!(replies[1].0, 1);
        assert_eq!(a.in_flight[1], 1);
        a.returned(1, batch);
        assert_eq!(a.in_flight[1], 0);
    }

    #[test]
    fn a_full_pipe_refuses_instead_of_dropping() {
        let (mut all, _polls) = links(2);
        let a = &mut all[0];
        let big = vec![b'x'; BATCH_BYTES];
        for seq in 0..MAX_BATCHES_IN_FLIGHT as u64 {
            assert!(a.forward(1, entry(seq), &[&big]), "batch {seq}");
        }
        // Every batch went out when it filled; no credit is left.
        assert!(!a.can_forward(1));
        assert!(!a.forward(1, entry(99), &[b"get z\r\n"]));
        assert!(!a.can_forward_to_all());
        let mut inbox = Vec::new();
        all[1].receive(&mut inbox);
        assert_eq!(inbox.len(), MAX_BATCHES_IN_FLIGHT);
    }
}
