//! Secret redaction for anything that leaves the process: logs, journal, status,
//! error messages, collect-logs. One function so every channel redacts the same way.
//!
//! What is removed (replaced by `<redacted>`):
//! - PEM bodies (`-----BEGIN X-----` … `-----END X-----`), also when the newlines are
//!   JSON-escaped (`\n`) or the END line is missing (a truncated tail of output);
//! - kubeadm bootstrap tokens (`[a-z0-9]{6}.[a-z0-9]{16}`) anywhere;
//! - values of `--token`, `--certificate-key`, `--discovery-token`, `--tls-bootstrap-token`,
//!   `--password` (as `--flag=V` or `--flag V`);
//! - values of secret keys in YAML/JSON/`k=v` text: `token`, `certificateKey`, `password`,
//!   `passwd`, `tlsBootstrapToken`, `token-secret`, `client-key-data`, `secret`, …;
//! - the line after kubeadm's `Using certificate key:` (the key is printed on its own line);
//! - values of `NAME=value` assignments and `--name=value` flags whose name holds
//!   `password`, `passwd`, `secret`, `token`, `key` or `credential` (`PGPASSWORD=…`,
//!   `--db-password=…`), and of `Authorization:` headers;
//! - long base64 runs that look like key material printed without PEM armour.
//!
//! The text is otherwise unchanged (same lines, same order), so redacted logs stay readable.

pub const REDACTED: &str = "<redacted>";

/// Flags whose value (next word or `=value`) is secret.
const SECRET_FLAGS: &[&str] = &[
    "--token",
    "--certificate-key",
    "--discovery-token",
    "--tls-bootstrap-token",
    "--password",
];

/// Keys whose value is secret, in YAML (`k: v`), JSON (`"k":"v"`) or `k=v` form; matched
/// case-insensitively and only as whole keys (`caCertHashes` and `token-id` are not secret).
const SECRET_KEYS: &[&str] = &[
    "token",
    "certificatekey",
    "certificate-key",
    "certificate_key",
    "password",
    "passwd",
    "plain_text_passwd",
    "hashed_passwd",
    "tlsbootstraptoken",
    "token-secret",
    "client-key-data",
    "secret",
];

/// Replace every secret in `text` with `<redacted>` (see the module doc for what counts).
pub fn redact_text(text: &str) -> String {
    let pem_free = redact_pem(text);
    let mut out = String::with_capacity(pem_free.len());
    let mut cert_key_next = false;
    let mut bare = BareKey::default();
    for (i, line) in pem_free.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if let Some(red) = bare.line(line) {
            out.push_str(&red);
            continue;
        }
        if cert_key_next && !line.trim().is_empty() {
            let indent = line
                .get(..line.len() - line.trim_start().len())
                .unwrap_or_default();
            out.push_str(indent);
            out.push_str(REDACTED);
            cert_key_next = false;
            continue;
        }
        let red = redact_line(line);
        cert_key_next = red
            .trim_end()
            .to_ascii_lowercase()
            .ends_with("certificate key:");
        out.push_str(&red);
    }
    out
}

