//! The byte streams a worker serves, whatever carries them: TCP, a Unix domain socket (`-s`),
//! or TLS over TCP (`-Z`, `tls.rs`). A worker reads and writes a `Stream` and accepts from a `Listener`
//! without knowing which; everything transport-specific (addresses for `stats conns`, Nagle,
//! the socket file's permissions) lives here.
//!
//! It must not parse requests or hold connection state beyond what the transport needs.

use crate::conns::Endpoint;
use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

pub(crate) mod tls;

/// A client connection.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<tls::TlsStream>),
}

impl Stream {
    /// The client's address as `stats conns` shows it.
    pub(crate) fn peer(&self) -> Option<Endpoint> {
        match self {
            Stream::Tcp(s) => s.peer_addr().ok().map(Endpoint::Inet),
            Stream::Tls(s) => s.sock.peer(),
            // A connected Unix client has no address (memcached shows `?:<AF 0>`).
            Stream::Unix(_) => Some(Endpoint::Unix(String::new())),
        }
    }

    /// The address the client connected to.
    pub(crate) fn local(&self) -> Option<Endpoint> {
        match self {
            Stream::Tcp(s) => s.local_addr().ok().map(Endpoint::Inet),
            Stream::Tls(s) => s.sock.local(),
            Stream::Unix(s) => s.local_addr().ok().map(|a| Endpoint::Unix(path_text(a.as_pathname()))),
        }
    }

    /// The client's IP address (None for a Unix socket): TCP clients prove their address.
    pub(crate) fn peer_ip(&self) -> Option<IpAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr().ok().map(|a| a.ip()),
            Stream::Tls(s) => s.sock.peer_ip(),
            Stream::Unix(_) => None,
        }
    }

    /// The client's address for a log line ("a local socket" for a Unix socket).
    pub(crate) fn peer_label(stream: Option<&Stream>) -> String {
        stream.and_then(Stream::peer_ip).map_or_else(|| "a local socket".to_string(), |ip| ip.to_string())
    }

    /// Turns Nagle off on TCP (replies leave as soon as they are written).
    pub(crate) fn set_nodelay(&self) {
        match self {
            Stream::Tcp(s) => _ = s.set_nodelay(true),
            Stream::Tls(s) => s.sock.set_nodelay(),
            Stream::Unix(_) => {}
        }
    }

    /// Wraps an accepted socket in TLS.
    pub(crate) fn into_tls(self, acceptor: &mut tls::Acceptor) -> io::Result<Stream> {
        match self {
            Stream::Tls(_) => Ok(self),
            sock => Ok(Stream::Tls(Box::new(acceptor.accept(sock)?))),
        }
    }

    /// Whether bytes already written are still waiting to leave (TLS records rustls holds).
    pub(crate) fn pending_output(&self) -> bool {
        matches!(self, Stream::Tls(s) if s.pending_output())
    }

    /// Bytes the client sent that wait in the socket, not yet read (`FIONREAD`; with TLS, the
    /// records' bytes): what reached the server though the worker has not taken it.
    pub(crate) fn queued_input(&self) -> usize {
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int into `queued`, a live local, for this open socket.
        let rc = unsafe { libc::ioctl(self.as_raw_fd(), libc::FIONREAD, &mut queued) };
        if rc == 0 {
            queued.max(0) as usize
        } else {
            0
        }
    }
}

fn path_text(path: Option<&Path>) -> String {
    path.map(|p| p.display().to_string()).unwrap_or_default()
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    /// Sends what earlier writes left inside the stream (TLS records); nothing for sockets.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.sock.as_raw_fd(),
        }
    }
}

/// Delegates `$call` to the socket inside a `Listener`.
macro_rules! each_socket {
    ($value:expr, $socket:ident => $call:expr) => {
        match $value {
            Self::Tcp($socket) => $call,
            Self::Unix($socket, ..) => $call,
        }
    };
}

impl Source for Stream {
    fn register(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(registry, token, interests),
            Stream::Unix(s) => s.register(registry, token, interests),
            Stream::Tls(s) => s.sock.register(registry, token, interests),
        }
    }

    fn reregister(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(registry, token, interests),
            Stream::Unix(s) => s.reregister(registry, token, interests),
            Stream::Tls(s) => s.sock.reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(registry),
            Stream::Unix(s) => s.deregister(registry),
            Stream::Tls(s) => s.sock.deregister(registry),
        }
    }
}

/// A listening socket: TCP (the main port or a direct port) or the Unix socket.
pub(crate) enum Listener {
    Tcp(TcpListener),
    /// The socket and its path.
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Takes one waiting client.
    pub(crate) fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }

    /// The bound address as `stats conns` shows it.
    pub(crate) fn endpoint(&self) -> Option<Endpoint> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok().map(Endpoint::Inet),
            Listener::Unix(_, path) => Some(Endpoint::Unix(path.display().to_string())),
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        each_socket!(self, l => l.as_raw_fd())
    }
}

impl Source for Listener {
    fn register(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        each_socket!(self, l => l.register(registry, token, interests))
    }

    fn reregister(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        each_socket!(self, l => l.reregister(registry, token, interests))
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        each_socket!(self, l => l.deregister(registry))
    }
}

/// memcached's `-s`: listens on the Unix socket at `path`, replacing a stale socket file left
/// there (never another kind of file), with permissions `mask` (`-a`, octal). Returns `count`
/// handles on the one socket, one per worker: every worker accepts from it (and deals the
/// connections out round-robin), as on the TCP port.
pub(crate) fn bind_unix(path: &Path, mask: u32, count: usize, backlog: i32) -> io::Result<Vec<Listener>> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
        std::fs::remove_file(path)?;
    }
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.bind(&socket2::SockAddr::unix(path)?)?;
    socket.listen(backlog)?;
    let listener: std::os::unix::net::UnixListener = std::os::fd::OwnedFd::from(socket).into();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mask & 0o777))?;
    listener.set_nonblocking(true)?;
    let mut handles = Vec::with_capacity(count);
    for _ in 1..count {
        handles.push(Listener::Unix(UnixListener::from_std(listener.try_clone()?), path.to_path_buf()));
    }
    handles.push(Listener::Unix(UnixListener::from_std(listener), path.to_path_buf()));
    Ok(handles)
}
