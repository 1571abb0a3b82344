//! Hostile bootstrap data (issue 8): every case runs the real binary, `nodeagent run
//! --transport dir:D --root R` on a seeded temp root, and `nodeagent validate`, and checks
//! 1. the exact error (place and message; the stage through the library's `pipeline`),
//! 2. that it fails fast (a bound on the agent's CPU time, far below the process kill timeout,
//!    which catches a hang; hostile_common::Measured says why not wall time),
//! 3. that nothing on disk changed: a snapshot of R (type, mode, owner, content, link target)
//!    is equal before and after, except the failure report itself (`run/nodeagent/status.json`,
//!    `var/log/nodeagent/events.jsonl`), which must say `failed` with the same error;
//! 4. that no secret reached stderr, the journal, the status files, the published guestinfo
//!    status or the `collect-logs` archive (hostile_common::assert_no_secret).
//!
//! Cases that currently misbehave live in hostile_regressions.rs (ignored, with the reason).

// Test code slices output it knows to be ASCII (ids, hashes, base64).
#![allow(clippy::string_slice)]

mod hostile_common;
mod prereq;

use libnodeagent::base::error::Stage;
use libnodeagent::base::limits::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const METADATA: &str = "instance-id: i-harden\nlocal-hostname: node1\n";
const FACTS: &str = "hostname: node1\nlocal-ipv4: 10.0.0.5\nnetwork-renderer: networkd\n";
/// Kill timeout for one agent process; every case must finish far below it.
const KILL_AFTER: Duration = Duration::from_secs(300);
/// Files a failed run writes on purpose: the platform and the operator hear why it failed.
const REPORTS: [&str; 2] = [
    "run/nodeagent/status.json",
    "var/log/nodeagent/events.jsonl",
];

struct Env {
    _t: tempfile::TempDir,
    d: PathBuf,
    r: PathBuf,
    facts: PathBuf,
    /// The userdata as a plain file, for `validate`.
    file: PathBuf,
    outside: PathBuf,
}

/// D with the given userdata (and `.encoding`), R seeded like a small image.
fn env(userdata: &[u8], encoding: Option<&str>) -> Env {
    let t = tempfile::tempdir().unwrap();
    let (d, r) = (t.path().join("d"), t.path().join("r"));
    for dir in [
        &d,
        &r.join("etc"),
        &r.join("run"),
        &r.join("var/log"),
        &r.join("outside"),
    ] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(
        r.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/:/usr/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(r.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").unwrap();
    std::fs::write(r.join("etc/hostname"), "image\n").unwrap();
    std::fs::write(r.join("outside/victim"), "untouched\n").unwrap();
    std::os::unix::fs::symlink("../outside/victim", r.join("etc/link")).unwrap();
    std::fs::write(d.join("guestinfo.metadata"), METADATA).unwrap();
    std::fs::write(d.join("guestinfo.userdata"), userdata).unwrap();
    if let Some(e) = encoding {
        std::fs::write(d.join("guestinfo.userdata.encoding"), e).unwrap();
    }
    let facts = t.path().join("facts.yaml");
    std::fs::write(&facts, FACTS).unwrap();
    let file = t.path().join("userdata.yaml");
    std::fs::write(&file, userdata).unwrap();
    let outside = t.path().join("abs");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("victim"), "untouched\n").unwrap();
    Env {
        _t: t,
        d,
        r,
        facts,
        file,
        outside,
    }
}

#[derive(Debug, PartialEq)]
enum Entry {
    Dir,
    File(Vec<u8>),
    Link(PathBuf),
}

/// Everything under `root` that a run could change, except mtimes.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (Entry, u32, u32, u32)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (Entry, u32, u32, u32)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let kind = if m.file_type().is_symlink() {
                Entry::Link(std::fs::read_link(&p).unwrap())
            } else if m.is_dir() {
                walk(root, &p, out);
                Entry::Dir
            } else {
                Entry::File(std::fs::read(&p).unwrap())
            };
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            out.insert(rel, (kind, m.mode(), m.uid(), m.gid()));
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The failure report's places: nodeagent's status and events, and cloud-init's status files
/// and logs (the same report in cloud-init's layout, docs/cloud-init-surface.md).
const REPORT_PLACES: [&str; 6] = [
    "run/nodeagent",
    "var/log/nodeagent",
    "run/cloud-init",
    "var/lib/cloud",
    "var/log/cloud-init.log",
    "var/log/cloud-init-output.log",
];

/// The snapshot without the failure report files and the directories holding them.
fn without_reports(
    mut s: BTreeMap<PathBuf, (Entry, u32, u32, u32)>,
) -> BTreeMap<PathBuf, (Entry, u32, u32, u32)> {
    s.retain(|p, _| {
        !REPORT_PLACES.iter().any(|r| {
            p.starts_with(r) || (p.as_os_str() == "var/lib" && Path::new(r).starts_with(p))
        })
    });
    s
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
    elapsed: Duration,
    /// CPU time of the agent and what it waited for: what the time bounds are checked on.
    cpu: Duration,
    /// Peak resident memory of the agent and what it waited for, KiB.
    max_rss_kib: u64,
}

