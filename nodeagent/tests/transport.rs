//! Transports (dir, nocloud, fwcfg, vmware), spec parsing, detection and `read_all`.
//! VMware runs against fake `vmware-rpctool` / `vmtoolsd` shell scripts on a private
//! search path: they record every argv exactly and answer like the real tools
//! (`No value found` on stderr with exit 1 for a missing key).

mod prereq;
use base64::Engine as _;
use libnodeagent::base::error::Stage;
use libnodeagent::source::transport::dir::DirTransport;
use libnodeagent::source::transport::fwcfg::FwCfgTransport;
use libnodeagent::source::transport::nocloud::NoCloudTransport;
use libnodeagent::source::transport::vmware::VmwareTransport;
use libnodeagent::source::transport::{
    self, Transport, detect_with_path, from_spec, read_all, redact_keys,
};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn write(path: &Path, data: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
}

fn b64(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(d)
}

// ---- dir ----

#[test]
fn dir_get_set_round_trip_and_missing_is_none() {
    let tmp = tempfile::tempdir().unwrap();
    let t = DirTransport::new(tmp.path());
    assert_eq!(t.name(), "dir");
    assert_eq!(t.get("metadata").unwrap(), None);
    t.set("nodeagent.status", b"{\"v\":1}").unwrap();
    assert_eq!(
        fs::read(tmp.path().join("guestinfo.nodeagent.status")).unwrap(),
        b"{\"v\":1}"
    );
    assert_eq!(
        t.get("nodeagent.status").unwrap().as_deref(),
        Some(&b"{\"v\":1}"[..])
    );
    t.set("nodeagent.status", b"second").unwrap();
    assert_eq!(
        t.get("nodeagent.status").unwrap().as_deref(),
        Some(&b"second"[..])
    );
    // Atomic replace leaves no temp files behind.
    let names: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("guestinfo.nodeagent.status")]
    );
}

#[test]
fn keys_cannot_escape_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let t = DirTransport::new(tmp.path().join("d"));
    for key in ["../x", "a/b", "", ".hidden", "a..b", "sp ace", "nl\n"] {
        let e = t.set(key, b"x").unwrap_err();
        assert_eq!(e.stage, Stage::Transport, "{key:?}");
        assert!(t.get(key).is_err(), "{key:?}");
    }
    assert!(!tmp.path().join("x").exists());
}

#[test]
fn read_all_follows_cloud_init_decoding() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        &d.join("guestinfo.metadata"),
        b"instance-id: vm-1\nlocal-hostname: vm-1\n\n",
    );
    write(
        &d.join("guestinfo.userdata"),
        format!("{}\n", b64(b"## template: jinja\n#cloud-config\n")).as_bytes(),
    );
    write(&d.join("guestinfo.userdata.encoding"), b"base64\n");
    write(&d.join("guestinfo.vendordata"), b"---\n");
    write(&d.join("guestinfo.vendordata.encoding"), b"gzip");
    let raw = read_all(&DirTransport::new(d)).unwrap();
    assert_eq!(
        raw.metadata.unwrap().text,
        "instance-id: vm-1\nlocal-hostname: vm-1"
    );
    assert_eq!(
        raw.userdata.unwrap().text,
        "## template: jinja\n#cloud-config\n"
    );
    assert_eq!(raw.vendordata, None);
}

#[test]
fn read_all_reports_unknown_encoding_warnings_and_decode_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(&d.join("guestinfo.userdata"), b"#cloud-config\n");
    write(&d.join("guestinfo.userdata.encoding"), b"gzip");
    let raw = read_all(&DirTransport::new(d)).unwrap();
    assert_eq!(raw.userdata.as_ref().unwrap().text, "#cloud-config");
    let w = raw.warnings();
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("guestinfo.userdata.encoding"), "{w:?}");
    write(&d.join("guestinfo.metadata"), b"QUJDQ");
    write(&d.join("guestinfo.metadata.encoding"), b"b64");
    let e = read_all(&DirTransport::new(d)).unwrap_err();
    assert_eq!(
        (e.stage, e.place.as_str()),
        (Stage::Decode, "guestinfo.metadata")
    );
}

// ---- nocloud ----

