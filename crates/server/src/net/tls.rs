//! TLS (memcached's `-Z`) with rustls and the ring provider: the certificates and the client
//! verification mode, reloaded on SIGHUP or `refresh_certs`, and one connection's record layer
//! over its socket (TCP or the Unix socket). A worker takes the current configuration when it accepts (an atomic
//! generation check, a lock only after a reload), so nothing is shared on the data path.
//!
//! It must not know about requests: a `TlsStream` reads and writes plaintext like a socket.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Plaintext one `write` hands rustls at most (it splits it into 16 KiB records).
const MAX_PLAINTEXT_PER_WRITE: usize = 256 * 1024;

/// What `-Z` and `-o ssl_*` ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    /// `ssl_chain_cert`: the server's certificate chain (PEM).
    pub chain_cert: PathBuf,
    /// `ssl_key`: its private key (PEM).
    pub key: PathBuf,
    /// `ssl_ca_cert`: the CAs client certificates are checked against (PEM).
    pub ca_cert: Option<PathBuf>,
    /// memcached's `ssl_verify_mode`: 0 no client certificate asked, 1 asked and checked if
    /// sent, 2 required, 3 required once (the same as 2 here: sessions are not resumed).
    pub verify_mode: u8,
}

/// The current configuration and the figures `stats` reports, shared by every worker.
#[derive(Debug)]
pub(crate) struct TlsContext {
    pub settings: TlsSettings,
    current: RwLock<Arc<ServerConfig>>,
    generation: AtomicU64,
    /// Unix time of the last successful load.
    pub loaded_at: AtomicU64,
    pub handshake_errors: AtomicU64,
    pub proto_errors: AtomicU64,
    pub new_sessions: AtomicU64,
    /// `-v` (changed at run time by `verbosity`): at 1 and above a refused handshake is logged.
    verbosity: Arc<std::sync::atomic::AtomicU32>,
}

impl TlsContext {
    /// Loads the certificates; the error says which file failed and why (memcached's words).
    pub(crate) fn new(
        settings: TlsSettings,
        now: u64,
        verbosity: Arc<std::sync::atomic::AtomicU32>,
    ) -> Result<TlsContext, String> {
        let config = load(&settings)?;
        Ok(TlsContext {
            settings,
            current: RwLock::new(config),
            generation: AtomicU64::new(0),
            loaded_at: AtomicU64::new(now),
            handshake_errors: AtomicU64::new(0),
            proto_errors: AtomicU64::new(0),
            new_sessions: AtomicU64::new(0),
            verbosity,
        })
    }

    /// Loads the certificates again (SIGHUP, `refresh_certs`); on failure the old ones stay.
    pub(crate) fn refresh(&self, now: u64) -> Result<(), String> {
        let config = load(&self.settings)?;
        if let Ok(mut current) = self.current.write() {
            *current = config;
        }
        self.generation.fetch_add(1, Ordering::Release);
        self.loaded_at.store(now, Ordering::Relaxed);
        Ok(())
    }
}

/// A worker's view of the context: the configuration it accepts with, refreshed only when a
/// reload bumped the generation.
pub(crate) struct Acceptor {
    context: Arc<TlsContext>,
    config: Arc<ServerConfig>,
    generation: u64,
}

impl Acceptor {
    pub(crate) fn new(context: Arc<TlsContext>) -> Acceptor {
        let generation = context.generation.load(Ordering::Acquire);
        let config = context.current.read().map(|c| Arc::clone(&c)).expect("the TLS configuration lock");
        Acceptor { context, config, generation }
    }

    /// Starts the server side of a handshake on an accepted socket.
    pub(crate) fn accept(&mut self, sock: super::Stream) -> io::Result<TlsStream> {
        let generation = self.context.generation.load(Ordering::Acquire);
        if generation != self.generation {
            if let Ok(current) = self.context.current.read() {
                self.config = Arc::clone(&current);
                self.generation = generation;
            }
        }
        let conn = ServerConnection::new(Arc::clone(&self.config)).map_err(io::Error::other)?;
        Ok(TlsStream { sock, conn, context: Arc::clone(&self.context), established: false })
    }
}