/// Run the agent with a kill timeout; a crash (signal) is code -1.
fn agent(args: &[&std::ffi::OsStr]) -> Out {
    let start = Instant::now();
    let mut agent = hostile_common::measured(env!("CARGO_BIN_EXE_nodeagent"));
    agent
        .command
        .args(args)
        .env("NODEAGENT_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let hostile_common::Measured {
        output: out,
        killed,
        max_rss_kib,
        cpu,
    } = agent.run(KILL_AFTER);
    assert!(
        !killed,
        "agent still running after {KILL_AFTER:?}: {args:?}"
    );
    assert!(
        max_rss_kib < hostile_common::PEAK_RSS_BOUND_KIB,
        "peak memory {max_rss_kib} KiB over the {} KiB bound: {args:?}",
        hostile_common::PEAK_RSS_BOUND_KIB
    );
    Out {
        max_rss_kib,
        cpu,
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

fn run(e: &Env) -> Out {
    let dir = format!("dir:{}", e.d.display());
    agent(&[
        "run".as_ref(),
        "--transport".as_ref(),
        dir.as_ref(),
        "--root".as_ref(),
        e.r.as_os_str(),
        "--facts".as_ref(),
        e.facts.as_os_str(),
    ])
}

/// `run` with `--exec`: commands run chrooted into R and the platform is redacted (the
/// caller made R an exec root: `prereq::exec_root`).
fn run_exec(e: &Env) -> Out {
    let dir = format!("dir:{}", e.d.display());
    agent(&[
        "run".as_ref(),
        "--transport".as_ref(),
        dir.as_ref(),
        "--root".as_ref(),
        e.r.as_os_str(),
        "--facts".as_ref(),
        e.facts.as_os_str(),
        "--exec".as_ref(),
    ])
}

fn validate(e: &Env) -> Out {
    agent(&[
        "validate".as_ref(),
        e.file.as_os_str(),
        "--root".as_ref(),
        e.r.as_os_str(),
        "--facts".as_ref(),
        e.facts.as_os_str(),
    ])
}

/// The library's view: the same inputs through `pipeline::gather` + `prepare`.
fn library_error(e: &Env) -> libnodeagent::base::error::Error {
    let opts = libnodeagent::pipeline::Options {
        transport: Some(format!("dir:{}", e.d.display())),
        facts: Some(e.facts.clone()),
        compat: false,
        root: e.r.clone(),
    };
    match libnodeagent::pipeline::gather(&opts).and_then(|i| libnodeagent::pipeline::prepare(&i)) {
        Ok(_) => panic!("hostile input accepted by the pipeline"),
        Err(err) => err,
    }
}

struct Expect<'a> {
    stage: Stage,
    place: &'a str,
    message: &'a str,
    /// `validate FILE` reads the file itself: its place/message (None: skip validate, e.g.
    /// encoded userdata, which only a transport decodes).
    validate: Option<&'a str>,
    /// Wall-clock bound for each of run and validate.
    within: Duration,
    /// Also check the stage in-process (skipped where the run itself is slow).
    in_process: bool,
}

impl<'a> Expect<'a> {
    fn new(stage: Stage, place: &'a str, message: &'a str) -> Self {
        Expect {
            stage,
            place,
            message,
            validate: Some(""),
            within: Duration::from_secs(20),
            in_process: true,
        }
    }
    fn no_validate(mut self) -> Self {
        self.validate = None;
        self
    }
    fn validate_says(mut self, s: &'a str) -> Self {
        self.validate = Some(s);
        self
    }
    fn within(mut self, secs: u64) -> Self {
        self.within = Duration::from_secs(secs);
        self
    }
    fn out_of_process_only(mut self) -> Self {
        self.in_process = false;
        self
    }
}

/// The whole check for one hostile input.
fn refused(userdata: &[u8], encoding: Option<&str>, x: Expect<'_>) {
    let e = env(userdata, encoding);
    let before = snapshot(&e.r);
    let want = format!("{}: {}", x.place, x.message);

    let out = run(&e);
    assert_eq!(
        out.code, 1,
        "run must fail with exit 1, not crash\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("nodeagent run: {want}")),
        "run error\nwant: {want}\ngot: {}",
        out.stderr
    );
    assert!(
        out.cpu < x.within,
        "run took {:?} CPU ({:?} wall), bound {:?}",
        out.cpu,
        out.elapsed,
        x.within
    );
    assert_eq!(without_reports(snapshot(&e.r)), before, "run changed R");
    assert!(
        !e.r.join("var/lib/nodeagent").exists(),
        "no state for a refused input"
    );
    // Read-stage failures report to the platform; transport/decode failures (before the
    // reporter exists) write nothing at all. Either way a report must say `failed`.
    if let Ok(bytes) = std::fs::read(e.r.join(REPORTS[0])) {
        let status: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(status["phase"], "failed", "{status}");
        assert!(
            status["error"].as_str().unwrap().contains(x.message),
            "{status}"
        );
    }
    if let Ok(events) = std::fs::read_to_string(e.r.join(REPORTS[1])) {
        assert!(
            events.lines().all(|l| l.contains("\"phase\":\"failed\"")),
            "{events}"
        );
    }

    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);

    if x.in_process {
        let err = library_error(&e);
        assert_eq!(err.stage, x.stage, "{err}");
        assert_eq!(err.place, x.place, "{err}");
        assert!(err.message.contains(x.message), "{err}");
    }

    if let Some(v) = x.validate {
        let before = snapshot(&e.r);
        let out = validate(&e);
        let name = e.file.display().to_string();
        let want = if v.is_empty() { want.as_str() } else { v };
        assert_eq!(
            out.code, 1,
            "validate must fail\n{}{}",
            out.stdout, out.stderr
        );
        assert!(
            out.stdout.starts_with(&format!("{name}: invalid: ")) && out.stdout.contains(want),
            "validate error\nwant: {want}\ngot: {}{}",
            out.stdout,
            out.stderr
        );
        assert!(out.cpu < x.within, "validate took {:?} CPU", out.cpu);
        assert_eq!(snapshot(&e.r), before, "validate changed R");
    }
}

fn cloud_config(body: &str) -> Vec<u8> {
    format!("#cloud-config\n{body}").into_bytes()
}

fn gzip_zeros(n: usize) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let chunk = vec![0u8; 1 << 20];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        gz.write_all(&chunk[..k]).unwrap();
        left -= k;
    }
    gz.finish().unwrap()
}

fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

// ---- decode: size bombs and bounds ----

#[test]
fn gzip_bomb_userdata() {
    let bomb = gzip_zeros(MAX_GUNZIP_BYTES + 1024 * 1024);
    assert!(bomb.len() < 256 * 1024, "a bomb: {} bytes", bomb.len());
    refused(
        b64(&bomb).as_bytes(),
        Some("gzip+base64"),
        Expect::new(
            Stage::Decode,
            "guestinfo.userdata",
            &format!("gzip output (gzip+base64) is over the limit of {MAX_GUNZIP_BYTES} bytes (MAX_GUNZIP_BYTES); refused"),
        )
        .no_validate(),
    );
}

#[test]
fn gzip_bomb_write_files_content() {
    let bomb = b64(&gzip_zeros(MAX_GUNZIP_BYTES + 1));
    let ud = cloud_config(&format!(
        "write_files:\n- path: /etc/bomb\n  encoding: gz+b64\n  content: {bomb}\n"
    ));
    refused(
        &ud,
        None,
        Expect::new(
            Stage::Plan,
            "write_files[0].content",
            &format!(
                "gzip output (gz+b64) is over the limit of {MAX_GUNZIP_BYTES} bytes (MAX_GUNZIP_BYTES); refused"
            ),
        ),
    );
}

#[test]
fn userdata_of_16_mib_plus_one() {
    let mut ud = cloud_config("runcmd: [true]\n");
    ud.resize(MAX_DECODED_BYTES + 1, b'#');
    refused(
        &ud,
        None,
        Expect::new(
            Stage::Decode,
            "guestinfo.userdata",
            &format!("value is {} bytes, over the limit of {MAX_DECODED_BYTES} bytes (MAX_DECODED_BYTES)", MAX_DECODED_BYTES + 1),
        )
        // validate reads FILE itself and names it.
        .validate_says(&format!("{} bytes; the limit is {MAX_DECODED_BYTES}", MAX_DECODED_BYTES + 1)),
    );
}

#[test]
fn userdata_of_16_mib_plus_one_after_base64() {
    let ud = vec![b'a'; MAX_DECODED_BYTES + 1];
    refused(
        b64(&ud).as_bytes(),
        Some("base64"),
        Expect::new(
            Stage::Decode,
            "guestinfo.userdata",
            &format!("base64 decodes to {} bytes, over the limit of {MAX_DECODED_BYTES} bytes (MAX_DECODED_BYTES)", MAX_DECODED_BYTES + 1),
        )
        .no_validate(),
    );
}

// ---- YAML: alias bombs, nesting, duplicates ----

