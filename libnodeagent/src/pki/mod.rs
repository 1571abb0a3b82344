//! PKI inspection and checks with x509-parser (certs command, pre-flight).

pub mod audit;
pub mod check;
pub mod der;
pub mod hash;
pub mod inspect;
pub mod prove;

/// Now, in Unix seconds.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
