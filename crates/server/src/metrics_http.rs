//! The metrics endpoint's HTTP side (`--metrics-port`): one thread running a small event loop
//! over at most `MAX_CONNECTIONS` connections at once, each with a deadline. A connection that
//! has not sent its request within `REQUEST_TIMEOUT` (or taken its reply within
//! `REPLY_TIMEOUT`) is closed, and when the table is full the oldest connection makes room for
//! the new one, so idle connections can neither hold a scrape up nor pile up.
//!
//! It must not touch partitions or worker connections: it only serves the page it is given.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

/// Connections served at once; a new one beyond this closes the oldest.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Time a connection has to send its request.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Time a connection has to take its reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request read (a scrape's request is a few hundred bytes).
const MAX_REQUEST_BYTES: usize = 8192;
const LISTENER: Token = Token(usize::MAX);

/// One HTTP exchange in progress.
struct Exchange {
    stream: TcpStream,
    opened: Instant,
    deadline: Instant,
    request: Vec<u8>,
    /// The reply once the request is whole, and how much of it is sent.
    reply: Option<(Vec<u8>, usize)>,
}

/// Binds `address` (so a bad address stops start-up) and serves it from a thread of its own:
/// `GET /metrics` gets `page()`, any other request a 404.
pub(crate) fn serve<F>(address: SocketAddr, page: F) -> io::Result<()>
where
    F: Fn() -> String + Send + 'static,
{
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let poll = Poll::new()?;
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
    std::thread::Builder::new().name("tierkv-metrics".into()).spawn(move || run(poll, listener, page))?;
    Ok(())
}

fn run<F: Fn() -> String>(mut poll: Poll, listener: TcpListener, page: F) {
    let mut events = Events::with_capacity(128);
    let mut exchanges: HashMap<usize, Exchange> = HashMap::new();
    let mut next_token = 0usize;
    loop {
        let now = Instant::now();
        exchanges.retain(|_, e| e.deadline > now);
        let timeout = exchanges.values().map(|e| e.deadline.saturating_duration_since(now)).min();
        if poll.poll(&mut events, timeout).is_err() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        for event in &events {
            if event.token() == LISTENER {
                accept_all(&poll, &listener, &mut exchanges, &mut next_token);
                continue;
            }
            let token = event.token().0;
            let done = exchanges.get_mut(&token).is_none_or(|e| progress(e, &page).unwrap_or(true));
            if done {
                exchanges.remove(&token);
            }
        }
    }
}

fn accept_all(poll: &Poll, listener: &TcpListener, exchanges: &mut HashMap<usize, Exchange>, next: &mut usize) {
    while let Ok((mut stream, _)) = listener.accept() {
        if exchanges.len() >= MAX_CONNECTIONS {
            if let Some(oldest) = exchanges.iter().min_by_key(|(_, e)| e.opened).map(|(&token, _)| token) {
                exchanges.remove(&oldest);
            }
        }
        *next = (*next + 1) % (usize::MAX - 1);
        let interest = Interest::READABLE | Interest::WRITABLE;
        if poll.registry().register(&mut stream, Token(*next), interest).is_ok() {
            let opened = Instant::now();
            let exchange =
                Exchange { stream, opened, deadline: opened + REQUEST_TIMEOUT, request: Vec::new(), reply: None };
            exchanges.insert(*next, exchange);
        }
    }
}

/// Reads what has arrived, answers a whole request, sends what the socket takes. True when the
/// exchange is over (reply sent, or the peer went away); an error ends it too.
fn progress<F: Fn() -> String>(e: &mut Exchange, page: &F) -> io::Result<bool> {
    if e.reply.is_none() {
        let mut buffer = [0u8; 1024];
        loop {
            match e.stream.read(&mut buffer) {
                Ok(0) if e.request.is_empty() => return Ok(true),
                Ok(0) => break,
                Ok(n) => e.request.extend_from_slice(&buffer[..n]),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
            if e.request.len() >= MAX_REQUEST_BYTES {
                break;
            }
        }
        let whole = e.request.windows(4).any(|w| w == b"\r\n\r\n") || e.request.len() >= MAX_REQUEST_BYTES;
        if !whole {
            return Ok(false);
        }
        e.reply = Some((reply(&e.request, page), 0));
        e.deadline = Instant::now() + REPLY_TIMEOUT;
    }
    let Some((reply, sent)) = e.reply.as_mut() else { return Ok(false) };
    while *sent < reply.len() {
        match e.stream.write(&reply[*sent..]) {
            Ok(n) => *sent += n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        }
    }
    Ok(true)
}

/// `GET /metrics` gets the page, anything else 404; the connection closes after it.
fn reply<F: Fn() -> String>(request: &[u8], page: &F) -> Vec<u8> {
    let line = request.split(|&b| b == b'\n').next().unwrap_or_default();
    let (status, body) = if line.starts_with(b"GET /metrics ") || line.starts_with(b"GET /metrics?") {
        ("200 OK", page())
    } else {
        ("404 Not Found", "only /metrics is served here\n".to_string())
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    [head.into_bytes(), body.into_bytes()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream as StdStream;

    fn scrape(port: u16, path: &str) -> String {
        let mut s = StdStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn start() -> u16 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        serve(SocketAddr::from(([127, 0, 0, 1], port)), || "page\n".repeat(100_000)).unwrap();
        port
    }

    #[test]
    fn idle_connections_do_not_hold_up_a_scrape() {
        let port = start();
        let idle: Vec<StdStream> =
            (0..MAX_CONNECTIONS + 10).map(|_| StdStream::connect(("127.0.0.1", port)).unwrap()).collect();
        let started = Instant::now();
        let page = scrape(port, "/metrics");
        assert!(started.elapsed() < Duration::from_millis(500), "took {:?}", started.elapsed());
        assert!(page.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(page.ends_with(&"page\n".repeat(100_000)), "the whole page, {} bytes", page.len());
        assert_eq!(scrape(port, "/other").lines().next(), Some("HTTP/1.1 404 Not Found"));
        drop(idle);
    }

    #[test]
    fn a_silent_connection_is_closed_after_the_request_timeout() {
        let port = start();
        let mut silent = StdStream::connect(("127.0.0.1", port)).unwrap();
        silent.set_read_timeout(Some(REQUEST_TIMEOUT * 3)).unwrap();
        let started = Instant::now();
        let mut byte = [0u8; 1];
        assert_eq!(silent.read(&mut byte).unwrap_or(0), 0, "closed without a reply");
        let waited = started.elapsed();
        assert!(waited >= REQUEST_TIMEOUT - Duration::from_millis(100) && waited < REQUEST_TIMEOUT * 2, "{waited:?}");
    }
}