/// Redact PEM bodies, keeping the BEGIN/END markers so readers see what was there.
/// Linear in the text: every search starts where the previous one of its kind stopped, and
/// the END search is remembered, so many BEGIN markers without an END (adversarial text)
/// do not rescan the rest of the text once each.
fn redact_pem(text: &str) -> String {
    const BEGIN: &str = "-----BEGIN ";
    const END: &str = "-----END ";
    let mut out = String::with_capacity(text.len());
    // The next END marker at or after `.0`, as last searched.
    let mut end_memo: Option<(usize, Option<usize>)> = None;
    let mut next_end = |from: usize| -> Option<usize> {
        match end_memo {
            Some((searched, None)) if from >= searched => return None,
            Some((searched, Some(e))) if from >= searched && e >= from => return Some(e),
            _ => {}
        }
        let found = text.get(from..).and_then(|t| t.find(END)).map(|e| from + e);
        end_memo = Some((from, found));
        found
    };
    let at = |from: usize| text.get(from..).unwrap_or_default();
    let mut pos = 0;
    while let Some(b) = at(pos).find(BEGIN).map(|b| pos + b) {
        // Header ends at the next "-----" after the label.
        let after_begin = b + BEGIN.len();
        let Some(h) = at(after_begin).find("-----") else {
            break;
        };
        let header_end = after_begin + h + 5;
        // Keep the line break after the header (real or JSON-escaped).
        let header_end = ["\r\n", "\n", "\\n"]
            .iter()
            .find(|nl| at(header_end).starts_with(**nl))
            .map(|nl| header_end + nl.len())
            .unwrap_or(header_end);
        out.push_str(text.get(pos..header_end).unwrap_or_default());
        let body = at(header_end);
        match next_end(header_end) {
            Some(e) => {
                out.push_str(REDACTED);
                // Keep the line break style just before END (newline or escaped \n).
                let before_end = text.get(header_end..e).unwrap_or_default();
                if before_end.ends_with("\\n") {
                    out.push_str("\\n");
                } else if before_end.ends_with('\n') {
                    out.push('\n');
                }
                // Past the END marker's label, so the loop does not see it as BEGIN.
                let marker_end = at(e + END.len())
                    .find("-----")
                    .map_or(text.len(), |x| e + END.len() + x + 5);
                out.push_str(text.get(e..marker_end).unwrap_or_default());
                pos = marker_end;
            }
            None => {
                // Truncated PEM: swallow everything that can belong to a PEM body.
                let mut n = 0;
                let bytes = body.as_bytes();
                while let Some(&c) = bytes.get(n) {
                    if c.is_ascii_alphanumeric()
                        || matches!(c, b'+' | b'/' | b'=' | b' ' | b'\t' | b'\r' | b'\n')
                    {
                        n += 1;
                    } else if c == b'\\' && bytes.get(n + 1) == Some(&b'n') {
                        n += 2;
                    } else {
                        break;
                    }
                }
                out.push_str(REDACTED);
                if body.get(..n).is_some_and(|b| b.ends_with('\n')) {
                    out.push('\n');
                }
                pos = header_end + n;
            }
        }
    }
    out.push_str(at(pos));
    out
}

/// An unarmoured key body (base64 of PKCS#1, PKCS#8, SEC1 or OpenSSH, wrapped at 64 or 70
/// columns) printed without its PEM markers: only its first line starts like a key (`MI…`,
/// `b3BlbnNzaC1rZXktdjE…`); the lines after it (an RSA key's primes) look like any base64.
/// Once a line ends in key material, every following line that is base64 alone is part of
/// the same body and redacted whole, up to the first line that is not.
#[derive(Debug, Default, Clone, Copy)]
struct BareKey {
    inside: bool,
}

impl BareKey {
    /// `Some(redacted line)` when `line` continues a key body. Otherwise `None`, and whether
    /// `line` starts a body is remembered for the next line.
    fn line(&mut self, line: &str) -> Option<String> {
        let body = line.trim();
        if self.inside && !body.is_empty() && body.bytes().all(is_b64) {
            let indent = line.get(..line.len() - line.trim_start().len());
            return Some(format!("{}{REDACTED}", indent.unwrap_or_default()));
        }
        self.inside = ends_in_key_material(body);
        None
    }
}

/// Line-by-line redaction of a stream (kubeadm output): carries PEM blocks, unarmoured key
/// bodies and kubeadm's `Using certificate key:` line across calls, which `redact_text` on
/// single lines cannot.
#[derive(Debug, Default)]
pub struct StreamRedactor {
    in_pem: bool,
    cert_key_next: bool,
    bare: BareKey,
}

impl StreamRedactor {
    pub fn line(&mut self, line: &str) -> String {
        if self.in_pem {
            match line.find("-----END ") {
                Some(i) => {
                    self.in_pem = false;
                    return format!(
                        "{REDACTED}{}",
                        redact_text(line.get(i..).unwrap_or_default())
                    );
                }
                None => return REDACTED.to_string(),
            }
        }
        if self.cert_key_next && !line.trim().is_empty() {
            self.cert_key_next = false;
            return REDACTED.to_string();
        }
        if let Some(red) = self.bare.line(line) {
            return red;
        }
        let out = redact_text(line);
        if let Some(b) = line.rfind("-----BEGIN ") {
            self.in_pem = !line.get(b..).unwrap_or_default().contains("-----END ");
        }
        self.cert_key_next = out
            .trim_end()
            .to_ascii_lowercase()
            .ends_with("certificate key:");
        out
    }
}

