//! memcached's binary SASL (`-S`): the same binary conversations get the same bytes from tierkv
//! (users from a `user:password` file) and Debian's memcached (Cyrus SASL with a sasldb made by
//! `saslpasswd2`); python-binary-memcached logs in with the right password and is refused with a
//! wrong one; text requests close the connection; bad flags stop start-up.

mod common;

use common::{free_port, mask_cas, start, Server, TIERKV};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use tierkv_protocol::binary::{opcode, write_request};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tierkv-sasl-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tierkv_sasl(dir: &std::path::Path) -> Server {
    tierkv_sasl_with(dir, &[])
}

fn tierkv_sasl_with(dir: &std::path::Path, extra: &[&str]) -> Server {
    let users = dir.join("users");
    std::fs::write(&users, "alice:secret\n").unwrap();
    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "64", "-t", "2"]).args(extra);
    command.args(["-S", "--sasl-pwdb"]).arg(&users);
    start(command, port)
}

/// Debian's memcached with Cyrus SASL: a sasldb holding alice, PLAIN only.
fn memcached_sasl(dir: &std::path::Path) -> Server {
    let sasldb = dir.join("sasldb2");
    let mut saslpasswd = Command::new("saslpasswd2")
        .args(["-a", "memcached", "-c", "-p", "-f"])
        .arg(&sasldb)
        .arg("alice")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("saslpasswd2 is installed (sasl2-bin; bash scripts/test.sh installs it)");
    saslpasswd.stdin.take().unwrap().write_all(b"secret").unwrap();
    assert!(saslpasswd.wait().unwrap().success());
    std::fs::write(dir.join("memcached.conf"), format!("mech_list: plain\nsasldb_path: {}\n", sasldb.display()))
        .unwrap();
    let port = free_port();
    let mut command = Command::new("memcached");
    command.args(["-S", "-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1", "-t", "1", "-m", "64"]);
    command.env("SASL_CONF_PATH", dir);
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    start(command, port)
}

fn request(op: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let extras: &[u8] = if op == opcode::SET { &[0; 8] } else { &[] };
    write_request(&mut out, op, 0x1234_5678, 0, extras, key, value);
    out
}

/// Sends each step on one connection; each reply is what came before 200 ms of quiet, or
/// "closed" when the server hung up.
fn conversation(port: u16, steps: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut replies = Vec::new();
    for step in steps {
        if stream.write_all(step).is_err() {
            replies.push(b"closed".to_vec());
            break;
        }
        let mut reply = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => {
                    reply.extend_from_slice(b"|closed");
                    break;
                }
                Ok(n) => reply.extend_from_slice(&buffer[..n]),
                Err(_) => break,
            }
        }
        replies.push(mask_cas(reply));
    }
    replies
}

