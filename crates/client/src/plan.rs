//! Turns a batch of requests into what each connection sends: requests grouped by where they
//! go (a server's main port, or the direct port of the partition that owns the key), in the
//! order given, consecutive `get`s for one place merged into one multi-key line, cut into
//! rounds small enough that sending a round never waits on replies not yet read.

use std::net::SocketAddr;

use crate::binary;
use crate::codec::{check_key, encode, Expect, Op, Reply};
use crate::error::Error;

/// Request bytes in one round to one place.
const ROUND_BYTES: usize = 256 << 10;
/// Requests in one round to one place.
const ROUND_REQUESTS: usize = 1024;
/// Keys on one `get` line.
pub(crate) const KEYS_PER_GET: usize = 100;

/// Where a request goes: the server's index in the fleet, and the address to send it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Place {
    pub(crate) server: usize,
    pub(crate) addr: SocketAddr,
}

/// What one connection sends and then reads, once.
#[derive(Default)]
pub(crate) struct Round {
    pub(crate) bytes: Vec<u8>,
    pub(crate) expects: Vec<Expect>,
    requests: usize,
    /// The last expectation is a `get` line (or batch of quiet binary gets) not yet ended,
    /// with this many keys.
    open_get: Option<(bool, usize)>,
    /// Binary requests (for SASL servers) instead of text.
    binary: bool,
}

impl Round {
    fn close_get(&mut self) {
        if self.open_get.take().is_some() {
            if self.binary {
                binary::end_gets(&mut self.bytes);
            } else {
                self.bytes.extend_from_slice(b"\r\n");
            }
        }
    }

    fn full(&self) -> bool {
        self.bytes.len() >= ROUND_BYTES || self.requests >= ROUND_REQUESTS
    }

    fn push(&mut self, index: usize, op: &Op<'_>) {
        self.requests += 1;
        let cas = match op {
            Op::Get(_) => false,
            Op::Gets(_) => true,
            _ => {
                self.close_get();
                let expect = if self.binary {
                    binary::encode(&mut self.bytes, index, op);
                    Expect::Binary { op: index }
                } else {
                    encode(&mut self.bytes, index, op)
                };
                self.expects.push(expect);
                return;
            }
        };
        // Binary gets all return the CAS; the reply for a `get` leaves it out.
        let cas = cas && !self.binary;
        match self.open_get {
            Some((open_cas, keys)) if open_cas == cas && keys < KEYS_PER_GET => {
                if let Some(Expect::Values { ops } | Expect::BinaryGets { ops }) = self.expects.last_mut() {
                    ops.push(index);
                }
                self.open_get = Some((cas, keys + 1));
            }
            _ => {
                self.close_get();
                if self.binary {
                    self.expects.push(Expect::BinaryGets { ops: vec![index] });
                } else {
                    self.bytes.extend_from_slice(if cas { b"gets" } else { b"get" });
                    self.expects.push(Expect::Values { ops: vec![index] });
                }
                self.open_get = Some((cas, 1));
            }
        }
        if self.binary {
            binary::encode_get(&mut self.bytes, index, op.key());
        } else {
            self.bytes.push(b' ');
            self.bytes.extend_from_slice(op.key());
        }
    }
}

/// The requests for one place.
pub(crate) struct Group {
    pub(crate) place: Place,
    pub(crate) rounds: Vec<Round>,
}

/// Groups `ops` by where `route` sends their keys, in the binary protocol when `binary`. A
/// request whose key is bad, that has no place or no binary form gets its error in `errors`
/// and is not sent.
pub(crate) fn plan(
    ops: &[Op<'_>],
    mut route: impl FnMut(&[u8]) -> Result<Place, Error>,
    errors: &mut [Option<Error>],
    binary: bool,
) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (index, op) in ops.iter().enumerate() {
        let place = check_key(op.key()).map_err(Error::BadKey).and_then(|()| match binary && !binary::supports(op) {
            true => {
                Err(Error::Config("atomics and vectors have no binary form; a SASL server speaks only binary".into()))
            }
            false => route(op.key()),
        });
        let place = match place {
            Ok(place) => place,
            Err(error) => {
                errors[index] = Some(error);
                continue;
            }
        };
        let group = match groups.iter().position(|g| g.place == place) {
            Some(at) => &mut groups[at],
            None => {
                groups.push(Group { place, rounds: vec![Round { binary, ..Round::default() }] });
                groups.last_mut().expect("just pushed")
            }
        };
        if group.rounds.last().is_some_and(Round::full) {
            group.rounds.push(Round { binary, ..Round::default() });
        }
        group.rounds.last_mut().expect("a group has a round").push(index, op);
    }
    for round in groups.iter_mut().flat_map(|g| g.rounds.iter_mut()) {
        round.close_get();
    }
    groups
}

