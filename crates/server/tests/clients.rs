//! Real third-party clients against tierkv: Debian's `memccapable` (libmemcached's protocol
//! conformance suite, text and binary), pymemcache over text, and the Rust `memcache` crate over
//! binary. `bash scripts/test.sh` installs the first two.

mod common;

use common::{free_port, start, tierkv, TIERKV};
use std::process::Command;

#[test]
fn memccapable_passes_every_text_and_binary_test() {
    let server = tierkv();
    let output = Command::new("memccapable")
        .args(["-h", "127.0.0.1", "-p", &server.1.to_string(), "-t", "5"])
        .output()
        .expect("memccapable is installed (libmemcached-tools; bash scripts/test.sh installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("All tests passed"), "{text}");
    assert!(!text.contains("[FAIL]"), "{text}");
}

#[test]
fn pymemcache_text_protocol() {
    let server = tierkv();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/pymemcache_client.py");
    let output = Command::new("python3")
        .args([script, &server.1.to_string(), &(1 << 20).to_string()])
        .output()
        .expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "pymemcache (pip install pymemcache; bash scripts/test.sh does): {text}");
    assert!(text.contains("all checks passed"), "{text}");
}

/// pymemcache's own integration tests (shipped in its package), run with pytest against a
/// server started as memcached's defaults would size it: all 100 pass, as against memcached
/// (`cache_memlimit 50` among them, below what the index of -m 1024 takes).
#[test]
fn pymemcache_integration_suite_passes_whole() {
    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "1024", "-t", "2"]);
    let server = start(command, port);
    let find = Command::new("python3")
        .args(["-c", "import pymemcache, os; print(os.path.dirname(pymemcache.__file__))"])
        .output()
        .expect("python3 runs");
    let package = String::from_utf8_lossy(&find.stdout).trim().to_string();
    let suite = format!("{package}/test/test_integration.py");
    let output = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", &suite, "--server", "127.0.0.1"])
        .args(["--port", &server.1.to_string()])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "pytest and pymemcache (bash scripts/test.sh installs them): {text}");
    assert!(text.contains("100 passed") && !text.contains("failed"), "{text}");
}

#[test]
fn rust_memcache_crate_binary_protocol() {
    let server = tierkv();
    let url = format!("memcache://127.0.0.1:{}?timeout=5", server.1);
    let client = memcache::Client::connect(url.as_str()).expect("connects over binary");
    client.set("foo", "bar", 0).unwrap();
    assert_eq!(client.get::<String>("foo").unwrap().as_deref(), Some("bar"));
    client.prepend("foo", "pre-").unwrap();
    client.append("foo", "-post").unwrap();
    assert_eq!(client.get::<String>("foo").unwrap().as_deref(), Some("pre-bar-post"));
    assert!(client.add("foo", "x", 0).is_err(), "add over an existing key fails");
    client.add("fresh", "x", 0).unwrap();
    client.replace("fresh", "y", 0).unwrap();
    assert!(client.replace("absent", "y", 0).is_err());
    let (_, _, cas): (String, u32, Option<u64>) = client.get("fresh").unwrap().unwrap();
    let cas = cas.expect("binary GET carries the CAS");
    assert!(client.cas("fresh", "z", 0, cas).unwrap());
    assert!(!client.cas("fresh", "w", 0, cas).unwrap(), "a stale CAS is refused");
    client.set("counter", 40u64, 0).unwrap();
    assert_eq!(client.increment("counter", 2).unwrap(), 42);
    assert_eq!(client.decrement("counter", 50).unwrap(), 0);
    assert!(client.touch("counter", 100).unwrap());
    assert!(!client.touch("absent", 100).unwrap());
    let keys: Vec<String> = (0..300).map(|i| format!("multi-{i}")).collect();
    for key in &keys {
        client.set(key, key.as_str(), 0).unwrap();
    }
    let refs: Vec<&str> = keys.iter().map(String::as_str).chain(["absent"]).collect();
    let many: std::collections::HashMap<String, String> = client.gets(&refs).unwrap();
    assert_eq!(many.len(), 300);
    assert!(keys.iter().all(|k| many[k] == *k));
    let big = vec![7u8; 1_000_000];
    client.set("big", big.as_slice(), 0).unwrap();
    assert_eq!(client.get::<Vec<u8>>("big").unwrap(), Some(big));
    assert!(client.set("huge", vec![1u8; 2 << 20].as_slice(), 0).is_err(), "beyond -I is refused");
    assert!(client.delete("foo").unwrap());
    assert!(!client.delete("foo").unwrap());
    let version = client.version().unwrap();
    assert!(version[0].1.starts_with("1.6.18"), "{version:?}");
    let stats = client.stats().unwrap();
    assert!(stats[0].1.contains_key("curr_items"), "{stats:?}");
    client.flush().unwrap();
    assert_eq!(client.get::<String>("fresh").unwrap(), None);
}
