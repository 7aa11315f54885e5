//! tierkv-client against servers that require TLS (`-Z`) or ASCII authentication (`-Y`): the
//! blocking and the async client connect, authenticate, and serve a fleet's calls; a wrong
//! CA or a wrong password is an error, never a silent fallback.

mod common;

use common::certs::certificates;
use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use tierkv_client::ketama::ServerSpec;
use tierkv_client::{Atomic, Auth, Config, Error, StoreMode, Tls};

fn tls_for(ca: &Path) -> Tls {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(ca).unwrap()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Tls { config: Arc::new(config), server_name: ServerName::try_from("localhost").unwrap() }
}

/// Two tierkv servers with direct ports and `extra` flags.
fn secured_fleet(extra: &[&std::ffi::OsStr]) -> Vec<Server> {
    (0..2)
        .map(|_| {
            let (port, base) = (free_port(), free_ports(2));
            let mut command = Command::new(TIERKV);
            command.args(["-p", &port.to_string(), "-m", "64", "-t", "2", "--direct-ports", &base.to_string()]);
            command.args(extra);
            start(command, port)
        })
        .collect()
}

/// Two TLS servers, certificates from `dir`.
fn tls_fleet(dir: &Path) -> Vec<Server> {
    let options =
        format!("ssl_chain_cert={},ssl_key={}", dir.join("server.pem").display(), dir.join("server.key").display());
    secured_fleet(&["-Z".as_ref(), "-o".as_ref(), options.as_ref()])
}

/// A wrong password is an error from both clients.
fn refused_by_both(servers: &[Server], auth: Auth) {
    let mut wrong = config(servers);
    wrong.auth = Some(auth);
    let refused = tierkv_client::blocking::Client::new(wrong.clone()).unwrap().get(b"k").unwrap_err();
    assert!(matches!(refused, Error::Auth { .. }), "{refused}");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let refused =
        runtime.block_on(async { tierkv_client::tokio::Client::new(wrong).unwrap().get(b"k").await.unwrap_err() });
    assert!(matches!(refused, Error::Auth { .. }), "{refused}");
}

fn config(servers: &[Server]) -> Config {
    Config::new(servers.iter().map(|s| ServerSpec::new("127.0.0.1", s.1)).collect())
}

/// Sets and reads back 2,000 keys; `$aw` is `await` for the async client.
macro_rules! round_trip {
    ($client:expr $(, $aw:ident)?) => {{
        let c = &$client;
        let names: Vec<String> = (0..2000).map(|i| format!("secure:{i}")).collect();
        let items: Vec<(&[u8], &[u8])> = names.iter().map(|k| (k.as_bytes(), k.as_bytes())).collect();
        assert!(c.set_many(&items, 0)$(.$aw)?.unwrap().iter().all(|&s| s));
        let asked: Vec<&[u8]> = names.iter().map(|k| k.as_bytes()).collect();
        let got = c.get_many(&asked)$(.$aw)?.unwrap();
        assert!(got.iter().zip(&names).all(|(g, k)| g.as_deref() == Some(k.as_bytes())));
        assert_eq!(c.get(b"secure:7")$(.$aw)?.unwrap().as_deref(), Some(&b"secure:7"[..]));
    }};
}

#[test]
fn both_clients_speak_tls_to_every_port_and_refuse_a_wrong_ca() {
    let dir = certificates("fleet-client");
    let servers = tls_fleet(&dir);
    let mut good = config(&servers);
    good.tls = Some(tls_for(&dir.join("ca.pem")));
    let blocking = tierkv_client::blocking::Client::new(good.clone()).unwrap();
    round_trip!(blocking);
    assert!(blocking.topologies().iter().all(|t| t.as_ref().is_some_and(|t| t.direct_port_base.is_some())));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let client = tierkv_client::tokio::Client::new(good.clone()).unwrap();
        round_trip!(client, await);
    });

    let mut wrong = config(&servers);
    wrong.tls = Some(tls_for(&dir.join("otherca.pem")));
    let refused = tierkv_client::blocking::Client::new(wrong.clone()).unwrap().get(b"k").unwrap_err();
    assert!(matches!(&refused, Error::Io { message, .. } if message.contains("certificate")), "{refused}");
    let refused =
        runtime.block_on(async { tierkv_client::tokio::Client::new(wrong).unwrap().get(b"k").await.unwrap_err() });
    assert!(matches!(&refused, Error::Io { message, .. } if message.contains("certificate")), "{refused}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn both_clients_authenticate_and_a_wrong_password_is_an_error() {
    let file = std::env::temp_dir().join(format!("tierkv-fleet-auth-{}", std::process::id()));
    std::fs::write(&file, "alice:secret\n").unwrap();
    let servers = secured_fleet(&["-Y".as_ref(), file.as_ref()]);
    let mut good = config(&servers);
    good.auth = Some(Auth::Ascii { user: "alice".into(), password: "secret".into() });
    round_trip!(tierkv_client::blocking::Client::new(good.clone()).unwrap());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async { round_trip!(tierkv_client::tokio::Client::new(good).unwrap(), await) });

    refused_by_both(&servers, Auth::Ascii { user: "alice".into(), password: "guess".into() });
    std::fs::remove_file(&file).ok();
}

