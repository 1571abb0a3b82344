//! Is a payload a jinja template, and of which type is a rendered part: cloud-init's
//! header and prefix rules (docs/formats.md B.1, B.3).

/// The exact user-data prefix cloud-init matches (after lower-casing and left-stripping).
pub(super) const JINJA_PREFIX: &str = "## template: jinja";

/// What the header says about a userdata payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    Jinja,
    NotTemplate,
    /// e.g. `## template:jinja` or `##template: jinja`: a likely typo (the text explains).
    LikelyTypo(String),
}

/// Python's `str.isspace()` (what `lstrip()`, `strip()` and `re`'s `\s` use): Unicode
/// whitespace plus the ASCII separators 0x1c-0x1f that Rust does not count.
pub(super) fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// cloud-init's `detect_template` check (rule 2): `##\s*template:(.*)` matched at the start
/// of the first line, case-insensitively; returns the captured type, lower-cased and stripped.
pub(super) fn rule2_type(first_line: &str) -> Option<String> {
    let rest = first_line.strip_prefix("##")?;
    let rest = rest.trim_start_matches(py_space);
    let (head, kind) = (rest.get(..9)?, rest.get(9..)?);
    if !head.eq_ignore_ascii_case("template:") {
        return None;
    }
    Some(kind.to_lowercase().trim_matches(py_space).to_string())
}

/// The first line as cloud-init's handler sees it (up to the first `\n`).
pub(super) fn first_line(userdata: &str) -> &str {
    userdata.split('\n').next().unwrap_or("")
}

/// Decide whether a payload is a jinja template: cloud-init rule 1 (user-data prefix,
/// lower-cased, left-stripped) AND rule 2 (the jinja handler's re-check of line 1).
/// Headers that pass only one rule, or look like a template header with a typo, are
/// reported as [`Header::LikelyTypo`]: cloud-init silently ignores such payloads.
pub fn detect(userdata: &str) -> Header {
    let stripped = userdata.trim_start_matches(py_space);
    let rule1 = lower_prefix_matches(stripped, JINJA_PREFIX);
    let line1 = first_line(userdata);
    let rule2 = rule2_type(line1);
    match (rule1, rule2.as_deref()) {
        (true, Some("jinja")) => Header::Jinja,
        (true, Some(other)) => Header::LikelyTypo(format!(
            "first line {:?} asks for template type {other:?}; only `## template: jinja` is supported \
             (cloud-init fails this part with \"Unknown template rendering type\")",
            shorten(line1)
        )),
        (true, None) => Header::LikelyTypo(format!(
            "the `## template: jinja` header must be the very first line, with nothing before it \
             (found {:?} first; cloud-init drops such a part)",
            shorten(line1)
        )),
        (false, Some("jinja")) => Header::LikelyTypo(format!(
            "header {:?} is not exactly `## template: jinja` (one space after `##` and one after the colon); \
             cloud-init does not treat this user-data as a template and silently ignores it",
            shorten(line1.trim_end_matches(py_space))
        )),
        (false, _) => looks_like_header(stripped),
    }
}

/// `text.lower().startswith(prefix)` for an ASCII `prefix`, without lower-casing all of `text`.
pub(super) fn lower_prefix_matches(text: &str, prefix: &str) -> bool {
    let mut lowered = text.chars().flat_map(char::to_lowercase);
    prefix.chars().all(|p| lowered.next() == Some(p))
}

/// Anything whose first non-blank line (BOM ignored) reads like `#... template ...:` is a
/// header attempt with a typo; everything else is simply not a template.
pub(super) fn looks_like_header(stripped: &str) -> Header {
    let line = first_line(stripped.trim_start_matches(|c| c == '\u{feff}' || py_space(c)));
    let lower = line.to_lowercase();
    let Some(after_hash) = lower.strip_prefix('#') else {
        return Header::NotTemplate;
    };
    let body = after_hash.trim_start_matches(|c| c == '#' || py_space(c));
    let Some(after_word) = body.strip_prefix("template") else {
        return Header::NotTemplate;
    };
    if !after_word.trim_start_matches(py_space).starts_with(':') {
        return Header::NotTemplate;
    }
    let why = if stripped.starts_with('\u{feff}') {
        "starts with a byte-order mark"
    } else {
        "is not exactly `## template: jinja`"
    };
    Header::LikelyTypo(format!(
        "header {:?} {why}; cloud-init does not treat this user-data as a template and silently ignores it",
        shorten(line.trim_end_matches(py_space))
    ))
}

/// At most 60 characters of a header line for messages.
pub(super) fn shorten(line: &str) -> String {
    let mut s: String = line.chars().take(60).collect();
    if s.len() < line.len() {
        s.push_str("...");
    }
    s
}

/// cloud-init's user-data type prefixes (`handlers.INCLUSION_TYPES_MAP`), matched longest
/// first against the lower-cased, left-stripped text.
pub(super) const TYPE_PREFIXES: [(&str, &str); 9] = [
    ("#include", "text/x-include-url"),
    ("#include-once", "text/x-include-once-url"),
    ("#!", "text/x-shellscript"),
    ("#cloud-config", "text/cloud-config"),
    ("#part-handler", "text/part-handler"),
    ("#cloud-boothook", "text/cloud-boothook"),
    ("#cloud-config-archive", "text/cloud-config-archive"),
    ("#cloud-config-jsonp", "text/cloud-config-jsonp"),
    (JINJA_PREFIX, "text/jinja2"),
];

/// The MIME type cloud-init infers for a user-data text (`type_from_starts_with`).
pub fn content_type(text: &str) -> Option<&'static str> {
    let stripped = text.trim_start_matches(py_space);
    let mut prefixes = TYPE_PREFIXES;
    prefixes.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    prefixes
        .iter()
        .find(|(p, _)| lower_prefix_matches(stripped, p))
        .map(|(_, t)| *t)
}

/// cloud-init hands a rendered template only to the cloud-config, shell-script and
/// boothook handlers; anything else (or an empty result) is dropped. Say so.
pub(super) fn subtype_warning(text: &str) -> Option<String> {
    if text.is_empty() {
        return Some("rendered user-data is empty: cloud-init skips this part".into());
    }
    match content_type(text) {
        Some(
            "text/cloud-config"
            | "text/cloud-config-jsonp"
            | "text/x-shellscript"
            | "text/cloud-boothook",
        ) => None,
        other => Some(format!(
            "rendered user-data is of type {}: cloud-init's jinja handler only passes on #cloud-config, \
             #! scripts and #cloud-boothook and ignores this part",
            other.unwrap_or("unknown (no #cloud-config or #! first line)")
        )),
    }
}