/// The requests `settle` chose to send again.
pub(crate) fn subset<'a>(ops: &[Op<'a>], again: &[usize]) -> Vec<Op<'a>> {
    again.iter().map(|&i| ops[i]).collect()
}

/// Puts the results of the second try back in place.
pub(crate) fn merge(
    again: &[usize],
    retried: Vec<Result<Reply, Error>>,
    replies: &mut [Option<Reply>],
    errors: &mut [Option<Error>],
) {
    for (&i, result) in again.iter().zip(retried) {
        match result {
            Ok(reply) => replies[i] = Some(reply),
            Err(error) => errors[i] = Some(error),
        }
    }
}

/// One result per request.
pub(crate) fn finish(replies: Vec<Option<Reply>>, errors: Vec<Option<Error>>) -> Vec<Result<Reply, Error>> {
    replies
        .into_iter()
        .zip(errors)
        .map(|(reply, error)| match (reply, error) {
            (Some(reply), _) => Ok(reply),
            (None, Some(error)) => Err(error),
            (None, None) => Err(Error::Unexpected("no reply".into())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::StoreMode;

    fn place(server: usize) -> Place {
        Place { server, addr: SocketAddr::from(([127, 0, 0, 1], 7000 + server as u16)) }
    }

    #[test]
    fn consecutive_gets_share_a_line_and_order_is_kept() {
        let set = Op::Store { mode: StoreMode::Set, key: b"b", value: b"xy", flags: 3, exptime: 0 };
        let ops = [Op::Get(b"a"), Op::Get(b"b"), set, Op::Get(b"b"), Op::Gets(b"c"), Op::Delete(b"a")];
        let mut errors = vec![None; ops.len()];
        let groups = plan(&ops, |_| Ok(place(0)), &mut errors, false);
        assert_eq!(groups.len(), 1);
        let round = &groups[0].rounds[0];
        assert_eq!(
            String::from_utf8_lossy(&round.bytes),
            "get a b\r\nset b 3 0 2\r\nxy\r\nget b\r\ngets c\r\ndelete a\r\n"
        );
        assert_eq!(round.expects.len(), 5);
    }

    #[test]
    fn keys_go_to_their_place_and_bad_keys_are_not_sent() {
        let long = vec![b'k'; 251];
        let ops = [Op::Get(b"a"), Op::Get(b"bb"), Op::Get(&long), Op::Get(b"has space"), Op::Get(b"ccc")];
        let mut errors = vec![None; ops.len()];
        let groups = plan(&ops, |key| Ok(place(key.len() % 2)), &mut errors, false);
        let lines: Vec<String> =
            groups.iter().map(|g| String::from_utf8_lossy(&g.rounds[0].bytes).into_owned()).collect();
        assert_eq!(lines, ["get a ccc\r\n", "get bb\r\n"]);
        assert!(matches!(&errors[2], Some(Error::BadKey(_))) && matches!(&errors[3], Some(Error::BadKey(_))));
    }

    #[test]
    fn big_batches_are_cut_into_rounds_and_lines() {
        let keys: Vec<String> = (0..2500).map(|i| format!("key{i}")).collect();
        let ops: Vec<Op<'_>> = keys.iter().map(|k| Op::Get(k.as_bytes())).collect();
        let mut errors = vec![None; ops.len()];
        let groups = plan(&ops, |_| Ok(place(0)), &mut errors, false);
        let rounds = &groups[0].rounds;
        assert_eq!(rounds.len(), 3);
        assert_eq!(rounds[0].expects.len(), 11);
        assert!(rounds.iter().all(|r| r.bytes.ends_with(b"\r\n")));
        let lines: usize = rounds.iter().map(|r| r.bytes.split(|&b| b == b'\n').count() - 1).sum();
        assert_eq!(lines, 11 + 11 + 5);
    }
}
