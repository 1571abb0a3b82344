//! authorized_keys as cloud-init writes it (`ssh_util.setup_user_keys`, 25.1): each given
//! key parsed as OpenSSH reads a line (options, key type, base64, comment); comments, empty
//! entries and lines without a known key type are dropped; the file's existing lines are
//! kept (a key line rewritten in the same normal form, one space between fields), a line
//! whose key (base64) is given again is replaced by the given one, the rest appended.
//! Pure functions: the planner checks the lines they make, apply writes them.

/// cloud-init 25.1's `VALID_KEY_TYPES` (22.4 also took `ssh-dss` and `dsa`; 25.1 drops them,
/// as OpenSSH 9.8 stopped accepting DSA).
const KEY_TYPES: &[&str] = &[
    "rsa",
    "ecdsa",
    "ed25519",
    "ecdsa-sha2-nistp256-cert-v01@openssh.com",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384-cert-v01@openssh.com",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521-cert-v01@openssh.com",
    "ecdsa-sha2-nistp521",
    "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "sk-ssh-ed25519-cert-v01@openssh.com",
    "sk-ssh-ed25519@openssh.com",
    "ssh-ed25519-cert-v01@openssh.com",
    "ssh-ed25519",
    "ssh-rsa-cert-v01@openssh.com",
    "ssh-rsa",
    "ssh-xmss-cert-v01@openssh.com",
    "ssh-xmss@openssh.com",
];

/// cloud-init's `DISABLE_USER_OPTS`: the options a key gets on root with `disable_root`
/// (`$USER` is the default user, `NONE` without one; `$DISABLE_USER` is root).
pub const DISABLE_USER_OPTS: &str = "no-port-forwarding,no-agent-forwarding,no-X11-forwarding,command=\"echo 'Please login as the user \\\"$USER\\\" rather than the user \\\"$DISABLE_USER\\\".';echo;sleep 10;exit 142\"";

/// One line: a key (`key` set) or anything else, kept as it was (`source`).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyLine {
    source: String,
    options: Option<String>,
    /// key type, base64, comment.
    key: Option<(String, String, String)>,
}

impl KeyLine {
    pub fn is_key(&self) -> bool {
        self.key.is_some()
    }

    fn base64(&self) -> Option<&str> {
        self.key.as_ref().map(|k| k.1.as_str())
    }

    /// The line as cloud-init writes it.
    pub fn text(&self) -> String {
        let Some((kind, b64, comment)) = &self.key else {
            return self.source.clone();
        };
        let mut toks: Vec<&str> = Vec::new();
        toks.extend(self.options.as_deref().filter(|o| !o.is_empty()));
        toks.push(kind);
        toks.push(b64);
        if !comment.is_empty() {
            toks.push(comment);
        }
        toks.join(" ")
    }
}

/// Python's `str.split(None, 2)`: up to three fields separated by runs of whitespace, the
/// last keeping its inner whitespace.
fn split3(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        if out.len() == 2 {
            out.push(rest.trim_end());
            break;
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        out.push(rest.get(..end).unwrap_or_default());
        rest = rest.get(end..).unwrap_or_default().trim_start();
    }
    out
}

/// `parse_ssh_key`: type, base64, comment of a key without options.
fn key_fields(ent: &str) -> Option<(String, String, String)> {
    let toks = split3(ent);
    match toks.as_slice() {
        [kind, b64, rest @ ..] if KEY_TYPES.contains(kind) => Some((
            kind.to_string(),
            b64.to_string(),
            rest.first().map_or(String::new(), |c| c.to_string()),
        )),
        _ => None,
    }
}

/// `_extract_options`: the leading options (up to the first space or tab outside double
/// quotes, `\"` not ending a quote) and the rest, left-stripped.
fn split_options(ent: &str) -> (String, String) {
    let chars: Vec<char> = ent.chars().collect();
    let (mut quoted, mut i) = (false, 0);
    while i < chars.len() && (quoted || !matches!(chars.get(i), Some(' ' | '\t'))) {
        let cur = chars.get(i).copied();
        let Some(next) = chars.get(i + 1).copied() else {
            i += 1;
            break;
        };
        if cur == Some('\\') && next == '"' {
            i += 1;
        } else if cur == Some('"') {
            quoted = !quoted;
        }
        i += 1;
    }
    let options: String = chars.iter().take(i).collect();
    let rest: String = chars.iter().skip(i).collect();
    (options, rest.trim_start().to_string())
}

