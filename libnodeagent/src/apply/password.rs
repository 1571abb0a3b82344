//! `plain_text_passwd`: hashed as the image's `chpasswd` (no `-e`) would hash it, so the
//! shadow entry holds a hash that verifies, never the text. Debian and Ubuntu's chpasswd
//! goes through PAM, whose pam_unix line names `yescrypt` (`$y$j9T$`, libxcrypt's cost 5);
//! elsewhere login.defs' ENCRYPT_METHOD decides, and anything but YESCRYPT gets SHA-512
//! crypt (`$6$`, 5000 rounds), which every libcrypt verifies (MD5 and DES are not offered).

use super::Target;
use crate::base::error::{Error, ErrorKind, Result, Stage};
use yescrypt::PasswordHasher;

/// The hash of `plain` for the image at `t`.
pub fn hash(t: &Target, plain: &str, place: &str) -> Result<String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| {
        Error::of(
            ErrorKind::Io,
            Stage::Apply,
            place,
            format!("random salt: {e}"),
        )
    })?;
    let h = if yescrypt_image(t) {
        yescrypt::Yescrypt::default()
            .hash_password_with_salt(plain.as_bytes(), &salt)
            .map(|h| h.to_string())
    } else {
        sha_crypt::ShaCrypt::SHA512
            .hash_password_with_salt(plain.as_bytes(), salt.get(..12).unwrap_or_default())
            .map(|h| h.to_string())
    };
    h.map_err(|e| {
        Error::of(
            ErrorKind::Internal,
            Stage::Apply,
            place,
            format!("hashing the password: {e}"),
        )
    })
}

/// Whether the image's chpasswd makes yescrypt hashes: its PAM password stack (Debian's
/// common-password) names yescrypt, or login.defs says ENCRYPT_METHOD YESCRYPT.
fn yescrypt_image(t: &Target) -> bool {
    let read = |p: &str| {
        let mut text = String::new();
        let f = crate::base::confine::open_read(&t.root, p).ok()?;
        std::io::Read::read_to_string(&mut std::io::Read::take(f, 1 << 20), &mut text).ok()?;
        Some(text)
    };
    let pam = read("/etc/pam.d/common-password").unwrap_or_default();
    let pam_unix = pam
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains("pam_unix.so"))
        .flat_map(str::split_whitespace)
        .find(|w| {
            [
                "yescrypt",
                "sha512",
                "sha256",
                "md5",
                "bigcrypt",
                "blowfish",
                "gost_yescrypt",
            ]
            .contains(w)
        });
    if let Some(m) = pam_unix {
        return m == "yescrypt";
    }
    read("/etc/login.defs")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let mut w = l.split_whitespace();
            w.next() == Some("ENCRYPT_METHOD") && w.next() == Some("YESCRYPT")
        })
}