#[test]
fn nocloud_reads_seed_files_verbatim_and_never_encodings() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(&d.join("meta-data"), b"instance-id: iid-1\n");
    write(&d.join("user-data"), b"#cloud-config\nruncmd: []\n\n");
    let t = NoCloudTransport::new(d);
    assert_eq!(t.name(), "nocloud");
    assert_eq!(
        t.get("metadata").unwrap().as_deref(),
        Some(&b"instance-id: iid-1\n"[..])
    );
    assert_eq!(t.get("vendordata").unwrap(), None);
    write(&d.join("guestinfo.userdata.encoding"), b"base64");
    assert_eq!(t.get("userdata.encoding").unwrap(), None);
    let raw = read_all(&t).unwrap();
    assert_eq!(raw.userdata.unwrap().text, "#cloud-config\nruncmd: []\n\n");
    assert_eq!(raw.metadata.unwrap().text, "instance-id: iid-1\n");
    // Publishing never touches the seed.
    t.set("userdata", b"---").unwrap();
    t.set("nodeagent.status", b"{}").unwrap();
    assert_eq!(
        fs::read(d.join("user-data")).unwrap(),
        b"#cloud-config\nruncmd: []\n\n"
    );
    assert_eq!(fs::read(d.join("nodeagent.userdata")).unwrap(), b"---");
    assert_eq!(
        t.get("nodeagent.status").unwrap().as_deref(),
        Some(&b"{}"[..])
    );
}

// ---- fwcfg ----

fn fwcfg(root: &Path) -> FwCfgTransport {
    let mut t = FwCfgTransport::new(root.join("by_name"), root.join("port"));
    t.timeout = Duration::from_millis(300);
    t
}

#[test]
fn fwcfg_reads_raw_files_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let t = fwcfg(tmp.path());
    write(
        &tmp.path().join("by_name/opt/guestinfo.metadata/raw"),
        b"instance-id: q1\n",
    );
    assert_eq!(t.name(), "fwcfg");
    assert_eq!(
        t.get("metadata").unwrap().as_deref(),
        Some(&b"instance-id: q1\n"[..])
    );
    assert_eq!(t.get("userdata").unwrap(), None);
    assert_eq!(t.get("metadata.encoding").unwrap(), None);
}

/// A scratch `by_name` tree, its transport, and the (empty) entry directory of `guestinfo.KEY`.
fn fwcfg_entry(key: &str) -> (tempfile::TempDir, FwCfgTransport, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let t = fwcfg(tmp.path());
    let entry = tmp.path().join(format!("by_name/opt/guestinfo.{key}"));
    fs::create_dir_all(&entry).unwrap();
    (tmp, t, entry)
}

/// The kernel's `size` beside `raw` says how much to read: what it counts is the value, a
/// `size` that does not parse leaves the whole file, and a size over the limit is refused
/// without reading.
#[test]
fn fwcfg_reads_as_much_as_the_entry_size_says() {
    let (_tmp, t, entry) = fwcfg_entry("userdata");
    write(&entry.join("raw"), b"hello world");
    for (size, want) in [
        ("11\n", &b"hello world"[..]),
        ("5\n", b"hello"),
        ("64\n", b"hello world"),
        ("eleven\n", b"hello world"),
    ] {
        write(&entry.join("size"), size.as_bytes());
        assert_eq!(
            t.get("userdata").unwrap().as_deref(),
            Some(want),
            "size {size:?}"
        );
    }
    let too_big = libnodeagent::source::transport::MAX_RAW_VALUE_BYTES + 1;
    write(&entry.join("size"), format!("{too_big}\n").as_bytes());
    let e = t.get("userdata").unwrap_err();
    assert_eq!(e.place, "guestinfo.userdata");
    assert!(e.message.contains("over the limit"), "{e}");
    std::fs::remove_file(entry.join("raw")).unwrap();
    write(&entry.join("size"), b"11\n");
    assert_eq!(t.get("userdata").unwrap(), None);
}

