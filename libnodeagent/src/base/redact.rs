//! Secret redaction for anything that leaves the process: logs, journal, status,
//! error messages, collect-logs. One state machine, [`Redactor`], so every channel redacts
//! the same way: every program's output is fed to one as it is read (bytes, any chunking),
//! and every other text goes through [`redact_text`], the same machine over its lines.
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
//! The text is otherwise unchanged (same lines, same order; a multi-line PEM body becomes one
//! `<redacted>` line), so redacted logs stay readable.

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

/// Replace every secret in `text` with `<redacted>` (see the module doc for what counts):
/// the text is one stream through a [`Redactor`], so a rule that spans lines (a PEM body,
/// the line after `Using certificate key:`) holds here exactly as on a program's output.
pub fn redact_text(text: &str) -> String {
    let mut r = Redactor::new();
    let mut out = String::with_capacity(text.len());
    let mut first = true;
    for line in text.split('\n') {
        if let Some(red) = r.line(line) {
            if !first {
                out.push('\n');
            }
            first = false;
            out.push_str(&red);
        }
    }
    // A PEM body folded into one `<redacted>` at the end keeps the text's final line break.
    if text.ends_with('\n') && !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Longest line a [`Redactor`] fed bytes emits (after redaction); the rest is cut.
pub const MAX_LINE: usize = crate::base::limits::KUBEADM_MAX_LINE;
/// Raw bytes of one line kept whole for redaction: more than MAX_LINE, so that a secret
/// which straddles the MAX_LINE cut is still whole when the rules see it.
const RAW_LINE: usize = 4 * MAX_LINE;
/// Of a line longer than RAW_LINE, the last bytes kept for the rules that look at a line's
/// end (`certificate key:`, a PEM header, key material the next line continues).
const TAIL_WINDOW: usize = 1024;
/// Output streams one redactor reads at once (a program's stdout and stderr).
pub const STREAMS: usize = 2;

/// The one redactor: a state machine over the lines of one output, fed whole text
/// ([`redact_text`]), line by line ([`Redactor::line`]), or bytes as they are read
/// ([`Redactor::push`], every program's stdout and stderr: chunks of any size, a byte at a
/// time included). The state carried from line to line is what no line-by-line scrub can
/// see: an open PEM body (its lines folded into one `<redacted>`), kubeadm's `Using
/// certificate key:` (the next non-blank line is the key), and an unarmoured key body (its
/// following base64 lines). Streams fed to one redactor share that state in the order their
/// lines complete, so a marker on stderr covers the key on stdout.
#[derive(Debug, Default)]
pub struct Redactor {
    /// Inside a PEM body that has not ended; whether its `<redacted>` line was emitted.
    pem_open: Option<bool>,
    cert_key_next: bool,
    bare: BareKey,
    bufs: [LineBuf; STREAMS],
}

/// One stream's line being assembled: its first RAW_LINE bytes, and past those a window of
/// its last bytes (memory stays bounded whatever is printed).
#[derive(Debug, Default)]
struct LineBuf {
    head: Vec<u8>,
    tail: Vec<u8>,
    overlong: bool,
}

impl LineBuf {
    fn add(&mut self, mut part: &[u8]) {
        if !self.overlong {
            let room = RAW_LINE - self.head.len();
            let take = room.min(part.len());
            self.head
                .extend_from_slice(part.get(..take).unwrap_or_default());
            part = part.get(take..).unwrap_or_default();
            if part.is_empty() {
                return;
            }
            self.overlong = true;
        }
        self.tail.extend_from_slice(part);
        if self.tail.len() > 2 * TAIL_WINDOW {
            let cut = self.tail.len() - TAIL_WINDOW;
            self.tail.drain(..cut);
        }
    }

    fn is_empty(&self) -> bool {
        self.head.is_empty()
    }

    /// The line as the rules see it: whole, or (overlong) its head cut at a word boundary,
    /// ` … `, and its last bytes from a word boundary: no secret is split at either cut.
    fn take(&mut self) -> String {
        let text = if self.overlong {
            let head = cut_at_word(&self.head, true);
            let from = self.tail.len().saturating_sub(TAIL_WINDOW);
            let tail = cut_at_word(self.tail.get(from..).unwrap_or_default(), false);
            format!(
                "{} … {}",
                String::from_utf8_lossy(head),
                String::from_utf8_lossy(tail)
            )
        } else {
            String::from_utf8_lossy(&self.head).into_owned()
        };
        self.head.clear();
        self.tail.clear();
        self.overlong = false;
        text
    }
}

/// `bytes` without the partial word at its end (`at_end`) or at its start: a cut line
/// never shows the piece of a token the cut went through.
fn cut_at_word(bytes: &[u8], at_end: bool) -> &[u8] {
    let sep = |b: &u8| b.is_ascii_whitespace();
    if at_end {
        match bytes.iter().rposition(sep) {
            Some(i) => bytes.get(..i).unwrap_or_default(),
            None => &[],
        }
    } else {
        match bytes.iter().position(sep) {
            Some(i) => bytes.get(i + 1..).unwrap_or_default(),
            None => &[],
        }
    }
}

impl Redactor {
    pub fn new() -> Redactor {
        Redactor::default()
    }

    /// Feed `chunk` of output stream `stream` (< STREAMS); every line it completes goes to
    /// `emit` redacted and cut to MAX_LINE bytes.
    pub fn push(&mut self, stream: usize, mut chunk: &[u8], emit: &mut dyn FnMut(String)) {
        let stream = stream.min(STREAMS - 1);
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.bufs[stream].add(chunk.get(..i).unwrap_or_default());
                    chunk = chunk.get(i + 1..).unwrap_or_default();
                    self.end_line(stream, emit);
                }
                None => {
                    self.bufs[stream].add(chunk);
                    chunk = &[];
                }
            }
        }
    }

    /// End the line being assembled on `stream` here, even without a line break (the
    /// program ended, or its output changed hands: the next list item's begins).
    pub fn end_line(&mut self, stream: usize, emit: &mut dyn FnMut(String)) {
        let stream = stream.min(STREAMS - 1);
        let text = self.bufs[stream].take();
        if let Some(mut red) = self.line(text.strip_suffix('\r').unwrap_or(&text)) {
            cut_bytes(&mut red, MAX_LINE);
            emit(red);
        }
    }

    /// Whether a line without its line break is being assembled on `stream`.
    pub fn pending(&self, stream: usize) -> bool {
        !self.bufs[stream.min(STREAMS - 1)].is_empty()
    }

    /// End of the output: every stream's last line that has no line break.
    pub fn finish(&mut self, emit: &mut dyn FnMut(String)) {
        for stream in 0..STREAMS {
            if !self.bufs[stream].is_empty() {
                self.end_line(stream, emit);
            }
        }
    }

    /// One whole line, redacted; `None` when it is a further line of a PEM body whose
    /// `<redacted>` was already emitted.
    pub fn line(&mut self, line: &str) -> Option<String> {
        let indent = line
            .get(..line.len() - line.trim_start().len())
            .unwrap_or_default();
        if let Some(emitted) = self.pem_open {
            if let Some(i) = line.find("-----END ") {
                self.pem_open = None;
                let before = line.get(..i).unwrap_or_default();
                let lead = if emitted && before.trim().is_empty() {
                    before.to_string()
                } else {
                    format!("{indent}{REDACTED}")
                };
                return Some(lead + &self.plain(line.get(i..).unwrap_or_default()));
            }
            if is_pem_body(line) {
                if emitted {
                    return None;
                }
                self.pem_open = Some(!line.trim().is_empty());
                return Some(if line.trim().is_empty() {
                    line.to_string()
                } else {
                    format!("{indent}{REDACTED}")
                });
            }
            self.pem_open = None;
        }
        if let Some(red) = self.bare.line(line) {
            self.cert_key_next = false;
            return Some(red);
        }
        if self.cert_key_next && !line.trim().is_empty() {
            self.cert_key_next = false;
            return Some(format!("{indent}{REDACTED}"));
        }
        Some(self.plain(line))
    }

    /// A line outside any multi-line secret: its own secrets redacted, and what it opens for
    /// the next line remembered.
    fn plain(&mut self, line: &str) -> String {
        let (pem_free, open) = redact_pem(line);
        let red = redact_line(&pem_free);
        self.pem_open = open;
        self.cert_key_next = red
            .trim_end()
            .to_ascii_lowercase()
            .ends_with("certificate key:");
        red
    }
}

