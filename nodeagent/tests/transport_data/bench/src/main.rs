// Release-profile timing of nodeagent's decode.rs, compiled from the source file as-is
// (standalone so it builds in a minute without the whole crate). See BENCHMARKS.md.
#![allow(dead_code)]
#[path = "../../../../../libnodeagent/src/source/decode.rs"]
mod decode;
#[path = "../../../../../libnodeagent/src/base/error.rs"]
pub mod error;
#[path = "../../../../../libnodeagent/src/base/limits.rs"]
pub mod limits;
/// Where decode.rs finds them in the library (`crate::base::{error, limits}`).
mod base {
    pub use super::{error, limits};
}
use base64::Engine as _;
use std::io::Write;

fn gz(d: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(d).unwrap();
    e.finish().unwrap()
}

fn main() {
    let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
    let cabpk = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../../../shared/corpus/capi/cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml"
    ))
    .expect("the shared corpus beside the repository");
    let big: Vec<u8> = (0..limits::MAX_DECODED_BYTES)
        .map(|i| b"abcdefghij\n"[i % 11])
        .collect();
    let bomb = gz(&vec![b'0'; 1 << 20]).repeat(limits::MAX_GUNZIP_BYTES >> 20);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "cabpk userdata (17.8 KB raw), base64",
            b64(&cabpk).into_bytes(),
            "base64",
        ),
        (
            "cabpk userdata, gzip+base64",
            b64(&gz(&cabpk)).into_bytes(),
            "gzip+base64",
        ),
        (
            "16 MiB value (the limit), base64",
            b64(&big).into_bytes(),
            "base64",
        ),
        (
            "16 MiB value, gzip+base64",
            b64(&gz(&big)).into_bytes(),
            "gzip+base64",
        ),
        (
            "64 MiB gzip output (the limit), gz+b64",
            b64(&bomb).into_bytes(),
            "gz+b64",
        ),
    ];
    for (name, raw, enc) in cases {
        let runs = if raw.len() > 1 << 18 || enc.starts_with("gz") && name.contains("MiB") {
            5
        } else {
            2000
        };
        let mut best = std::time::Duration::MAX;
        for _ in 0..runs {
            let start = std::time::Instant::now();
            let d = decode::decode_value("userdata", &raw, Some(enc.as_bytes()))
                .unwrap()
                .unwrap();
            std::hint::black_box(d);
            best = best.min(start.elapsed());
        }
        println!("{name}: best of {runs}: {best:?}");
    }
}
