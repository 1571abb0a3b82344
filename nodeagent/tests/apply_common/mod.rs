//! Helpers shared by the apply tests: hand-built plans and tree snapshots.
#![allow(dead_code)]

#[path = "../prereq/mod.rs"]
pub mod prereq;

use libnodeagent::apply::{self, Options, Target};
use libnodeagent::base::state::{Journal, State};
use libnodeagent::plan::RunStage;
use libnodeagent::plan::*;
use libnodeagent::report::Reporter;
use libnodeagent::source::config::ImageConfig;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

pub fn owner(s: &str) -> Owner {
    let (u, g) = s.split_once(':').unwrap_or((s, ""));
    Owner {
        user: Some(u.to_string()),
        group: (!g.is_empty()).then(|| g.to_string()),
    }
}

pub fn file(path: &str, content: &str, own: &str, mode: u32) -> FileWrite {
    FileWrite {
        path: path.into(),
        content: Content(content.as_bytes().to_vec()),
        owner: owner(own),
        mode: Some(mode),
        append: false,
        defer: false,
        secret: path.ends_with(".key"),
        source: None,
    }
}

pub fn step(id: &str, stage: RunStage, frequency: Frequency, action: Action) -> Step {
    Step {
        id: id.into(),
        stage,
        frequency,
        action,
    }
}

pub fn wf(f: FileWrite) -> Step {
    step(
        &format!("write_files:{}", f.path),
        RunStage::Main,
        Frequency::PerInstance,
        Action::WriteFile(f),
    )
}

pub fn sh(origin: &str, script: &str, freq: Frequency) -> Step {
    step(
        origin,
        RunStage::Main,
        freq,
        Action::Command(CommandSpec {
            origin: origin.into(),
            run: Run::Shell(script.into()),
            timeout_secs: 30,
        }),
    )
}

pub fn plan(iid: &str, steps: Vec<Step>) -> Plan {
    Plan {
        version: PLAN_VERSION,
        instance_id: iid.into(),
        steps,
        warnings: vec![],
    }
}

pub fn opts(root: &Path, exec: bool, compat: bool) -> Options {
    Options {
        target: Target::new(root),
        stage: RunStage::All,
        exec,
        compat,
        config: ImageConfig::default(),
        supervisor: env!("CARGO_BIN_EXE_nodeagent").into(),
        // The crash test's agent (its harness's main thread idle) sets it on every other
        // run, so that kills hit both ways of supervising.
        fork_supervisor: std::env::var_os("NODEAGENT_TEST_FORK_SUPERVISOR").is_some(),
        ends_run: true,
        runtime: Default::default(),
    }
}

/// One run, as `nodeagent run` does it after planning, in a given boot.
pub fn run(
    root: &Path,
    p: &Plan,
    exec: bool,
    compat: bool,
    boot: &str,
) -> libnodeagent::base::error::Result<apply::Summary> {
    let st = State::open(root)?;
    st.begin_instance(&p.instance_id)?;
    let mut j = Journal::open(
        &st.instance_dir(&p.instance_id).join("journal.jsonl"),
        boot.into(),
    )?;
    let mut rep = Reporter::new(None, root, &p.instance_id);
    apply::apply(p, &opts(root, exec, compat), &mut j, &mut rep)
}

/// A minimal user database in `root`.
pub fn passwd(root: &Path) {
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\ncapv:x:1000:1000::/home/capv:/bin/bash\n",
    )
    .unwrap();
    std::fs::write(
        root.join("etc/group"),
        "root:x:0:\ncapv:x:1000:\nadm:x:4:capv\n",
    )
    .unwrap();
}

/// Everything under `dir` that matters for equality: type, mode, owner, content hash.
pub fn snapshot(dir: &Path, skip: &dyn Fn(&str) -> bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(dir, dir, skip, &mut out);
    out
}

fn walk(base: &Path, dir: &Path, skip: &dyn Fn(&str) -> bool, out: &mut BTreeMap<String, String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd {
        let e = e.unwrap();
        let p = e.path();
        let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
        if skip(&rel) {
            continue;
        }
        let m = std::fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let desc = if ft.is_symlink() {
            format!("link {}", std::fs::read_link(&p).unwrap().display())
        } else if ft.is_dir() {
            format!("dir {:o} {}:{}", m.mode() & 0o7777, m.uid(), m.gid())
        } else if ft.is_file() {
            let data = std::fs::read(&p).unwrap();
            format!(
                "file {:o} {}:{} {}",
                m.mode() & 0o7777,
                m.uid(),
                m.gid(),
                libnodeagent::apply::files::sha256_hex(&data)
            )
        } else {
            format!("other {:o} rdev {}", m.mode(), m.rdev())
        };
        out.insert(rel, desc);
        if ft.is_dir() {
            walk(base, &p, skip, out);
        }
    }
}

pub fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

pub fn ids(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid())
}

/// The debootstrap'd minimal Debian 12 rootfs with shadow's tools and sudo that
/// `tests/apply-ci` caches outside the clone and links as `target/apply-rootfs` (resolved
/// here, so overlays and `--root` see a plain directory); `None` (the caller skips, saying
/// why) when not root or not built, unless `NODEAGENT_PRIVILEGED_TESTS=1` makes that a failure.
pub fn rootfs() -> Option<std::path::PathBuf> {
    let link = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/apply-rootfs");
    let fs = std::fs::canonicalize(&link).unwrap_or(link);
    let useradd = fs.join("usr/sbin/useradd");
    prereq::privileged(&["/usr/bin/mount", useradd.to_str()?]).then_some(fs)
}

/// A throw-away writable copy of the rootfs: an overlay mount (changes land in `upper`).
pub struct Overlay {
    pub dir: tempfile::TempDir,
    pub root: std::path::PathBuf,
    pub upper: std::path::PathBuf,
}

impl Overlay {
    pub fn new(lower: &Path) -> Overlay {
        let dir = tempfile::tempdir().unwrap();
        let (root, upper, work) = (
            dir.path().join("m"),
            dir.path().join("u"),
            dir.path().join("w"),
        );
        for d in [&root, &upper, &work] {
            std::fs::create_dir(d).unwrap();
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        );
        let ok = std::process::Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(&root)
            .status()
            .unwrap();
        assert!(ok.success(), "overlay mount");
        Overlay { dir, root, upper }
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.root)
            .status();
    }
}

/// Programs the tests' commands call besides the shell's builtins.
pub const EXEC_TOOLS: &[&str] = &["/bin/sleep", "/bin/cat", "/usr/bin/env"];

/// A fresh root that `--exec` commands can run in: they run chrooted into it, as cloud-init
/// would on that node (prereq::exec_root). `None` (the caller skips, saying why) when not root.
pub fn exec_dir() -> Option<tempfile::TempDir> {
    let d = tempfile::tempdir().unwrap();
    prereq::exec_root(d.path(), EXEC_TOOLS).then_some(d)
}
