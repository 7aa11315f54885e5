//! tierkv-bench against real sockets: the floor server, Debian's memcached, and bad targets.
//! Every server is started on a free loopback port and stopped at the end.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_tierkv-bench");

/// A child process killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tests here measure servers pinned to cores; run one at a time so they do not starve each
/// other into reply timeouts on a 2-core machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn free_port() -> u16 {
    tierkv_bench::ports::free_port().unwrap()
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_bench(args: &[&str]) -> Output {
    Command::new(BENCH).arg("run").args(args).stdin(Stdio::null()).output().expect("tierkv-bench runs")
}

/// The JSON line's number for `field` (the bench prints one flat object plus latency_us).
fn number(json: &str, field: &str) -> f64 {
    let at = json.find(&format!("\"{field}\":")).unwrap_or_else(|| panic!("{field} missing in {json}"));
    let rest = &json[at + field.len() + 3..];
    let end = rest.find([',', '}']).unwrap();
    rest[..end].parse().unwrap_or_else(|_| panic!("{field} is not a number in {json}"))
}

fn assert_sane(output: &Output, expect_hits: bool) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "run failed: {stderr}");
    let json = String::from_utf8(output.stdout.clone()).unwrap();
    assert_eq!(json.lines().count(), 1, "exactly one JSON line: {json}");
    assert!(number(&json, "operations") > 0.0 && number(&json, "ops_per_sec") > 0.0);
    assert_eq!(number(&json, "errors"), 0.0);
    let (p50, p99, p999) = (number(&json, "p50"), number(&json, "p99"), number(&json, "p999"));
    assert!(0.0 < p50 && p50 <= p99 && p99 <= p999, "{json}");
    if expect_hits {
        assert_eq!(number(&json, "get_hit_ratio"), 1.0, "{json}");
    }
    assert!(number(&json, "client_cpu_us_per_op") > 0.0);
    json
}

#[test]
fn against_the_floor_server() {
    let _serial = serial();
    for (protocol, floor_protocol) in [("text", "text"), ("resp", "resp")] {
        let port = free_port();
        let server = Server(
            Command::new(BENCH)
                .args(["floor", "--port", &port.to_string(), "--protocol", floor_protocol])
                .spawn()
                .unwrap(),
        );
        wait_for_port(port);
        let target = format!("127.0.0.1:{port}");
        let pid = server.0.id().to_string();
        let output = run_bench(&[
            "--target",
            &target,
            "--protocol",
            protocol,
            "--workload",
            "B",
            "--keys",
            "1000",
            "--connections",
            "4",
            "--pipeline",
            "8",
            "--seconds",
            "1",
            "--server-pid",
            &pid,
            "--json",
        ]);
        let json = assert_sane(&output, true);
        assert!(number(&json, "server_cpu_us_per_op") >= 0.0);
    }
}

/// Debian's memcached on a free port, and that port.
fn memcached() -> (Server, u16) {
    memcached_with_udp(false)
}

/// Debian's memcached, with UDP on the same port number when `udp`.
fn memcached_with_udp(udp: bool) -> (Server, u16) {
    let port = free_port();
    let udp_port = if udp { port.to_string() } else { "0".to_string() };
    let mut command = Command::new("memcached");
    command.args(["-p", &port.to_string(), "-U", &udp_port, "-l", "127.0.0.1", "-t", "1", "-m", "64"]);
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    let child = command.spawn().expect("memcached is installed (bash scripts/test.sh installs Debian's memcached)");
    let server = Server(child);
    wait_for_port(port);
    (server, port)
}

/// One second of load on `server` (preloaded, 2000 keys), with `extra` flags; its JSON line.
fn one_second(server: &Server, port: u16, protocol: &str, extra: &[&str]) -> String {
    let (target, pid) = (format!("127.0.0.1:{port}"), server.0.id().to_string());
    let mut args = vec!["--target", &target, "--protocol", protocol, "--keys", "2000", "--seconds", "1", "--preload"];
    args.extend_from_slice(&["--server-pid", &pid, "--json"]);
    args.extend_from_slice(extra);
    assert_sane(&run_bench(&args), true)
}

#[test]
fn against_debian_memcached() {
    let _serial = serial();
    let (server, port) = memcached();
    for protocol in ["text", "meta", "binary"] {
        let json = one_second(&server, port, protocol, &["--workload", "A", "--connections", "4", "--pipeline", "4"]);
        assert!(number(&json, "server_cpu_us_per_op") > 0.0, "{json}");
    }
}

