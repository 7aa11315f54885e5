//! UDP sockets with batched system calls: `recvmmsg` takes up to `RECV_BATCH` datagrams in one
//! call and `sendmmsg` sends up to `SEND_BATCH` (mTCP's lesson: amortise the system call).
//! The unsafe code is confined here; each block says why it is sound.

use crate::limits::{MAX_QUEUED_BYTES, MAX_REQUEST_DATAGRAM, RECV_BATCH, SEND_BATCH};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// A non-blocking UDP socket on `address`, without SO_REUSEPORT (no other process can join the
/// port); the workers share it through duplicated handles.
pub(crate) fn bind(address: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(address), Type::DGRAM, None)?;
    socket.set_nonblocking(true)?;
    // Room for bursts of requests while the worker is busy.
    let _ = socket.set_recv_buffer_size(4 << 20);
    socket.bind(&address.into())?;
    Ok(socket.into())
}

/// Buffers for one `recvmmsg` batch.
pub(crate) struct Receiver {
    buffers: Vec<u8>,
    lengths: [usize; RECV_BATCH],
    truncated: [bool; RECV_BATCH],
    peers: Vec<Option<SocketAddr>>,
}

impl Receiver {
    pub(crate) fn new() -> Receiver {
        Receiver {
            buffers: vec![0; RECV_BATCH * MAX_REQUEST_DATAGRAM],
            lengths: [0; RECV_BATCH],
            truncated: [false; RECV_BATCH],
            peers: vec![None; RECV_BATCH],
        }
    }