/// Reading to the end is what costs on fw_cfg (every read re-reads the entry from its start),
/// so a sized read stops at the size (`confine::read_prefix`: a buffer of the size, never a
/// read past it; `fwcfg_reads_as_much_as_the_entry_size_says` checks what it returns). A
/// FIFO in place of `raw` (not the kernel's file) is refused at once, never waited on: the
/// seed reader examines what a name is before it opens it.
#[test]
fn fwcfg_raw_that_is_a_fifo_is_refused_without_waiting() {
    let (_tmp, t, entry) = fwcfg_entry("metadata");
    write(&entry.join("size"), b"16\n");
    let raw = entry.join("raw");
    let c = std::ffi::CString::new(raw.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let started = std::time::Instant::now();
    let e = t.get("metadata").unwrap_err();
    let waited = started.elapsed();
    assert_eq!(e.place, "guestinfo.metadata");
    assert!(e.message.contains("a FIFO, not a regular file"), "{e}");
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
}

#[test]
fn fwcfg_set_writes_one_compact_json_line_per_value() {
    let tmp = tempfile::tempdir().unwrap();
    let t = fwcfg(tmp.path());
    fs::write(tmp.path().join("port"), b"").unwrap();
    t.set(
        "nodeagent.status",
        b"{\n  \"v\": 1,\n  \"phase\": \"reading\"\n}",
    )
    .unwrap();
    t.set("local-ipv4", b"10.0.0.5").unwrap();
    t.set("userdata.encoding", b" ").unwrap();
    let out = fs::read_to_string(tmp.path().join("port")).unwrap();
    assert_eq!(
        out,
        "{\"v\":1,\"phase\":\"reading\"}\n{\"key\":\"local-ipv4\",\"value\":\"10.0.0.5\"}\n{\"key\":\"userdata.encoding\",\"value\":\" \"}\n"
    );
    // Status must be JSON and fit MAX_STATUS_BYTES; nothing is written otherwise.
    assert!(t.set("nodeagent.status", b"not json").is_err());
    let big = format!(
        "{{\"e\":\"{}\"}}",
        "x".repeat(libnodeagent::base::limits::MAX_STATUS_BYTES)
    );
    assert!(
        t.set("nodeagent.status", big.as_bytes())
            .unwrap_err()
            .message
            .contains("MAX_STATUS_BYTES")
    );
    assert!(t.set("local-ipv4", b"\xff").is_err());
    assert_eq!(fs::read_to_string(tmp.path().join("port")).unwrap(), out);
}

#[test]
fn fwcfg_set_reaches_a_fifo_reader_and_times_out_without_one() {
    let tmp = tempfile::tempdir().unwrap();
    let t = fwcfg(tmp.path());
    let port = tmp.path().join("port");
    nix::unistd::mkfifo(&port, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // No reader: fails after the timeout instead of blocking forever.
    let start = Instant::now();
    let e = t.set("nodeagent.status", b"{\"v\":1}").unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(e.message.contains("port"), "{e}");
    // With a reader.
    let p = port.clone();
    let reader = std::thread::spawn(move || fs::read_to_string(p).unwrap());
    let t2 = FwCfgTransport {
        timeout: Duration::from_secs(5),
        ..fwcfg(tmp.path())
    };
    t2.set("nodeagent.status", b"{\"v\":1,\"phase\":\"done\"}")
        .unwrap();
    drop(t2);
    assert_eq!(reader.join().unwrap(), "{\"v\":1,\"phase\":\"done\"}\n");
}

// ---- from_spec ----

#[test]
fn from_spec_parses_every_form_and_rejects_others() {
    assert_eq!(from_spec("vmware").unwrap().name(), "vmware");
    assert_eq!(from_spec("fwcfg").unwrap().name(), "fwcfg");
    assert_eq!(from_spec("ovf").unwrap().name(), "ovf");
    assert_eq!(from_spec("dir:/tmp/x").unwrap().name(), "dir");
    assert_eq!(
        from_spec("nocloud:/var/lib/cloud/seed/nocloud")
            .unwrap()
            .name(),
        "nocloud"
    );
    for bad in [
        "", "vmware:", "dir", "dir:", "nocloud:", "ovf:", "OVF", "VMWARE", "fwcfg:/x", "envvar",
    ] {
        let e = from_spec(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert_eq!(e.stage, Stage::Usage, "{bad:?}");
        assert!(
            e.message.contains("dir:PATH") && e.message.contains("nocloud:PATH"),
            "{e}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = from_spec(&format!("dir:{}", tmp.path().display())).unwrap();
    t.set("x", b"1").unwrap();
    assert!(tmp.path().join("guestinfo.x").exists());
}

// ---- fake VMware tools ----

struct FakeTools {
    _tmp: tempfile::TempDir,
    bin: PathBuf,
    data: PathBuf,
    log: PathBuf,
    pidfile: PathBuf,
}

/// `modes`: (tool name, mode) where mode is `ok`, `denied`, `hang` or `secret-error`.
fn fake_tools(modes: &[(&str, &str)]) -> FakeTools {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    let data = tmp.path().join("data");
    let log = tmp.path().join("calls.log");
    let pidfile = tmp.path().join("sleeper.pid");
    fs::create_dir_all(&bin).unwrap();
    fs::create_dir_all(&data).unwrap();
    for (tool, mode) in modes {
        let script = format!(
            r#"#!/bin/sh
# fake {tool}: records its argv (NUL-separated, records end with \001) and answers like the real one
printf '%s\0' "{tool}" "$@" >> '{log}'; printf '\001' >> '{log}'
[ "$1" = "--cmd" ] && shift
case "{mode}" in
  denied) echo "Permission denied" >&2; exit 1 ;;
  secret-error) echo "failed: --token abcdef.0123456789abcdef" >&2; exit 1 ;;
  hang) sleep 30 & echo $! > '{pidfile}'; wait; exit 0 ;;
  flood) head -c 40000000 /dev/zero; exit 0 ;;
esac
case "$1" in
  "info-get guestinfo."*)
    k="${{1#info-get guestinfo.}}"
    if [ -f '{data}'/"$k" ]; then cat '{data}'/"$k"; else echo "No value found" >&2; exit 1; fi ;;
  "info-set guestinfo."*) exit 0 ;;
  *) echo "Unknown command" >&2; exit 1 ;;
esac
"#,
            log = log.display(),
            data = data.display(),
            pidfile = pidfile.display()
        );
        let p = bin.join(tool);
        fs::write(&p, script).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    FakeTools {
        _tmp: tmp,
        bin,
        data,
        log,
        pidfile,
    }
}