/// `AuthKeyLineParser.parse`: `options`, when given, replaces the line's own options.
pub fn parse(src: &str, options: Option<&str>) -> KeyLine {
    let plain = KeyLine {
        source: src.to_string(),
        options: None,
        key: None,
    };
    let line = src.trim_end_matches(['\r', '\n']);
    if line.starts_with('#') || line.trim().is_empty() {
        return plain;
    }
    let ent = line.trim();
    if let Some(key) = key_fields(ent) {
        return KeyLine {
            options: options.map(str::to_string),
            key: Some(key),
            ..plain
        };
    }
    let (own, rest) = split_options(ent);
    match key_fields(&rest) {
        Some(key) => KeyLine {
            options: Some(options.map_or(own, str::to_string)),
            key: Some(key),
            ..plain
        },
        None => plain,
    }
}

/// Python's `str.splitlines()` (a file's lines as cloud-init reads them).
fn split_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let brk = [
            '\n', '\r', '\u{b}', '\u{c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{85}', '\u{2028}',
            '\u{2029}',
        ];
        match rest.find(brk) {
            None => {
                out.push(rest);
                break;
            }
            Some(i) => {
                out.push(rest.get(..i).unwrap_or_default());
                let skip = if rest.get(i..).is_some_and(|r| r.starts_with("\r\n")) {
                    2
                } else {
                    rest.get(i..)
                        .and_then(|r| r.chars().next())
                        .map_or(1, char::len_utf8)
                };
                rest = rest.get(i + skip..).unwrap_or_default();
            }
        }
    }
    out
}

/// `update_authorized_keys`: the new content of a file holding `existing`, given `keys`
/// (parsed with `options`). Given keys that are not keys are dropped.
pub fn update(existing: &str, keys: &[String], options: Option<&str>) -> String {
    // cloud-init takes the keys as a set: a key given twice is one.
    let mut unique: Vec<&String> = Vec::new();
    for k in keys {
        if !unique.contains(&k) {
            unique.push(k);
        }
    }
    let given: Vec<KeyLine> = unique.iter().map(|k| parse(k, options)).collect();
    let mut to_add: Vec<bool> = given.iter().map(KeyLine::is_key).collect();
    let mut lines: Vec<KeyLine> = split_lines(existing)
        .into_iter()
        .map(|l| parse(l, None))
        .collect();
    for ent in lines.iter_mut().filter(|e| e.is_key()) {
        let b64 = ent.base64().map(str::to_string);
        for (j, k) in given.iter().enumerate() {
            if k.is_key() && k.base64().map(str::to_string) == b64 {
                *ent = k.clone();
                if let Some(add) = to_add.get_mut(j) {
                    *add = false;
                }
            }
        }
    }
    lines.extend(
        given
            .iter()
            .zip(&to_add)
            .filter(|(_, add)| **add)
            .map(|(k, _)| k.clone()),
    );
    let mut out: Vec<String> = lines.iter().map(KeyLine::text).collect();
    out.push(String::new());
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGQ0";

    #[test]
    fn keys_are_read_as_cloud_init_reads_them() {
        // A trailing newline (a .pub file read whole) is stripped, whitespace collapsed.
        assert_eq!(
            parse(&format!("{K} me@host\n"), None).text(),
            format!("{K} me@host")
        );
        assert_eq!(
            parse("ssh-ed25519\t AAAA   a  b ", None).text(),
            "ssh-ed25519 AAAA a  b"
        );
        // Comments, empty entries and unknown key types are not keys.
        for not_key in ["# a comment", "", "   ", "ssh-dss AAAA x", "hello world"] {
            assert!(!parse(not_key, None).is_key(), "{not_key:?}");
        }
        // Options are kept, or replaced by the given ones.
        let with = format!("from=\"10.0.0.1\",command=\"echo \\\"x y\\\"\" {K} c");
        assert_eq!(parse(&with, None).text(), with);
        assert_eq!(parse(&with, Some("no-pty")).text(), format!("no-pty {K} c"));
        assert_eq!(parse(&with, Some("")).text(), format!("{K} c"));
        assert_eq!(parse(K, Some("no-pty")).text(), format!("no-pty {K}"));
    }

    #[test]
    fn the_file_is_updated_as_cloud_init_updates_it() {
        let existing = "# mine\n\nssh-rsa   BBBB   old one\nssh-ed25519 AAAA old\n";
        let keys = vec![
            "ssh-ed25519 AAAA new\n".to_string(),
            "# not a key".to_string(),
            String::new(),
            "ssh-rsa CCCC".to_string(),
        ];
        assert_eq!(
            update(existing, &keys, None),
            "# mine\n\nssh-rsa BBBB old one\nssh-ed25519 AAAA new\nssh-rsa CCCC\n"
        );
        assert_eq!(update("", &[], None), "");
        assert_eq!(
            update("", &[K.to_string()], Some("no-pty")),
            format!("no-pty {K}\n")
        );
        assert_eq!(split_lines("a\r\nb\rc\n"), ["a", "b", "c"]);
    }
}