/// "Billion laughs": nine levels of ten aliases each, 10^9 nodes if expanded.
#[test]
fn yaml_billion_laughs() {
    let mut s = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
    for i in 1..9u8 {
        let (p, c) = ((b'a' + i - 1) as char, (b'a' + i) as char);
        let items = vec![format!("*{p}"); 10].join(",");
        s.push_str(&format!("{c}: &{c} [{items}]\n"));
    }
    s.push_str("runcmd: *i\n");
    // The bytes bound (each node's struct counts) is crossed before MAX_YAML_NODES.
    let msg = format!(
        "document expands to more than {} MiB in memory (MAX_YAML_EXPANDED_BYTES",
        MAX_YAML_EXPANDED_BYTES >> 20
    );
    refused(
        &cloud_config(&s),
        None,
        Expect::new(Stage::CloudConfig, "userdata line 7 column 14", &msg)
            .validate_says(&format!("userdata line 7 column 14: {msg}")),
    );
}

/// Many cheap aliases: the expansion count bound, not the node bound.
#[test]
fn yaml_alias_flood() {
    let n = MAX_YAML_ALIAS_EXPANSIONS + 1;
    let s = format!("a: &a x\nruncmd: [{}]\n", vec!["*a"; n].join(","));
    // The (n)th alias starts after "runcmd: [" and n-1 "*a," items.
    let place = format!("userdata line 3 column {}", 9 + 3 * (n - 1) + 1);
    refused(
        &cloud_config(&s),
        None,
        Expect::new(
            Stage::CloudConfig,
            &place,
            &format!("more than {MAX_YAML_ALIAS_EXPANSIONS} alias expansions (alias bomb?)"),
        ),
    );
}

#[test]
fn yaml_deep_block_nesting() {
    let mut s = String::from("x:\n");
    for i in 0..200 {
        s.push_str(&format!("{}k{i}:\n", "  ".repeat(i + 1)));
    }
    refused(
        &cloud_config(&s),
        None,
        Expect::new(
            Stage::CloudConfig,
            "userdata line 66 column 132",
            &format!("nesting deeper than {MAX_YAML_DEPTH} levels"),
        ),
    );
}

/// Flow nesting is stopped by yaml-rust2's own scanner limit before MAX_YAML_DEPTH is
/// reached (so the message is the parser's, still naming line and column).
#[test]
fn yaml_deep_flow_nesting() {
    let s = format!("runcmd: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
    refused(
        &cloud_config(&s),
        None,
        Expect::new(
            Stage::CloudConfig,
            "userdata line 2 column 264",
            "recursion limit exceeded",
        ),
    );
}

#[test]
fn yaml_duplicate_top_level_key() {
    refused(
        &cloud_config("runcmd: [a]\nruncmd: [b]\n"),
        None,
        Expect::new(
            Stage::CloudConfig,
            "userdata line 3 column 1",
            "duplicate key 'runcmd' (first at line 2)",
        ),
    );
}

#[test]
fn yaml_duplicate_nested_key() {
    refused(
        &cloud_config("write_files:\n- path: /etc/x\n  content: hi\n  path: /etc/y\n"),
        None,
        Expect::new(
            Stage::CloudConfig,
            "userdata line 5 column 3",
            "duplicate key 'path' (first at line 3)",
        ),
    );
}

#[test]
fn yaml_duplicate_key_in_metadata() {
    let e = env(&cloud_config("runcmd: [true]\n"), None);
    std::fs::write(
        e.d.join("guestinfo.metadata"),
        "instance-id: i-1\ninstance-id: i-2\n",
    )
    .unwrap();
    let before = snapshot(&e.r);
    let out = run(&e);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "nodeagent run: guestinfo.metadata: line 2 column 1: duplicate key 'instance-id' (first at line 1)"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(without_reports(snapshot(&e.r)), before);
    let err = library_error(&e);
    assert_eq!(
        (err.stage, err.place.as_str()),
        (Stage::Metadata, "guestinfo.metadata: line 2 column 1"),
        "{err}"
    );
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

// ---- templates: endless loops and gigabytes ----

/// Fuel's refusal: it pays for instructions, data made and items visited.
static OUT_OF_FUEL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("template exceeded its work budget of {TEMPLATE_FUEL} fuel")
});

#[test]
fn template_endless_loop_runs_out_of_fuel() {
    let ud = "## template: jinja\n#cloud-config\n\
              {% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}\n";
    // The fuel bound ends it; an unbounded endless loop would run until the kill timeout.
    refused(
        ud.as_bytes(),
        None,
        Expect::new(Stage::Template, "userdata line 3", &OUT_OF_FUEL)
            .within(120)
            .out_of_process_only(),
    );
}

#[test]
fn template_gigabytes_of_output() {
    let x = "x".repeat(4000);
    let ud = format!(
        "## template: jinja\n#cloud-config\n\
         {{% for i in range(10000) %}}{{% for j in range(10000) %}}{x}{{% endfor %}}{{% endfor %}}\n"
    );
    refused(
        ud.as_bytes(),
        None,
        Expect::new(
            Stage::Template,
            "userdata",
            "rendered output exceeds the 64 MiB limit: the template produces too much text",
        ),
    );
}

#[test]
fn template_gigabyte_string_repeat() {
    let ud = "## template: jinja\n#cloud-config\n{{ \"x\" * 1000000000 }}\n";
    refused(
        ud.as_bytes(),
        None,
        Expect::new(Stage::Template, "userdata line 3", &OUT_OF_FUEL),
    );
}

#[test]
fn template_endless_recursion() {
    let ud = "## template: jinja\n#cloud-config\n\
              {% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}\n";
    refused(
        ud.as_bytes(),
        None,
        Expect::new(
            Stage::Template,
            "userdata line 3",
            "invalid operation: recursion limit exceeded",
        ),
    );
}

// ---- cloud-config: counts, paths, modes, owners ----

#[test]
fn one_more_write_files_entry_than_the_limit() {
    let mut s = String::from("write_files:\n");
    for i in 0..=MAX_WRITE_FILES {
        s.push_str(&format!("- path: /tmp/f{i}\n  content: x\n"));
    }
    refused(
        &cloud_config(&s),
        None,
        Expect::new(
            Stage::CloudConfig,
            "userdata write_files",
            &format!(
                "{} entries; the limit is {MAX_WRITE_FILES}",
                MAX_WRITE_FILES + 1
            ),
        )
        .within(60),
    );
}

#[test]
fn nul_byte_in_path() {
    refused(
        &cloud_config("write_files:\n- path: \"/etc/a\\0b\"\n  content: hi\n"),
        None,
        Expect::new(
            Stage::Plan,
            "write_files[0].path",
            "path contains a NUL byte",
        ),
    );
}

#[test]
fn invalid_utf8_in_path() {
    let mut ud = cloud_config("write_files:\n- path: /etc/a");
    ud.push(0xff);
    ud.extend_from_slice(b"b\n  content: hi\n");
    refused(
        &ud,
        None,
        Expect::new(
            Stage::Decode,
            "guestinfo.userdata",
            "value is not valid UTF-8 (invalid byte at offset 41)",
        )
        .validate_says("not UTF-8 (invalid byte at offset 41)"),
    );
}

#[test]
fn invalid_utf8_in_path_after_base64() {
    let mut ud = cloud_config("write_files:\n- path: /etc/a");
    ud.push(0xff);
    ud.extend_from_slice(b"b\n  content: hi\n");
    refused(
        b64(&ud).as_bytes(),
        Some("base64"),
        Expect::new(
            Stage::Decode,
            "guestinfo.userdata",
            "decoded value is not valid UTF-8 (invalid byte at offset 41)",
        )
        .no_validate(),
    );
}