/// `s` cut to at most `max` bytes at a character boundary, with `…` after it when cut.
pub(crate) fn cut_bytes(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
}

/// A line that can belong to a PEM body: base64 and blanks, or an RFC 1421 header
/// (`Proc-Type: 4,ENCRYPTED`, `DEK-Info: …`) of an encrypted legacy key.
fn is_pem_body(line: &str) -> bool {
    let t = line.trim();
    if t.bytes().all(|c| is_b64(c) || c == b' ' || c == b'\t') {
        return true;
    }
    let name_len = t
        .bytes()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == b'-')
        .count();
    name_len > 0 && t.get(name_len..).is_some_and(|r| r.starts_with(": "))
}

/// Redact the PEM bodies of one line (a body with JSON-escaped line breaks is one line),
/// keeping the BEGIN/END markers so readers see what was there. Also returns whether the
/// line ends inside a body that goes on in the next lines (`Some(true)`: its `<redacted>`
/// is already in this line). Linear in the line: every search starts where the previous one
/// of its kind stopped, and the END search is remembered, so many BEGIN markers without an
/// END (adversarial text) do not rescan the rest of the line once each.
fn redact_pem(text: &str) -> (String, Option<bool>) {
    if !text.contains("-----BEGIN ") {
        return (text.to_string(), None);
    }
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
                // No END on this line: swallow everything that can belong to a PEM body; a
                // body that reaches the line's end may go on in the next lines.
                let mut n = 0;
                let bytes = body.as_bytes();
                while let Some(&c) = bytes.get(n) {
                    if c.is_ascii_alphanumeric()
                        || matches!(c, b'+' | b'/' | b'=' | b' ' | b'\t' | b'\r')
                    {
                        n += 1;
                    } else if c == b'\\' && bytes.get(n + 1) == Some(&b'n') {
                        n += 2;
                    } else {
                        break;
                    }
                }
                let shown = body.get(..n).is_some_and(|b| !b.trim().is_empty());
                if shown {
                    out.push_str(REDACTED);
                }
                pos = header_end + n;
                if pos >= text.len() {
                    return (out, Some(shown));
                }
            }
        }
    }
    out.push_str(at(pos));
    (out, None)
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
    // Each rule is skipped where it cannot match (the result is the same; most output lines
    // have nothing to redact): a value needs `:` or `=` after its key, or a secret flag's
    // `--` and its first letter; a token needs its `.`; key material 40 base64 characters.
    let bytes = line.as_bytes();
    let flag = bytes.windows(3).any(|w| {
        w[0] == b'-'
            && w[1] == b'-'
            && matches!(w[2].to_ascii_lowercase(), b't' | b'c' | b'd' | b'p')
    });
    let mut out = if flag || bytes.iter().any(|&b| b == b':' || b == b'=') {
        redact_values(line)
    } else {
        line.to_string()
    };
    if out.contains('.') {
        out = redact_bootstrap_tokens(&out);
    }
    if out.len() >= DER_BASE64_MIN {
        out = redact_key_material(&out);
    }
    out
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
mod tests;
