//! tierkv's atomics through the server (docs/protocol-extensions.md): the text and binary
//! replies, combining that answers exactly as one-by-one execution does, and a counter contended
//! by many connections over several workers that ends at the sum of every acknowledged delta.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use common::{exchange_binary_to_sentinel, exchange_to_sentinel, exchange_to_sentinel_within, tierkv_with, PATIENT};
use tierkv_protocol::binary::{opcode, status, write_request, HEADER_BYTES};

const SCRIPT: &[u8] = b"set n 0 0 2\r\n10\r\n\
atomic n add u64 5\r\n\
atomic n add u64 -20\r\n\
atomic n add i64 -20\r\n\
set n 0 0 2\r\n-5\r\n\
atomic n add i64 -20\r\n\
atomic n cas i64 -25 7\r\n\
atomic n cas i64 1 2\r\n\
atomic n min u64 3\r\n\
atomic n max i64 -9\r\n\
atomic n or u64 12\r\n\
atomic n and u64 6\r\n\
atomic n xor u64 5\r\n\
get n\r\n\
incr n 1\r\n\
atomic missing add u64 1\r\n\
set s 0 0 3\r\nabc\r\n\
atomic s add u64 1\r\n\
atomic s add i64 1\r\n\
atomic n mul u64 1\r\n\
atomic n add f32 1\r\n\
atomic n min u64 -1\r\n\
atomic n add u64 1 noreply\r\n\
get n\r\n";

const EXPECTED: &str = "STORED\r\n\
OK 10 15\r\n\
OK 15 18446744073709551611\r\n\
CLIENT_ERROR value is not an i64 counter\r\n\
STORED\r\n\
OK -5 -25\r\n\
OK -25 7\r\n\
EXISTS 7\r\n\
OK 7 3\r\n\
OK 3 3\r\n\
OK 3 15\r\n\
OK 15 6\r\n\
OK 6 3\r\n\
VALUE n 0 1\r\n3\r\nEND\r\n\
4\r\n\
NOT_FOUND\r\n\
STORED\r\n\
CLIENT_ERROR value is not a u64 counter\r\n\
CLIENT_ERROR value is not an i64 counter\r\n\
CLIENT_ERROR unknown atomic operation\r\n\
CLIENT_ERROR atomic type must be u64 or i64\r\n\
CLIENT_ERROR invalid numeric operand\r\n\
VALUE n 0 1\r\n5\r\nEND\r\n";

fn replies(server_flags: &[&str]) -> String {
    let server = tierkv_with(server_flags);
    let reply = exchange_to_sentinel(server.1, SCRIPT);
    let text = String::from_utf8(reply).unwrap();
    text[..text.rfind("EN ").or_else(|| text.rfind("HD")).unwrap_or(text.len())].to_string()
}

#[test]
fn text_atomics_answer_as_documented_with_and_without_combining() {
    let combined = replies(&["-t", "1"]);
    assert!(combined.starts_with(EXPECTED), "{combined}");
    assert_eq!(replies(&["-t", "1", "--no-atomic-combining"]), combined);
}

#[test]
fn pipelined_atomics_on_one_key_are_combined_and_counted() {
    let server = tierkv_with(&["-t", "1"]);
    let mut script = b"set hot 0 0 1\r\n0\r\n".to_vec();
    for i in 0..16 {
        script.extend_from_slice(format!("atomic hot add u64 {i}\r\n").as_bytes());
    }
    script.extend_from_slice(b"stats tierkv\r\n");
    let reply = String::from_utf8(exchange_to_sentinel(server.1, &script)).unwrap();
    let mut sum = 0;
    for i in 0..16 {
        assert!(reply.contains(&format!("OK {sum} {}\r\n", sum + i)), "{reply}");
        sum += i;
    }
    let saved: u64 = reply.lines().find_map(|l| l.strip_prefix("STAT atomic_lookups_saved ")).unwrap().parse().unwrap();
    assert!(saved >= 8, "a pipeline of 16 atomics shares lookups: {saved}\n{reply}");
}

fn binary_atomic(out: &mut Vec<u8>, op: u8, code: u8, signed: bool, a: u64, b: u64, key: &[u8]) {
    let mut extras = [0u8; 18];
    extras[0] = code;
    extras[1] = u8::from(signed);
    extras[2..10].copy_from_slice(&a.to_be_bytes());
    extras[10..].copy_from_slice(&b.to_be_bytes());
    write_request(out, op, 7, 0, &extras, key, b"");
}

