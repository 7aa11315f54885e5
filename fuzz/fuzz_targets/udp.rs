#![no_main]
//! UDP datagrams: frame header, then the request inside.

use libfuzzer_sys::fuzz_target;
use tierkv_protocol::udp::{FrameError, FrameHeader, FRAME_BYTES};
use tierkv_protocol::Limits;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    match FrameHeader::decode_request(data) {
        Ok((header, payload)) => {
            assert_eq!(header.datagrams, 1);
            let mut encoded = Vec::new();
            header.encode(&mut encoded);
            assert_eq!(&encoded[..], &data[..FRAME_BYTES]);
            assert_eq!(payload, &data[FRAME_BYTES..]);
            common::check_stream(payload, &Limits::default());
        }
        Err(FrameError::TooShort) => assert!(data.len() < FRAME_BYTES),
        Err(FrameError::MultiPacket(header)) => assert_ne!(header.datagrams, 1),
    }
});