#[test]
fn relative_path() {
    refused(
        &cloud_config("write_files:\n- path: etc/x\n  content: hi\n"),
        None,
        Expect::new(
            Stage::Plan,
            "write_files[0].path",
            "path 'etc/x' is relative; write_files paths must be absolute",
        ),
    );
}

#[test]
fn dot_dot_path() {
    refused(
        &cloud_config("write_files:\n- path: /etc/../../outside/victim\n  content: hi\n"),
        None,
        Expect::new(
            Stage::Plan,
            "write_files[0].path",
            "path '/etc/../../outside/victim' contains '..'",
        ),
    );
}

#[test]
fn permissions_9999_string() {
    refused(
        &cloud_config("write_files:\n- path: /etc/x\n  content: hi\n  permissions: '9999'\n"),
        None,
        Expect::new(
            Stage::Plan,
            "write_files[0].permissions",
            "permissions '9999' is not an octal file mode (0 to 07777)",
        ),
    );
}

#[test]
fn permissions_minus_one() {
    refused(
        &cloud_config("write_files:\n- path: /etc/x\n  content: hi\n  permissions: -1\n"),
        None,
        Expect::new(
            Stage::Plan,
            "write_files[0].permissions",
            "permissions -1 is not a file mode (0 to 07777)",
        ),
    );
}

#[test]
fn owner_that_does_not_exist() {
    refused(
        &cloud_config("write_files:\n- path: /etc/x\n  content: hi\n  owner: nosuchuser:root\n"),
        None,
        Expect::new(
            Stage::Plan,
            "write_files[0]:/etc/x.owner",
            "user 'nosuchuser' does not exist in the target and is not created before this file",
        ),
    );
}

#[test]
fn group_that_does_not_exist() {
    refused(
        &cloud_config("write_files:\n- path: /etc/x\n  content: hi\n  owner: root:nosuchgroup\n"),
        None,
        Expect::new(
            Stage::Plan,
            "write_files[0]:/etc/x.owner",
            "group 'nosuchgroup' does not exist in the target and is not created before this file",
        ),
    );
}

// ---- symlinks: never followed out of the file or the root ----

/// `/etc/link -> ../outside/victim`: writing /etc/link replaces the link with a regular
/// file; the link's target keeps its content.
#[test]
fn write_files_final_component_symlink_is_not_followed() {
    let e = env(
        &cloud_config("write_files:\n- path: /etc/link\n  content: pwned\n"),
        None,
    );
    let out = run(&e);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(e.r.join("outside/victim")).unwrap(),
        "untouched\n"
    );
    let m = std::fs::symlink_metadata(e.r.join("etc/link")).unwrap();
    assert!(m.file_type().is_file(), "link replaced by a regular file");
    assert_eq!(
        std::fs::read_to_string(e.r.join("etc/link")).unwrap(),
        "pwned"
    );
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

/// Absolute symlinks (final or intermediate) resolve inside --root, never to the host.
#[test]
fn absolute_symlinks_stay_inside_the_root() {
    let ud = cloud_config(
        "write_files:\n- path: /etc/sub/victim\n  content: pwned\n- path: /etc/abslink\n  content: pwned\n",
    );
    let e = env(&ud, None);
    std::os::unix::fs::symlink(&e.outside, e.r.join("etc/sub")).unwrap();
    std::os::unix::fs::symlink(e.outside.join("victim"), e.r.join("etc/abslink")).unwrap();
    let out = run(&e);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(e.outside.join("victim")).unwrap(),
        "untouched\n",
        "a write escaped the root"
    );
    assert!(
        std::fs::symlink_metadata(e.r.join("etc/abslink"))
            .unwrap()
            .is_file()
    );
    let inside =
        e.r.join(e.outside.strip_prefix("/").unwrap())
            .join("victim");
    assert_eq!(std::fs::read_to_string(inside).unwrap(), "pwned");
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

/// The metadata's encoded `network` string goes through the same gunzip bound.
#[test]
fn gzip_bomb_in_metadata_network() {
    let e = env(&cloud_config("runcmd: [\"true\"]\n"), None);
    let bomb = b64(&gzip_zeros(MAX_GUNZIP_BYTES + 1));
    std::fs::write(
        e.d.join("guestinfo.metadata"),
        format!(
            "{{\"instance-id\": \"i-1\", \"network\": \"{bomb}\", \"network.encoding\": \"gzip+base64\"}}"
        ),
    )
    .unwrap();
    let before = snapshot(&e.r);
    let out = run(&e);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let want = format!(
        "nodeagent run: guestinfo.metadata: guestinfo.metadata.network: gzip output (gzip+base64) is over the limit of {MAX_GUNZIP_BYTES} bytes (MAX_GUNZIP_BYTES); refused"
    );
    assert!(
        out.stderr.contains(&want),
        "want {want}\ngot {}",
        out.stderr
    );
    assert!(out.cpu < Duration::from_secs(20), "{:?} CPU", out.cpu);
    assert_eq!(without_reports(snapshot(&e.r)), before);
    let err = library_error(&e);
    assert_eq!(err.stage, Stage::Decode, "{err}");
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

// ---- issue 13: silent death, endless CPU, secrets ----

/// Every report the run left under R, for secret scans.
fn reports_text(r: &Path) -> String {
    let mut all = String::new();
    for rel in REPORTS {
        all.push_str(&std::fs::read_to_string(r.join(rel)).unwrap_or_default());
    }
    all
}

/// A `caCertHashes` entry with a multi-byte character across byte 7 aborted the process (a
/// byte-index slice): no status, nothing reported. Now it is refused in the plan, naming the
/// field, and R is unchanged.
#[test]
fn ca_cert_hash_with_a_multi_byte_character_is_refused_not_a_crash() {
    let hash = format!("sha256é{}", "0".repeat(63));
    assert_eq!(hash.len(), 71);
    let join = format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.10:6443\n    token: abcdef.0123456789abcdef\n    caCertHashes:\n    - \"{hash}\"\nnodeRegistration:\n  name: node1\n"
    );
    let indented: String = join.lines().map(|l| format!("      {l}\n")).collect();
    let ud = cloud_config(&format!(
        "write_files:\n- path: /run/kubeadm/kubeadm-join-config.yaml\n  content: |\n{indented}runcmd:\n- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml && echo success > /run/cluster-api/bootstrap-success.complete\n"
    ));
    let e = env(&ud, None);
    let before = snapshot(&e.r);
    let out = run(&e);
    assert_eq!(
        out.code, 1,
        "refused with exit 1, not aborted\n{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    assert!(
        out.stderr.contains("discovery.bootstrapToken.caCertHashes"),
        "the error names the field\n{}",
        out.stderr
    );
    assert!(out.cpu < Duration::from_secs(20), "{:?} CPU", out.cpu);
    assert_eq!(without_reports(snapshot(&e.r)), before, "run changed R");
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(e.r.join(REPORTS[0])).unwrap()).unwrap();
    assert_eq!(status["phase"], "failed", "{status}");
    assert!(!reports_text(&e.r).contains("abcdef.0123456789abcdef"));
    eprintln!("{:?}, peak {} KiB", out.elapsed, out.max_rss_kib);
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &["0123456789abcdef"]);
}