/// Redact a JSON document by value: every string (and every string under a secret key)
/// goes through `redact_text` once, and the document is serialised again, so it stays valid
/// JSON. Redacting its text instead could eat the backslash of an escaped quote
/// (`token: \"<redacted>\"` read as the bare value `\`). `None`: not JSON.
pub fn redact_json(text: &str) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
    redact_json_value(&mut v);
    let out = if text.trim_end().contains('\n') {
        serde_json::to_string_pretty(&v).ok()?
    } else {
        serde_json::to_string(&v).ok()?
    };
    Some(if text.ends_with('\n') {
        out + "\n"
    } else {
        out
    })
}

fn redact_json_value(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) => *s = redact_text(s),
        serde_json::Value::Array(a) => a.iter_mut().for_each(redact_json_value),
        serde_json::Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                let secret_key = SECRET_KEYS.iter().any(|s| s.eq_ignore_ascii_case(k));
                match val {
                    serde_json::Value::String(s) if secret_key && !s.is_empty() => {
                        *s = REDACTED.to_string()
                    }
                    _ => redact_json_value(val),
                }
            }
        }
        _ => {}
    }
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

/// Redact flag values, secret key values, bootstrap tokens and unarmoured key material
/// within one line.
fn redact_line(line: &str) -> String {
    let with_values = redact_values(line);
    let without_tokens = redact_bootstrap_tokens(&with_values);
    redact_key_material(&without_tokens)
}

/// Words that make a `NAME=value` assignment or a `--name=value` flag secret
/// (`PGPASSWORD=…`, `--db-password=…`, `AWS_SECRET_ACCESS_KEY=…`, `--api-token=…`).
const SECRET_NAME_PARTS: &[&str] = &["password", "passwd", "secret", "token", "key", "credential"];

/// A `NAME=` or `--name=` starting at `i` whose name holds a SECRET_NAME_PARTS word: the
/// position just after `=`.
fn secret_assignment_at(lower: &[u8], i: usize) -> Option<usize> {
    let rest = lower.get(i..)?;
    let name_start = if rest.starts_with(b"--") { 2 } else { 0 };
    let name_len = rest
        .get(name_start..)?
        .iter()
        .take_while(|&&c| is_word_byte(c))
        .count();
    let name = rest.get(name_start..name_start + name_len)?;
    if name_len == 0 || rest.get(name_start + name_len) != Some(&b'=') {
        return None;
    }
    SECRET_NAME_PARTS
        .iter()
        .any(|part| name.windows(part.len()).any(|w| w == part.as_bytes()))
        .then_some(i + name_start + name_len + 1)
}

/// An HTTP `Authorization:` header at `i`: the range of its value, to the end of the line
/// or the closing quote (`Authorization: Bearer …`, `-H 'Authorization: Basic …'`).
fn authorization_at(line: &str, lower: &[u8], i: usize) -> Option<(usize, usize)> {
    const NAME: &[u8] = b"authorization";
    if !lower.get(i..)?.starts_with(NAME) {
        return None;
    }
    let bytes = line.as_bytes();
    let mut j = i + NAME.len();
    if matches!(bytes.get(j), Some(b'"' | b'\'')) {
        j += 1;
    }
    while matches!(bytes.get(j), Some(b' ' | b'\t')) {
        j += 1;
    }
    if bytes.get(j) != Some(&b':') {
        return None;
    }
    j += 1;
    while matches!(bytes.get(j), Some(b' ' | b'\t' | b'"' | b'\'')) {
        j += 1;
    }
    // Already redacted (a log line redacted again by collect-logs): keep what follows it,
    // such as the log fields after a quoted command's output.
    if line.get(j..)?.starts_with(REDACTED) {
        return Some((j, j + REDACTED.len()));
    }
    let end = line
        .get(j..)?
        .find(['"', '\''])
        .map_or(line.len(), |k| j + k);
    (end > j).then_some((j, end))
}

/// Shortest run of base64 characters that starts like DER (`MI…`, `MH…`, `MC…`: a SEQUENCE)
/// and is redacted as unarmoured key material.
const DER_BASE64_MIN: usize = 40;
/// Shortest run of mixed-case base64 with digits that is redacted whatever its start.
const BASE64_MIN: usize = 120;

