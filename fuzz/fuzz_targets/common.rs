//! Postconditions every decoder must meet, shared by the fuzz targets.

use tierkv_protocol::client::encode_request;
use tierkv_protocol::{decode_request, Command, Decoded, Limits, Request};

/// Decodes every request in `input` in turn (as a server would), checking after each one that
/// it consumed something within the input, respects the limits, and that re-encoding it gives
/// bytes that decode to a request which re-encodes to the same bytes.
pub fn check_stream(input: &[u8], limits: &Limits) {
    let mut at = 0;
    // Every step consumes at least one byte, so this loop is bounded by the input length.
    while at < input.len() {
        match decode_request(&input[at..], limits) {
            Decoded::Request { request, consumed } => {
                assert!(consumed >= 1 && consumed <= input.len() - at, "consumed {consumed} of {}", input.len() - at);
                check_limits(&request, limits);
                check_reencode(&request, limits);
                at += consumed;
            }
            Decoded::Incomplete { needed } => {
                assert!(needed == 0 || needed > input.len() - at, "incomplete but {needed} bytes are there");
                return;
            }
            Decoded::Error(error) => {
                assert!(error.skip >= 1, "an error must skip something");
                if error.close {
                    return;
                }
                at = at.saturating_add(error.skip);
            }
        }
    }
}

fn check_limits(request: &Request<'_>, limits: &Limits) {
    let mut buffer = [0u8; 256];
    match request.command {
        Command::Get { keys, base64, touch, .. } => {
            // memcached answers "gat <exptime>" without keys with END, so only gat may have none.
            assert!(!keys.is_empty() || touch.is_some());
            assert_eq!(keys.iter().count(), keys.len());
            for key in keys.iter() {
                let key = tierkv_protocol::Key { raw: key, base64 };
                let decoded = key.decode_into(&mut buffer).expect("decoded keys are valid");
                assert!(!decoded.is_empty() && decoded.len() <= limits.max_key_bytes);
            }
        }
        Command::Store { key, value, flags, .. } => {
            let decoded = key.decode_into(&mut buffer).expect("decoded keys are valid");
            assert!(!decoded.is_empty() && decoded.len() <= limits.max_key_bytes);
            assert!(value.len() <= limits.max_value_bytes);
            assert!(limits.item_fits(key.raw.len(), flags, value.len()));
        }
        Command::Delete { key, .. } | Command::Arith { key, .. } | Command::Touch { key, .. } => {
            let decoded = key.decode_into(&mut buffer).expect("decoded keys are valid");
            assert!(!decoded.is_empty() && decoded.len() <= limits.max_key_bytes);
        }
        _ => {}
    }
}

fn check_reencode(request: &Request<'_>, limits: &Limits) {
    if matches!(request.command, Command::Sasl { .. })
        && !matches!(request.style, tierkv_protocol::ReplyStyle::Binary(_))
    {
        return;
    }
    let mut first = Vec::new();
    encode_request(&mut first, request);
    let again = match decode_request(&first, limits) {
        Decoded::Request { request, consumed } => {
            assert_eq!(consumed, first.len(), "re-encoded request decodes whole");
            request
        }
        other => panic!("re-encoded {:?} decodes to {other:?}", String::from_utf8_lossy(&first)),
    };
    let mut second = Vec::new();
    encode_request(&mut second, &again);
    assert_eq!(first, second, "encode(decode(encode(request))) differs");
}