/// A very long instance id with a refused userdata made the status writer loop forever at
/// 100 % CPU (the 4 KiB cut could never fit). Now the failure is published, cut to fit.
#[test]
fn status_with_fields_over_the_4k_cap_is_published_not_spun_on() {
    let e = env(b"#cloud-config\nruncmd: [unclosed\n", None);
    let iid = format!("i-{}", "x".repeat(20_000));
    std::fs::write(
        e.d.join("guestinfo.metadata"),
        format!("instance-id: {iid}\n"),
    )
    .unwrap();
    let before = snapshot(&e.r);
    let out = run(&e);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.cpu < Duration::from_secs(20), "{:?} CPU", out.cpu);
    assert_eq!(without_reports(snapshot(&e.r)), before, "run changed R");
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(e.r.join(REPORTS[0])).unwrap()).unwrap();
    assert_eq!(status["phase"], "failed", "{status}");
    let published = std::fs::read(e.d.join("guestinfo.nodeagent.status")).unwrap();
    assert!(published.len() <= MAX_STATUS_BYTES, "{}", published.len());
    let compact: serde_json::Value = serde_json::from_slice(&published).unwrap();
    assert_eq!(compact["phase"], "failed", "{compact}");
    eprintln!("{:?}, peak {} KiB", out.elapsed, out.max_rss_kib);
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

/// A failing runcmd item (run with `--exec`, chrooted into R) whose command line holds
/// `secret` and which prints it on stderr as its last output line (which the error quotes):
/// the run fails naming the item, and the secret reaches none of stderr, the journal, the
/// status files, the published guestinfo status or the collect-logs archive.
fn failing_command_keeps_secret(item: &str, secret: &str) {
    let ud = cloud_config(&format!(
        "runcmd:\n- {}\n",
        serde_json::to_string(item).unwrap()
    ));
    let e = env(&ud, None);
    if !prereq::exec_root(&e.r, &[]) {
        return;
    }
    let out = run_exec(&e);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("runcmd[0]"), "{}", out.stderr);
    assert!(out.stderr.contains("exit status 3"), "{}", out.stderr);
    assert!(out.cpu < Duration::from_secs(30), "{:?} CPU", out.cpu);
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(e.r.join(REPORTS[0])).unwrap()).unwrap();
    assert_eq!(status["phase"], "failed", "{status}");
    hostile_common::assert_no_secret(
        &e.r,
        &e.d,
        &format!("{}{}", out.stderr, out.stdout),
        &[secret],
    );
    eprintln!("{:?}, peak {} KiB", out.elapsed, out.max_rss_kib);
}

#[test]
fn secret_in_an_environment_assignment_stays_out_of_every_sink() {
    failing_command_keeps_secret(
        "PGPASSWORD=hunter2pw psql -h db; echo PGPASSWORD=hunter2pw >&2; exit 3",
        "hunter2pw",
    );
}

#[test]
fn secret_in_an_authorization_header_stays_out_of_every_sink() {
    failing_command_keeps_secret(
        "curl -H 'Authorization: Bearer eyJtokenvalue' https://db; echo 'Authorization: Bearer eyJtokenvalue' >&2; exit 3",
        "eyJtokenvalue",
    );
}

#[test]
fn secret_in_a_password_flag_stays_out_of_every_sink() {
    failing_command_keeps_secret(
        "migrate --db-password=s3cretpw; echo 'retry with --db-password=s3cretpw' >&2; exit 3",
        "s3cretpw",
    );
}

/// Key material printed without PEM armour (a DER private key in base64 on one line).
#[test]
fn unarmoured_key_material_stays_out_of_every_sink() {
    let der = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKjMzEfYyjiWA4R4";
    failing_command_keeps_secret(&format!("echo {der} >&2; exit 3"), &der[..40]);
}

/// Fuel counted only instructions before minijinja 3.1: a short template calling a costly
/// filter on a large string a few hundred times ran for 47 s, stopped only by the renderer's
/// CPU cap (TEMPLATE_CPU_SECS, still there behind fuel). Fuel now pays for the data each call
/// makes, so it stops in-process at the line.
#[test]
fn template_costly_filter_repeated_runs_out_of_fuel() {
    let ud = "## template: jinja\n#cloud-config\n\
              {% set s = \"ab\" * 4000000 %}{% for i in range(100000) %}{{ (s|replace(\"a\", \"cd\"))|length }}{% endfor %}\n";
    refused(
        ud.as_bytes(),
        None,
        Expect::new(Stage::Template, "userdata line 3", &OUT_OF_FUEL),
    );
}

/// Printing, `join` and `tojson` are ours: each item they visit costs fuel, so a long lazy
/// `n * [x]` is refused at its line (fuzz: printing a 63M-item one took 9 s in-process).
#[test]
fn template_long_lazy_list_printed_or_joined_runs_out_of_fuel() {
    for expr in [
        "{{ 3000000 * [8] }}",
        "{{ (3000000 * [8]) | join(',') }}",
        "{{ (3000000 * [8]) | tojson }}",
        "{{ ','.join(3000000 * ['a']) }}",
    ] {
        let ud = format!("## template: jinja\n#cloud-config\n{expr}\n");
        refused(
            ud.as_bytes(),
            None,
            Expect::new(Stage::Template, "userdata line 3", &OUT_OF_FUEL),
        );
    }
}

// ---- memory: expanded YAML bytes, accepted growth, filter output, command floods ----

/// `nodeagent run --root R` (no --exec) on `e`, asserting exit 0 (peak memory and the kill
/// timeout are asserted by `agent`).
fn accepted(e: &Env) -> Out {
    let out = run(e);
    assert_eq!(out.code, 0, "run must accept the input\n{}", out.stderr);
    out
}

/// A large anchor aliased a few hundred times: few nodes, few aliases, but each alias is a
/// copy in memory. Bounded in expanded bytes (MAX_YAML_EXPANDED_BYTES), refused at the alias
/// that crosses it.
#[test]
fn yaml_large_anchor_aliased_is_bounded_in_bytes() {
    let big = "x".repeat(64 * 1024);
    let n = 2 * MAX_YAML_EXPANDED_BYTES / big.len();
    assert!(n < MAX_YAML_ALIAS_EXPANSIONS);
    let s = format!("a: &a \"{big}\"\nruncmd: [{}]\n", vec!["*a"; n].join(","));
    let ud = cloud_config(&s);
    // The crossing alias's column follows from the per-node cost; the library names it.
    let place = match libnodeagent::render::cloudconfig::parse(
        std::str::from_utf8(&ud).unwrap(),
        "userdata",
        false,
    ) {
        Err(e) => e.place,
        Ok(_) => panic!("aliases expanding to {n} x 64 KiB accepted"),
    };
    assert!(place.starts_with("userdata line 3 column "), "{place}");
    refused(
        &ud,
        None,
        Expect::new(
            Stage::CloudConfig,
            &place,
            &format!(
                "document expands to more than {} MiB in memory (MAX_YAML_EXPANDED_BYTES",
                MAX_YAML_EXPANDED_BYTES >> 20
            ),
        ),
    );
}