impl FakeTools {
    fn transport(&self) -> VmwareTransport {
        VmwareTransport::with_search_path(Some(self.bin.as_os_str()))
    }
    fn put(&self, key: &str, v: &[u8]) {
        fs::write(self.data.join(key), v).unwrap();
    }
    /// Every call so far: the tool name followed by its exact argv.
    fn calls(&self) -> Vec<Vec<String>> {
        let raw = fs::read(&self.log).unwrap_or_default();
        raw.split(|&b| b == 1)
            .filter(|r| !r.is_empty())
            .map(|r| {
                r.split(|&b| b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .collect()
    }
}

fn call(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

#[test]
fn vmware_reads_with_rpctool_one_argument_and_no_value_found_is_absent() {
    let f = fake_tools(&[("vmware-rpctool", "ok"), ("vmtoolsd", "ok")]);
    f.put("metadata", b"instance-id: vm-7\n");
    let t = f.transport();
    assert_eq!(
        t.get("metadata").unwrap().as_deref(),
        Some(&b"instance-id: vm-7\n"[..])
    );
    assert_eq!(t.get("userdata").unwrap(), None);
    assert_eq!(
        f.calls(),
        vec![
            call(&["vmware-rpctool", "info-get guestinfo.metadata"]),
            call(&["vmware-rpctool", "info-get guestinfo.userdata"])
        ]
    );
}

#[test]
fn vmware_read_all_uses_cloud_init_rpc_order() {
    let f = fake_tools(&[("vmware-rpctool", "ok")]);
    f.put("metadata", b"instance-id: vm-7\n");
    f.put("metadata.encoding", b"\n");
    f.put("userdata", b"---");
    f.put("userdata.encoding", b"base64");
    f.put("vendordata", b64(b"#cloud-config\n").as_bytes());
    f.put("vendordata.encoding", b"b64\n");
    let raw = read_all(&f.transport()).unwrap();
    assert_eq!(raw.metadata.unwrap().text, "instance-id: vm-7");
    assert_eq!(raw.userdata, None);
    assert_eq!(raw.vendordata.unwrap().text, "#cloud-config\n");
    let keys: Vec<String> = f.calls().into_iter().map(|c| c[1].clone()).collect();
    // userdata is `---` (redacted), so its encoding is never asked for.
    assert_eq!(
        keys,
        [
            "info-get guestinfo.metadata",
            "info-get guestinfo.metadata.encoding",
            "info-get guestinfo.userdata",
            "info-get guestinfo.vendordata",
            "info-get guestinfo.vendordata.encoding"
        ]
    );
}

#[test]
fn vmware_permission_denied_falls_back_to_vmtoolsd_and_stays_there() {
    let f = fake_tools(&[("vmware-rpctool", "denied"), ("vmtoolsd", "ok")]);
    f.put("metadata", b"m");
    let t = f.transport();
    assert_eq!(t.get("metadata").unwrap().as_deref(), Some(&b"m"[..]));
    assert_eq!(t.get("userdata").unwrap(), None);
    t.set("local-ipv4", b"10.1.2.3").unwrap();
    assert_eq!(
        f.calls(),
        vec![
            call(&["vmware-rpctool", "info-get guestinfo.metadata"]),
            call(&["vmtoolsd", "--cmd", "info-get guestinfo.metadata"]),
            call(&["vmtoolsd", "--cmd", "info-get guestinfo.userdata"]),
            call(&[
                "vmtoolsd",
                "--cmd",
                "info-set guestinfo.local-ipv4 10.1.2.3"
            ]),
        ]
    );
}

#[test]
fn vmware_failure_without_fallback_is_an_error_with_the_tool_stderr() {
    let f = fake_tools(&[("vmware-rpctool", "denied")]);
    let e = f.transport().get("metadata").unwrap_err();
    assert_eq!(
        (e.stage, e.place.as_str()),
        (Stage::Transport, "guestinfo.metadata")
    );
    assert!(
        e.message.contains("vmware-rpctool") && e.message.contains("Permission denied"),
        "{e}"
    );
    // Both tools failing: both reasons, vmtoolsd's last.
    let f = fake_tools(&[("vmware-rpctool", "denied"), ("vmtoolsd", "secret-error")]);
    let e = f.transport().get("userdata").unwrap_err();
    assert!(
        e.message.contains("Permission denied") && e.message.contains("vmtoolsd"),
        "{e}"
    );
    assert!(
        !e.message.contains("abcdef.0123456789abcdef"),
        "token leaked: {e}"
    );
    assert!(e.message.contains("<redacted>"), "{e}");
}

#[test]
fn vmware_only_vmtoolsd_is_used_directly() {
    let f = fake_tools(&[("vmtoolsd", "ok")]);
    f.put("userdata", b"u");
    assert_eq!(
        f.transport().get("userdata").unwrap().as_deref(),
        Some(&b"u"[..])
    );
    assert_eq!(
        f.calls(),
        vec![call(&["vmtoolsd", "--cmd", "info-get guestinfo.userdata"])]
    );
}

#[test]
fn vmware_without_tools_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    // A non-executable file with the right name does not count.
    fs::write(tmp.path().join("vmware-rpctool"), "#!/bin/sh\n").unwrap();
    let t = VmwareTransport::with_search_path(Some(tmp.path().as_os_str()));
    assert!(!t.has_tool());
    let e = t.get("metadata").unwrap_err();
    assert!(
        e.message.contains("vmware-rpctool") && e.message.contains("vmtoolsd"),
        "{e}"
    );
    assert!(!VmwareTransport::with_search_path(None).has_tool());
}

#[test]
fn vmware_set_passes_key_and_value_as_one_argument_and_empty_as_one_space() {
    let f = fake_tools(&[("vmware-rpctool", "ok")]);
    let t = f.transport();
    t.set("userdata", b"---").unwrap();
    t.set("userdata.encoding", b"").unwrap();
    t.set("nodeagent.status", b"{\"v\":1,\"phase\":\"done\"}")
        .unwrap();
    assert_eq!(
        f.calls(),
        vec![
            call(&["vmware-rpctool", "info-set guestinfo.userdata ---"]),
            call(&["vmware-rpctool", "info-set guestinfo.userdata.encoding  "]),
            call(&[
                "vmware-rpctool",
                "info-set guestinfo.nodeagent.status {\"v\":1,\"phase\":\"done\"}"
            ]),
        ]
    );
    assert!(t.set("x", b"a\0b").is_err());
}

fn process_gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie waiting for its (re)parent to reap it is dead too.
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn vmware_timeout_kills_the_helper_and_its_children() {
    let f = fake_tools(&[("vmware-rpctool", "hang")]);
    let t = f.transport().with_timeout(Duration::from_millis(400));
    let start = Instant::now();
    let e = t.get("metadata").unwrap_err();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(e.message.contains("timed out after 400 ms"), "{e}");
    let pid: i32 = fs::read_to_string(&f.pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while !process_gone(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(process_gone(pid), "sleep {pid} survived the timeout kill");
}

// ---- detection ----

fn order(specs: &[&str]) -> Vec<String> {
    specs.iter().map(|s| s.to_string()).collect()
}

const DEFAULT: &[&str] = &["vmware", "fwcfg", "nocloud:/var/lib/cloud/seed/nocloud"];

/// A VMware guest (DMI product) with `vmware-rpctool` and a cloud-config userdata.
fn vmware_with_userdata() -> (FakeTools, tempfile::TempDir) {
    let f = fake_tools(&[("vmware-rpctool", "ok")]);
    f.put("userdata", b"#cloud-config\n");
    let root = tempfile::tempdir().unwrap();
    write(
        &root.path().join("sys/class/dmi/id/product_name"),
        b"VMware7,1\n",
    );
    (f, root)
}

#[test]
fn detect_picks_vmware_on_vmware_dmi_with_a_tool() {
    let (f, root) = vmware_with_userdata();
    let (t, log) = detect_with_path(&order(DEFAULT), root.path(), Some(f.bin.as_os_str())).unwrap();
    assert_eq!(t.name(), "vmware");
    assert_eq!(
        log,
        vec!["vmware: selected: guestinfo.userdata present".to_string()]
    );
}

/// Detection reads metadata (and userdata when metadata is absent); the run's read right after
/// gets those values from detection, one RPC each, and a key set in between is read again.
#[test]
fn a_value_detection_read_is_not_read_from_the_platform_twice() {
    let (f, root) = vmware_with_userdata();
    let (t, _) = detect_with_path(&order(DEFAULT), root.path(), Some(f.bin.as_os_str())).unwrap();
    let raw = read_all(t.as_ref()).unwrap();
    assert!(raw.metadata.is_none());
    // guestinfo values are right-stripped as cloud-init does.
    assert_eq!(raw.userdata.unwrap().text, "#cloud-config");
    let gets = |key: &str| {
        let rpc = format!("info-get guestinfo.{key}");
        f.calls().iter().filter(|c| c[1] == rpc).count()
    };
    assert_eq!(
        (gets("metadata"), gets("userdata")),
        (1, 1),
        "{:?}",
        f.calls()
    );
    // Handed out once: a later read, or one after a set, asks the platform.
    t.get("userdata").unwrap();
    assert_eq!(gets("userdata"), 2);
    let (t, _) = detect_with_path(&order(DEFAULT), root.path(), Some(f.bin.as_os_str())).unwrap();
    t.set("userdata", b"---").unwrap();
    t.get("userdata").unwrap();
    assert_eq!(
        gets("userdata"),
        4,
        "read again after the set: {:?}",
        f.calls()
    );
}

#[test]
fn detect_skips_vmware_off_vmware_and_without_tools_and_logs_why() {
    let f = fake_tools(&[("vmware-rpctool", "ok")]);
    f.put("metadata", b"instance-id: x");
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    write(
        &r.join("sys/class/dmi/id/product_name"),
        b"Standard PC (Q35 + ICH9, 2009)\n",
    );
    write(
        &r.join("sys/firmware/qemu_fw_cfg/by_name/opt/guestinfo.metadata/raw"),
        b"instance-id: q\n",
    );
    let (t, log) = detect_with_path(&order(DEFAULT), r, Some(f.bin.as_os_str())).unwrap();
    assert_eq!(t.name(), "fwcfg");
    assert_eq!(
        t.get("metadata").unwrap().as_deref(),
        Some(&b"instance-id: q\n"[..])
    );
    assert!(
        log[0].starts_with("vmware: skipped") && log[0].contains("Standard PC"),
        "{log:?}"
    );
    assert_eq!(log[1], "fwcfg: selected: guestinfo.metadata present");
    assert!(f.calls().is_empty(), "no RPC off VMware");
    // VMware DMI but no tool on the path.
    write(
        &r.join("sys/class/dmi/id/product_name"),
        b"VMware Virtual Platform\n",
    );
    let empty = tempfile::tempdir().unwrap();
    let (_, log) = detect_with_path(&order(DEFAULT), r, Some(empty.path().as_os_str())).unwrap();
    assert!(
        log[0].contains("neither vmware-rpctool nor vmtoolsd"),
        "{log:?}"
    );
}

#[test]
fn detect_treats_redacted_values_as_absent_and_falls_through_to_nocloud() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    write(
        &r.join("sys/firmware/qemu_fw_cfg/by_name/opt/guestinfo.metadata/raw"),
        b"---\n",
    );
    write(
        &r.join("sys/firmware/qemu_fw_cfg/by_name/opt/guestinfo.userdata/raw"),
        b"  \n",
    );
    write(
        &r.join("var/lib/cloud/seed/nocloud/meta-data"),
        b"instance-id: n1\n",
    );
    write(
        &r.join("var/lib/cloud/seed/nocloud/user-data"),
        b"#cloud-config\n",
    );
    let (t, log) = detect_with_path(&order(DEFAULT), r, None).unwrap();
    assert_eq!(t.name(), "nocloud");
    assert_eq!(
        read_all(t.as_ref()).unwrap().metadata.unwrap().text,
        "instance-id: n1\n"
    );
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[1], "fwcfg: skipped: no metadata or userdata");
    assert_eq!(
        log[2],
        "nocloud:/var/lib/cloud/seed/nocloud: selected: guestinfo.metadata present"
    );
}

#[test]
fn detect_without_data_fails_listing_everything_tried() {
    let root = tempfile::tempdir().unwrap();
    let e = detect_with_path(
        &order(DEFAULT),
        root.path(),
        Some(OsStr::new("/nonexistent")),
    )
    .err()
    .unwrap();
    assert_eq!(e.stage, Stage::Transport);
    for part in [
        "vmware: skipped",
        "fwcfg: skipped",
        "nocloud:/var/lib/cloud/seed/nocloud: skipped",
    ] {
        assert!(e.message.contains(part), "{e}");
    }
    let e = detect_with_path(&order(&["fwcfg", "floppy"]), root.path(), None)
        .err()
        .unwrap();
    assert_eq!(e.stage, Stage::Usage);
    assert!(e.message.contains("floppy"), "{e}");
}

#[test]
fn detect_honours_the_given_order() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    write(
        &r.join("sys/firmware/qemu_fw_cfg/by_name/opt/guestinfo.userdata/raw"),
        b"#cloud-config\n",
    );
    write(&r.join("seed/user-data"), b"#cloud-config\n");
    write(&r.join("gi/guestinfo.metadata"), b"instance-id: d\n");
    let (t, log) = detect_with_path(&order(&["nocloud:/seed", "fwcfg"]), r, None).unwrap();
    assert_eq!((t.name(), log.len()), ("nocloud", 1));
    let (t, _) = detect_with_path(&order(&["dir:/gi", "nocloud:/seed", "fwcfg"]), r, None).unwrap();
    assert_eq!(t.name(), "dir");
    let (t, _) = detect_with_path(&order(&["fwcfg", "dir:/gi"]), r, None).unwrap();
    assert_eq!(t.name(), "fwcfg");
    // transport::detect is the same with the process PATH.
    let (t, _) = transport::detect(&order(&["fwcfg"]), r).unwrap();
    assert_eq!(t.name(), "fwcfg");
}

#[test]
fn vmware_output_over_the_raw_limit_is_refused_quickly() {
    let f = fake_tools(&[("vmware-rpctool", "flood")]);
    let start = Instant::now();
    let e = f.transport().get("userdata").unwrap_err();
    assert!(e.message.contains("MAX_RAW_VALUE_BYTES"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn redact_keys_sets_marker_then_blank_encoding_like_cloud_init() {
    let f = fake_tools(&[("vmware-rpctool", "ok")]);
    let errors = redact_keys(
        &f.transport(),
        &["userdata".to_string(), "vendordata".to_string()],
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        f.calls(),
        vec![
            call(&["vmware-rpctool", "info-set guestinfo.userdata ---"]),
            call(&["vmware-rpctool", "info-set guestinfo.userdata.encoding  "]),
            call(&["vmware-rpctool", "info-set guestinfo.vendordata ---"]),
            call(&["vmware-rpctool", "info-set guestinfo.vendordata.encoding  "]),
        ]
    );
    // Failures are collected, and every key is still attempted.
    let f = fake_tools(&[("vmware-rpctool", "denied")]);
    let errors = redact_keys(
        &f.transport(),
        &["userdata".to_string(), "metadata".to_string()],
    );
    assert_eq!(errors.len(), 4);
    assert_eq!(f.calls().len(), 4);
    // After redaction through dir, the next read finds nothing (A.7: later boots see no data).
    let tmp = tempfile::tempdir().unwrap();
    let t = DirTransport::new(tmp.path());
    t.set("userdata", b64(b"#cloud-config\n").as_bytes())
        .unwrap();
    t.set("userdata.encoding", b"base64").unwrap();
    assert!(read_all(&t).unwrap().userdata.is_some());
    assert!(redact_keys(&t, &["userdata".to_string()]).is_empty());
    assert_eq!(read_all(&t).unwrap().userdata, None);
}

// ---- real CAPV metadata and CABPK userdata through every encoding ----

fn corpus_files() -> Vec<(&'static str, PathBuf)> {
    let base = Path::new(prereq::CORPUS).join("capi");
    let mut out = Vec::new();
    for (key, dir) in [
        ("metadata", "capv/metadata-golden-head"),
        ("metadata", "capv/metadata-golden-v1.10.0"),
        ("userdata", "cabpk/rendered"),
        ("userdata", "issues"),
    ] {
        let mut files: Vec<_> = fs::read_dir(base.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|p| (key, p)));
    }
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn corpus_values_decode_exactly_through_dir_and_vmware() {
    if !prereq::corpus_present() {
        return;
    }
    let files = corpus_files();
    assert!(files.len() >= 29, "corpus moved? {}", files.len());
    let f = fake_tools(&[("vmware-rpctool", "ok")]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = DirTransport::new(tmp.path());
    for (i, (key, path)) in files.iter().enumerate() {
        // Spawning the fake tool is slow: every file through dir, every fifth through vmware too.
        let via_vmware = i % 5 == 0 || path.to_string_lossy().contains("cabpk");
        let content = fs::read_to_string(path).unwrap();
        // Plain values lose trailing whitespace (cloud-init rstrip); encoded ones are exact.
        let plain_expected = content
            .trim_end_matches(|c: char| c.is_whitespace())
            .to_string();
        let wrapped: String = b64(content.as_bytes())
            .as_bytes()
            .chunks(76)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("", content.clone().into_bytes(), plain_expected.as_str()),
            (
                "base64",
                b64(content.as_bytes()).into_bytes(),
                content.as_str(),
            ),
            ("b64", wrapped.into_bytes(), content.as_str()),
            (
                "gzip+base64",
                b64(&gzip(content.as_bytes())).into_bytes(),
                content.as_str(),
            ),
            (
                "gz+b64",
                b64(content.as_bytes()).into_bytes(),
                content.as_str(),
            ),
        ];
        for (enc, value, expected) in cases {
            for k in ["metadata", "userdata"] {
                let _ = fs::remove_file(tmp.path().join(format!("guestinfo.{k}")));
                let _ = fs::remove_file(f.data.join(k));
            }
            // Plain writes: `set` (fsync'd, atomic) is tested above and slow on a busy disk.
            write(&tmp.path().join(format!("guestinfo.{key}")), &value);
            write(
                &tmp.path().join(format!("guestinfo.{key}.encoding")),
                enc.as_bytes(),
            );
            // The real tool prints the value followed by a newline.
            let mut printed = value.clone();
            printed.push(b'\n');
            f.put(key, &printed);
            f.put(&format!("{key}.encoding"), format!("{enc}\n").as_bytes());
            let vm = f.transport();
            let transports: Vec<&dyn Transport> = if via_vmware {
                vec![&dir, &vm]
            } else {
                vec![&dir]
            };
            for t in transports {
                let raw = read_all(t)
                    .unwrap_or_else(|e| panic!("{} {enc:?} via {}: {e}", path.display(), t.name()));
                let got = if *key == "metadata" {
                    raw.metadata
                } else {
                    raw.userdata
                };
                let got = got.unwrap_or_else(|| {
                    panic!("{} {enc:?} via {}: absent", path.display(), t.name())
                });
                assert!(
                    got.text == expected,
                    "{} {enc:?} via {}: decoded text differs",
                    path.display(),
                    t.name()
                );
                assert!(got.warnings.is_empty(), "{:?}", got.warnings);
            }
        }
    }
}

/// Benchmark, not a timed test (BENCHMARKS.md "decode and transports"): cost of one
/// vmware `get` with `/bin/echo` standing in for a (tiny, compiled) vmware-rpctool.
/// `cargo test -p nodeagent --test transport bench_vmware_get -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_vmware_get() {
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/bin/echo", tmp.path().join("vmware-rpctool")).unwrap();
    let t = VmwareTransport::with_search_path(Some(tmp.path().as_os_str()));
    assert_eq!(
        t.get("metadata").unwrap().as_deref(),
        Some(&b"info-get guestinfo.metadata\n"[..])
    );
    let runs = 300;
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(t.get("metadata").unwrap());
            start.elapsed()
        })
        .collect();
    times.sort();
    println!(
        "vmware get via /bin/echo: median {:?}, p90 {:?}, min {:?} over {runs} calls",
        times[runs / 2],
        times[runs * 9 / 10],
        times[0]
    );
}
