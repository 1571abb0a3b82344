//! guestinfo value decoding: `decode_value` (rstrip, `---`, base64, lenient gunzip) and
//! write_files `decode_file_content`. Input: mode byte, encoding, NUL, raw value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use libnodeagent::source::decode;
use libnodeagent::base::limits::{MAX_DECODED_BYTES, MAX_GUNZIP_BYTES};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (enc, raw) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (&b""[..], rest),
    };
    match mode % 3 {
        0 => check_value(decode::decode_value("userdata", raw, Some(enc))),
        1 => check_value(decode::decode_value("metadata", raw, None)),
        _ => {
            let enc = String::from_utf8_lossy(enc);
            if let Ok(out) = decode::decode_file_content(raw, &enc) {
                assert!(out.len() <= MAX_GUNZIP_BYTES.max(MAX_DECODED_BYTES));
            }
        }
    }
    let _ = decode::is_present(raw);
});

/// A decoded value is never larger than the gunzip bound, and errors name the key.
fn check_value(r: libnodeagent::base::error::Result<Option<decode::Decoded>>) {
    match r {
        Ok(Some(d)) => assert!(d.text.len() <= MAX_GUNZIP_BYTES),
        Ok(None) => {}
        Err(e) => assert!(e.place.starts_with("guestinfo."), "{e}"),
    }
}