/// The largest write_files contents a plan accepts, from a few hundred KiB of gzip: the
/// run stays under the memory bound (the issue measured 367 MB for 60 MiB).
#[test]
fn largest_accepted_write_files_stay_under_the_memory_bound() {
    let per_file = (MAX_WRITE_FILES_TOTAL_BYTES / 2).min(MAX_GUNZIP_BYTES) - 1024;
    let files = MAX_WRITE_FILES_TOTAL_BYTES / per_file;
    let gz = b64(&gzip_zeros(per_file));
    let mut s = String::from("write_files:\n");
    for i in 0..files {
        s.push_str(&format!(
            "- path: /var/big{i}\n  encoding: gz+b64\n  content: {gz}\n"
        ));
    }
    let e = env(&cloud_config(&s), None);
    let out = accepted(&e);
    for i in 0..files {
        let len = std::fs::metadata(e.r.join(format!("var/big{i}")))
            .unwrap()
            .len();
        assert_eq!(len as usize, per_file);
    }
    eprintln!(
        "{files} x {per_file} bytes written: {:?}, peak {} KiB",
        out.elapsed, out.max_rss_kib
    );
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

/// A flood of runcmd items in a userdata under the size limit: refused by the expanded-bytes
/// bound long before the items cost hundreds of MB (900k items took 886 MB).
#[test]
fn runcmd_flood_is_refused_within_the_memory_bound() {
    let n = (MAX_DECODED_BYTES - 64) / 4;
    let mut s = String::with_capacity(n * 4 + 16);
    s.push_str("runcmd:\n");
    for _ in 0..n {
        s.push_str("- a\n");
    }
    let ud = cloud_config(&s);
    let place = match libnodeagent::render::cloudconfig::parse(
        std::str::from_utf8(&ud).unwrap(),
        "userdata",
        false,
    ) {
        Err(e) => e.place,
        Ok(_) => panic!("{n} runcmd items accepted"),
    };
    refused(
        &ud,
        None,
        Expect::new(
            Stage::CloudConfig,
            &place,
            &format!(
                "document expands to more than {} MiB in memory",
                MAX_YAML_EXPANDED_BYTES >> 20
            ),
        )
        .within(60),
    );
}

/// The most runcmd items the bytes bound lets through: planned and journaled (skipped, no
/// --exec) under the memory bound.
#[test]
fn largest_accepted_runcmd_stays_under_the_memory_bound() {
    // Each item costs two nodes' worth of the bound at most (its node and its text).
    let n = MAX_YAML_EXPANDED_BYTES / 2 / 128;
    let mut s = String::from("runcmd:\n");
    for i in 0..n {
        s.push_str(&format!("- echo {i}\n"));
    }
    let e = env(&cloud_config(&s), None);
    let out = accepted(&e);
    eprintln!(
        "{n} runcmd items: {:?}, peak {} KiB",
        out.elapsed, out.max_rss_kib
    );
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

/// `indent` builds width x lines in one string before the output cap sees it.
#[test]
fn template_indent_past_the_render_cap_is_refused() {
    let ud = "## template: jinja\n#cloud-config\n{{ (\"a\\n\" * 100000) | indent(1000) }}\n";
    refused(
        ud.as_bytes(),
        None,
        Expect::new(
            Stage::Template,
            "userdata line 3",
            // 100 000 lines of "a" plus 1000 spaces each, counted before building it.
            "invalid operation: result would be 100201000 bytes, over the 64 MiB render limit",
        ),
    );
}

/// printf widths are padding built in one string: `%999999999d` is a gigabyte.
#[test]
fn template_format_width_past_the_render_cap_is_refused() {
    let ud = "## template: jinja\n#cloud-config\n{{ \"%999999999d\" | format(1) }}\n";
    refused(
        ud.as_bytes(),
        None,
        Expect::new(
            Stage::Template,
            "userdata line 3",
            "invalid operation: result would be 1000000011 bytes, over the 64 MiB render limit",
        ),
    );
}

// ---- secrets and escaping ----

/// A jinja syntax error on a line holding a password: cloud-init quotes the line; nodeagent
/// names it only, so the password reaches no report.
#[test]
fn jinja_syntax_error_does_not_quote_the_line() {
    let ud = b"## template: jinja\n#cloud-config\nchpasswd: {list: 'root:Hunter2Secret'} {{ oops\n";
    refused(
        ud,
        None,
        Expect::new(
            Stage::Template,
            "userdata line 3",
            "Unable to parse Jinja template due to syntax error: ",
        ),
    );
    let e = env(ud, None);
    let out = run(&e);
    let published =
        std::fs::read_to_string(e.d.join("guestinfo.nodeagent.status")).unwrap_or_default();
    let everything = format!("{}{}{}", out.stderr, reports_text(&e.r), published);
    assert!(everything.contains("on line 3"), "{everything}");
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &["Hunter2"]);
}

/// A newline in a path cannot start a log line of its own on stderr: every line of the
/// agent's stderr is one event, control characters inside it escaped.
#[test]
fn newlines_in_input_do_not_forge_log_lines() {
    let ud = cloud_config("write_files:\n- path: \"/tmp/a\\n ERROR forged line\"\n  content: x\n");
    let e = env(&ud, None);
    let dir = format!("dir:{}", e.d.display());
    let mut agent = hostile_common::measured(env!("CARGO_BIN_EXE_nodeagent"));
    agent
        .command
        .args(["run", "--transport", &dir, "--facts"])
        .arg(&e.facts)
        .arg("--root")
        .arg(&e.r)
        // Info level: the write is logged with its path.
        .env("NODEAGENT_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let m = agent.run(KILL_AFTER);
    assert!(!m.killed && m.max_rss_kib < hostile_common::PEAK_RSS_BOUND_KIB);
    let out = m.output;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // cloud-init writes such a path too; what matters is how it is logged.
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("a\\n ERROR forged line"),
        "path not logged escaped:\n{stderr}"
    );
    for line in stderr.lines() {
        assert!(
            !line.trim_start().starts_with("ERROR forged"),
            "forged line on stderr:\n{stderr}"
        );
    }
    hostile_common::assert_no_secret(&e.r, &e.d, &stderr, &[]);
}

// ---- visibility ----

/// An invalid /etc/nodeagent/config.yaml: the run fails, and status.json, the events journal
/// and the platform all say `failed` with the reason (before, nothing was written anywhere).
#[test]
fn invalid_image_config_is_reported_failed_everywhere() {
    let e = env(&cloud_config("runcmd: [true]\n"), None);
    std::fs::create_dir_all(e.r.join("etc/nodeagent")).unwrap();
    std::fs::write(
        e.r.join("etc/nodeagent/config.yaml"),
        "no_such_setting: 1\n",
    )
    .unwrap();
    let out = run(&e);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("config.yaml"), "{}", out.stderr);
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(e.r.join(REPORTS[0])).unwrap()).unwrap();
    assert_eq!(status["phase"], "failed", "{status}");
    assert!(
        status["error"].as_str().unwrap().contains("config.yaml"),
        "{status}"
    );
    let events = std::fs::read_to_string(e.r.join(REPORTS[1])).unwrap();
    assert!(events.contains("\"phase\":\"failed\""), "{events}");
    let published: serde_json::Value =
        serde_json::from_slice(&std::fs::read(e.d.join("guestinfo.nodeagent.status")).unwrap())
            .unwrap();
    assert_eq!(published["phase"], "failed", "{published}");
    assert!(out.cpu < Duration::from_secs(20), "{:?} CPU", out.cpu);
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