#[test]
fn binary_atomics_return_old_and_new_values() {
    let server = tierkv_with(&["-t", "1"]);
    let mut request = Vec::new();
    write_request(&mut request, opcode::SET, 1, 0, &[0; 8], b"b", b"40");
    binary_atomic(&mut request, opcode::ATOMIC, 0, false, 2, 0, b"b");
    binary_atomic(&mut request, opcode::ATOMICQ, 0, false, 1, 0, b"b");
    binary_atomic(&mut request, opcode::ATOMIC, 1, false, 9, 5, b"b");
    binary_atomic(&mut request, opcode::ATOMIC, 0, false, 1, 0, b"nope");
    let reply = exchange_binary_to_sentinel(server.1, &request);
    let mut at = 0;
    let mut answers = Vec::new();
    while at + HEADER_BYTES <= reply.len() {
        let status = u16::from_be_bytes([reply[at + 6], reply[at + 7]]);
        let body = u32::from_be_bytes(reply[at + 8..at + 12].try_into().unwrap()) as usize;
        answers.push((reply[at + 1], status, reply[at + HEADER_BYTES..at + HEADER_BYTES + body].to_vec()));
        at += HEADER_BYTES + body;
    }
    let pair = |old: u64, new: u64| [old.to_be_bytes(), new.to_be_bytes()].concat();
    assert_eq!(answers[1], (opcode::ATOMIC, status::SUCCESS, pair(40, 42)));
    // The quiet one answers nothing; the cas sees 43 and says so.
    assert_eq!(answers[2], (opcode::ATOMIC, status::KEY_EEXISTS, 43u64.to_be_bytes().to_vec()));
    assert_eq!((answers[3].0, answers[3].1), (opcode::ATOMIC, status::KEY_ENOENT));
}

#[test]
fn a_contended_counter_ends_at_the_sum_of_acknowledged_deltas() {
    let server = tierkv_with(&["-t", "2"]);
    let port = server.1;
    let mut setup = TcpStream::connect(("127.0.0.1", port)).unwrap();
    setup.write_all(b"set total 0 0 1\r\n0\r\n").unwrap();
    let mut line = String::new();
    BufReader::new(setup.try_clone().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "STORED\r\n");
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            std::thread::spawn(move || {
                let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                let mut acknowledged = 0i64;
                for round in 0..50u64 {
                    // Pipelines of 16, with negative deltas too: combined on the owner.
                    let mut batch = String::new();
                    let deltas: Vec<i64> = (0..16).map(|i| ((t * 31 + round * 7 + i) % 11) as i64 - 3).collect();
                    for d in &deltas {
                        batch.push_str(&format!("atomic total add i64 {d}\r\n"));
                    }
                    writer.write_all(batch.as_bytes()).unwrap();
                    for d in &deltas {
                        let mut reply = String::new();
                        reader.read_line(&mut reply).unwrap();
                        assert!(reply.starts_with("OK "), "{reply}");
                        acknowledged += d;
                    }
                }
                acknowledged
            })
        })
        .collect();
    let expected: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let reply = String::from_utf8(exchange_to_sentinel(port, b"get total\r\n")).unwrap();
    assert!(
        reply.starts_with(&format!("VALUE total 0 {}\r\n{expected}\r\n", expected.to_string().len())),
        "{reply} vs {expected}"
    );
}

