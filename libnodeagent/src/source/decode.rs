//! guestinfo value decoding exactly as cloud-init (rstrip, '---', base64/gzip), bounded.
//!
//! cloud-init facts reproduced here (docs/formats.md A.5 and C.3):
//! - a value is `rstrip()`-ed (Python whitespace), empty or `---` means absent;
//! - the `.encoding` value is rstripped too and compared case-sensitively;
//! - base64 is Python's non-validating `b64decode`: characters outside the alphabet are
//!   dropped, a pad sequence ends the input, only a bad length/padding fails;
//! - `gzip+base64` gunzips leniently (not gzip ⇒ the data is used unchanged).
//!
//! Deliberate differences: raw values that are not UTF-8 are an error naming the byte
//! offset (cloud-init substitutes U+FFFD), unknown encodings produce a warning naming
//! the key (cloud-init is silent), and every size is bounded (`crate::base::limits`).
//! All functions are bytes → Result and never panic (property-tested).

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use crate::base::error::{Error, ErrorKind, Result, Stage};
use crate::base::limits::{MAX_DECODED_BYTES, MAX_GUNZIP_BYTES};
use std::fmt;
use std::io::Read;

/// A decoded guestinfo value. `Debug` shows only the size: values carry secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct Decoded {
    pub text: String,
    pub warnings: Vec<String>,
}

impl fmt::Debug for Decoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoded")
            .field("text", &format_args!("<{} bytes>", self.text.len()))
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// Decode one guestinfo value exactly as cloud-init's VMware datasource does (A.5): raw bytes → UTF-8 text,
/// rstrip() all trailing whitespace; empty or exactly `---` ⇒ Ok(None) (absent); the encoding value is
/// itself rstripped, `---`/empty ⇒ plain; `base64`/`b64` ⇒ non-validating base64 (drop chars outside the alphabet,
/// fail only on bad padding, like Python's b64decode); `gzip+base64`/`gz+b64` ⇒ base64 then LENIENT gunzip
/// (not gzip ⇒ unchanged); any other encoding value ⇒ plain text but return a warning (cloud-init silently
/// treats `gzip`, `Base64` as plain text: we warn, naming the key). Result must be UTF-8.
pub fn decode_value(key: &str, raw: &[u8], encoding: Option<&[u8]>) -> Result<Option<Decoded>> {
    let place = format!("guestinfo.{key}");
    let enc_place = format!("guestinfo.{key}.encoding");
    let text = utf8(raw, &place, "value")?;
    let value = py_rstrip(text);
    if is_absent(value) {
        return Ok(None);
    }
    let enc = match encoding {
        None => None,
        Some(e) => {
            let e = utf8(e, &enc_place, "encoding")?;
            let e = py_rstrip(e);
            if is_absent(e) { None } else { Some(e) }
        }
    };
    decode_text(&place, &enc_place, value, enc).map(Some)
}

/// cloud-init's `decode(key, enc_type, data)` alone, for values that are not guestinfo
/// keys of their own, such as a metadata `network` string with `network.encoding`: no
/// rstrip, no `---` rule, the encoding compared exactly (empty ⇒ plain). Bounded and
/// UTF-8-checked like decode_value; places are `guestinfo.<key>` and `guestinfo.<key>.encoding`.
pub fn decode_encoded(key: &str, data: &str, encoding: Option<&str>) -> Result<Decoded> {
    let place = format!("guestinfo.{key}");
    let enc_place = format!("guestinfo.{key}.encoding");
    decode_text(&place, &enc_place, data, encoding.filter(|e| !e.is_empty()))
}

