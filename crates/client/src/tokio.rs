//! The async client (the `tokio` feature): the blocking client's calls, types and behaviour,
//! on tokio's sockets. Planning, encoding, decoding and failover are the shared ones; only the
//! waiting differs. No lock is held across an `.await`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::api::Pipeline;
use crate::codec::{Expect, Op, ProtocolError, Reply};
use crate::error::{Error, Failure};
use crate::fleet::{login, stats_request, Config, LOGIN_OPS};
use crate::ketama::ServerSpec;
use crate::plan::{finish, merge, plan, subset, Group};
use crate::reader::{ReadBuf, RoundReader};
use crate::shared::{one_server, Shared};
use crate::Topology;

/// A byte stream tokio can drive: TCP, or TLS over TCP.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

struct Conn {
    stream: Box<dyn Io>,
    addr: SocketAddr,
    buf: ReadBuf,
    binary: bool,
}

async fn timed<T>(
    limit: Option<Duration>,
    addr: SocketAddr,
    work: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, Error> {
    let result = match limit {
        Some(limit) => match tokio::time::timeout(limit, work).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")),
        },
        None => work.await,
    };
    result.map_err(|e| Error::io(addr, &e))
}

impl Conn {
    async fn open(addr: SocketAddr, config: &Config) -> Result<Conn, Error> {
        let tcp = timed(Some(config.connect_timeout), addr, TcpStream::connect(addr)).await?;
        tcp.set_nodelay(true).map_err(|e| Error::io(addr, &e))?;
        let stream: Box<dyn Io> = match &config.tls {
            None => Box::new(tcp),
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let handshake = connector.connect(tls.server_name.clone(), tcp);
                Box::new(timed(Some(config.connect_timeout), addr, handshake).await?)
            }
        };
        let mut conn = Conn { stream, addr, buf: ReadBuf::new(), binary: false };
        conn.binary = config.binary();
        if let Some(auth) = &config.auth {
            let (bytes, expect, success) = login(auth);
            let mut replies = [None];
            conn.send(&bytes, config.io_timeout).await.map_err(|f| f.error)?;
            conn.receive(&[expect], &LOGIN_OPS, &mut replies, config.io_timeout).await.map_err(|f| f.error)?;
            if replies[0] != Some(success) {
                return Err(Error::Auth { server: addr.to_string(), message: format!("{:?}", replies[0]) });
            }
        }
        Ok(conn)
    }

    async fn send(&mut self, bytes: &[u8], limit: Option<Duration>) -> Result<(), Failure> {
        let (stream, addr) = (&mut self.stream, self.addr);
        let work = async move {
            stream.write_all(bytes).await?;
            stream.flush().await
        };
        timed(limit, addr, work).await.map_err(|error| Failure { error, sent: true })
    }

    async fn fill(&mut self, limit: Option<Duration>) -> Result<(), Error> {
        let addr = self.addr;
        let space = self.buf.space().map_err(|e| Error::Protocol { server: addr.to_string(), message: e.0 })?;
        match timed(limit, addr, self.stream.read(space)).await? {
            0 => Err(Error::io(addr, &crate::conn::closed())),
            n => {
                self.buf.filled(n);
                Ok(())
            }
        }
    }

    async fn receive(
        &mut self,
        expects: &[Expect],
        ops: &[Op<'_>],
        replies: &mut [Option<Reply>],
        limit: Option<Duration>,
    ) -> Result<(), Failure> {
        let server = self.addr;
        let fail = |error| Failure { error, sent: true };
        let protocol = |e: ProtocolError| fail(Error::Protocol { server: server.to_string(), message: e.0 });
        let mut reader = RoundReader::new(expects);
        while !reader.read_from(&mut self.buf, ops, replies).map_err(protocol)? {
            self.fill(limit).await.map_err(fail)?;
        }
        Ok(())
    }

    async fn stats(&mut self, group: &str, limit: Option<Duration>) -> Result<String, Error> {
        self.send(&stats_request(self.binary, group), limit).await.map_err(|f| f.error)?;
        loop {
            let taken = self
                .buf
                .take_stats(self.binary)
                .map_err(|e| Error::Protocol { server: self.addr.to_string(), message: e.0 })?;
            if let Some(reply) = taken {
                return Ok(reply);
            }
            self.fill(limit).await?;
        }
    }
}

/// An async client of a fleet; share it (in an `Arc`) between tasks.
pub struct Client {
    shared: Shared<Conn>,
}

impl Client {
    /// A client of the fleet `config` describes. Nothing is connected until used.
    pub fn new(config: Config) -> Result<Client, Error> {
        Ok(Client { shared: Shared::new(config)? })
    }

