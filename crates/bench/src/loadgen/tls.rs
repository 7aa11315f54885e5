//! The load generator's TLS client (for servers started with `-Z`): a blocking handshake when
//! the connection opens, then records written and read around the event loop's plaintext
//! buffers. The server's certificate is checked against `--tls-ca` for 127.0.0.1 or the
//! target's IP address.

use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

/// A client configuration that trusts the CAs in `ca` (PEM).
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca).map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
        roots.add(cert).map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Completes the handshake on a blocking socket (then made non-blocking by the caller).
pub fn handshake(
    config: &Arc<ClientConfig>,
    ip: IpAddr,
    stream: &mut std::net::TcpStream,
) -> Result<Box<ClientConnection>, String> {
    let mut tls =
        ClientConnection::new(Arc::clone(config), ServerName::IpAddress(ip.into())).map_err(|e| format!("TLS: {e}"))?;
    while tls.is_handshaking() {
        tls.complete_io(stream).map_err(|e| format!("TLS handshake with {ip} failed: {e}"))?;
    }
    Ok(Box::new(tls))
}

/// Encrypts `output[*written..]` and writes records while the socket takes them (the rest
/// leaves on the next writable event, when this runs again).
pub fn flush(tls: &mut ClientConnection, stream: &mut TcpStream, output: &[u8], written: &mut usize) -> io::Result<()> {
    if *written < output.len() {
        tls.writer().write_all(&output[*written..])?;
        *written = output.len();
    }
    while tls.wants_write() {
        match tls.write_tls(stream) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads every record available and appends the plaintext to `input`; true if the server
/// closed the connection.
pub fn fill(
    tls: &mut ClientConnection,
    stream: &mut TcpStream,
    buffer: &mut [u8],
    input: &mut Vec<u8>,
) -> io::Result<bool> {
    loop {
        match tls.read_tls(stream) {
            Ok(0) => return Ok(true),
            Ok(_) => {
                tls.process_new_packets().map_err(io::Error::other)?;
                loop {
                    match tls.reader().read(buffer) {
                        Ok(0) => return Ok(true),
                        Ok(n) => input.extend_from_slice(&buffer[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