/// A guestinfo key the metadata asks to redact that cannot be overwritten: the secret stays
/// readable on the platform, so the run is `degraded` (exit 2) with the reason, not `done`.
#[test]
fn failed_guestinfo_redaction_is_degraded_with_a_reason() {
    let e = env(&cloud_config("final_message: hi\n"), None);
    std::fs::write(
        e.d.join("guestinfo.metadata"),
        format!("{METADATA}redact: [secretkey]\n"),
    )
    .unwrap();
    // A directory where the transport writes the key's value: the write fails.
    std::fs::create_dir_all(e.d.join("guestinfo.secretkey/x")).unwrap();
    let out = run_exec(&e);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("guestinfo.secretkey could not be redacted: "),
        "{}",
        out.stderr
    );
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(e.r.join(REPORTS[0])).unwrap()).unwrap();
    // `done` with warnings is degraded (`nodeagent status` exits 2).
    assert_eq!(status["phase"], "done", "{status}");
    assert!(
        status["warnings"]
            .to_string()
            .contains("guestinfo.secretkey could not be redacted"),
        "{status}"
    );
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

// ---- exactly once ----

/// A supervisor killed alone while its command runs: the command goes with it (it never
/// finishes unsupervised, with no status recorded, to be started again by the next run while
/// it still runs), and its process group id is left for the next run to kill what remains.
#[test]
fn a_supervisor_killed_alone_takes_its_command_with_it() {
    let t = tempfile::tempdir().unwrap();
    let rc = t.path().join("h.rc");
    let rec = t.path().join("record");
    let script = format!("echo start >> {0}; sleep 3; echo end >> {0}", rec.display());
    let mut sup = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["__supervise"])
        .arg(&rc)
        .args(["60", "/bin/sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !std::fs::read_to_string(&rec)
        .unwrap_or_default()
        .contains("start")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "command did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pgid: i32 = std::fs::read_to_string(t.path().join("h.pgid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    sup.kill().unwrap();
    sup.wait().unwrap();
    // The shell (the group leader) dies with its supervisor.
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, r)| r.starts_with(['Z', 'X']))
            })
            .unwrap_or(true)
    };
    let t1 = Instant::now();
    while !gone(pgid) {
        assert!(
            t1.elapsed() < Duration::from_secs(5),
            "command outlived its supervisor"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        std::fs::read_to_string(&rec).unwrap(),
        "start\n",
        "the command finished without its supervisor"
    );
    assert!(!rc.exists(), "no status for a command that did not finish");
    // What the shell started (`sleep`) is still in the group: the next run kills it
    // (commands::reap_orphan_group) before starting the command again.
    // SAFETY: signal to a process group this test made.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// Found by the structure-aware fuzzer (fuzz/corpus/structured/regress-mounts-*): with
/// `mount_default_fields` shorter than two fields, a second entry for the same device
/// without a mount point indexed field 1 of the first and aborted the agent. Now both are
/// skipped with a warning, as entries without a mount point are.
#[test]
fn mounts_with_one_default_field_do_not_abort() {
    let e = env(
        &cloud_config("mount_default_fields: [x]\nmounts:\n- [/dev/sdb]\n- [/dev/sdb]\n"),
        None,
    );
    let out = run(&e);
    // Done with warnings (degraded): nothing to mount.
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("mounts[0]: no mount point"),
        "{}",
        out.stderr
    );
    assert!(out.cpu < Duration::from_secs(20), "{:?} CPU", out.cpu);
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

/// The memory figure the bounds above are checked on is the program's own: a child that
/// allocates 96 MiB is seen at 96 MiB or more, and `true` stays small while this test
/// process holds 300 MiB itself (a child's `ru_maxrss` would include that if the test
/// spawned it directly, hostile_common::MEASURING_PARENT says why).
#[test]
fn the_memory_figure_is_the_programs_own() {
    let held = vec![1u8; 300 << 20];
    let run = |program: &str, args: &[&str]| {
        let mut m = hostile_common::measured(program);
        m.command
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let out = m.run(KILL_AFTER);
        assert!(out.output.status.success(), "{program} {args:?} failed");
        out.max_rss_kib
    };
    let small = run("true", &[]);
    let large = run(
        "sh",
        &["-c", "exec python3 -c 'x = b\"\\x01\" * (96 << 20)'"],
    );
    assert!(held.iter().step_by(4096).all(|b| *b == 1));
    assert!(small < 32 * 1024, "`true` measured at {small} KiB");
    assert!(
        (96 * 1024..200 * 1024).contains(&large),
        "96 MiB allocation measured at {large} KiB"
    );
}

// ---- issue 33: key bodies line by line, map-key injection, mode 0, plan-time checks ----

/// An RSA key printed without its PEM markers by a failing command (`grep -v -- -----`):
/// only its first line looks like DER; the other lines (the primes) reached the journal,
/// nodeagent-output.log, the "last output" in status.json and guestinfo, and the archive.
/// No line of it is anywhere now, and every JSON file of the archive is still JSON.
#[test]
fn unarmoured_rsa_key_body_stays_out_of_every_sink_line_by_line() {
    let pem = minter::pki::Key::generate(minter::pki::Algorithm::Rsa2048)
        .unwrap()
        .private_pem;
    let body: Vec<&str> = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let item = format!("printf '%s\\n' {} >&2; exit 3", body.join(" "));
    let ud = cloud_config(&format!(
        "runcmd:\n- {}\n",
        serde_json::to_string(&item).unwrap()
    ));
    let e = env(&ud, None);
    if !prereq::exec_root(&e.r, &[]) {
        return;
    }
    let out = run_exec(&e);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("runcmd[0]"), "{}", out.stderr);
    // Every line but the command line itself (which the agent shows cut and redacted).
    hostile_common::assert_no_secret(&e.r, &e.d, &format!("{}{}", out.stderr, out.stdout), &body);
    eprintln!("{} key lines, none leaked; {:?}", body.len(), out.elapsed);
}

/// `ethernets` map keys reach the generated files' comment line: a key with line breaks
/// added `[Network] DNS=` of the sender's choice and the run exited 0. Now it is refused
/// before anything is written, the error shows the key escaped on one line.
#[test]
fn network_device_id_with_line_breaks_is_refused_before_any_write() {
    let e = env(&cloud_config("runcmd: [\"true\"]\n"), None);
    let metadata = serde_json::json!({
        "instance-id": "i-1",
        "local-hostname": "evil",
        "network": {"version": 2, "ethernets": {
            "id0\n[Network]\nDNS=6.6.6.6\n#": {"dhcp4": true}
        }}
    });
    std::fs::write(e.d.join("guestinfo.metadata"), metadata.to_string()).unwrap();
    let before = snapshot(&e.r);
    let out = run(&e);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains(r#"network.ethernets[id0\n[Network]\nDNS=6.6.6.6\n#]: a device id must be"#),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("\nDNS=6.6.6.6"), "{}", out.stderr);
    assert_eq!(without_reports(snapshot(&e.r)), before, "run changed R");
    assert!(!reports_text(&e.r).contains("\nDNS="));
    hostile_common::assert_no_secret(&e.r, &e.d, &out.stderr, &[]);
}

/// More devices than MAX_NETWORK_DEVICES: refused in the plan, /etc/hostname untouched (it
/// was written, then the network step ran out of file descriptors).
#[test]
fn too_many_network_devices_are_refused_before_the_hostname_is_written() {
    let e = env(&cloud_config("runcmd: [\"true\"]\n"), None);
    let eths: serde_json::Map<String, serde_json::Value> = (0..600)
        .map(|i| (format!("e{i}"), serde_json::json!({"dhcp4": true})))
        .collect();
    let metadata = serde_json::json!({
        "instance-id": "i-1", "local-hostname": "other",
        "network": {"version": 2, "ethernets": eths}
    });
    std::fs::write(e.d.join("guestinfo.metadata"), metadata.to_string()).unwrap();
    let before = snapshot(&e.r);
    let out = run(&e);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "network.ethernets: 600 devices, more than MAX_NETWORK_DEVICES ({MAX_NETWORK_DEVICES})"
        )),
        "{}",
        out.stderr
    );
    assert_eq!(without_reports(snapshot(&e.r)), before, "run changed R");
    assert_eq!(
        std::fs::read_to_string(e.r.join("etc/hostname")).unwrap(),
        "image\n"
    );
}

