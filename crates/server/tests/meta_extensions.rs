//! tierkv's meta forms of its atomics and vectors (`mx`, `mv`; docs/protocol-extensions.md):
//! the replies with their flags, quiet mode in pipelines, base64 keys, combining that answers
//! exactly as one-by-one execution does, and keys owned by another worker.

mod common;

use common::{exchange_to_sentinel, tierkv_with};

const ATOMIC_SCRIPT: &[u8] = b"set n 0 0 2\r\n10\r\n\
mx n add u64 5\r\n\
mx n add u64 5 v p k O1\r\n\
mx n add i64 -30 v p\r\n\
mx n cas i64 -10 3 p\r\n\
mx n cas i64 -10 4 p O2 k\r\n\
mx n max u64 8 q\r\n\
mx n min u64 1 q O3\r\n\
mx n xor u64 3 q v p\r\n\
mx n or u64 0 v\r\n\
mx bg== add u64 1 b k v\r\n\
mx nope add u64 1 q O4 k\r\n\
mx n add u64 1 T9\r\n\
mx n pow u64 1\r\n\
set s 0 0 1\r\nx\r\n\
mx s add i64 1 q\r\n\
get n\r\n";

const ATOMIC_EXPECTED: &str = "STORED\r\n\
HD\r\n\
VA 2 p15 kn O1\r\n20\r\n\
VA 3 p20\r\n-10\r\n\
HD p-10\r\n\
EX p3 O2 kn\r\n\
VA 1\r\n2\r\n\
VA 1 kbg== b\r\n3\r\n\
NF O4 knope\r\n\
CLIENT_ERROR invalid flag\r\n\
CLIENT_ERROR unknown atomic operation\r\n\
STORED\r\n\
CLIENT_ERROR value is not an i64 counter\r\n\
VALUE n 0 1\r\n3\r\nEND\r\n";

fn replies(server_flags: &[&str], script: &[u8]) -> Vec<u8> {
    let server = tierkv_with(server_flags);
    let mut reply = exchange_to_sentinel(server.1, script);
    let sentinel = reply.windows(2).rposition(|w| w == b"EN").expect("the sentinel's reply");
    reply.truncate(sentinel);
    reply
}

#[test]
fn mx_answers_as_documented_with_and_without_combining_on_any_worker() {
    for flags in [&["-t", "1"][..], &["-t", "1", "--no-atomic-combining"], &["-t", "3"]] {
        let reply = replies(flags, ATOMIC_SCRIPT);
        assert_eq!(String::from_utf8_lossy(&reply), ATOMIC_EXPECTED, "server flags {flags:?}");
    }
}

#[test]
fn quiet_mx_pipelines_are_combined_and_counted() {
    let server = tierkv_with(&["-t", "1"]);
    let mut script = b"set hot 0 0 1\r\n0\r\n".to_vec();
    for i in 0..32 {
        script.extend_from_slice(format!("mx hot add u64 {i} q\r\n").as_bytes());
    }
    script.extend_from_slice(b"mx hot add u64 0 v\r\nstats tierkv\r\n");
    let reply = String::from_utf8(exchange_to_sentinel(server.1, &script)).unwrap();
    assert!(reply.starts_with("STORED\r\nVA 3\r\n496\r\nSTAT "), "only the last answers: {reply}");
    let saved: u64 = reply.lines().find_map(|l| l.strip_prefix("STAT atomic_lookups_saved ")).unwrap().parse().unwrap();
    assert!(saved >= 16, "a pipeline of 33 meta atomics shares lookups: {saved}");
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn mv_upd(out: &mut Vec<u8>, key: &str, op: &str, elem: &str, offset: u32, data: &[u8], flags: &str) {
    out.extend_from_slice(format!("mv {key} upd {op} {elem} {offset} {} {flags}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[test]
fn mv_answers_as_documented() {
    let mut script = b"mv v new f32 4 F5 T0\r\nmv v new f32 4 q\r\n".to_vec();
    mv_upd(&mut script, "v", "add", "f32", 1, &f32s(&[1.5, 2.0]), "q");
    mv_upd(&mut script, "v", "add", "f32", 0, &f32s(&[1.0]), "O9 k");
    mv_upd(&mut script, "v", "max", "i64", 0, &[0; 8], "");
    mv_upd(&mut script, "v", "add", "f32", 3, &f32s(&[1.0, 1.0]), "q");
    mv_upd(&mut script, "none", "add", "f32", 0, &f32s(&[1.0]), "q O8");
    mv_upd(&mut script, "v", "add", "f32", 0, &f32s(&[1.0]), "z");
    script.extend_from_slice(b"mv v get 0 3 k\r\nmv dg== len b\r\nmv none get 0 1 q\r\nmv none len O7\r\n");
    script.extend_from_slice(b"mg v f v\r\nmv v mul\r\nmv w new u64 1 F6 T100 q\r\nmg w f t\r\n");
    for flags in [&["-t", "1"][..], &["-t", "3"]] {
        let reply = replies(flags, &script);
        let mut expected = b"HD\r\nHD O9 kv\r\nCLIENT_ERROR vector type mismatch\r\n\
CLIENT_ERROR vector slice out of bounds\r\nNF O8\r\nCLIENT_ERROR invalid flag\r\nVA 12 kv\r\n"
            .to_vec();
        expected.extend_from_slice(&f32s(&[1.0, 1.5, 2.0]));
        expected.extend_from_slice(b"\r\nVA 5\r\nf32 4\r\nEN O7\r\nVA 24 f0\r\n");
        expected.extend_from_slice(b"TV\x03\x01\x04\x00\x00\x00");
        expected.extend_from_slice(&f32s(&[1.0, 1.5, 2.0, 0.0]));
        expected.extend_from_slice(b"\r\nCLIENT_ERROR unknown vector command\r\nHD f6 t100\r\n");
        assert_eq!(String::from_utf8_lossy(&reply), String::from_utf8_lossy(&expected), "server flags {flags:?}");
    }
}

#[test]
fn text_vector_noreply_is_silent() {
    let mut script = b"vnew v u64 2 noreply\r\nvget v 0 1 noreply\r\n".to_vec();
    script.extend_from_slice(b"vupd v add u64 0 8 noreply\r\n\x02\x00\x00\x00\x00\x00\x00\x00\r\nvlen v\r\n");
    let reply = replies(&["-t", "1"], &script);
    assert_eq!(String::from_utf8_lossy(&reply), "VECTOR u64 2\r\n");
}