#[test]
fn the_rust_client_pipelines_atomics_and_reads_their_answers() {
    use tierkv_client::blocking::Client;
    use tierkv_client::{Atomic, AtomicCode, AtomicReply};
    let server = tierkv_with(&["-t", "2"]);
    let client = Client::connect(("127.0.0.1", server.1)).unwrap();
    assert!(client.set(b"c", b"-3").unwrap());
    let signed = |code, operand, operand2| Atomic { key: b"c", code, signed: true, operand, operand2 };
    let replies = client
        .atomics(&[
            signed(AtomicCode::Add, (-4i64) as u64, 0),
            signed(AtomicCode::Cas, (-7i64) as u64, 100),
            signed(AtomicCode::Cas, 1, 2),
            signed(AtomicCode::Max, 50, 0),
            Atomic::add(b"c", 1),
            Atomic::add(b"absent", 1),
        ])
        .unwrap();
    assert_eq!(
        replies,
        [
            AtomicReply::Done { old: (-3i64) as u64, new: (-7i64) as u64 },
            AtomicReply::Done { old: (-7i64) as u64, new: 100 },
            AtomicReply::Mismatch { current: 100 },
            AtomicReply::Done { old: 100, new: 100 },
            AtomicReply::Done { old: 100, new: 101 },
            AtomicReply::NotFound,
        ]
    );
    assert_eq!(client.get(b"c").unwrap(), Some(b"101".to_vec()));
    assert_eq!(client.get(b"absent").unwrap(), None);
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn vupd(out: &mut Vec<u8>, key: &str, op: &str, elem: &str, offset: u32, data: &[u8]) {
    out.extend_from_slice(format!("vupd {key} {op} {elem} {offset} {}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[test]
fn vector_commands_answer_as_documented() {
    let server = tierkv_with(&["-t", "2"]);
    let mut script = b"vnew v f32 4\r\n".to_vec();
    vupd(&mut script, "v", "add", "f32", 1, &f32s(&[1.5, 2.0]));
    vupd(&mut script, "v", "max", "f32", 0, &f32s(&[-1.0, 1.0, 9.0, 0.5]));
    vupd(&mut script, "v", "add", "i64", 0, &[0; 8]);
    vupd(&mut script, "v", "add", "f32", 3, &f32s(&[1.0, 1.0]));
    vupd(&mut script, "v", "add", "f32", 0, &[0; 3]);
    vupd(&mut script, "none", "add", "f32", 0, &f32s(&[1.0]));
    script.extend_from_slice(
        b"vget v 1 2\r\nvlen v\r\nvlen none\r\nset p 0 0 1\r\nx\r\nvlen p\r\nvnew big u64 1000000\r\nvnew v f16 3\r\n",
    );
    let reply = exchange_to_sentinel(server.1, &script);
    let mut expected =
        b"STORED\r\nOK\r\nOK\r\nCLIENT_ERROR vector type mismatch\r\nCLIENT_ERROR vector slice out of bounds\r\n\
CLIENT_ERROR vector data is not whole elements\r\nNOT_FOUND\r\nVALUE v 0 8\r\n"
            .to_vec();
    expected.extend_from_slice(&f32s(&[1.5, 9.0]));
    expected.extend_from_slice(
        b"\r\nEND\r\nVECTOR f32 4\r\nNOT_FOUND\r\nSTORED\r\nCLIENT_ERROR not a vector\r\n\
SERVER_ERROR object too large for cache\r\nCLIENT_ERROR vector type must be i64, u64, f64 or f32\r\n",
    );
    assert!(reply.starts_with(&expected), "{}", String::from_utf8_lossy(&reply));
}

#[test]
fn a_contended_vector_ends_at_the_sum_of_acknowledged_deltas() {
    const LEN: usize = 64;
    let server = tierkv_with(&["-t", "2"]);
    let port = server.1;
    // The first request of a just-started server, answered for sure: a loaded machine may take
    // longer than `QUIET` to schedule the owning worker.
    let created = exchange_to_sentinel_within(port, b"vnew pv f32 64\r\n", PATIENT);
    assert!(created.starts_with(b"STORED\r\n"), "{}", String::from_utf8_lossy(&created));
    let threads: Vec<_> = (0..6u32)
        .map(|t| {
            std::thread::spawn(move || {
                let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                let mut sums = vec![0f64; LEN];
                for round in 0..40u32 {
                    let mut batch = Vec::new();
                    let mut pending = Vec::new();
                    for i in 0..8u32 {
                        // Integer-valued deltas whose partial sums stay far below 2^24: exact in f32.
                        let offset = (t * 7 + round * 3 + i) % 48;
                        let deltas: Vec<f32> = (0..16).map(|j| ((t + round + i + j) % 5) as f32 - 2.0).collect();
                        vupd(&mut batch, "pv", "add", "f32", offset, &f32s(&deltas));
                        pending.push((offset, deltas));
                    }
                    writer.write_all(&batch).unwrap();
                    for (offset, deltas) in pending {
                        let mut reply = String::new();
                        reader.read_line(&mut reply).unwrap();
                        assert_eq!(reply, "OK\r\n");
                        for (j, d) in deltas.iter().enumerate() {
                            sums[offset as usize + j] += f64::from(*d);
                        }
                    }
                }
                sums
            })
        })
        .collect();
    let mut expected = vec![0f64; LEN];
    for t in threads {
        for (e, s) in expected.iter_mut().zip(t.join().unwrap()) {
            *e += s;
        }
    }
    let reply = exchange_to_sentinel(port, b"vget pv 0 64\r\n");
    let data = &reply[reply.iter().position(|&b| b == b'\n').unwrap() + 1..][..LEN * 4];
    let got: Vec<f64> = data.chunks(4).map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap()))).collect();
    assert_eq!(got, expected, "no update lost");
}
