//! A connection's life in the worker: one turn (and what it asks for next), its close, and
//! the delivery of other workers' replies into its reply order.
//!
//! It must not decode requests: `turns` does.

use super::connection::flush;
use super::connection::Turn;
use super::turns::serve_connection;
use super::Worker;
use crate::execute::stats_reply;
use crate::forward::Batch;
use crate::pending::{Kind, Pending};
use crate::stats::Snapshot;
use mio::Poll;
use std::sync::atomic::Ordering;
use tierkv_protocol::reply;

impl Worker {
    /// One turn of the connection in `slot`: closes it when it is finished, queues it when it
    /// has work no event will announce.
    pub(super) fn turn(&mut self, slot: usize, poll: &Poll) {
        let Some(connection) = self.connections.get_mut(slot).and_then(Option::as_mut) else { return };
        connection.starved = false;
        // --metrics-port: two clock reads a turn, shared out over the turn's requests.
        let timing = self.latency.is_some().then(|| {
            let c = &self.core.state.counters;
            (std::time::Instant::now(), c.cmd_get + c.cmd_touch, c.cmd_set)
        });
        let turn = serve_connection(connection, slot, &mut self.core, self.input_limit, &mut self.chunk);
        if let (Some((start, reads, writes)), Some(latency)) = (timing, self.latency.as_mut()) {
            let c = &self.core.state.counters;
            let (reads, writes) = ((c.cmd_get + c.cmd_touch).saturating_sub(reads), c.cmd_set.saturating_sub(writes));
            let seconds = start.elapsed().as_secs_f64();
            let all = (reads + writes).max(1) as f64;
            latency[0].record(reads, seconds * reads as f64 / all);
            latency[1].record(writes, seconds * writes as f64 / all);
        }
        self.core.budget.account(connection);
        if connection.blocked {
            self.blocked.push(slot);
        }
        if let Some(until) = connection.auth_until.take() {
            self.auth_waits.push((slot, connection.generation, until));
        }
        if connection.watching().is_some() && turn != Turn::Close && !self.watching.contains(&slot) {
            self.watching.push(slot);
        }

        match turn {
            Turn::Wait => {}
            Turn::Again => self.again.push(slot),
            Turn::Close => self.close(slot, poll),
        }
    }

    /// `--metrics-port`: publishes this worker's figures, at most once a second.
    pub(super) fn publish_metrics(&mut self) {
        let (Some(published), Some(latency)) = (&self.shared.metrics, &self.latency) else { return };
        let now = tierkv_engine::Engine::now(&*self.core.partition);
        if now == self.published_at {
            return;
        }
        self.published_at = now;
        let snapshot = self.core.state.snapshot(&self.core.partition);
        published.publish(self.core.id, crate::metrics::WorkerFigures { snapshot, latency: *latency });
    }

    pub(super) fn close(&mut self, slot: usize, poll: &Poll) {
        if let Some(mut connection) = self.connections[slot].take() {
            self.free.push(slot);
            self.core.budget.forget(&connection);
            if let Some(id) = connection.watching() {
                self.core.state.shared.watchers.remove(id);
                self.watching.retain(|&watching| watching != slot);
            }
            if let Some(stream) = connection.stream.as_mut() {
                let _ = poll.registry().deregister(stream);
                self.core.state.curr_connections -= 1;
                self.shared.open_connections.fetch_sub(1, Ordering::Relaxed);
                self.shared.worker_conns[self.core.id].fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Puts the replies in `batch` (sent to worker `from`) into their connections' reply order
    /// and writes what is now in order. A `late` batch answers deferred requests: it was never
    /// one of this worker's batches in flight.
    pub(super) fn deliver(&mut self, from: usize, batch: Box<Batch>, poll: &Poll, late: bool) {
        let mut touched: Vec<usize> = Vec::new();
        for (entry, _, replies) in batch.ranges() {
            if self.deliver_one(entry, &batch.replies[replies]) && touched.last() != Some(&entry.slot) {
                touched.push(entry.slot);
            }
        }
        if !late {
            self.core.links.returned(from, batch);
        }
        self.settle(&touched, poll);
    }

    /// Puts one reply into its connection's reply order; false if the connection is gone (or
    /// the reply is deferred).
    pub(super) fn deliver_one(&mut self, entry: Pending, bytes: &[u8]) -> bool {
        let Some(connection) = self.connections.get_mut(entry.slot).and_then(Option::as_mut) else { return false };
        if connection.generation != entry.generation || entry.kind == Kind::Deferred {
            return false;
        }
        let Some(part) = connection.order.part_mut(entry.seq) else { return false };
        part.waiting = part.waiting.saturating_sub(1);
        match entry.kind {
            Kind::Request => part.bytes.extend_from_slice(bytes),
            Kind::Read | Kind::GetKey { .. } => {
                part.bytes.extend_from_slice(bytes);
                connection.remote_reads -= 1;
            }
            Kind::Flush { .. } | Kind::Reset | Kind::Unlink | Kind::Deferred => {}
            Kind::Conns => {
                part.bytes.extend_from_slice(bytes);
                if part.waiting == 0 {
                    crate::conns::finish(&mut part.bytes);
                }
            }
            Kind::Dump => {
                if let Some((lines, next, items)) = crate::dump::decode_reply(bytes) {
                    let workers = self.core.workers;
                    let ended =
                        connection.dump_mut().is_some_and(|dump| dump.advance(next, items, lines.len(), workers));
                    let part = connection.order.part_mut(entry.seq).expect("found above");
                    part.bytes.extend_from_slice(lines);
                    if ended {
                        reply::status(&mut part.bytes, reply::Status::End);
                        connection.end_dump();
                    }
                }
                connection.blocked = true;
                self.blocked.push(entry.slot);
            }
            Kind::Snapshot => {
                let done = part.waiting == 0;
                if let Some(gather) = connection.gather.as_mut().filter(|g| g.seq == entry.seq) {
                    if let Some(snapshot) = Snapshot::read_from(bytes) {
                        gather.total.add(&snapshot);
                    }
                    if done {
                        let gather = connection.gather.take().expect("checked above");
                        let core = &self.core;
                        let part = connection.order.part_mut(entry.seq).expect("found above");
                        stats_reply(
                            gather.group,
                            gather.binary.as_ref(),
                            &core.state,
                            &gather.total,
                            &core.partition,
                            &mut part.bytes,
                        );
                    }
                }
            }
        }
        true
    }

    /// Writes what is now in order on the connections in `touched`, and lets connections that
    /// stopped for room go again.
    pub(super) fn settle(&mut self, touched: &[usize], poll: &Poll) {
        for &slot in touched {
            let Some(connection) = self.connections[slot].as_mut() else { continue };
            connection.drain_parts(&mut self.core.pool);
            self.core.budget.account(connection);
            if connection.udp.is_some() {
                if connection.settled() && connection.is_closing() {
                    self.finish_udp(slot);
                }
                continue;
            }
            let failed = !flush(connection, &mut self.core.state);
            if failed || (connection.is_closing() && connection.settled() && connection.output.is_empty()) {
                self.close(slot, poll);
            }
        }
        // Room has opened up: connections that stopped for it go again.
        for slot in self.blocked.drain(..) {
            if let Some(connection) = self.connections[slot].as_mut() {
                if std::mem::take(&mut connection.blocked) {
                    self.again.push(slot);
                }
            }
        }
    }
}