#[test]
fn over_udp_against_debian_memcached() {
    let _serial = serial();
    let (server, port) = memcached_with_udp(true);
    for protocol in ["text", "binary"] {
        let json = one_second(&server, port, protocol, &["--udp", "--connections", "8"]);
        assert!(number(&json, "lost") < number(&json, "operations") / 100.0, "{json}");
    }
    // Without UDP on the target, the run fails with a clear message instead of hanging.
    let (_tcp_only, tcp_port) = memcached();
    let output = run_bench(&["--target", &format!("127.0.0.1:{tcp_port}"), "--udp", "--seconds", "5", "--keys", "100"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("UDP"), "{}", String::from_utf8_lossy(&output.stderr));
}

/// Runs the bench against `target` and returns its stderr, asserting a quick failure.
fn fails_quickly(target: &str) -> String {
    let start = Instant::now();
    let output = run_bench(&["--target", target, "--seconds", "30", "--connections", "2", "--keys", "100"]);
    assert!(!output.status.success(), "the run must fail");
    assert!(start.elapsed() < Duration::from_secs(10), "it must fail within seconds, took {:?}", start.elapsed());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn bad_targets_fail_clearly() {
    let _serial = serial();
    let port = free_port();
    let stderr = fails_quickly(&format!("127.0.0.1:{port}"));
    assert!(stderr.contains("cannot connect"), "{stderr}");

    // A server that closes every connection after reading.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(2) {
            let mut stream = stream.unwrap();
            let mut buffer = [0u8; 1024];
            let _ = stream.read(&mut buffer);
        }
    });
    let stderr = fails_quickly(&address.to_string());
    assert!(stderr.contains("closed the connection"), "{stderr}");

    // A server that answers another protocol.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut streams = Vec::new();
        for stream in listener.incoming().take(2) {
            let mut stream = stream.unwrap();
            let mut buffer = [0u8; 1024];
            let _ = stream.read(&mut buffer);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
            streams.push(stream);
        }
        std::thread::sleep(Duration::from_secs(15));
    });
    let stderr = fails_quickly(&address.to_string());
    assert!(stderr.contains("reply"), "{stderr}");

    // A server that never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let streams: Vec<_> = listener.incoming().take(2).collect();
        std::thread::sleep(Duration::from_secs(15));
        drop(streams);
    });
    let stderr = fails_quickly(&address.to_string());
    assert!(stderr.contains("no reply"), "{stderr}");
}

#[test]
fn compare_writes_table_json_and_plot() {
    let _serial = serial();
    let out = std::env::temp_dir().join(format!("tierkv-compare-test-{}", std::process::id()));
    let output = Command::new(BENCH)
        .args(["compare", "--servers", "memcached,redis,floor", "--workloads", "B", "--pipelines", "1,4"])
        .args(["--seconds", "0.3", "--keys", "1000", "--connections", "4", "--memory-mib", "64", "--sweep", "5000"])
        .args(["--repeat", "2"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // The table has one (median) row per server, depth and rate; rounds.md has every round.
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert_eq!(table.lines().count(), 2 + 3 * 2 * 2, "{table}");
    let row =
        |server: &str, rest: &str| table.lines().any(|l| l.starts_with(&format!("| {server} | ")) && l.contains(rest));
    assert!(
        row("memcached", "| B | zipf:0.99 | 1 | closed loop |") && row("redis", "| B | zipf:0.99 | 4 | 5000 |"),
        "{table}"
    );
    let rounds = std::fs::read_to_string(out.join("rounds.md")).unwrap();
    assert_eq!(rounds.lines().count(), 2 + 2 * 3 * 2 * 2, "{rounds}");
    assert!(
        rounds.contains("| floor | 0 | B | zipf:0.99 | 4 | closed loop |")
            && rounds.contains("| floor | 1 | B | zipf:0.99 | 4 | closed loop |")
    );
    let json = std::fs::read_to_string(out.join("results.json")).unwrap();
    assert_eq!(json.matches("\"server\":").count(), 24);
    assert!(json.contains("\"rate\":5000") && json.contains("\"round\":1"));
    let svg = std::fs::read_to_string(out.join("plot.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<polyline"), "the sweep draws throughput against p99");
    std::fs::remove_dir_all(&out).unwrap();
}

/// A server that answers each text request with END, one at a time, 2 ms apart, and returns
/// per connection the most requests it had unanswered when new ones arrived after its first
/// reply (a client that waits for its whole round sends nothing while any are unanswered).
fn slow_answerer() -> (std::net::SocketAddr, std::sync::mpsc::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let (report, reports) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let report = report.clone();
            std::thread::spawn(move || {
                stream.set_nonblocking(true).unwrap();
                let (mut arrived, mut replied, mut most, mut buffer) = (0usize, 0usize, 0usize, [0u8; 4096]);
                loop {
                    match stream.read(&mut buffer) {
                        Ok(0) => break,
                        Ok(n) => {
                            if replied > 0 {
                                most = most.max(arrived - replied);
                            }
                            arrived += buffer[..n].iter().filter(|&&b| b == b'\n').count();
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => break,
                    }
                    if arrived > replied {
                        std::thread::sleep(Duration::from_millis(2));
                        if stream.write_all(b"END\r\n").is_err() {
                            break;
                        }
                        replied += 1;
                    } else {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                let _ = report.send(most);
            });
        }
    });
    (address, reports)
}

#[test]
fn a_window_keeps_the_pipeline_full_where_rounds_wait() {
    let _serial = serial();
    for (window, expect_overlap) in [(false, false), (true, true)] {
        let (address, reports) = slow_answerer();
        let target = address.to_string();
        let mut args = vec!["--target", &target, "--get-ratio", "1", "--keys", "100", "--connections", "1"];
        args.extend_from_slice(&["--pipeline", "4", "--seconds", "0.5", "--json"]);
        if window {
            args.push("--window");
        }
        let output = run_bench(&args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        // The load's connection is the one that saw the most (the topology query sees one).
        let most = reports.iter().take(2).max().unwrap();
        if expect_overlap {
            assert!(most >= 2, "a window sends a request per reply while the rest wait: {most}");
        } else {
            assert_eq!(most, 0, "a round is sent only once all its replies are in");
        }
    }
    let refused = run_bench(&["--target", "127.0.0.1:1", "--window", "--rate", "1000"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--window is a closed loop"));
}