/// Shortest line of base64 alone (mixed case and digits) redacted as key material: 44 is
/// 32 bytes, an Ed25519 or WireGuard private key; a wrapped key body's lines are 64 or 70.
const BASE64_LINE_MIN: usize = 44;
/// Shortest base64 word after key material, on the same line, taken as the body going on.
const KEY_WORD_MIN: usize = 16;
/// Base64 of `openssh-key-v1\0`: the start of an OpenSSH private key body.
const OPENSSH_KEY_START: &[u8] = b"b3BlbnNzaC1rZXktdjE";

fn is_b64(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=')
}

/// A base64 run that is key material: starts like DER (`MI…`, `MH…`, `MC…`: a SEQUENCE) or an
/// OpenSSH key, or is long and mixed (case and digits); `whole_line`: the run is all its
/// line holds, where a shorter mixed run is enough.
fn is_key_run(run: &[u8], whole_line: bool) -> bool {
    let len = run.len();
    let der_like = len >= DER_BASE64_MIN
        && (run.starts_with(b"MI")
            || run.starts_with(b"MH")
            || run.starts_with(b"MC")
            || run.starts_with(OPENSSH_KEY_START));
    let min = if whole_line {
        BASE64_LINE_MIN
    } else {
        BASE64_MIN
    };
    let mixed = len >= min
        && run.iter().any(u8::is_ascii_uppercase)
        && run.iter().any(u8::is_ascii_lowercase)
        && run.iter().any(u8::is_ascii_digit);
    der_like || mixed
}

/// The (trimmed) line ends with a base64 run that is key material: the body may go on in
/// the next lines.
fn ends_in_key_material(body: &str) -> bool {
    let bytes = body.as_bytes();
    let run_len = bytes.iter().rev().take_while(|&&c| is_b64(c)).count();
    let run = bytes.get(bytes.len() - run_len..).unwrap_or_default();
    is_key_run(run, run_len == bytes.len())
}

/// Redact long base64 runs that look like key material printed without PEM armour. A key
/// body whose line breaks are JSON-escaped (`MI…\nAB…\n`) is one line here: every run right
/// after an escaped break that follows key material is the body going on.
fn redact_key_material(line: &str) -> String {
    let bytes = line.as_bytes();
    let whole = line.trim().len();
    let mut out = String::with_capacity(line.len());
    let mut copied = 0;
    let mut i = 0;
    // The previous run was key material and only escaped line breaks came since.
    let mut in_key = false;
    let mut after_break = false;
    // Only blanks since key material: the body's lines as words of one line (a command line
    // `printf '%s\n' MII… AB… …`).
    let mut after_blank = false;
    while i < bytes.len() {
        if !bytes.get(i).is_some_and(|&c| is_b64(c)) {
            // An escaped line break separates runs (its `n` does not start the next one).
            if bytes.get(i..).is_some_and(|b| b.starts_with(b"\\n")) {
                after_break = in_key;
                i += 2;
            } else if in_key && matches!(bytes.get(i), Some(b' ' | b'\t')) {
                after_blank = true;
                i += 1;
            } else {
                in_key = false;
                i += 1;
            }
            continue;
        }
        let len = bytes
            .get(i..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&c| is_b64(c))
            .count();
        let run = bytes.get(i..i + len).unwrap_or_default();
        // A continuation is a whole escaped line: the run ends at the next escaped break,
        // the string's end or the text's.
        let line_end = bytes
            .get(i + len..)
            .is_none_or(|b| b.is_empty() || b.starts_with(b"\\n") || b.starts_with(b"\""));
        in_key = (in_key && after_break && line_end)
            || (in_key && after_blank && !after_break && len >= KEY_WORD_MIN)
            || is_key_run(run, len == whole);
        (after_break, after_blank) = (false, false);
        if in_key {
            out.push_str(line.get(copied..i).unwrap_or_default());
            out.push_str(REDACTED);
            copied = i + len;
        }
        i += len;
    }
    out.push_str(line.get(copied..).unwrap_or_default());
    out
}

