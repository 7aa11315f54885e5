//! The network floor: a server that stores nothing and answers every request with a canned,
//! well-formed reply, reading once and writing once per wake-up. What any real server costs
//! beyond it is the server's own work.

use crate::resp;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use tierkv_protocol::{decode_request, Command, Decoded, Limits};

/// Which protocol the floor speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FloorProtocol {
    /// memcached's text protocol (`get`).
    Text,
    /// Redis's RESP (`GET`).
    Resp,
}

/// Bytes a connection may buffer without completing a request before it is closed.
const MAX_BUFFERED_BYTES: usize = 1 << 20;
/// Most connections served at once.
const MAX_CONNECTIONS: usize = 4096;
const LISTENER: Token = Token(usize::MAX);
const CANNED_VALUE: &[u8; 32] = b"0123456789abcdef0123456789abcdef";

struct Connection {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
}

/// Serves forever on `listener`.
pub fn serve(listener: std::net::TcpListener, protocol: FloorProtocol) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new()?;
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut events = Events::with_capacity(1024);
    let mut connections: HashMap<usize, Connection> = HashMap::new();
    let mut next_token = 0usize;
    let mut read_buffer = vec![0u8; 64 * 1024];
    loop {
        poll.poll(&mut events, None)?;
        for event in events.iter() {
            if event.token() == LISTENER {
                while let Ok((mut stream, _)) = listener.accept() {
                    if connections.len() >= MAX_CONNECTIONS {
                        continue;
                    }
                    let token = next_token;
                    next_token = next_token.wrapping_add(1) % (usize::MAX - 1);
                    poll.registry().register(&mut stream, Token(token), Interest::READABLE | Interest::WRITABLE)?;
                    stream.set_nodelay(true)?;
                    connections.insert(token, Connection { stream, input: Vec::new(), output: Vec::new() });
                }
                continue;
            }
            let token = event.token().0;
            let Some(connection) = connections.get_mut(&token) else { continue };
            let keep = event.is_readable() && serve_readable(connection, protocol, &mut read_buffer)
                || !event.is_readable() && flush(connection);
            if !keep {
                connections.remove(&token);
            }
        }
    }
}

/// Reads what is there (one read unless it filled the buffer), answers every complete request,
/// writes once. False when the connection is finished.
fn serve_readable(connection: &mut Connection, protocol: FloorProtocol, buffer: &mut [u8]) -> bool {
    loop {
        match connection.stream.read(buffer) {
            Ok(0) => return false,
            Ok(n) => {
                connection.input.extend_from_slice(&buffer[..n]);
                if n < buffer.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    let consumed = match protocol {
        FloorProtocol::Text => answer_text(&connection.input, &mut connection.output),
        FloorProtocol::Resp => answer_resp(&connection.input, &mut connection.output),
    };
    let Some(consumed) = consumed else { return false };
    connection.input.drain(..consumed);
    if connection.input.len() > MAX_BUFFERED_BYTES {
        return false;
    }
    flush(connection)
}

fn flush(connection: &mut Connection) -> bool {
    while !connection.output.is_empty() {
        match connection.stream.write(&connection.output) {
            Ok(0) => return false,
            Ok(n) => {
                connection.output.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    true
}

/// Canned text replies for every complete request; the bytes used, or None to close.
fn answer_text(input: &[u8], output: &mut Vec<u8>) -> Option<usize> {
    let limits = Limits::default();
    let mut at = 0;
    loop {
        match decode_request(&input[at..], &limits) {
            Decoded::Request { request, consumed } => {
                match request.command {
                    Command::Get { keys, .. } => {
                        for key in keys.iter() {
                            tierkv_protocol::reply::value(output, key, 0, CANNED_VALUE, None);
                        }
                        output.extend_from_slice(b"END\r\n");
                    }
                    Command::Store { .. } => output.extend_from_slice(b"STORED\r\n"),
                    Command::Quit => return None,
                    _ => output.extend_from_slice(b"ERROR\r\n"),
                }
                at += consumed;
            }
            Decoded::Incomplete { .. } => return Some(at),
            Decoded::Error(error) if error.close || error.skip > input.len() - at => return None,
            Decoded::Error(error) => {
                tierkv_protocol::reply::error(output, &error.reply);
                at += error.skip;
            }
        }
    }
}

/// Canned RESP replies: GET -> a 32-byte bulk string, SET -> +OK, anything else an error.
fn answer_resp(input: &[u8], output: &mut Vec<u8>) -> Option<usize> {
    let mut at = 0;
    let mut args = [&b""[..]; resp::MAX_ARGUMENTS];
    loop {
        match resp::decode_command(&input[at..], &mut args) {
            resp::Decoded::Done(count, consumed) => {
                match (args[0], count) {
                    (b"GET" | b"get", 2) => {
                        output.extend_from_slice(b"$32\r\n");
                        output.extend_from_slice(CANNED_VALUE);
                        output.extend_from_slice(b"\r\n");
                    }
                    (b"SET" | b"set", 3..) => output.extend_from_slice(b"+OK\r\n"),
                    _ => output.extend_from_slice(b"-ERR unknown command\r\n"),
                }
                at += consumed;
            }
            resp::Decoded::Incomplete => return Some(at),
            resp::Decoded::Invalid(_) => return None,
        }
    }
}