/// `permissions: '0000'` (or `0`) asked for no access; cloud-init leaves 0644, a key
/// readable by all. Refused in strict mode like `permissions: 644`.
#[test]
fn permissions_zero_is_refused_not_made_world_readable() {
    for p in ["'0000'", "0", "'0'"] {
        refused(
            &cloud_config(&format!(
                "write_files:\n- path: /etc/a\n  content: a\n- path: /etc/x.key\n  content: k\n  permissions: {p}\n"
            )),
            None,
            Expect::new(
                Stage::Plan,
                "write_files[1].permissions",
                "mode 0 (no access at all) is not applied by cloud-init",
            ),
        );
    }
}

/// Values useradd refuses only at apply, after earlier steps wrote: a date it cannot read,
/// and (uid_t)-1, which it refuses and chown reads as "no change" (the home stayed root's).
#[test]
fn user_values_useradd_refuses_are_refused_in_the_plan() {
    refused(
        &cloud_config(
            "write_files:\n- path: /etc/a\n  content: a\nusers:\n- name: bob\n  expiredate: not-a-date\n",
        ),
        None,
        Expect::new(
            Stage::Plan,
            "users[0].expiredate",
            "not a date: want YYYY-MM-DD",
        ),
    );
    refused(
        &cloud_config("users:\n- name: bob\n  expiredate: '2026-02-30'\n"),
        None,
        Expect::new(Stage::Plan, "users[0].expiredate", "not a date"),
    );
    refused(
        &cloud_config("users:\n- name: bob\n  uid: 4294967295\n"),
        None,
        Expect::new(Stage::Plan, "users[0].uid", "4294967295 is (uid_t)-1"),
    );
    refused(
        &cloud_config("users:\n- name: bob\n  inactive: -2\n"),
        None,
        Expect::new(Stage::Plan, "users[0].inactive", "not a number of days"),
    );
}

/// `/etc/sudoers.d` in the image is an absolute link to a directory outside the root: the
/// sudo step chmodded that host directory to 0750 (it resolved only the parents). It is
/// resolved inside the root now; the outside directory keeps its mode and gets no file.
#[test]
fn sudo_step_never_chmods_through_an_absolute_link() {
    use std::os::unix::fs::PermissionsExt;
    let e = env(
        &cloud_config("users:\n- name: bob\n  lock_passwd: true\n  sudo: ALL=(ALL) NOPASSWD:ALL\n"),
        None,
    );
    std::fs::create_dir_all(e.r.join("usr/sbin")).unwrap();
    for tool in ["useradd", "usermod", "groupadd", "chpasswd"] {
        std::fs::write(e.r.join("usr/sbin").join(tool), "").unwrap();
    }
    std::fs::write(e.r.join("etc/shadow"), "root:*:19000:0:99999:7:::\n").unwrap();
    // What lets the agent make the user itself, as useradd would (apply/accounts.rs).
    std::fs::write(e.r.join("etc/login.defs"), "USERGROUPS_ENAB yes\n").unwrap();
    std::fs::create_dir_all(e.r.join("etc/default")).unwrap();
    std::fs::write(
        e.r.join("etc/default/useradd"),
        "SHELL=/bin/sh\nHOME=/home\n",
    )
    .unwrap();
    let outside = e.outside.join("sudoers.d");
    std::fs::create_dir(&outside).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&outside, e.r.join("etc/sudoers.d")).unwrap();
    let out = run(&e);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mode = std::fs::metadata(&outside).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755, "the outside directory was chmodded");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    let inside = e.r.join(outside.strip_prefix("/").unwrap());
    assert_eq!(
        std::fs::metadata(&inside).unwrap().permissions().mode() & 0o7777,
        0o750
    );
    assert!(inside.join("90-nodeagent-bob").is_file());
}

/// `query --root R userdata` and `query --all` printed what an absolute link in the saved
/// instance data pointed to on the operator's machine; they read inside R now.
#[test]
fn query_never_reads_through_an_absolute_link_out_of_the_root() {
    let e = env(&cloud_config("runcmd: [\"true\"]\n"), None);
    let out = run(&e);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let host_secret = e.outside.join("operator-secret");
    std::fs::write(&host_secret, "OPERATOR-ONLY-d41d8cd9\n").unwrap();
    let instances = e.r.join("var/lib/nodeagent/instances");
    let idir = std::fs::read_dir(&instances)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let ud = idir.join(libnodeagent::pipeline::SAVED_USERDATA);
    std::fs::remove_file(&ud).unwrap();
    std::os::unix::fs::symlink(&host_secret, &ud).unwrap();
    for args in [&["userdata"][..], &["--all"][..]] {
        let mut a: Vec<&std::ffi::OsStr> = vec!["query".as_ref(), "--root".as_ref()];
        a.push(e.r.as_os_str());
        a.extend(args.iter().map(|s| std::ffi::OsStr::new(*s)));
        let out = agent(&a);
        assert!(
            !out.stdout.contains("OPERATOR-ONLY") && !out.stderr.contains("OPERATOR-ONLY"),
            "{args:?} read the host file:\n{}{}",
            out.stdout,
            out.stderr
        );
    }
}

/// A link as the last component in the log directory (`nodeagent-output.log -> /etc/shadow`)
/// put that file into the world-readable collect-logs archive. Links are not followed.
#[test]
fn collect_logs_never_follows_a_final_link_in_the_log_directory() {
    let e = env(&cloud_config("runcmd: [\"true\"]\n"), None);
    std::fs::write(
        e.r.join("etc/shadow"),
        "root:$6$SHADOWHASHd41d8:19000::::::\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("/etc/shadow", e.r.join("var/log/nodeagent-output.log")).unwrap();
    let all = hostile_common::leak_sinks(&e.r, &e.d);
    assert!(!all.contains("SHADOWHASH"), "{all}");
    assert!(
        all.contains("skipped nodeagent-output.log"),
        "the manifest says why: {all}"
    );
    assert_eq!(
        std::fs::read_to_string(e.r.join("etc/shadow")).unwrap(),
        "root:$6$SHADOWHASHd41d8:19000::::::\n"
    );
}
