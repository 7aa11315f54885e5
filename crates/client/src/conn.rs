//! One blocking connection: TCP or TLS, authenticated once when opened, with a read buffer
//! that a round of replies is parsed from as it arrives.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::codec::{Expect, Op, ProtocolError, Reply};
use crate::error::{Error, Failure};
use crate::fleet::{login, stats_request, Config, LOGIN_OPS};
use crate::reader::{ReadBuf, RoundReader};

enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

pub(crate) struct Conn {
    stream: Stream,
    addr: SocketAddr,
    buf: ReadBuf,
    /// The server speaks only binary (SASL).
    binary: bool,
}

impl Conn {
    /// Connects, sets timeouts, starts TLS and authenticates, as `config` says.
    pub(crate) fn open(addr: SocketAddr, config: &Config) -> Result<Conn, Error> {
        let tcp = TcpStream::connect_timeout(&addr, config.connect_timeout).map_err(|e| Error::io(addr, &e))?;
        let setup = |tcp: &TcpStream| -> std::io::Result<()> {
            tcp.set_nodelay(true)?;
            tcp.set_read_timeout(config.io_timeout)?;
            tcp.set_write_timeout(config.io_timeout)
        };
        setup(&tcp).map_err(|e| Error::io(addr, &e))?;
        let stream = match &config.tls {
            None => Stream::Plain(tcp),
            Some(tls) => {
                let session = rustls::ClientConnection::new(tls.config.clone(), tls.server_name.clone())
                    .map_err(|e| Error::Config(format!("TLS: {e}")))?;
                Stream::Tls(Box::new(rustls::StreamOwned::new(session, tcp)))
            }
        };
        let mut conn = Conn { stream, addr, buf: ReadBuf::new(), binary: false };
        conn.binary = config.binary();
        if let Some(auth) = &config.auth {
            let (bytes, expect, success) = login(auth);
            let mut replies = [None];
            conn.exchange(&bytes, &[expect], &LOGIN_OPS, &mut replies).map_err(|f| f.error)?;
            if replies[0] != Some(success) {
                return Err(Error::Auth { server: addr.to_string(), message: format!("{:?}", replies[0]) });
            }
        }
        Ok(conn)
    }

    /// Sends one round's requests.
    pub(crate) fn send(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        let result = self.stream.write_all(bytes).and_then(|()| self.stream.flush());
        result.map_err(|e| Failure { error: Error::io(self.addr, &e), sent: true })
    }

    /// Reads one round's replies into `replies`.
    pub(crate) fn receive(
        &mut self,
        expects: &[Expect],
        ops: &[Op<'_>],
        replies: &mut [Option<Reply>],
    ) -> Result<(), Failure> {
        let server = self.addr;
        let fail = |error| Failure { error, sent: true };
        let protocol = |e: ProtocolError| fail(Error::Protocol { server: server.to_string(), message: e.0 });
        let mut reader = RoundReader::new(expects);
        while !reader.read_from(&mut self.buf, ops, replies).map_err(protocol)? {
            self.fill().map_err(fail)?;
        }
        Ok(())
    }

    /// Sends `bytes` and reads the replies `expects` describes.
    pub(crate) fn exchange(
        &mut self,
        bytes: &[u8],
        expects: &[Expect],
        ops: &[Op<'_>],
        replies: &mut [Option<Reply>],
    ) -> Result<(), Failure> {
        self.send(bytes)?;
        self.receive(expects, ops, replies)
    }

    /// Reads more bytes.
    fn fill(&mut self) -> Result<(), Error> {
        let space = self.buf.space().map_err(|e| Error::Protocol { server: self.addr.to_string(), message: e.0 })?;
        match self.stream.read(space) {
            Ok(0) => Err(Error::io(self.addr, &closed())),
            Ok(n) => {
                self.buf.filled(n);
                Ok(())
            }
            Err(e) => Err(Error::io(self.addr, &e)),
        }
    }

    /// Sends a `stats` request and returns the reply up to `END` (or an error line).
    pub(crate) fn stats(&mut self, group: &str) -> Result<String, Error> {
        self.send(&stats_request(self.binary, group)).map_err(|f| f.error)?;
        loop {
            let taken = self
                .buf
                .take_stats(self.binary)
                .map_err(|e| Error::Protocol { server: self.addr.to_string(), message: e.0 })?;
            if let Some(reply) = taken {
                return Ok(reply);
            }
            self.fill()?;
        }
    }
}

/// The error for a connection the server closed.
pub(crate) fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed")
}