fn load(settings: &TlsSettings) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&settings.chain_cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("Error loading the certificate chain: {} : {e}", settings.chain_cert.display()))?;
    if chain.is_empty() {
        return Err(format!("Error loading the certificate chain: {} : no certificate", settings.chain_cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&settings.key)
        .map_err(|e| format!("Error loading the key: {} : {e}", settings.key.display()))?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("Error setting up TLS: {e}"))?;
    let builder = match (&settings.ca_cert, settings.verify_mode) {
        (_, 0) => builder.with_no_client_auth(),
        (None, _) => return Err("ssl_verify_mode 1 to 3 needs ssl_ca_cert".to_string()),
        (Some(ca), mode) => {
            let ca_error = |e: String| format!("Error loading the CA certificate: {} : {e}", ca.display());
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| ca_error(e.to_string()))? {
                roots.add(cert.map_err(|e| ca_error(e.to_string()))?).map_err(|e| ca_error(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if mode == 1 { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| ca_error(e.to_string()))?)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| format!("Error validating the certificate: {e}"))?;
    Ok(Arc::new(config))
}

/// One TLS connection: rustls's record layer over its socket.
pub(crate) struct TlsStream {
    /// The socket (never itself TLS).
    pub sock: super::Stream,
    conn: ServerConnection,
    context: Arc<TlsContext>,
    /// The handshake has finished (counted once in `new_sessions`).
    established: bool,
}

impl TlsStream {
    /// Writes the records rustls holds (handshake messages, encrypted replies) while the
    /// socket takes them; WouldBlock when some are left for the next writable event.
    pub(crate) fn send_pending(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether encrypted records are waiting for the socket.
    pub(crate) fn pending_output(&self) -> bool {
        self.conn.wants_write()
    }

    /// Takes the records that arrived; a protocol error (a plain-text client, a refused
    /// certificate) is counted, answered with an alert and ends the connection.
    fn process(&mut self) -> io::Result<()> {
        if let Err(error) = self.conn.process_new_packets() {
            let counter = if self.established { &self.context.proto_errors } else { &self.context.handshake_errors };
            counter.fetch_add(1, Ordering::Relaxed);
            if self.context.verbosity.load(Ordering::Relaxed) > 0 {
                let peer = self.sock.peer_ip().map_or_else(|| "a local socket".to_string(), |ip| ip.to_string());
                let when = if self.established { "after the handshake" } else { "in the handshake" };
                eprintln!("tierkv: TLS connection from {peer} refused {when}: {error}");
            }
            let _ = self.send_pending();
            return Err(io::Error::new(io::ErrorKind::InvalidData, error));
        }
        if !self.established && !self.conn.is_handshaking() {
            self.established = true;
            self.context.new_sessions.fetch_add(1, Ordering::Relaxed);
        }
        match self.send_pending() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            other => other,
        }
    }
}

impl Read for TlsStream {
    /// Fills `buf` with plaintext until it is full or the socket is drained, so a short read
    /// means what it means for TCP: nothing more until the next readable event.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        loop {
            match self.conn.reader().read(&mut buf[filled..]) {
                Ok(0) if filled < buf.len() => return Ok(filled),
                Ok(n) => {
                    filled += n;
                    if filled == buf.len() {
                        return Ok(filled);
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The error (a close without close_notify) is seen on the next read.
                Err(_) if filled > 0 => return Ok(filled),
                Err(e) => return Err(e),
            }
            match self.conn.read_tls(&mut self.sock) {
                Ok(0) => return Ok(filled),
                Ok(_) => self.process()?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && filled > 0 => return Ok(filled),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for TlsStream {
    /// Takes plaintext only when earlier records have left, so unsent bytes never pile up
    /// inside rustls beyond one write's worth.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send_pending()?;
        let n = self.conn.writer().write(&buf[..buf.len().min(MAX_PLAINTEXT_PER_WRITE)])?;
        match self.send_pending() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
            Err(e) => Err(e),
            Ok(()) => Ok(n),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_pending()
    }
}
