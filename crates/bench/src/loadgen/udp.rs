//! The load generator over UDP: one request per datagram, each a slot waiting for its reply
//! (or its timeout), the same workloads and checks as over TCP.
//!
//! It must not measure differently from TCP: it fills the same `RunResult`.

use super::{check_reply, encode, Kind, Matched, Protocol, RunConfig, RunResult, Values};
use crate::workload::{write_text_key, Rng};
use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};
use std::io::{self};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tierkv_protocol::Limits;

/// How long a UDP request waits for its reply before it counts as lost.
pub(super) const UDP_REPLY_TIMEOUT: Duration = Duration::from_millis(200);

/// One UDP socket with one request in flight.
pub(super) struct UdpSlot {
    socket: mio::net::UdpSocket,
    request_id: u16,
    kind: Kind,
    intended: Instant,
    sent: Instant,
    /// Reply datagrams received so far, by sequence number.
    parts: Vec<Option<Vec<u8>>>,
    datagram: Vec<u8>,
    busy: bool,
}

/// The UDP twin of `drive_until`: `config.connections` sockets, each with one request in flight
/// as one datagram (memcached's 8-byte frame header, then the request); replies reassembled by
/// request id and sequence number. A request not answered within `UDP_REPLY_TIMEOUT` is
/// counted as lost and the socket moves on.
pub(super) fn drive_udp(
    config: &RunConfig,
    values: &Values,
    mut next: impl FnMut() -> Option<(u64, bool)>,
) -> Result<RunResult, String> {
    if !matches!(config.protocol, Protocol::Text | Protocol::Binary) {
        return Err("UDP runs speak the text or the binary protocol".into());
    }
    if config.direct.is_some() {
        return Err("--udp and --direct cannot be combined".into());
    }
    let limits = Limits { max_value_bytes: config.value_bytes.1.max(1 << 20), ..Limits::default() };
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    let mut slots = open_slots(config, &poll)?;
    let mut latency_ns = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
    let (mut operations, mut gets, mut get_hits, mut refused_sets, mut lost) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut rng = Rng::new(config.seed ^ 0xFACE);
    let mut key = vec![0u8; config.key_bytes];
    let start = Instant::now();
    let mut finished = false;
    let mut send = |slot: &mut UdpSlot, rng: &mut Rng, finished: &mut bool| {
        let Some((number, is_get)) = (if *finished { None } else { next() }) else {
            *finished = true;
            slot.busy = false;
            return;
        };
        write_text_key(number, &mut key);
        slot.kind = if is_get { Kind::Get } else { Kind::Set };
        slot.request_id = slot.request_id.wrapping_add(1);
        slot.datagram.clear();
        for field in [slot.request_id, 0, 1, 0] {
            slot.datagram.extend_from_slice(&field.to_be_bytes());
        }
        encode(&mut slot.datagram, config.protocol, slot.kind, &key, values.pick(rng), u32::from(slot.request_id));
        slot.parts.clear();
        let now = Instant::now();
        slot.intended = now;
        slot.sent = now;
        // A full socket buffer loses the datagram like the network would: the timeout covers it.
        let _ = slot.socket.send(&slot.datagram);
        slot.busy = true;
    };
    for slot in slots.iter_mut() {
        send(slot, &mut rng, &mut finished);
    }
    let mut events = Events::with_capacity(1024);
    let mut buffer = vec![0u8; 65_536];
    let mut reply = Vec::new();
    while slots.iter().any(|slot| slot.busy) {
        poll.poll(&mut events, Some(Duration::from_millis(20))).map_err(|e| e.to_string())?;
        for event in events.iter() {
            let slot = &mut slots[event.token().0];
            loop {
                let n = match slot.socket.recv(&mut buffer) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // An ICMP error (nothing listens): the timeout counts the request as lost.
                    Err(_) => break,
                };
                if !reassemble(slot, &buffer[..n], &mut reply) {
                    continue;
                }
                let matched = match_reply(config, slot.kind, &reply, &limits)?;
                operations += 1;
                refused_sets += u64::from(matched == Matched::Refused);
                if slot.kind == Kind::Get {
                    gets += 1;
                    get_hits += u64::from(matched == Matched::Done { hit: true });
                }
                latency_ns.saturating_record(slot.intended.elapsed().as_nanos().max(1) as u64);
                send(slot, &mut rng, &mut finished);
            }
        }
        let now = Instant::now();
        for slot in slots.iter_mut().filter(|slot| slot.busy && now - slot.sent > UDP_REPLY_TIMEOUT) {
            lost += 1;
            send(slot, &mut rng, &mut finished);
        }
        if operations == 0 && lost > 10 * config.connections as u64 {
            return Err(format!("no UDP reply from {} (is UDP on, -U?)", config.target));
        }
    }
    Ok(RunResult { operations, gets, get_hits, refused_sets, lost, elapsed: start.elapsed(), latency_ns })
}

/// `config.connections` UDP sockets connected to the target, registered with `poll`.
fn open_slots(config: &RunConfig, poll: &Poll) -> Result<Vec<UdpSlot>, String> {
    let bind: SocketAddr = if config.target.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { "[::]:0".parse().unwrap() };
    let mut slots = Vec::with_capacity(config.connections);
    for i in 0..config.connections {
        let socket = std::net::UdpSocket::bind(bind).map_err(|e| e.to_string())?;
        socket.connect(config.target).map_err(|e| format!("cannot reach {} over UDP: {e}", config.target))?;
        socket.set_nonblocking(true).map_err(|e| e.to_string())?;
        let mut socket = mio::net::UdpSocket::from_std(socket);
        poll.registry().register(&mut socket, Token(i), Interest::READABLE).map_err(|e| e.to_string())?;
        let now = Instant::now();
        slots.push(UdpSlot {
            socket,
            request_id: (i as u16).wrapping_mul(7919),
            kind: Kind::Get,
            intended: now,
            sent: now,
            parts: Vec::new(),
            datagram: Vec::with_capacity(64 + config.value_bytes.1),
            busy: false,
        });
    }
    Ok(slots)
}

/// Files a received datagram into `slot`'s reply; true once every part of the reply is in
/// (then `reply` holds it whole). Datagrams of other requests are ignored.
fn reassemble(slot: &mut UdpSlot, datagram: &[u8], reply: &mut Vec<u8>) -> bool {
    let Ok((header, payload)) = tierkv_protocol::udp::FrameHeader::decode(datagram) else { return false };
    if !slot.busy || header.request_id != slot.request_id || header.sequence >= header.datagrams {
        return false;
    }
    if slot.parts.len() != usize::from(header.datagrams) {
        slot.parts = vec![None; usize::from(header.datagrams)];
    }
    slot.parts[usize::from(header.sequence)] = Some(payload.to_vec());
    if slot.parts.iter().any(Option::is_none) {
        return false;
    }
    reply.clear();
    for part in slot.parts.iter().flatten() {
        reply.extend_from_slice(part);
    }
    true
}

/// What a whole UDP reply says (a text get's VALUE and END arrive in one message).
fn match_reply(config: &RunConfig, kind: Kind, reply: &[u8], limits: &Limits) -> Result<Matched, String> {
    let mut at = 0;
    let mut awaiting_end = false;
    loop {
        match check_reply(config.protocol, kind, awaiting_end, &reply[at..], limits)? {
            Some((Matched::NeedEnd, used)) => {
                awaiting_end = true;
                at += used;
            }
            Some((matched, _)) => return Ok(matched),
            None => return Err(format!("{} sent an incomplete UDP reply", config.target)),
        }
    }
}
