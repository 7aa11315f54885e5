//! A connection's reply order: replies leave in the order their requests came, whoever
//! produces them. A reply produced here while nothing waits goes straight to the output; once
//! a reply is due from another worker (a forwarded request, a split get's key, a broadcast),
//! it holds a numbered part, and every later reply queues behind it until it is complete.
//! UDP adds marks: where one request's message ends in the output.
//!
//! Pure bookkeeping over buffers: no sockets, no partition, no other worker.

use crate::limits::{POOL_BUFFERS, POOL_BUFFER_BYTES};
use std::collections::VecDeque;

/// One reply in the order: written here, or still due from other workers.
pub(super) struct Part {
    pub(super) bytes: Vec<u8>,
    /// Replies (or acknowledgements) still due from other workers.
    pub(super) waiting: usize,
    /// The end of one UDP message (no bytes): where the output stands is recorded in `marks`.
    mark: bool,
}

impl Part {
    /// A part due from `waiting` other workers, built before it joins the order
    /// (`ReplyOrder::push_part`), so this worker can write its own share into it first.
    pub(super) fn waiting_for(bytes: Vec<u8>, waiting: usize) -> Part {
        Part { bytes, waiting, mark: false }
    }
}

/// The replies of one connection that wait for an earlier one from another worker.
#[derive(Default)]
pub(super) struct ReplyOrder {
    /// Oldest first.
    parts: VecDeque<Part>,
    /// Sequence number of `parts[0]`.
    first_seq: u64,
}

impl ReplyOrder {
    /// Parts held (complete ones included, until the ones before them are).
    pub(super) fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether every reply so far has gone to the output.
    pub(super) fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Sequence number the next part gets.
    pub(super) fn next_seq(&self) -> u64 {
        self.first_seq + self.parts.len() as u64
    }

    /// A reply due from `waiting` other workers, to be written into `bytes` (an empty buffer):
    /// its sequence number, by which `part_mut` finds it.
    pub(super) fn push_waiting(&mut self, bytes: Vec<u8>, waiting: usize) -> u64 {
        self.push_part(Part::waiting_for(bytes, waiting))
    }

    /// Joins `part` (from `Part::waiting_for`) to the order: its sequence number.
    pub(super) fn push_part(&mut self, part: Part) -> u64 {
        let seq = self.next_seq();
        self.parts.push_back(part);
        seq
    }

    /// The part numbered `seq`, if it is still held.
    pub(super) fn part_mut(&mut self, seq: u64) -> Option<&mut Part> {
        let index = seq.checked_sub(self.first_seq)?;
        self.parts.get_mut(usize::try_from(index).ok()?)
    }

    /// Where a reply produced now goes: straight to `output` when nothing waits ahead of it,
    /// otherwise into the last part (if complete) or a new one.
    #[inline]
    pub(super) fn local_out<'a>(&'a mut self, output: &'a mut Vec<u8>, pool: &mut Vec<Vec<u8>>) -> &'a mut Vec<u8> {
        if self.parts.is_empty() {
            return output;
        }
        if self.parts.back().is_some_and(|part| part.waiting > 0 || part.mark) {
            self.parts.push_back(Part { bytes: pool.pop().unwrap_or_default(), waiting: 0, mark: false });
        }
        &mut self.parts.back_mut().expect("a part was just ensured").bytes
    }

    /// Ends one UDP message after every reply given so far: at once in `marks` when nothing
    /// waits, otherwise when the parts before it are complete.
    pub(super) fn mark(&mut self, output_len: usize, marks: &mut Vec<usize>) {
        if self.parts.is_empty() {
            marks.push(output_len);
        } else {
            self.parts.push_back(Part { bytes: Vec::new(), waiting: 0, mark: true });
        }
    }

    /// Moves the complete replies at the front to `output` (recording marks), and keeps
    /// their buffers for reuse in `pool` (within its bounds).
    pub(super) fn drain(&mut self, output: &mut Vec<u8>, marks: &mut Vec<usize>, pool: &mut Vec<Vec<u8>>) {
        while self.parts.front().is_some_and(|part| part.waiting == 0) {
            let mut part = self.parts.pop_front().expect("front exists");
            self.first_seq += 1;
            if part.mark {
                marks.push(output.len());
            }
            output.extend_from_slice(&part.bytes);
            if pool.len() < POOL_BUFFERS && part.bytes.capacity() <= POOL_BUFFER_BYTES {
                part.bytes.clear();
                pool.push(part.bytes);
            }
        }
    }