#[test]
fn binary_sasl_answers_as_memcached_does() {
    let dir = scratch("differential");
    // memcached never closes a connection for failed attempts: neither does tierkv here.
    let (ours, theirs) = (tierkv_sasl_with(&dir, &["--auth-max-failures", "0"]), memcached_sasl(&dir));
    let auth = |password: &[u8]| request(opcode::SASL_AUTH, b"PLAIN", &[b"\0alice\0", password].concat());
    let conversations: Vec<Vec<Vec<u8>>> = vec![
        vec![request(opcode::SASL_LIST_MECHS, b"", b"")],
        vec![request(opcode::GET, b"k", b""), request(opcode::NOOP, b"", b"")],
        vec![auth(b"wrong"), auth(b"secret"), request(opcode::SET, b"k", b"v"), request(opcode::GET, b"k", b"")],
        vec![request(opcode::SASL_STEP, b"PLAIN", b"\0alice\0secret"), request(opcode::SET, b"k", b"v")],
        vec![request(opcode::SASL_AUTH, b"CRAM-MD5", b"alice"), auth(b"secret"), request(opcode::NOOP, b"", b"")],
        // A text request: memcached waits for a whole binary header, then hangs up.
        vec![b"get k\r\n".to_vec(), b"get k\r\nget k\r\nget k\r\nget k\r\n".to_vec()],
        vec![auth(b"secret"), b"get k\r\nget k\r\nget k\r\nget k\r\n".to_vec()],
    ];
    for steps in &conversations {
        assert_eq!(conversation(ours.1, steps), conversation(theirs.1, steps), "{steps:?}");
    }
    // After logging in, `stats settings` (binary STAT) says how authentication is set up.
    let settings = |port: u16| -> Vec<(String, String)> {
        let replies = conversation(port, &[auth(b"secret"), request(opcode::STAT, b"settings", b"")]);
        let (reply, mut at, mut found) = (&replies[1], 0, Vec::new());
        while at + 24 <= reply.len() {
            let key_len = u16::from_be_bytes([reply[at + 2], reply[at + 3]]) as usize;
            let body = u32::from_be_bytes(reply[at + 8..at + 12].try_into().unwrap()) as usize;
            let key = String::from_utf8_lossy(&reply[at + 24..at + 24 + key_len]).into_owned();
            let value = String::from_utf8_lossy(&reply[at + 24 + key_len..at + 24 + body]).into_owned();
            if ["binding_protocol", "auth_enabled_sasl", "auth_enabled_ascii"].contains(&key.as_str()) {
                found.push((key, value));
            }
            at += 24 + body;
        }
        found
    };
    let mine = settings(ours.1);
    assert_eq!(mine.len(), 3, "{mine:?}");
    assert_eq!(mine, settings(theirs.1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn python_binary_memcached_logs_in() {
    let dir = scratch("client");
    let server = tierkv_sasl(&dir);
    let script = "import sys, bmemcached\n\
from bmemcached.exceptions import MemcachedException\n\
address = '127.0.0.1:' + sys.argv[1]\n\
c = bmemcached.Client((address,), 'alice', 'secret')\n\
for i in range(100): assert c.set('k%d' % i, 'v%d' % i)\n\
assert c.get('k7') == 'v7' and c.get('k99') == 'v99'\n\
try:\n    bmemcached.Client((address,), 'alice', 'nope').set('x', 'y')\n    sys.exit('a wrong password was taken')\n\
except MemcachedException as e:\n    assert 'Auth failure' in str(e), e\n\
print('ok')\n";
    let output = Command::new("python3").args(["-c", script, &server.1.to_string()]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("ok"), "python-binary-memcached: {text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sasl_flags_are_checked_at_start_up() {
    let dir = scratch("flags");
    let users = dir.join("users");
    std::fs::write(&users, "alice:secret\n").unwrap();
    let users = users.display().to_string();
    for (args, expected) in [
        (vec!["-S"], "-S/--enable-sasl"),
        (vec!["-S", "--sasl-pwdb", &users, "-U", "11311"], "-U/--udp-port"),
        (vec!["-S", "--sasl-pwdb", &users, "-Y", &users], "-S/--enable-sasl"),
        (vec!["--sasl-pwdb", &users], "--sasl-pwdb"),
    ] {
        let output = Command::new(TIERKV)
            .args(["-p", &free_port().to_string()])
            .args(&args)
            .env_remove("MEMCACHED_SASL_PWDB")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(expected), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Password guessing over SASL: the connection closes after the third failure (the default
/// `--auth-max-failures`), and the first failure is logged with the user and the address.
#[test]
fn a_connection_closes_after_three_failed_sasl_attempts() {
    let dir = scratch("guessing");
    let server = tierkv_sasl(&dir);
    let auth = |password: &[u8]| request(opcode::SASL_AUTH, b"PLAIN", &[b"\0alice\0", password].concat());
    let replies = conversation(server.1, &[auth(b"a"), auth(b"b"), auth(b"c"), auth(b"secret")]);
    let text = |reply: &Vec<u8>| String::from_utf8_lossy(reply).into_owned();
    assert_eq!(replies[1][6..8], [0, 0x20], "auth error: {}", text(&replies[1]));
    assert!(!replies[1].ends_with(b"|closed"), "{}", text(&replies[1]));
    assert_eq!(replies[2][6..8], [0, 0x20]);
    assert!(replies[2].ends_with(b"|closed"), "closed after the third: {}", text(&replies[2]));
    std::thread::sleep(Duration::from_millis(100));
    let log = server.stderr();
    assert!(
        log.contains(
            "SASL authentication failed for user \"alice\" from 127.0.0.1 (1 on this connection; its next attempt \
             waits 10 ms)"
        ),
        "{log}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