/// The binary-only calls a SASL fleet serves; `$aw` is `await` for the async client.
macro_rules! binary_calls {
    ($client:expr $(, $aw:ident)?) => {{
        let c = &$client;
        assert!(c.store(StoreMode::Set, b"b", b"12", 7, 0)$(.$aw)?.unwrap());
        let item = c.gets(b"b")$(.$aw)?.unwrap().unwrap();
        assert_eq!((item.value.as_slice(), item.flags), (&b"12"[..], 7));
        assert_eq!(c.get_item(b"b")$(.$aw)?.unwrap().unwrap().cas, None);
        assert!(!c.store(StoreMode::Cas(item.cas.unwrap() + 1), b"b", b"0", 0, 0)$(.$aw)?.unwrap());
        assert!(!c.store(StoreMode::Add, b"b", b"0", 0, 0)$(.$aw)?.unwrap());
        assert!(!c.store(StoreMode::Replace, b"none", b"0", 0, 0)$(.$aw)?.unwrap());
        assert!(c.store(StoreMode::Append, b"b", b"3", 0, 0)$(.$aw)?.unwrap());
        assert_eq!(c.incr(b"b", 1)$(.$aw)?.unwrap(), Some(124));
        assert_eq!(c.decr(b"b", 200)$(.$aw)?.unwrap(), Some(0));
        assert_eq!(c.incr(b"none", 1)$(.$aw)?.unwrap(), None);
        assert!(c.touch(b"b", 100)$(.$aw)?.unwrap());
        assert!(c.delete(b"b")$(.$aw)?.unwrap());
        assert!(!c.delete(b"b")$(.$aw)?.unwrap());
        assert_eq!(c.get(b"b")$(.$aw)?.unwrap(), None);
        assert!(matches!(c.atomic(&Atomic::add(b"b", 1))$(.$aw)?, Err(Error::Config(_))));
        assert!(c.topologies().iter().all(|t| t.as_ref().is_some_and(|t| t.direct_port_base.is_some())));
    }};
}

#[test]
fn both_clients_log_in_with_sasl_and_speak_binary() {
    let file = std::env::temp_dir().join(format!("tierkv-fleet-sasl-{}", std::process::id()));
    std::fs::write(&file, "alice:secret\n").unwrap();
    let servers = secured_fleet(&["-S".as_ref(), "--sasl-pwdb".as_ref(), file.as_ref()]);
    let mut good = config(&servers);
    good.auth = Some(Auth::SaslPlain { user: "alice".into(), password: "secret".into() });
    let blocking = tierkv_client::blocking::Client::new(good.clone()).unwrap();
    round_trip!(blocking);
    binary_calls!(blocking);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let client = tierkv_client::tokio::Client::new(good).unwrap();
        round_trip!(client, await);
        binary_calls!(client, await);
    });
    let forwarded: u64 = servers.iter().map(|s| sasl_forwarded(s.1)).sum();
    assert_eq!(forwarded, 0, "binary requests went to their partitions' ports");

    refused_by_both(&servers, Auth::SaslPlain { user: "alice".into(), password: "guess".into() });
    std::fs::remove_file(&file).ok();
}

/// `forwarded_requests` from a SASL server, asked through an authenticated client.
fn sasl_forwarded(port: u16) -> u64 {
    let mut config = Config::new(vec![ServerSpec::new("127.0.0.1", port)]);
    config.auth = Some(Auth::SaslPlain { user: "alice".into(), password: "secret".into() });
    config.direct = true;
    let client = tierkv_client::blocking::Client::new(config).unwrap();
    client.get(b"warm-up").unwrap();
    client.topologies()[0].as_ref().unwrap().forwarded_requests
}