    /// Reply bytes held in parts.
    pub(super) fn pending_bytes(&self) -> usize {
        self.parts.iter().map(|part| part.bytes.len()).sum()
    }

    /// Bytes the parts' buffers take (their capacities), for the memory budget.
    pub(super) fn buffer_bytes(&self) -> usize {
        self.parts.iter().map(|part| part.bytes.capacity()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(order: &mut ReplyOrder, output: &mut Vec<u8>, pool: &mut Vec<Vec<u8>>, text: &[u8]) {
        order.local_out(output, pool).extend_from_slice(text);
    }

    #[test]
    fn replies_leave_in_request_order_whoever_completes_first() {
        let (mut order, mut output, mut marks, mut pool) = (ReplyOrder::default(), Vec::new(), Vec::new(), Vec::new());
        reply(&mut order, &mut output, &mut pool, b"1 ");
        let second = order.push_waiting(Vec::new(), 1);
        reply(&mut order, &mut output, &mut pool, b"3 ");
        let fourth = order.push_waiting(Vec::new(), 2);
        reply(&mut order, &mut output, &mut pool, b"5 ");
        assert_eq!(output, b"1 ", "nothing overtakes a reply still due");
        // The fourth completes first: still held behind the second.
        for piece in [&b"4a "[..], b"4b "] {
            let part = order.part_mut(fourth).unwrap();
            part.bytes.extend_from_slice(piece);
            part.waiting -= 1;
        }
        order.drain(&mut output, &mut marks, &mut pool);
        assert_eq!(output, b"1 ");
        let part = order.part_mut(second).unwrap();
        part.bytes.extend_from_slice(b"2 ");
        part.waiting -= 1;
        order.drain(&mut output, &mut marks, &mut pool);
        assert_eq!(output, b"1 2 3 4a 4b 5 ");
        assert!(order.is_empty() && order.part_mut(second).is_none() && order.part_mut(fourth).is_none());
        assert_eq!(order.next_seq(), fourth + 2, "the local reply behind the fourth took a number too");
    }

    #[test]
    fn marks_end_messages_where_their_replies_end() {
        let (mut order, mut output, mut marks, mut pool) = (ReplyOrder::default(), Vec::new(), Vec::new(), Vec::new());
        reply(&mut order, &mut output, &mut pool, b"aa");
        order.mark(output.len(), &mut marks);
        let due = order.push_waiting(Vec::new(), 1);
        order.mark(output.len(), &mut marks);
        reply(&mut order, &mut output, &mut pool, b"ccc");
        order.mark(output.len(), &mut marks);
        assert_eq!(marks, [2]);
        let part = order.part_mut(due).unwrap();
        part.bytes.extend_from_slice(b"bbbb");
        part.waiting = 0;
        order.drain(&mut output, &mut marks, &mut pool);
        assert_eq!((output.as_slice(), marks.as_slice()), (&b"aabbbbccc"[..], &[2, 6, 9][..]));
    }

    #[test]
    fn buffers_are_reused_within_the_pool_bounds() {
        let (mut order, mut output, mut marks, mut pool) = (ReplyOrder::default(), Vec::new(), Vec::new(), Vec::new());
        let small = order.push_waiting(Vec::with_capacity(64), 0);
        let large = order.push_waiting(Vec::with_capacity(POOL_BUFFER_BYTES + 1), 0);
        assert_eq!(order.buffer_bytes(), 64 + POOL_BUFFER_BYTES + 1);
        order.part_mut(small).unwrap().bytes.extend_from_slice(b"x");
        order.part_mut(large).unwrap().bytes.extend_from_slice(b"y");
        assert_eq!(order.pending_bytes(), 2);
        order.drain(&mut output, &mut marks, &mut pool);
        assert_eq!(output, b"xy");
        assert_eq!(pool.len(), 1, "the oversized buffer is dropped, the small one kept");
        assert!(pool[0].is_empty() && pool[0].capacity() >= 64);
        let mut full: Vec<Vec<u8>> = (0..POOL_BUFFERS).map(|_| Vec::new()).collect();
        order.push_waiting(Vec::with_capacity(8), 0);
        order.drain(&mut output, &mut marks, &mut full);
        assert_eq!(full.len(), POOL_BUFFERS);
    }
}
