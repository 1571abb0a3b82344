//! Secret redaction for anything that leaves the process: logs, journal, status,
//! error messages, collect-logs. One function so every channel redacts the same way.

/// Replace bootstrap tokens, `--token`/`--certificate-key`/`--discovery-token*` values,
/// `token:`/`certificateKey:`/`password:` YAML values and PEM bodies with `<redacted>`.
pub fn redact_text(text: &str) -> String {
    // Implemented in full by the kubeadm/report work; this is the shared entry point.
    let mut out = String::with_capacity(text.len());
    let mut in_pem = false;
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let t = line.trim();
        if t.starts_with("-----BEGIN ") {
            in_pem = true;
            out.push_str(line);
            continue;
        }
        if t.starts_with("-----END ") {
            in_pem = false;
            out.push_str(line);
            continue;
        }
        if in_pem {
            if !out.ends_with("<redacted>") {
                out.push_str("<redacted>");
            } else {
                out.pop();
            }
            continue;
        }
        out.push_str(&redact_line(line));
    }
    out
}

fn redact_line(line: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut redact_next = false;
    for w in line.split(' ') {
        if redact_next && !w.is_empty() {
            words.push("<redacted>".into());
            redact_next = false;
            continue;
        }
        let lower = w.to_ascii_lowercase();
        let flag = [
            "--token",
            "--certificate-key",
            "--discovery-token",
            "--tls-bootstrap-token",
            "token:",
            "certificatekey:",
            "password:",
            "passwd:",
        ]
        .iter()
        .find(|f| lower == **f || lower.starts_with(&format!("{f}=")));
        if let Some(f) = flag {
            if lower.len() > f.len() {
                words.push(format!("{}=<redacted>", &w[..f.len()]));
            } else {
                words.push(w.to_string());
                redact_next = true;
            }
            continue;
        }
        if is_bootstrap_token(w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '.')) {
            words.push("<redacted>".into());
            continue;
        }
        words.push(w.to_string());
    }
    words.join(" ")
}

/// `[a-z0-9]{6}.[a-z0-9]{16}`, kubeadm's bootstrap token shape.
pub fn is_bootstrap_token(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 23
        && b[6] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 6 || c.is_ascii_lowercase() || c.is_ascii_digit())
}
