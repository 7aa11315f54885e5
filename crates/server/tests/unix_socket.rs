//! memcached's `-s` (a Unix domain socket instead of TCP and UDP) and `-a` (its permissions):
//! served by every worker, used by pymemcache and libmemcached's `memcstat`/`memccp`, listed
//! by `stats conns` as memcached lists it, a stale socket file replaced, bad flags refused.

mod common;

use common::TIERKV;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct UnixServer(Child, PathBuf);

impl Drop for UnixServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_file(&self.1);
    }
}

fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tierkv-{}-{name}.sock", std::process::id()))
}

fn start(path: &Path, extra: &[&str]) -> UnixServer {
    let child = Command::new(TIERKV)
        .arg("-s")
        .arg(path)
        .args(["-m", "64"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = UnixServer(child, path.to_path_buf());
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(path).is_err() {
        assert!(Instant::now() < deadline, "the server did not listen on {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// Sends `request` and reads until the reply ends with `end`.
fn exchange(path: &Path, request: &[u8], end: &[u8]) -> String {
    let mut stream = UnixStream::connect(path).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(request).unwrap();
    let mut reply = Vec::new();
    let mut buffer = [0u8; 65536];
    while !reply.ends_with(end) {
        let n = stream.read(&mut buffer).expect("the reply comes");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8(reply).unwrap()
}

#[test]
fn every_worker_serves_the_socket_with_its_permissions() {
    let path = socket_path("serve");
    let server = start(&path, &["-t", "2", "-a", "640"]);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "-a sets the socket's permissions");
    // Keys of both partitions, over several connections (each accepted by some worker).
    for round in 0..4 {
        let mut request = Vec::new();
        for i in 0..50 {
            request.extend_from_slice(format!("set k{round}-{i} 0 0 2\r\nv{}\r\n", i % 10).as_bytes());
        }
        request.extend_from_slice(format!("get k{round}-7 k{round}-48\r\n").as_bytes());
        let reply = exchange(&path, &request, b"END\r\n");
        assert_eq!(reply.matches("STORED\r\n").count(), 50);
        assert!(reply.ends_with(&format!("VALUE k{round}-7 0 2\r\nv7\r\nVALUE k{round}-48 0 2\r\nv8\r\nEND\r\n")));
    }
    let conns = exchange(&path, b"stats conns\r\n", b"END\r\n");
    assert!(conns.contains(&format!(":addr unix:{}\r\n", path.display())), "the listener: {conns}");
    assert!(conns.contains(":addr ?:<AF 0>\r\n"), "a client, as memcached shows it: {conns}");
    drop(server);
}

/// memcached -s on `path` with `-a mask`, killed when dropped.
fn memcached_unix(path: &Path, mask: &str) -> UnixServer {
    let mut command = Command::new("memcached");
    command.arg("-s").arg(path).args(["-a", mask, "-t", "1", "-m", "64"]);
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    let server = UnixServer(command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap(), path.to_path_buf());
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(path).is_err() {
        assert!(Instant::now() < deadline, "memcached did not listen on {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// `stats conns` and the socket's `stats settings` lines, with descriptors, seconds and the
/// path replaced (they differ between servers), the connection groups sorted.
fn unix_view(path: &Path) -> (Vec<String>, Vec<String>) {
    let mut idle = UnixStream::connect(path).unwrap();
    idle.write_all(b"version\r\n").unwrap();
    let mut buffer = [0u8; 64];
    let _ = idle.read(&mut buffer).unwrap();
    let reply = exchange(path, b"stats conns\r\nstats settings\r\nmn\r\n", b"MN\r\n")
        .replace(&path.display().to_string(), "PATH");
    let (conns, settings) = reply.split_once("END\r\n").unwrap();
    let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for line in conns.lines() {
        let (fd, stat) = line.strip_prefix("STAT ").unwrap().split_once(':').unwrap();
        let stat = if stat.starts_with("secs_since_last_cmd") { "secs_since_last_cmd S" } else { stat };
        groups.entry(fd.to_string()).or_default().push(stat.to_string());
    }
    let mut groups: Vec<String> = groups.into_values().map(|group| group.join(", ")).collect();
    groups.sort();
    let wanted = ["STAT domain_socket ", "STAT umask ", "STAT tcpport ", "STAT udpport "];
    let settings = settings.lines().filter(|l| wanted.iter().any(|w| l.starts_with(w))).map(String::from).collect();
    drop(idle);
    (groups, settings)
}

#[test]
fn stats_conns_and_settings_show_the_socket_as_memcached_does() {
    // Short paths: memcached 1.6.18 cuts a listener's path in `stats conns` to 26 bytes (it
    // reads the address into a sockaddr_in6); tierkv shows the whole path.
    let short = |name: &str| std::path::PathBuf::from(format!("/tmp/tk{}{name}.s", std::process::id() % 100_000));
    let (ours, theirs) = (short("o"), short("t"));
    let _tierkv = start(&ours, &["-t", "1", "-a", "640"]);
    let _memcached = memcached_unix(&theirs, "640");
    let (our_view, their_view) = (unix_view(&ours), unix_view(&theirs));
    assert_eq!(our_view, their_view);
    assert!(our_view.1.contains(&"STAT umask 640".to_string()), "{our_view:?}");
}

#[test]
fn pymemcache_and_libmemcached_tools_use_the_socket() {
    let path = socket_path("clients");
    let _server = start(&path, &["-t", "2"]);
    let script = "import sys\nfrom pymemcache.client.base import Client\n\
c = Client(sys.argv[1])\n\
for i in range(200): c.set('py%d' % i, b'x' * i)\n\
assert all(c.get('py%d' % i) == b'x' * i for i in range(200))\n\
assert c.get_many(['py1', 'py199', 'absent']) == {'py1': b'x', 'py199': b'x' * 199}\n\
print('ok')\n";
    let output = Command::new("python3").args(["-c", script]).arg(&path).output().expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("ok"), "pymemcache over the socket: {text}");

    let servers = format!("--servers={}", path.display());
    let stat = Command::new("memcstat").arg(&servers).output().expect("memcstat (libmemcached-tools)");
    let text = String::from_utf8_lossy(&stat.stdout);
    assert!(stat.status.success() && text.contains("curr_items: 200"), "memcstat: {text}");
    let file = std::env::temp_dir().join(format!("tierkv-{}-memccp.txt", std::process::id()));
    std::fs::write(&file, b"copied by memccp").unwrap();
    let copy = Command::new("memccp").arg(&servers).arg(&file).output().expect("memccp (libmemcached-tools)");
    assert!(copy.status.success(), "memccp: {}", String::from_utf8_lossy(&copy.stderr));
    let key = file.file_name().unwrap().to_str().unwrap();
    let reply = exchange(&path, format!("get {key}\r\n").as_bytes(), b"END\r\n");
    assert!(reply.contains("\r\ncopied by memccp\r\nEND\r\n"), "{reply}");
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn a_stale_socket_is_replaced_and_other_files_are_not() {
    let path = socket_path("stale");
    let mut first = start(&path, &["-t", "1"]);
    // A crash leaves the socket file behind: the next start replaces it.
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert!(path.exists());
    let second = start(&path, &["-t", "1"]);
    assert_eq!(exchange(&path, b"version\r\n", b"\r\n").split(' ').next(), Some("VERSION"));
    drop(second);
    drop(first);

    let regular = socket_path("regular");
    std::fs::write(&regular, b"not a socket").unwrap();
    let output = Command::new(TIERKV).arg("-s").arg(&regular).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("-s/--unix-socket"), "{stderr}");
    assert_eq!(std::fs::read(&regular).unwrap(), b"not a socket", "a file that is not a socket is left alone");
    std::fs::remove_file(&regular).unwrap();
}

#[test]
fn flags_that_do_not_fit_the_socket_are_refused() {
    let path = socket_path("flags");
    let path = path.to_str().unwrap();
    for (args, flag) in [
        (vec!["-a", "600"], "-a/--unix-mask"),
        (vec!["-s", path, "-a", "999"], "-a/--unix-mask"),
        (vec!["-s", path, "-U", "11211"], "-U/--udp-port"),
        (vec!["-s", path, "--direct-ports", "30000"], "--direct-ports"),
    ] {
        let output = Command::new(TIERKV).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(flag), "{args:?}: {stderr}");
    }
}