    /// Reads up to `RECV_BATCH` waiting datagrams; returns how many (0 when none waits).
    pub(crate) fn receive(&mut self, socket: &mio::net::UdpSocket) -> io::Result<usize> {
        // SAFETY: sockaddr_storage, iovec and mmsghdr are plain data, zeroed before use. Every
        // iovec points at its own MAX_REQUEST_DATAGRAM slice of `self.buffers`, every
        // msg_name at its own element of `names`, and both outlive the call; the kernel writes
        // at most iov_len bytes and msg_namelen bytes there and reports counts in msg_len.
        let count = unsafe {
            let mut names: [libc::sockaddr_storage; RECV_BATCH] = std::mem::zeroed();
            let mut iovecs: [libc::iovec; RECV_BATCH] = std::mem::zeroed();
            let mut messages: [libc::mmsghdr; RECV_BATCH] = std::mem::zeroed();
            let base = self.buffers.as_mut_ptr();
            for i in 0..RECV_BATCH {
                iovecs[i].iov_base = base.add(i * MAX_REQUEST_DATAGRAM).cast();
                iovecs[i].iov_len = MAX_REQUEST_DATAGRAM;
                messages[i].msg_hdr.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
                messages[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                messages[i].msg_hdr.msg_iov = &mut iovecs[i];
                messages[i].msg_hdr.msg_iovlen = 1;
            }
            let received = libc::recvmmsg(
                socket.as_raw_fd(),
                messages.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            );
            if received < 0 {
                let error = io::Error::last_os_error();
                return if error.kind() == io::ErrorKind::WouldBlock { Ok(0) } else { Err(error) };
            }
            for i in 0..received as usize {
                self.lengths[i] = messages[i].msg_len as usize;
                self.truncated[i] = messages[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
                self.peers[i] = SockAddr::new(names[i], messages[i].msg_hdr.msg_namelen).as_socket();
            }
            received as usize
        };
        Ok(count)
    }

    /// Datagram `i` of the last batch and its sender; None if it was too long or its sender
    /// has no IP address.
    pub(crate) fn datagram(&self, i: usize) -> Option<(SocketAddr, &[u8])> {
        let peer = self.peers[i]?;
        if self.truncated[i] {
            return None;
        }
        let start = i * MAX_REQUEST_DATAGRAM;
        Some((peer, &self.buffers[start..start + self.lengths[i]]))
    }
}

/// Reply datagrams waiting for one socket.
#[derive(Default)]
pub(crate) struct Sender {
    bytes: Vec<u8>,
    datagrams: Vec<(SocketAddr, usize, usize)>,
    /// Datagrams dropped because the queue or the socket buffer was full.
    pub dropped: u64,
}

impl Sender {
    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.datagrams.is_empty()
    }

    /// Whether a reply of `bytes` more fits in the queue.
    pub(crate) fn has_room(&self, bytes: usize) -> bool {
        self.bytes.len() + bytes <= MAX_QUEUED_BYTES
    }

    /// The buffer to frame replies into, and a function recording each datagram's range.
    pub(crate) fn queue(&mut self, peer: SocketAddr, frame: impl FnOnce(&mut Vec<u8>, &mut dyn FnMut(usize, usize))) {
        let datagrams = &mut self.datagrams;
        frame(&mut self.bytes, &mut |start, end| datagrams.push((peer, start, end)));
    }

    /// Sends everything queued, `SEND_BATCH` datagrams per call; what the socket refuses is
    /// dropped (UDP promises nothing more, and the client asks again).
    pub(crate) fn send(&mut self, socket: &mio::net::UdpSocket) {
        let mut at = 0;
        while at < self.datagrams.len() {
            let batch = &self.datagrams[at..(at + SEND_BATCH).min(self.datagrams.len())];
            let names: Vec<SockAddr> = batch.iter().map(|(peer, _, _)| SockAddr::from(*peer)).collect();
            // SAFETY: iovec and mmsghdr are plain data, zeroed before use. Each iovec points
            // into `self.bytes` within bounds (ranges were recorded when the bytes were
            // appended, and the buffer is not touched until the call returns); each msg_name
            // points at a SockAddr in `names`, alive until the call returns; the kernel only
            // reads them.
            let sent = unsafe {
                let mut iovecs: [libc::iovec; SEND_BATCH] = std::mem::zeroed();
                let mut messages: [libc::mmsghdr; SEND_BATCH] = std::mem::zeroed();
                for (i, ((_, start, end), name)) in batch.iter().zip(&names).enumerate() {
                    iovecs[i].iov_base = self.bytes.as_ptr().add(*start) as *mut libc::c_void;
                    iovecs[i].iov_len = end - start;
                    messages[i].msg_hdr.msg_name = name.as_ptr() as *mut libc::c_void;
                    messages[i].msg_hdr.msg_namelen = name.len();
                    messages[i].msg_hdr.msg_iov = &mut iovecs[i];
                    messages[i].msg_hdr.msg_iovlen = 1;
                }
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    messages.as_mut_ptr(),
                    batch.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if sent <= 0 {
                let error = io::Error::last_os_error();
                if sent < 0 && error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // The socket buffer is full (or the destination refused): drop the rest.
                self.dropped += (self.datagrams.len() - at) as u64;
                break;
            }
            at += sent as usize;
        }
        self.datagrams.clear();
        self.bytes.clear();
        if self.bytes.capacity() > MAX_QUEUED_BYTES {
            self.bytes = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_go_out_and_come_in_whole() {
        let server = mio::net::UdpSocket::from_std(bind("127.0.0.1:0".parse().unwrap()).unwrap());
        let address = server.local_addr().unwrap();
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..40u8 {
            client.send_to(&vec![i; 100 + usize::from(i)], address).unwrap();
        }
        client.send_to(&vec![7; 70_000], address).unwrap_or(0);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut receiver = Receiver::new();
        let mut got = Vec::new();
        loop {
            let count = receiver.receive(&server).unwrap();
            if count == 0 {
                break;
            }
            for i in 0..count {
                if let Some((peer, data)) = receiver.datagram(i) {
                    assert_eq!(peer, client.local_addr().unwrap());
                    got.push(data.to_vec());
                }
            }
        }
        assert_eq!(got.len(), 40, "the 70000-byte datagram cannot exist; 40 arrive");
        assert!(got.iter().enumerate().all(|(i, d)| d.len() == 100 + i && d.iter().all(|&b| b == i as u8)));
        // Replies go back in one batch.
        let mut sender = Sender::default();
        for i in 0..70u8 {
            sender.queue(client.local_addr().unwrap(), |bytes, record| {
                let start = bytes.len();
                bytes.extend_from_slice(&[i; 10]);
                record(start, bytes.len());
            });
        }
        assert!(!sender.is_empty());
        sender.send(&server);
        assert!(sender.is_empty());
        client.set_read_timeout(Some(std::time::Duration::from_secs(1))).unwrap();
        let mut buffer = [0u8; 64];
        for i in 0..70u8 {
            let (n, from) = client.recv_from(&mut buffer).unwrap();
            assert_eq!((n, from, buffer[0]), (10, address, i));
        }
    }
}