/// A userdata or vendordata value as cloud-init takes it: decoded as [`decode_value`] does
/// (or, `verbatim`, the bytes of a NoCloud seed file or an OVF property as they are), then,
/// when the result is gzip data, decompressed, as cloud-init's user-data processing does for
/// every datasource (`user_data.convert_string`: `util.decomp_gzip`, which leaves data that
/// does not decompress as it was), bounded by `MAX_GUNZIP_BYTES`; then it must be UTF-8.
pub fn decode_userdata(
    key: &str,
    raw: &[u8],
    encoding: Option<&[u8]>,
    verbatim: bool,
) -> Result<Option<Decoded>> {
    let place = format!("guestinfo.{key}");
    let (bytes, warnings) = if verbatim {
        if raw.len() > MAX_DECODED_BYTES {
            return Err(Error::too_large(
                Stage::Decode,
                &place,
                format!(
                    "value is {} bytes, over the limit of {} bytes (MAX_DECODED_BYTES)",
                    raw.len(),
                    MAX_DECODED_BYTES
                ),
            ));
        }
        (raw.to_vec(), Vec::new())
    } else {
        let enc_place = format!("guestinfo.{key}.encoding");
        let text = utf8(raw, &place, "value")?;
        let value = py_rstrip(text);
        if is_absent(value) {
            return Ok(None);
        }
        let enc = match encoding {
            None => None,
            Some(e) => {
                let e = py_rstrip(utf8(e, &enc_place, "encoding")?);
                if is_absent(e) { None } else { Some(e) }
            }
        };
        let mut warnings = Vec::new();
        let bytes = decode_bytes(&place, &enc_place, value, enc, &mut warnings)?;
        (bytes, warnings)
    };
    let bytes = if bytes.starts_with(&GZIP_MAGIC) {
        gunzip(&bytes, MAX_GUNZIP_BYTES, true).map_err(|e| {
            Error::of(
                e.kind(),
                Stage::Decode,
                &place,
                e.describe("gzip", MAX_GUNZIP_BYTES),
            )
        })?
    } else {
        bytes
    };
    let what = if verbatim { "value" } else { "decoded value" };
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::invalid(
            Stage::Decode,
            &place,
            format!(
                "{what} is not valid UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    Ok(Some(Decoded { text, warnings }))
}

/// The encoding table (A.5 step 2) applied to an already normalised value.
fn decode_text(place: &str, enc_place: &str, value: &str, enc: Option<&str>) -> Result<Decoded> {
    let mut warnings = Vec::new();
    let bytes = decode_bytes(place, enc_place, value, enc, &mut warnings)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::invalid(
            Stage::Decode,
            place,
            format!(
                "decoded value is not valid UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    Ok(Decoded { text, warnings })
}

/// The bytes the encoding table (A.5 step 2) makes of an already normalised value.
fn decode_bytes(
    place: &str,
    enc_place: &str,
    value: &str,
    enc: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Vec<u8>> {
    let bytes: Vec<u8> = match enc {
        Some("gzip+base64") | Some("gz+b64") => {
            let b = b64_step(value.as_bytes(), place)?;
            gunzip(&b, MAX_GUNZIP_BYTES, true).map_err(|e| {
                Error::of(
                    e.kind(),
                    Stage::Decode,
                    place,
                    e.describe("gzip+base64", MAX_GUNZIP_BYTES),
                )
            })?
        }
        Some("base64") | Some("b64") => b64_step(value.as_bytes(), place)?,
        Some(other) => {
            warnings.push(unknown_encoding_warning(enc_place, other));
            plain_bounded(value, place)?
        }
        None => plain_bounded(value, place)?,
    };
    Ok(bytes)
}

/// A value read verbatim (NoCloud seed files): UTF-8 checked and bounded, no rstrip, no `---`.
pub fn decode_plain(key: &str, raw: &[u8]) -> Result<Decoded> {
    let place = format!("guestinfo.{key}");
    let text = utf8(raw, &place, "value")?;
    check_plain_size(text, &place)?;
    Ok(Decoded {
        text: text.to_string(),
        warnings: Vec::new(),
    })
}

/// True when a raw value counts as present for cloud-init (A.2 step 4, A.5 step 1):
/// non-empty after rstrip and not the redaction marker `---`. Never fails.
pub fn is_present(raw: &[u8]) -> bool {
    !is_absent(py_rstrip(&String::from_utf8_lossy(raw)))
}

/// write_files content decoding (cloud-init C.3: lower-cased+stripped encoding; gz/gzip strict gunzip;
/// gz+base64/gzip+base64/gz+b64/gzip+b64; b64/base64; text/plain/empty ⇒ unchanged; unknown ⇒ error naming
/// the encoding — the caller decides compat). Bounded like decode_value.
pub fn decode_file_content(content: &[u8], encoding: &str) -> std::result::Result<Vec<u8>, String> {
    let enc = encoding.trim_matches(py_isspace).to_lowercase();
    let b64 = |c: &[u8]| py_b64decode(c, MAX_DECODED_BYTES).map_err(|e| e.to_string());
    let gz = |c: &[u8]| {
        gunzip(c, MAX_GUNZIP_BYTES, false).map_err(|e| e.describe(&enc, MAX_GUNZIP_BYTES))
    };
    match enc.as_str() {
        "gz" | "gzip" => gz(content),
        "gz+base64" | "gzip+base64" | "gz+b64" | "gzip+b64" => gz(&b64(content)?),
        "b64" | "base64" => b64(content),
        "" | "text/plain" => Ok(content.to_vec()),
        _ => Err(format!(
            "unknown encoding {:?} (known: b64, base64, gz, gzip, gz+b64, gz+base64, gzip+b64, gzip+base64, text/plain; \
             cloud-init would write the content verbatim with a warning)",
            shorten(encoding)
        )),
    }
}

fn is_absent(v: &str) -> bool {
    v.is_empty() || v == "---"
}

/// Python's `str.isspace()`: Unicode White_Space plus the ASCII separators 0x1C..=0x1F.
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.rstrip()` with no argument.
pub fn py_rstrip(s: &str) -> &str {
    s.trim_end_matches(py_isspace)
}

/// `b` as text, or an error naming `what` at `place` and the offset of the first invalid byte.
fn utf8<'a>(b: &'a [u8], place: &str, what: &str) -> Result<&'a str> {
    std::str::from_utf8(b).map_err(|e| {
        let off = e.valid_up_to();
        Error::invalid(
            Stage::Decode,
            place,
            format!("{what} is not valid UTF-8 (invalid byte at offset {off})"),
        )
    })
}

fn check_plain_size(value: &str, place: &str) -> Result<()> {
    if value.len() > MAX_DECODED_BYTES {
        return Err(Error::too_large(
            Stage::Decode,
            place,
            format!(
                "value is {} bytes, over the limit of {} bytes (MAX_DECODED_BYTES)",
                value.len(),
                MAX_DECODED_BYTES
            ),
        ));
    }
    Ok(())
}

fn plain_bounded(value: &str, place: &str) -> Result<Vec<u8>> {
    check_plain_size(value, place)?;
    Ok(value.as_bytes().to_vec())
}

fn b64_step(value: &[u8], place: &str) -> Result<Vec<u8>> {
    py_b64decode(value, MAX_DECODED_BYTES).map_err(|e| {
        let kind = match e {
            B64Error::TooLarge { .. } => ErrorKind::TooLarge,
            _ => ErrorKind::Invalid,
        };
        Error::of(kind, Stage::Decode, place, e.to_string())
    })
}

fn unknown_encoding_warning(enc_place: &str, enc: &str) -> String {
    let known = ["base64", "b64", "gzip+base64", "gz+b64"];
    let hint = known
        .iter()
        .find(|k| k.eq_ignore_ascii_case(enc.trim()))
        .map(|k| format!(" (did you mean {k:?}? encodings are case-sensitive and untrimmed)"))
        .unwrap_or_default();
    format!(
        "{enc_place}: unknown encoding {:?}{hint}; value used as plain text, as cloud-init does \
         (known: base64, b64, gzip+base64, gz+b64)",
        shorten(enc)
    )
}

/// Encoding names are echoed in messages; keep them short.
fn shorten(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}

/// Why a base64 decode failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum B64Error {
    /// Python refuses `str` input with non-ASCII characters before decoding.
    NonAscii { offset: usize },
    /// One data character more than a multiple of four (no input encodes to that).
    Length { data_chars: usize },
    /// Data characters not a multiple of four and no terminating pad sequence.
    Padding { data_chars: usize },
    /// The decoded size would exceed the limit.
    TooLarge { size: usize, limit: usize },
}

impl fmt::Display for B64Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            B64Error::NonAscii { offset } => {
                write!(f, "invalid base64: non-ASCII byte at offset {offset}")
            }
            B64Error::Length { data_chars } => {
                write!(
                    f,
                    "invalid base64: {data_chars} data characters is 1 more than a multiple of 4"
                )
            }
            B64Error::Padding { data_chars } => {
                write!(
                    f,
                    "invalid base64: incorrect padding ({data_chars} data characters, not a multiple of 4)"
                )
            }
            B64Error::TooLarge { size, limit } => {
                write!(
                    f,
                    "base64 decodes to {size} bytes, over the limit of {limit} bytes (MAX_DECODED_BYTES)"
                )
            }
        }
    }
}

const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
);

fn is_b64_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'+' || c == b'/'
}

/// Python's `base64.b64decode(s)` for a `str` (validate=False), as CPython's
/// `binascii.a2b_base64(strict_mode=False)`: non-alphabet characters are skipped; `=` at
/// quad position 0/1 is skipped; enough `=` after 2 or 3 data characters ends the input
/// (the rest is ignored); a final partial quad without that is an error. The output size
/// is computed and checked against `limit` before anything is decoded.
pub fn py_b64decode(input: &[u8], limit: usize) -> std::result::Result<Vec<u8>, B64Error> {
    // Pass 1: find the data characters and where a pad sequence ends the input.
    let mut quad = 0usize;
    let mut pads = 0usize;
    let mut data_chars = 0usize;
    let mut end = input.len();
    let mut terminated = false;
    for (i, &c) in input.iter().enumerate() {
        if !c.is_ascii() {
            return Err(B64Error::NonAscii { offset: i });
        }
        if c == b'=' {
            if quad >= 2 {
                pads += 1;
                if quad + pads >= 4 {
                    end = i;
                    terminated = true;
                    break;
                }
            }
            continue;
        }
        if !is_b64_char(c) {
            continue;
        }
        pads = 0;
        data_chars += 1;
        quad = (quad + 1) % 4;
    }
    if terminated {
        // Python rejects non-ASCII anywhere in a str, even after the pad sequence.
        if let Some(off) = input
            .get(end..)
            .unwrap_or_default()
            .iter()
            .position(|c| !c.is_ascii())
        {
            return Err(B64Error::NonAscii { offset: end + off });
        }
    } else if quad == 1 {
        return Err(B64Error::Length { data_chars });
    } else if quad != 0 {
        return Err(B64Error::Padding { data_chars });
    }
    let size = data_chars / 4 * 3 + [0, 0, 1, 2].get(data_chars % 4).copied().unwrap_or(0);
    if size > limit {
        return Err(B64Error::TooLarge { size, limit });
    }
    // Pass 2: keep only the data characters and let the `base64` crate decode them.
    let mut chars = Vec::with_capacity(data_chars);
    chars.extend(
        input
            .get(..end)
            .unwrap_or_default()
            .iter()
            .copied()
            .filter(|&c| is_b64_char(c)),
    );
    let mut out = Vec::with_capacity(size);
    use base64::Engine as _;
    LENIENT
        .decode_vec(&chars, &mut out)
        .map_err(|_| B64Error::Padding { data_chars })?;
    Ok(out)
}

/// Why a gunzip failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GzError {
    /// Not gzip, truncated, bad CRC, or trailing garbage after a member.
    Corrupt(String),
    /// Output would exceed the limit.
    TooLarge,
}

impl GzError {
    fn kind(&self) -> ErrorKind {
        match self {
            GzError::Corrupt(_) => ErrorKind::Invalid,
            GzError::TooLarge => ErrorKind::TooLarge,
        }
    }
    fn describe(&self, enc: &str, limit: usize) -> String {
        match self {
            GzError::Corrupt(m) => format!("invalid gzip data ({enc}): {m}"),
            GzError::TooLarge => {
                format!(
                    "gzip output ({enc}) is over the limit of {limit} bytes (MAX_GUNZIP_BYTES); refused"
                )
            }
        }
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Gunzip like Python's `gzip.GzipFile(...).read()`: concatenated members, zero padding
/// between/after members skipped, empty input gives empty output. `lenient` (cloud-init's
/// `decomp_gzip(quiet=True)`) returns the input unchanged when it is not valid gzip; the
/// size limit is enforced in both modes, streaming, without allocating past the limit.
pub fn gunzip(data: &[u8], limit: usize, lenient: bool) -> std::result::Result<Vec<u8>, GzError> {
    match gunzip_strict(data, limit) {
        Err(GzError::Corrupt(_)) if lenient => {
            if data.len() > limit {
                return Err(GzError::TooLarge);
            }
            Ok(data.to_vec())
        }
        r => r,
    }
}

fn gunzip_strict(data: &[u8], limit: usize) -> std::result::Result<Vec<u8>, GzError> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut first = true;
    loop {
        if !first {
            let zeros = rest.iter().take_while(|&&b| b == 0).count();
            rest = rest.get(zeros..).unwrap_or_default();
        }
        if rest.is_empty() {
            return Ok(out);
        }
        if !rest.starts_with(&GZIP_MAGIC) {
            let what = if first {
                "not gzip data (no gzip magic)"
            } else {
                "trailing data after the last gzip member"
            };
            return Err(GzError::Corrupt(what.into()));
        }
        first = false;
        let mut dec = flate2::bufread::GzDecoder::new(rest);
        read_capped(&mut dec, &mut out, limit)?;
        rest = dec.into_inner();
    }
}

/// Append everything `r` yields to `out`, failing with `TooLarge` once `out` would pass
/// `limit`; capacity grows by doubling but never past `limit + 1` chunk.
fn read_capped<R: Read>(
    r: &mut R,
    out: &mut Vec<u8>,
    limit: usize,
) -> std::result::Result<(), GzError> {
    let mut buf = [0u8; 32 * 1024];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(GzError::Corrupt(e.to_string())),
        };
        if out.len() + n > limit {
            return Err(GzError::TooLarge);
        }
        if out.capacity() - out.len() < n {
            let want = (out.capacity() * 2)
                .max(out.len() + n)
                .max(64 * 1024)
                .min(limit);
            out.reserve_exact(want - out.len());
        }
        out.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::string_slice)]
mod tests {
    use super::*;

    /// Userdata that is gzip data is decompressed (cloud-init's `decomp_gzip` on every
    /// datasource's userdata): a NoCloud file as it is, and after a guestinfo `.encoding`;
    /// data with the magic that does not decompress is kept, as `decomp_gzip` keeps it.
    #[test]
    fn gzip_userdata_is_decompressed_as_cloud_init_does() {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write;
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(b"#cloud-config\nruncmd: [x]\n").unwrap();
        let gz = e.finish().unwrap();
        let plain = decode_userdata("userdata", &gz, None, true)
            .unwrap()
            .unwrap();
        assert_eq!(plain.text, "#cloud-config\nruncmd: [x]\n");
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &gz);
        let v = decode_userdata("userdata", b64.as_bytes(), Some(b"base64"), false);
        assert_eq!(v.unwrap().unwrap().text, plain.text);
        let e = decode_userdata("userdata", b"\x1f\x8b\xffnot gzip", None, true).unwrap_err();
        assert!(e.message.contains("not valid UTF-8"), "{e}");
        let kept = decode_userdata("userdata", b"#cloud-config\n", None, true)
            .unwrap()
            .unwrap();
        assert_eq!(kept.text, "#cloud-config\n");
        assert!(
            decode_userdata("userdata", b"  \n", None, false)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn python_b64_vectors() {
        // Checked against CPython 3.11 base64.b64decode.
        let ok: &[(&str, &[u8])] = &[
            ("QQ==garbage", b"A"),
            ("QQ=x=", b"A\x0c"),
            ("QUJD QQ== QUJD", b"ABCA"),
            ("Q=Q==", b"A"),
            ("QUJD=QUJD", b"ABCABC"),
            ("QR==", b"A"),
            ("QUJ=QUJD", b"AB"),
            (" Q U J D ", b"ABC"),
            ("", b""),
            ("====", b""),
        ];
        for (i, o) in ok {
            assert_eq!(py_b64decode(i.as_bytes(), 100).as_deref(), Ok(*o), "{i:?}");
        }
        let bad: &[(&str, B64Error)] = &[
            ("QQ", B64Error::Padding { data_chars: 2 }),
            ("QUI", B64Error::Padding { data_chars: 3 }),
            ("QQ=", B64Error::Padding { data_chars: 2 }),
            ("QUJDQQ=", B64Error::Padding { data_chars: 6 }),
            ("Q", B64Error::Length { data_chars: 1 }),
            ("QU\u{e9}JD", B64Error::NonAscii { offset: 2 }),
        ];
        for (i, e) in bad {
            assert_eq!(py_b64decode(i.as_bytes(), 100), Err(e.clone()), "{i:?}");
        }
    }

    #[test]
    fn gzip_multi_member_and_zero_padding() {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write;
        let gz = |d: &[u8]| {
            let mut e = GzEncoder::new(Vec::new(), Compression::default());
            e.write_all(d).unwrap();
            e.finish().unwrap()
        };
        let mut two = gz(b"hello ");
        two.extend(gz(b"world"));
        two.extend([0, 0, 0]);
        assert_eq!(gunzip(&two, 100, false).unwrap(), b"hello world");
        two.push(7);
        assert!(matches!(gunzip(&two, 100, false), Err(GzError::Corrupt(_))));
        assert_eq!(gunzip(b"plain", 100, true).unwrap(), b"plain");
        assert!(matches!(
            gunzip(b"plain", 100, false),
            Err(GzError::Corrupt(_))
        ));
        assert_eq!(gunzip(&gz(&[b'x'; 101]), 100, true), Err(GzError::TooLarge));
        assert_eq!(gunzip(&gz(&[b'x'; 100]), 100, true).unwrap().len(), 100);
    }
}