    /// A client of one server, with the defaults.
    pub fn connect(addr: SocketAddr) -> Result<Client, Error> {
        Client::new(one_server(addr))
    }

    /// The server `key` goes to now (None when every server is ejected).
    pub fn server_for(&self, key: &[u8]) -> Option<ServerSpec> {
        self.shared.server_for(key)
    }

    /// What the client knows of each server's partitions (None: not tierkv, or not asked yet).
    pub fn topologies(&self) -> Vec<Option<Topology>> {
        self.shared.topologies()
    }

    async fn take(&self, addr: SocketAddr) -> Result<Conn, Error> {
        match self.shared.pooled(addr) {
            Some(conn) => Ok(conn),
            None => {
                let config = self.shared.fleet().config.clone();
                Conn::open(addr, &config).await
            }
        }
    }

    fn io_timeout(&self) -> Option<Duration> {
        self.shared.fleet().config.io_timeout
    }

    async fn prepare(&self) {
        let now = Instant::now();
        for (server, addr) in self.shared.due(now) {
            let fetched = match self.take(addr).await {
                Ok(mut conn) => {
                    let reply = conn.stats("tierkv", self.io_timeout()).await;
                    if reply.is_ok() {
                        self.shared.give_back(addr, conn);
                    }
                    reply
                }
                Err(error) => Err(error),
            };
            self.shared.fleet().learned(server, fetched, now);
        }
    }

    /// Runs a batch of requests and returns one result per request, in order, as the blocking
    /// client's `run` does.
    pub async fn run(&self, ops: &[Op<'_>]) -> Vec<Result<Reply, Error>> {
        let mut replies: Vec<Option<Reply>> = vec![None; ops.len()];
        let mut errors: Vec<Option<Error>> = vec![None; ops.len()];
        let again = self.run_once(ops, &mut replies, &mut errors, true).await;
        if !again.is_empty() {
            let retry_ops = subset(ops, &again);
            let mut r_replies = vec![None; again.len()];
            let mut r_errors = vec![None; again.len()];
            self.run_once(&retry_ops, &mut r_replies, &mut r_errors, false).await;
            merge(&again, finish(r_replies, r_errors), &mut replies, &mut errors);
        }
        finish(replies, errors)
    }

    async fn run_once(
        &self,
        ops: &[Op<'_>],
        replies: &mut [Option<Reply>],
        errors: &mut [Option<Error>],
        retry: bool,
    ) -> Vec<usize> {
        self.prepare().await;
        let groups = {
            let fleet = self.shared.fleet();
            plan(ops, |key| fleet.place(key), errors, fleet.config.binary())
        };
        let failures = self.exchange(&groups, ops, replies).await;
        self.shared.fleet().settle(&groups, failures, ops, replies, errors, retry)
    }

    /// Sends every group's rounds and reads their replies, round by round.
    async fn exchange(&self, groups: &[Group], ops: &[Op<'_>], replies: &mut [Option<Reply>]) -> Vec<Option<Failure>> {
        let limit = self.io_timeout();
        let mut conns = Vec::with_capacity(groups.len());
        let mut failures: Vec<Option<Failure>> = Vec::with_capacity(groups.len());
        for group in groups {
            match self.take(group.place.addr).await {
                Ok(conn) => (conns.push(Some(conn)), failures.push(None)),
                Err(error) => (conns.push(None), failures.push(Some(Failure { error, sent: false }))),
            };
        }
        let rounds = groups.iter().map(|g| g.rounds.len()).max().unwrap_or(0);
        for r in 0..rounds {
            for (i, group) in groups.iter().enumerate() {
                let (Some(round), Some(conn)) = (group.rounds.get(r), conns[i].as_mut()) else { continue };
                if let Err(failure) = conn.send(&round.bytes, limit).await {
                    (conns[i], failures[i]) = (None, Some(failure));
                }
            }
            for (i, group) in groups.iter().enumerate() {
                let (Some(round), Some(conn)) = (group.rounds.get(r), conns[i].as_mut()) else { continue };
                if let Err(failure) = conn.receive(&round.expects, ops, replies, limit).await {
                    (conns[i], failures[i]) = (None, Some(failure));
                }
            }
        }
        for (group, conn) in groups.iter().zip(conns) {
            if let Some(conn) = conn {
                self.shared.give_back(group.place.addr, conn);
            }
        }
        failures
    }

    /// Runs a pipeline built with [`Pipeline`].
    pub async fn execute(&self, pipeline: &Pipeline<'_>) -> Vec<Result<Reply, Error>> {
        self.run(&pipeline.ops).await
    }
}

crate::api::typed_methods!(Client, async, await);
