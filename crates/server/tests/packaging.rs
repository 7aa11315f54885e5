//! What ships beside the binary: the systemd unit passes `systemd-analyze verify` and scores a
//! low exposure with `systemd-analyze security --offline=true`; the example configuration
//! starts a server.

mod common;

use common::{exchange, free_port, start, TIERKV};
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The unit with ExecStart pointing at the binary under test (verify checks that it exists).
fn unit_under_test() -> std::path::PathBuf {
    let unit = std::fs::read_to_string(format!("{ROOT}/packaging/tierkv.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/tierkv --config /etc/tierkv/tierkv.toml"));
    let dir = std::env::temp_dir().join(format!("tierkv-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tierkv.service");
    std::fs::write(&path, unit.replace("ExecStart=/usr/bin/tierkv", &format!("ExecStart={TIERKV}"))).unwrap();
    path
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit = unit_under_test();
    let verify = Command::new("systemd-analyze").arg("verify").arg(&unit).output().expect("systemd-analyze (systemd)");
    let text = format!("{}{}", String::from_utf8_lossy(&verify.stdout), String::from_utf8_lossy(&verify.stderr));
    assert!(verify.status.success() && text.trim().is_empty(), "systemd-analyze verify: {text}");
    let security = Command::new("systemd-analyze").args(["security", "--offline=true"]).arg(&unit).output().unwrap();
    let text = String::from_utf8_lossy(&security.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for tierkv.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("an exposure score in {text}"));
    eprintln!("systemd-analyze security exposure: {score}");
    assert!(score <= 2.0, "the unit is hardened (exposure {score}): {text}");
    std::fs::remove_dir_all(unit.parent().unwrap()).unwrap();
}

#[test]
fn the_example_configuration_starts_a_server() {
    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["--config", &format!("{ROOT}/packaging/tierkv.toml"), "-p", &port.to_string(), "-m", "64"]);
    let server = start(command, port);
    assert_eq!(exchange(server.1, b"set k 0 0 1\r\nv\r\nget k\r\n"), b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n");
}
