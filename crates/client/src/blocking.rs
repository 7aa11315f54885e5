//! A small blocking client for tierkv's atomics (docs/protocol-extensions.md) over the text
//! protocol, with pipelining: `atomics` sends a whole batch, then reads every reply, so a hot
//! key's updates reach the server together and are combined there.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};

use tierkv_protocol::VectorCall;
pub use tierkv_protocol::{AtomicCode, VectorElem, VectorOpCode};

/// One atomic request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Atomic<'a> {
    /// The counter's key.
    pub key: &'a [u8],
    /// The operation.
    pub code: AtomicCode,
    /// i64 (true) or u64 (false).
    pub signed: bool,
    /// The operand (for compare-and-swap, the expected value).
    pub operand: u64,
    /// `cas`: the new value.
    pub operand2: u64,
}

impl<'a> Atomic<'a> {
    /// Fetch-and-add of `delta` on a u64 counter.
    pub fn add(key: &'a [u8], delta: u64) -> Atomic<'a> {
        Atomic { key, code: AtomicCode::Add, signed: false, operand: delta, operand2: 0 }
    }
}

/// The server's answer to one atomic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtomicReply {
    /// The operation ran.
    Done {
        /// The value before.
        old: u64,
        /// The value after.
        new: u64,
    },
    /// `cas` found this value.
    Mismatch {
        /// The value it holds.
        current: u64,
    },
    /// No such key.
    NotFound,
    /// CLIENT_ERROR or SERVER_ERROR, with the server's words.
    Error(String),
}

/// What went wrong talking to the server.
#[derive(Debug)]
pub enum ClientError {
    /// The connection failed.
    Io(std::io::Error),
    /// A reply the client does not understand.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "i/o: {e}"),
            ClientError::Protocol(line) => write!(f, "unexpected reply {line:?}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> ClientError {
        ClientError::Io(e)
    }
}

/// One connection.
pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    out: Vec<u8>,
}

fn number(text: &str, signed: bool) -> Option<u64> {
    if signed {
        text.parse::<i64>().ok().map(|v| v as u64)
    } else {
        text.parse::<u64>().ok()
    }
}

impl Client {
    /// Connects to a tierkv (or memcached) server.
    pub fn connect(address: impl ToSocketAddrs) -> Result<Client, ClientError> {
        let stream = TcpStream::connect(address)?;
        stream.set_nodelay(true)?;
        Ok(Client { reader: BufReader::new(stream.try_clone()?), writer: stream, out: Vec::new() })
    }

    fn line(&mut self) -> Result<String, ClientError> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(ClientError::Protocol("connection closed".into()));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }

    /// `set <key> 0 0 <len>`; true when stored.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<bool, ClientError> {
        self.out.clear();
        self.out.extend_from_slice(b"set ");
        self.out.extend_from_slice(key);
        self.out.extend_from_slice(format!(" 0 0 {}\r\n", value.len()).as_bytes());
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
        self.writer.write_all(&self.out)?;
        Ok(self.line()? == "STORED")
    }

    /// `get <key>`: the value, or None.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        self.writer.write_all(&[b"get ", key, b"\r\n"].concat())?;
        self.value_reply()
    }

    /// One atomic.
    pub fn atomic(&mut self, request: &Atomic<'_>) -> Result<AtomicReply, ClientError> {
        Ok(self.atomics(std::slice::from_ref(request))?.remove(0))
    }

    /// A pipeline of atomics: all sent, then every reply read, in order.
    pub fn atomics(&mut self, requests: &[Atomic<'_>]) -> Result<Vec<AtomicReply>, ClientError> {
        self.out.clear();
        for r in requests {
            tierkv_protocol::atomic::write_text_request(&mut self.out, r.key, r.code, r.signed, r.operand, r.operand2);
            self.out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&self.out)?;
        requests.iter().map(|r| self.reply(r.signed)).collect()
    }

    /// `vnew`: a vector of `len` zeroes; true when stored.
    pub fn vector_new(&mut self, key: &[u8], elem: VectorElem, len: u32) -> Result<bool, ClientError> {
        self.out.clear();
        tierkv_protocol::vector::write_request(&mut self.out, key, &VectorCall::New { elem, len }, false);
        self.writer.write_all(&self.out)?;
        Ok(self.line()? == "STORED")
    }

    /// A pipeline of `vupd`s (op, type, offset, little-endian data) on `key`: Ok(true) applied,
    /// Ok(false) no such key, Err(message) refused.
    pub fn vector_updates(
        &mut self,
        key: &[u8],
        updates: &[(VectorOpCode, VectorElem, u32, &[u8])],
    ) -> Result<Vec<Result<bool, String>>, ClientError> {
        self.out.clear();
        for &(op, elem, offset, data) in updates {
            tierkv_protocol::vector::write_request(
                &mut self.out,
                key,
                &VectorCall::Update { op, elem, offset, data },
                false,
            );
        }
        self.writer.write_all(&self.out)?;
        updates
            .iter()
            .map(|_| match self.line()?.as_str() {
                "OK" => Ok(Ok(true)),
                "NOT_FOUND" => Ok(Ok(false)),
                other if other.starts_with("CLIENT_ERROR") || other.starts_with("SERVER_ERROR") => {
                    Ok(Err(other.to_string()))
                }
                other => Err(ClientError::Protocol(other.to_string())),
            })
            .collect()
    }

    /// `vget`: elements `offset..offset + count` as little-endian bytes, or None for a miss.
    pub fn vector_get(&mut self, key: &[u8], offset: u32, count: u32) -> Result<Option<Vec<u8>>, ClientError> {
        self.out.clear();
        tierkv_protocol::vector::write_request(&mut self.out, key, &VectorCall::Get { offset, count }, false);
        self.writer.write_all(&self.out)?;
        self.value_reply()
    }

    /// A `VALUE ... END` reply, or END for a miss.
    fn value_reply(&mut self) -> Result<Option<Vec<u8>>, ClientError> {
        let header = self.line()?;
        if header == "END" {
            return Ok(None);
        }
        if !header.starts_with("VALUE ") {
            return Err(ClientError::Protocol(header));
        }
        let bytes: usize =
            header.rsplit(' ').next().and_then(|n| n.parse().ok()).ok_or(ClientError::Protocol(header.clone()))?;
        let mut value = vec![0u8; bytes + 2];
        std::io::Read::read_exact(&mut self.reader, &mut value)?;
        value.truncate(bytes);
        match self.line()?.as_str() {
            "END" => Ok(Some(value)),
            other => Err(ClientError::Protocol(other.to_string())),
        }
    }

    fn reply(&mut self, signed: bool) -> Result<AtomicReply, ClientError> {
        let line = self.line()?;
        let mut words = line.splitn(3, ' ');
        let bad = || ClientError::Protocol(line.clone());
        Ok(match words.next() {
            Some("OK") => {
                let old = words.next().and_then(|w| number(w, signed)).ok_or_else(bad)?;
                let new = words.next().and_then(|w| number(w, signed)).ok_or_else(bad)?;
                AtomicReply::Done { old, new }
            }
            Some("EXISTS") => {
                AtomicReply::Mismatch { current: words.next().and_then(|w| number(w, signed)).ok_or_else(bad)? }
            }
            Some("NOT_FOUND") => AtomicReply::NotFound,
            Some("CLIENT_ERROR" | "SERVER_ERROR") => AtomicReply::Error(line.clone()),
            _ => return Err(bad()),
        })
    }
}