fn redact_values(line: &str) -> String {
    let bytes = line.as_bytes();
    let lower = line.to_ascii_lowercase();
    let mut out = String::with_capacity(line.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if i > 0 && is_word_byte(bytes[i - 1]) {
            i += 1;
            continue;
        }
        if let Some((value_start, value_end)) = secret_value_at(line, &lower, i)
            && line.get(value_start..value_end) != Some(REDACTED)
        {
            out.push_str(line.get(copied..value_start).unwrap_or_default());
            out.push_str(REDACTED);
            copied = value_end;
            i = value_end.max(i + 1);
            continue;
        }
        i += 1;
    }
    out.push_str(line.get(copied..).unwrap_or_default());
    out
}

/// If a secret flag or key starts at `i`, the byte range of its value.
fn secret_value_at(line: &str, lower: &str, i: usize) -> Option<(usize, usize)> {
    let bytes = line.as_bytes();
    let whole_lower = lower.as_bytes();
    let lower = whole_lower.get(i..)?;
    for flag in SECRET_FLAGS {
        if lower.starts_with(flag.as_bytes()) {
            let mut j = i + flag.len();
            match bytes.get(j) {
                Some(b'=') => j += 1,
                Some(b' ' | b'\t') => {
                    while matches!(bytes.get(j), Some(b' ' | b'\t')) {
                        j += 1;
                    }
                }
                _ => continue,
            }
            return value_range(line, j);
        }
    }
    // `users[0].passwd: not a password hash` is an error naming a key path, not a YAML key
    // with a value: a key right after `.` is a path's last part (redacting would eat "not").
    let in_key_path = i > 0 && bytes.get(i - 1) == Some(&b'.');
    for key in SECRET_KEYS {
        if !in_key_path && lower.starts_with(key.as_bytes()) {
            let mut j = i + key.len();
            if matches!(bytes.get(j), Some(b'"' | b'\'')) {
                j += 1;
            }
            while matches!(bytes.get(j), Some(b' ' | b'\t')) {
                j += 1;
            }
            if !matches!(bytes.get(j), Some(b':' | b'=')) {
                continue;
            }
            j += 1;
            while matches!(bytes.get(j), Some(b' ' | b'\t')) {
                j += 1;
            }
            return value_range(line, j);
        }
    }
    if let Some(range) = authorization_at(line, whole_lower, i) {
        return Some(range);
    }
    secret_assignment_at(whole_lower, i).and_then(|j| value_range(line, j))
}

/// A value starting at `j`: quoted (up to the closing quote) or a bare word.
fn value_range(line: &str, j: usize) -> Option<(usize, usize)> {
    let bytes = line.as_bytes();
    let first = *bytes.get(j)?;
    if first == b'"' || first == b'\'' {
        let close = line
            .get(j + 1..)?
            .find(first as char)
            .map(|k| j + 1 + k)
            .unwrap_or(line.len());
        if close == j + 1 {
            return None;
        }
        return Some((j + 1, close));
    }
    let end = line
        .get(j..)?
        .find(|c: char| c.is_whitespace() || matches!(c, ',' | '}' | ']' | ';' | '&' | '"' | '\''))
        .map(|k| j + k)
        .unwrap_or(line.len());
    // YAML block indicators and empty values carry no secret on this line.
    if end == j
        || matches!(
            line.get(j..end)?,
            "|" | "|-" | ">" | ">-" | "null" | "~" | "{}" | "[]"
        )
    {
        return None;
    }
    Some((j, end))
}

