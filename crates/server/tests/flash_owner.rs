//! One server per flash file: a second tierkv started on a running one's flash file is refused,
//! naming the file, and leaves it alone (the first keeps serving, and its restart serves all it
//! had); a flash file deleted or replaced under a running server is said in its log and in
//! `stats` (`flash_file`).

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const KEYS: usize = 20_000;

fn flash_path(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("tierkv-owner-{}-{name}.flash", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn value(i: usize) -> String {
    format!("{i}-").repeat(200)[..120 + i % 80].to_string()
}

/// Sets `k0..k{KEYS}` (4 MiB of DRAM holds a fraction of them: the rest goes to flash).
fn fill(port: u16) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    for start in (0..KEYS).step_by(500) {
        let mut request = String::new();
        for i in start..start + 500 {
            let v = value(i);
            request.push_str(&format!("set k{i} 0 0 {}\r\n{v}\r\n", v.len()));
        }
        stream.write_all(request.as_bytes()).unwrap();
        let mut reply = Vec::new();
        let mut chunk = [0u8; 8192];
        while reply.len() < 500 * 8 {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "closed");
            reply.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(reply, b"STORED\r\n".repeat(500));
    }
}

/// How many of the keys come back with their own value; panics on a wrong one.
fn served(port: u16) -> usize {
    let mut found = 0;
    for start in (0..KEYS).step_by(100) {
        let keys: Vec<String> = (start..start + 100).map(|i| format!("k{i}")).collect();
        let reply = exchange_to_sentinel(port, format!("get {}\r\n", keys.join(" ")).as_bytes());
        let text = String::from_utf8_lossy(&reply);
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let Some(key) = line.strip_prefix("VALUE k") else { continue };
            let i: usize = key.split(' ').next().unwrap().parse().unwrap();
            assert_eq!(lines.next(), Some(value(i).as_str()), "k{i}: a wrong value");
            found += 1;
        }
    }
    found
}

#[test]
fn a_second_server_on_a_running_ones_flash_file_is_refused_and_the_first_keeps_everything() {
    let path = flash_path("second");
    let port = free_port();
    let first = start(hybrid_command(port, &path, &[], "64m"), port);
    fill(port);
    let before = served(port);
    assert!(before > KEYS * 99 / 100, "{before} of {KEYS} served before");
    let started = Instant::now();
    let second_port = free_port();
    let mut second = Command::new(TIERKV);
    second.args(["-p", &second_port.to_string(), "-m", "4", "-t", "1"]);
    second.args(["--flash-path", path.to_str().unwrap(), "--flash-size", "32m", "--flash-force"]);
    // `start` waits for a listening port, which a refused server never opens: its own wait.
    let log = std::env::temp_dir().join(format!("tierkv-owner-second-{}.stderr", std::process::id()));
    let mut child = second.stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a second server runs on the file: {}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(!status.success(), "{said}");
    assert!(said.contains(&format!("--flash-path {}: is in use", path.display())), "{said}");
    assert_eq!(served(port), before, "the first server lost items to the second");
    stop_within(first, Duration::from_secs(30));
    let first = start(hybrid_command(port, &path, &[], "64m"), port);
    let deadline = Instant::now() + Duration::from_secs(20);
    while first.stderr().matches("restored").count() < 2 {
        assert!(Instant::now() < deadline, "not restored: {}", first.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(served(port), before, "the restart after the refused second server: {}", first.stderr());
    drop(first);
    let _ = std::fs::remove_file(&path);
}

/// Worker 0 looks once a second; waits for `stats` to say `expected`.
fn wait_for_file_state(port: u16, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let state = stats_map(port, "").get("flash_file").cloned().unwrap_or_default();
        if state == expected {
            return;
        }
        assert!(Instant::now() < deadline, "flash_file is {state:?}, not {expected:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_flash_file_deleted_or_moved_back_under_a_running_server_is_reported() {
    let path = flash_path("deleted");
    let port = free_port();
    let server = start(hybrid_command(port, &path, &[], "64m"), port);
    wait_for_file_state(port, "ok");
    let moved = path.with_extension("moved");
    std::fs::rename(&path, &moved).unwrap();
    wait_for_file_state(port, "moved to another name");
    std::fs::rename(&moved, &path).unwrap();
    wait_for_file_state(port, "ok");
    std::fs::remove_file(&path).unwrap();
    wait_for_file_state(port, "deleted");
    let log = server.stderr();
    assert!(
        log.contains(&format!("--flash-path {}: the flash file was deleted while the server runs", path.display())),
        "{log}"
    );
    assert!(log.contains("names the flash file again"), "{log}");
    fill(port);
    assert!(served(port) > KEYS * 99 / 100, "serving goes on");
}
