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
    let two = "-----BEGIN A-----\nS1\n-----END A-----\n-----BEGIN B-----\nS2\n-----END B-----\n";
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

/// Every way kubeadm-like output can carry its secrets across lines.
fn multi_line_output() -> String {
    format!(
        "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEsecret1\nAAAAsecret2\n-----END RSA PRIVATE KEY----- tail\n\
         [upload-certs] Using certificate key:\n{CERT_KEY}\n\
         [bootstrap-token] Using token: {TOKEN}\nb\n"
    )
}

fn no_secret(out: &str) {
    for secret in ["secret1", "secret2", CERT_KEY, TOKEN] {
        assert!(!out.contains(secret), "{secret} in {out}");
    }
}

/// Fed as bytes in every chunking, from whole to a byte at a time: the same lines.
#[test]
fn a_stream_split_at_any_read_boundary_redacts_as_whole_text() {
    let text = multi_line_output();
    let whole = redact_text(&text);
    no_secret(&whole);
    assert!(
        whole.starts_with("a\n") && whole.ends_with("\nb\n"),
        "{whole}"
    );
    assert!(
        whole.contains("\n-----END RSA PRIVATE KEY----- tail\n"),
        "{whole}"
    );
    for size in [1, 2, 3, 5, 7, 16, 64, text.len()] {
        let mut r = Redactor::new();
        let mut lines = Vec::new();
        for chunk in text.as_bytes().chunks(size) {
            r.push(0, chunk, &mut |l| lines.push(l));
        }
        r.finish(&mut |l| lines.push(l));
        assert_eq!(lines.join("\n") + "\n", whole, "chunks of {size}");
    }
}

/// The marker on one stream, the key on the other: one redactor covers both.
#[test]
fn streams_of_one_program_share_the_context() {
    let mut r = Redactor::new();
    let mut out = Vec::new();
    r.push(1, b"[upload-certs] Using certificate key:\n", &mut |l| {
        out.push(l)
    });
    for b in CERT_KEY.as_bytes() {
        r.push(0, std::slice::from_ref(b), &mut |l| out.push(l));
    }
    r.push(0, b"\nafter\n", &mut |l| out.push(l));
    no_secret(&out.join("\n"));
    assert_eq!(out.last().map(String::as_str), Some("after"));
}

/// A line longer than the raw bound: memory stays bounded, the emitted line is cut, and
/// the rules still see how it ends (the key on the next line is redacted).
#[test]
fn an_overlong_line_keeps_its_end_for_the_rules() {
    let mut r = Redactor::new();
    let mut out = Vec::new();
    let filler = "x ".repeat(RAW_LINE);
    r.push(0, filler.as_bytes(), &mut |l| out.push(l));
    r.push(
        0,
        format!("{TOKEN} Using certificate key:\n{CERT_KEY}\n").as_bytes(),
        &mut |l| out.push(l),
    );
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out[0].len() <= MAX_LINE + "…".len(), "{}", out[0].len());
    no_secret(&out.join("\n"));
    assert!(r.bufs.iter().all(|b| b.head.capacity() <= RAW_LINE));
}

/// A PEM body cut off (a bounded tail of output, no END line) and then ordinary lines:
/// the body is folded, the lines after it are kept.
#[test]
fn a_truncated_pem_body_ends_at_the_first_line_that_cannot_be_one() {
    let text = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEsecret\nAbc+/=\n[kubelet-start] done: ok\n";
    let r = redact_text(text);
    assert_eq!(
        r,
        "-----BEGIN EC PRIVATE KEY-----\n<redacted>\n[kubelet-start] done: ok\n"
    );
    // Encrypted legacy keys have headers before the body.
    let enc = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00FF\n\nsecretbody\n-----END RSA PRIVATE KEY-----\n";
    let r = redact_text(enc);
    assert!(!r.contains("secretbody") && !r.contains("00FF"), "{r}");
}

/// An RSA key body printed without its PEM markers (`grep -v -- -----`, a key in a
/// Secret): every line, not only the first, which alone starts like DER.
#[test]
fn unarmoured_key_bodies_lose_every_line() {
    // A fresh RSA-2048 key in PKCS#1 PEM (the rsa crate itself: no module of ours here).
    let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
    let pem = rsa::pkcs1::EncodeRsaPrivateKey::to_pkcs1_pem(&key, rsa::pkcs1::LineEnding::LF)
        .unwrap()
        .to_string();
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
    let mut stream = Redactor::new();
    let lines: Vec<String> = output.split('\n').filter_map(|l| stream.line(l)).collect();
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
    let plain =
        "ok\nsha256:3f2a9c0e1b7d4a5f6e8c9b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e\nabc\nDONE";
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
        let mut stream = Redactor::new();
        for chunk in text.as_bytes().chunks(3) {
            stream.push(0, chunk, &mut |_| {});
        }
        let alone = redact_text(&format!("{text} abcdef.0123456789abcdef é"));
        proptest::prop_assert!(!alone.ends_with("abcdef.0123456789abcdef é"), "{alone}");
    }
}