fn redact_bootstrap_tokens(line: &str) -> String {
    let bytes = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut copied = 0;
    let mut i = 0;
    while i + 23 <= bytes.len() {
        let boundary_before = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        let boundary_after = bytes.get(i + 23).is_none_or(|c| !c.is_ascii_alphanumeric());
        if boundary_before && boundary_after && is_token_bytes(&bytes[i..i + 23]) {
            out.push_str(line.get(copied..i).unwrap_or_default());
            out.push_str(REDACTED);
            i += 23;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(line.get(copied..).unwrap_or_default());
    out
}

/// `[a-z0-9]{6}.[a-z0-9]{16}`, kubeadm's bootstrap token shape.
pub fn is_bootstrap_token(s: &str) -> bool {
    is_token_bytes(s.as_bytes())
}

fn is_token_bytes(b: &[u8]) -> bool {
    b.len() == 23
        && b[6] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 6 || c.is_ascii_lowercase() || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_lose_env_secrets_secret_flags_auth_headers_and_bare_keys() {
        let der = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj";
        let line = format!(
            "PGPASSWORD=hunter2 psql --db-password=s3cret --api-token=tok123 \
             -H 'Authorization: Bearer eyJhbGciOi.payload' AWS_SECRET_ACCESS_KEY=wJalr key {der} end"
        );
        let red = redact_text(&line);
        for secret in [
            "hunter2",
            "s3cret",
            "tok123",
            "eyJhbGciOi",
            "wJalr",
            "MIIEvQ",
        ] {
            assert!(!red.contains(secret), "{secret} in {red}");
        }
        // What is not secret stays, word for word.
        for kept in [
            "PGPASSWORD=",
            "psql",
            "--db-password=",
            "-H 'Authorization: ",
            "key ",
            " end",
        ] {
            assert!(red.contains(kept), "{kept:?} lost: {red}");
        }
        // Redacting again changes nothing (collect-logs redacts logs that were redacted
        // when written; the fields after a header's value must survive).
        let logged = format!("{} step=runcmd[0] phase=\"failed\"", redact_text(&line));
        assert_eq!(redact_text(&logged), logged);
        // Hashes, paths and ordinary assignments are not key material.
        let plain = "caCertHashes=sha256:0123abcd HOME=/root PATH=/usr/bin:/bin mode=0644";
        assert_eq!(redact_text(plain), plain);
    }

    /// Adversarial shapes of a 2 MiB refused value (was 31 s: one END search per BEGIN).
    #[test]
    fn redaction_is_linear_on_adversarial_text() {
        const SIZE: usize = 2 * 1024 * 1024;
        let shapes = [
            "-----BEGIN A-----\n;",
            "-----BEGIN ",
            "-----END -----BEGIN X-----",
            "token=",
            "password: '",
            "--token ",
            "abcdef.0123456789abcdef ",
            "Using certificate key:\n",
            "\\n-----BEGIN K-----\\n",
        ];
        for shape in shapes {
            let text = shape.repeat(SIZE / shape.len());
            let t = std::time::Instant::now();
            let out = redact_text(&text);
            let took = t.elapsed();
            assert!(!out.is_empty());
            assert!(
                took < std::time::Duration::from_secs(5),
                "{shape:?}: {took:?}"
            );
            eprintln!("{shape:?}: {took:?}");
        }
    }

    const TOKEN: &str = "abcdef.0123456789abcdef";
    const CERT_KEY: &str = "9f2c6e1d7a4b3c5d8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d";

    /// `s` redacted, checked to hold neither TOKEN nor CERT_KEY.
    fn without_secrets(s: &str) -> String {
        let r = redact_text(s);
        assert!(!r.contains(TOKEN) && !r.contains(CERT_KEY), "{r}");
        r
    }

    #[test]
    fn flags_with_space_and_equals() {
        let s = format!(
            "kubeadm join 1.2.3.4:6443 --token {TOKEN} --certificate-key={CERT_KEY} --discovery-token-ca-cert-hash sha256:abc"
        );
        let r = without_secrets(&s);
        assert!(
            r.contains("--discovery-token-ca-cert-hash sha256:abc"),
            "{r}"
        );
        assert!(
            r.contains("--token <redacted>") && r.contains("--certificate-key=<redacted>"),
            "{r}"
        );
    }

    #[test]
    fn yaml_and_json_keys() {
        let yaml = "bootstrapTokens:\n- token: \"s3cr3t-value\"\n  ttl: 24h\ncontrolPlane:\n  certificateKey: 0011aa\n    password: 'p w'\n";
        let r = redact_text(yaml);
        assert!(
            !r.contains("s3cr3t-value") && !r.contains("0011aa") && !r.contains("p w"),
            "{r}"
        );
        assert!(r.contains("ttl: 24h"));
        let json = r#"{"token":"xyzzy","tokenId":"keep","caCertHashes":["sha256:keep"],"Password" : "hunter2"}"#;
        let r = redact_text(json);
        assert!(!r.contains("xyzzy") && !r.contains("hunter2"), "{r}");
        assert!(r.contains("keep"));
    }

    #[test]
    fn not_secret_keys_untouched() {
        for s in [
            "users[0].passwd: not a password hash (value not shown)",
            "plan: users[1].hashed_passwd: not a password hash",
            "token-id: abcdef",
            "caCertHashes: [sha256:00]",
            "tokens: 3",
            "the token is fine",
            "kind: JoinConfiguration",
        ] {
            assert_eq!(redact_text(s), s);
        }
    }

    #[test]
    fn pem_bodies_multiline_escaped_and_truncated() {
        let pem = "x\n-----BEGIN RSA PRIVATE KEY-----\nMIIEsecretline1\nAAAAsecretline2==\n-----END RSA PRIVATE KEY-----\ny";
        let r = redact_text(pem);
        assert_eq!(
            r,
            "x\n-----BEGIN RSA PRIVATE KEY-----\n<redacted>\n-----END RSA PRIVATE KEY-----\ny"
        );
        let esc =
            r#"{"content":"-----BEGIN PRIVATE KEY-----\nMIIEsecret\n-----END PRIVATE KEY-----\n"}"#;
        let r = redact_text(esc);
        assert!(!r.contains("MIIEsecret"), "{r}");
        assert!(r.contains("-----END PRIVATE KEY-----"));
        let cut = "log: -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEsecret\nAbc+/=";
        let r = redact_text(cut);
        assert!(
            !r.contains("MHcCAQEEsecret") && !r.contains("Abc+/="),
            "{r}"
        );
        let two =
            "-----BEGIN A-----\nS1\n-----END A-----\n-----BEGIN B-----\nS2\n-----END B-----\n";
        let r = redact_text(two);
        assert!(!r.contains("S1") && !r.contains("S2"), "{r}");
        assert_eq!(r.matches("<redacted>").count(), 2);
    }

    #[test]
    fn bare_tokens_and_certificate_key_line() {
        let s = format!(
            "[bootstrap-token] Using token {TOKEN}\n[upload-certs] Using certificate key:\n{CERT_KEY}\nnext"
        );
        let r = without_secrets(&s);
        assert!(r.ends_with("\nnext"));
        // Not a token: wrong lengths, upper case.
        for s in [
            "abcdef.0123456789abcdefg",
            "ABCDEF.0123456789ABCDEF",
            "abcde.0123456789abcdef",
        ] {
            assert_eq!(redact_text(s), s);
        }
    }

    #[test]
    fn stream_redactor_carries_state() {
        let mut r = StreamRedactor::default();
        let lines = [
            "a",
            "-----BEGIN RSA PRIVATE KEY-----",
            "MIIEsecret1",
            "AAAAsecret2",
            "-----END RSA PRIVATE KEY----- tail",
            "Using certificate key:",
            CERT_KEY,
            "b",
        ];
        let out: Vec<String> = lines.iter().map(|l| r.line(l)).collect();
        let joined = out.join("\n");
        assert!(
            !joined.contains("secret") && !joined.contains(CERT_KEY),
            "{joined}"
        );
        assert_eq!(out[0], "a");
        assert_eq!(out[7], "b");
        assert!(
            out[4].ends_with("-----END RSA PRIVATE KEY----- tail"),
            "{}",
            out[4]
        );
    }

    /// An RSA key body printed without its PEM markers (`grep -v -- -----`, a key in a
    /// Secret): every line, not only the first, which alone starts like DER.
    #[test]
    fn unarmoured_key_bodies_lose_every_line() {
        let pem = crate::mint::pki::Key::generate(crate::mint::pki::Algorithm::Rsa2048)
            .unwrap()
            .private_pem;
        let body: Vec<&str> = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        assert!(body.len() > 10);
        let output = format!("before\n{}\nafter: done", body.join("\n"));
        let check = |out: &str| {
            for l in &body {
                assert!(!out.contains(l), "{l} in {out}");
            }
            assert!(
                out.starts_with("before\n") && out.ends_with("\nafter: done"),
                "{out}"
            );
        };
        let once = redact_text(&output);
        check(&once);
        assert_eq!(redact_text(&once), once);
        let mut stream = StreamRedactor::default();
        let lines: Vec<String> = output.split('\n').map(|l| stream.line(l)).collect();
        check(&lines.join("\n"));
        // The same body inside a JSON string (line breaks escaped), and indented in YAML.
        let json = serde_json::json!({ "last": output }).to_string();
        let back: serde_json::Value = serde_json::from_str(&redact_text(&json)).unwrap();
        check(back["last"].as_str().unwrap());
        let yaml = format!("key: |\n  {}\nnext: 1", body.join("\n  "));
        let r = redact_text(&yaml);
        assert!(
            body.iter().all(|l| !r.contains(l)) && r.ends_with("\nnext: 1"),
            "{r}"
        );
        // OpenSSH and Ed25519 / WireGuard (44 characters) bodies, and the tail of a body
        // whose first line was cut off (a bounded output keeps its end).
        for s in [
            "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACBu5mQa7Bm0Hk2ZnV1uYfH3H9sOJ3a8ND2tUGrXkBqK4AAAAJgPwo9Y",
            "YEtqC2rGjRj9oJ8f3V0m5cS0p7yq1vXh0b2x5Q8k7Vw=",
            &body[3..].join("\n"),
        ] {
            let r = redact_text(s);
            for l in s.lines() {
                assert!(!r.contains(l), "{l} in {r}");
            }
        }
        // The body's lines as words of one command line.
        let cmd = format!("printf '%s\\n' {} >&2; exit 3", body.join(" "));
        let r = redact_text(&cmd);
        assert!(body.iter().all(|l| !r.contains(l)), "{r}");
        assert!(
            r.starts_with("printf '%s\\n' <redacted>") && r.ends_with(" >&2; exit 3"),
            "{r}"
        );
        // Short base64-looking words and hex digests stay.
        let plain = "ok\nsha256:3f2a9c0e1b7d4a5f6e8c9b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e\nabc\nDONE";
        assert_eq!(redact_text(plain), plain);
    }

    #[test]
    fn idempotent() {
        let s = format!("--token {TOKEN} token: x\n-----BEGIN K-----\nAA\n-----END K-----");
        let once = redact_text(&s);
        assert_eq!(redact_text(&once), once);
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn bootstrap_tokens_never_survive(id in "[a-z0-9]{6}", sec in "[a-z0-9]{16}", pre in "[ -~]{0,20}", post in "[ -~]{0,20}") {
                let token = format!("{id}.{sec}");
                let pre = pre.trim_end_matches(|c: char| c.is_ascii_alphanumeric());
                let post = post.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
                let out = redact_text(&format!("{pre}{token}{post}"));
                prop_assert!(!out.contains(&token));
            }

            #[test]
            fn flag_values_never_survive(v in "[A-Za-z0-9+/=._]{8,40}", flag in prop::sample::select(SECRET_FLAGS), eq in any::<bool>()) {
                let s = if eq { format!("cmd {flag}={v} --x y") } else { format!("cmd {flag} {v} --x y") };
                let out = redact_text(&s);
                prop_assert!(!out.contains(&v), "{}", out);
                prop_assert!(out.ends_with("--x y"));
            }

            #[test]
            fn any_text_is_safe(s in "\\PC{0,80}") {
                let once = redact_text(&s);
                prop_assert_eq!(redact_text(&once), once.clone());
            }

            #[test]
            fn pem_bodies_never_survive(body in prop::collection::vec("[A-Za-z0-9+/]{16,64}", 1..6)) {
                let pem = format!("a\n-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----\nb", body.join("\n"));
                let out = redact_text(&pem);
                for l in &body {
                    prop_assert!(!out.contains(l.as_str()));
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Secret markers glued to multi-byte text (command output and error messages are
        /// anyone's bytes): redaction returns, never panics, and a bootstrap token standing
        /// alone between separators never survives it.
        #[test]
        fn multibyte_text_around_secret_markers_never_panics(parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "--token", "--token=", "token:", "password=", "PGPASSWORD=", "Authorization:",
                "authorization\"", "-----BEGIN ", "-----END ", "certificate key:", " ", "\t",
                "\n", "'", "\"", "=", ":", ".", "é", "日本", "\u{2028}", "\u{1F512}", "ß=",
                "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA", "abcdef.0123456789abcdef",
                "|", "null", "x",
            ]),
            0..40,
        )) {
            let text = parts.concat();
            let _ = redact_text(&text);
            let mut stream = StreamRedactor::default();
            for line in text.split('\n') {
                let _ = stream.line(line);
            }
            let alone = redact_text(&format!("{text} abcdef.0123456789abcdef é"));
            proptest::prop_assert!(!alone.ends_with("abcdef.0123456789abcdef é"), "{alone}");
        }
    }
}
