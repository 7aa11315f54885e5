//! TLS (`-Z`): real clients (pymemcache with an SSLContext, `openssl s_client`) set and get;
//! client certificates as memcached's `ssl_verify_mode` says; a plain-text client on the TLS
//! port is refused; certificates reload on SIGHUP and `refresh_certs`; bad flags are refused.
//! The certificates come from a CA the test makes with `openssl`.

mod common;

use common::certs::certificates;
use common::{free_port, start, Server, TIERKV};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tls_server(dir: &Path, extra: &[&str]) -> Server {
    let port = free_port();
    let options =
        format!("ssl_chain_cert={},ssl_key={}", dir.join("server.pem").display(), dir.join("server.key").display());
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "64", "-t", "2", "-Z", "-o", &options]).args(extra);
    start(command, port)
}

fn python(args: &[&str]) -> String {
    let output = Command::new("python3").args(args).output().expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "python3 {args:?}: {text}");
    text
}

fn client_checks(port: u16, dir: &Path, mode: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/tls_client.py");
    let text = python(&[script, &port.to_string(), dir.to_str().unwrap(), mode]);
    assert!(text.contains("all checks passed"), "{text}");
}

/// What `openssl s_client` gets back for `request` (sent, then a second to answer).
fn s_client(port: u16, request: &str) -> String {
    let mut child = Command::new("timeout")
        .args(["10", "openssl", "s_client", "-connect", &format!("127.0.0.1:{port}"), "-quiet", "-no_ign_eof"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is installed");
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, request.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(800));
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stat(port: u16, name: &str) -> u64 {
    let reply = s_client(port, "stats\r\n");
    let prefix = format!("STAT {name} ");
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{name} in {reply}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn real_clients_set_and_get_over_tls_and_plain_text_is_refused() {
    let dir = certificates("clients");
    let server = tls_server(&dir, &[]);
    client_checks(server.1, &dir, "plain");
    let reply = s_client(server.1, "set s 0 0 5\r\nhello\r\nget s\r\n");
    assert_eq!(reply, "STORED\r\nVALUE s 0 5\r\nhello\r\nEND\r\n");
    assert!(stat(server.1, "ssl_handshake_errors") >= 1, "the plain-text client counts as a failed handshake");
    assert!(stat(server.1, "ssl_new_sessions") >= 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn client_certificates_follow_memcached_s_verify_modes() {
    let dir = certificates("verify");
    let ca = format!("ssl_ca_cert={}", dir.join("ca.pem").display());
    for (mode, checks) in [("2", "require"), ("3", "require"), ("1", "request")] {
        let server = tls_server(&dir, &["-v", "-o", &format!("{ca},ssl_verify_mode={mode}")]);
        client_checks(server.1, &dir, checks);
        // At -v a refused client is logged with its address and rustls's reason.
        let log = server.stderr();
        let refused =
            log.lines().find(|l| l.starts_with("tierkv: TLS connection from 127.0.0.1 refused in the handshake: "));
        assert!(refused.is_some(), "{log}");
    }
    // A CA alone does not ask for client certificates.
    let server = tls_server(&dir, &["-o", &ca]);
    let reply = s_client(server.1, "version\r\n");
    assert!(reply.starts_with("VERSION "), "{reply}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The certificate the server presents now, as PEM.
fn presented(port: u16) -> String {
    python(&[
        "-c",
        "import ssl, sys; print(ssl.get_server_certificate(('127.0.0.1', int(sys.argv[1]))))",
        &port.to_string(),
    ])
}

fn same_certificate(pem: &str, file: &Path) -> bool {
    let body = |text: &str| text.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    body(pem) == body(&std::fs::read_to_string(file).unwrap())
}

#[test]
fn certificates_reload_on_sighup_and_refresh_certs() {
    let dir = certificates("reload");
    let server = tls_server(&dir, &[]);
    assert!(same_certificate(&presented(server.1), &dir.join("server.pem")));
    // New files in place, then SIGHUP: new connections get the new certificate.
    std::fs::copy(dir.join("server2.pem"), dir.join("server.pem")).unwrap();
    std::fs::copy(dir.join("server2.key"), dir.join("server.key")).unwrap();
    // SAFETY: kill only sends a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(server.0.id() as libc::pid_t, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !same_certificate(&presented(server.1), &dir.join("server2.pem")) {
        assert!(Instant::now() < deadline, "SIGHUP did not reload the certificate");
        std::thread::sleep(Duration::from_millis(100));
    }
    // refresh_certs with a broken key: memcached's error, and the certificate in use stays.
    std::fs::write(dir.join("server.key"), "not a key").unwrap();
    let reply = s_client(server.1, "refresh_certs\r\n");
    assert!(reply.starts_with("Error loading the key: "), "{reply}");
    assert!(same_certificate(&presented(server.1), &dir.join("server2.pem")));
    std::fs::copy(dir.join("server2.key"), dir.join("server.key")).unwrap();
    assert_eq!(s_client(server.1, "refresh_certs\r\n"), "OK\r\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tls_flags_are_checked_at_start_up() {
    let dir = certificates("flags");
    let cert = format!("ssl_chain_cert={}", dir.join("server.pem").display());
    let key = format!("ssl_key={}", dir.join("server.key").display());
    let missing = format!("ssl_chain_cert={},{key}", dir.join("absent.pem").display());
    let cases: [(Vec<String>, &str); 5] = [
        (vec!["-Z".into()], "-Z/--enable-ssl"),
        (vec!["-Z".into(), "-o".into(), format!("{cert},{key},ssl_verify_mode=2")], "--tls-verify-mode"),
        (vec!["-Z".into(), "-o".into(), format!("{cert},{key}"), "-U".into(), "11311".into()], "-U/--udp-port"),
        (vec!["-o".into(), format!("{cert},{key}")], "need -Z/--enable-ssl"),
        (vec!["-Z".into(), "-o".into(), missing], "-Z/--enable-ssl: Error loading the certificate chain"),
    ];
    for (args, expected) in cases {
        let output = Command::new(TIERKV).args(["-p", &free_port().to_string()]).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(expected), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn direct_ports_are_tls_too() {
    let dir = certificates("direct");
    let base = common::free_ports(2);
    let server = tls_server(&dir, &["--direct-ports", &base.to_string()]);
    for port in [server.1, base, base + 1] {
        assert_eq!(
            s_client(port, "set d 0 0 1\r\nx\r\nget d\r\n"),
            "STORED\r\nVALUE d 0 1\r\nx\r\nEND\r\n",
            "port {port}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tls_settings_lines_match_memcached_s() {
    let dir = certificates("settings");
    let ca = format!("ssl_ca_cert={},ssl_verify_mode=1", dir.join("ca.pem").display());
    let ours = tls_server(&dir, &["-o", &ca]);
    let port = free_port();
    let options = format!(
        "ssl_chain_cert={},ssl_key={},{ca}",
        dir.join("server.pem").display(),
        dir.join("server.key").display()
    );
    let mut command = Command::new("memcached");
    command.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1", "-t", "1", "-Z", "-o", &options]);
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    let theirs = start(command, port);
    let ssl_lines = |port: u16| -> Vec<String> {
        s_client(port, "stats settings\r\n").lines().filter(|l| l.starts_with("STAT ssl_")).map(String::from).collect()
    };
    let (mine, reference) = (ssl_lines(ours.1), ssl_lines(theirs.1));
    assert_eq!(mine.len(), 11, "{mine:?}");
    assert_eq!(mine, reference);
    std::fs::remove_dir_all(&dir).unwrap();
}
