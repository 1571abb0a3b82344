//! Certificate and key inspection of arbitrary bytes (PEM or DER).
#![no_main]
use libfuzzer_sys::fuzz_target;
use libnodeagent::pki::{check, hash, inspect};

fuzz_target!(|data: &[u8]| {
    let _ = inspect::pem_blocks(data);
    if let Ok(certs) = inspect::parse_certs(data) {
        for c in certs.iter().take(4) {
            let _ = check::discovery_hash(c);
            let _ = check::check_validity("fuzz.crt", c, 1_800_000_000);
            for i in certs.iter().take(4) {
                let _ = inspect::signed_by(c, i);
            }
        }
    }
    if let Ok(c) = inspect::cert_info(data) {
        let _ = check::check_validity("fuzz.crt", &c, 0);
    }
    let _ = hash::discovery_hashes(data);
    // The key proof (pki::prove: the public key read from a PEM, a private key proved against
    // it by its public parts), as pre-flight runs it on sa.key and sa.pub.
    let _ = check::check_sa("sa.key", data, "sa.pub", data);
});
