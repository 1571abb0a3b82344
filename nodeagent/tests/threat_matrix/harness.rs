//! A trial node for the matrix: a root R, a directory beside it that a link out of R would
//! reach ("outside", holding a complete hostile seed), and the agent run on R as a bounded
//! child: its address space capped (RLIMIT_AS), its peak memory and CPU time measured, killed
//! after a deadline. Outcomes only: how it ended, what it cost, what changed where.

use crate::hostile_common;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Address space of the agent (and its measuring parent): an allocation past it aborts the
/// child, not the machine.
pub const ADDRESS_SPACE_BYTES: u64 = 1 << 30;
/// CPU time a refusal or a small run may take; a hang is caught by the kill below.
pub const CPU_BOUND: Duration = Duration::from_secs(10);
/// Wall time after which the agent is killed: far past every bound, so a hang fails.
pub const KILL_AFTER: Duration = Duration::from_secs(90);

pub const FACTS: &str = "hostname: node1\nlocal-ipv4: 10.0.0.5\nnetwork-renderer: networkd\n";
/// The seed inside the root: applying it writes `/etc/inside-applied`.
pub const INSIDE_MD: &str = "instance-id: i-inside\nlocal-hostname: node1\n";
pub const INSIDE_UD: &str =
    "#cloud-config\nwrite_files:\n- path: /etc/inside-applied\n  content: inside\n";
/// The seed outside the root: applying it writes `/etc/outside-applied` and takes the
/// instance-id `i-outside`.
pub const OUTSIDE_MD: &str = "instance-id: i-outside\nlocal-hostname: pwned\n";
pub const OUTSIDE_UD: &str =
    "#cloud-config\nwrite_files:\n- path: /etc/outside-applied\n  content: outside\n";

pub struct Node {
    t: tempfile::TempDir,
    pub root: PathBuf,
    /// Beside the root: `victim` and a hostile seed in `seed/` (NoCloud names) and `gi/`
    /// (`dir:` names). Must stay exactly as it is.
    pub outside: PathBuf,
    pub facts: PathBuf,
}

/// How a bounded agent run ended and what it cost.
#[derive(Debug)]
pub struct Outcome {
    /// Exit code; `None` when a signal ended it (an abort on the address-space cap).
    pub code: Option<i32>,
    pub killed: bool,
    pub max_rss_kib: u64,
    pub cpu: Duration,
    pub stderr: String,
}

impl Outcome {
    /// Ended by itself with an exit code, within the CPU bound and under the memory bound.
    pub fn bounded(&self) -> &Self {
        assert!(
            !self.killed,
            "killed after {KILL_AFTER:?}: it hung\n{}",
            self.stderr
        );
        assert!(
            self.code.is_some(),
            "ended by a signal (an abort?)\n{}",
            self.stderr
        );
        assert!(
            self.cpu < CPU_BOUND,
            "{:?} of CPU\n{}",
            self.cpu,
            self.stderr
        );
        assert!(
            self.max_rss_kib < hostile_common::PEAK_RSS_BOUND_KIB,
            "peak RSS {} KiB\n{}",
            self.max_rss_kib,
            self.stderr
        );
        self
    }

    /// [`Outcome::bounded`] and exit 1: a refusal.
    pub fn refused(&self) -> &Self {
        self.bounded();
        assert_eq!(self.code, Some(1), "{}", self.stderr);
        self
    }

    /// [`Outcome::bounded`] and exit 0.
    pub fn succeeded(&self) -> &Self {
        self.bounded();
        assert_eq!(self.code, Some(0), "{}", self.stderr);
        self
    }
}

/// Type, mode, content or link target of every entry under a directory.
pub type Snapshot = BTreeMap<PathBuf, (String, u32, Vec<u8>)>;

pub fn snapshot(dir: &Path) -> Snapshot {
    fn walk(base: &Path, dir: &Path, out: &mut Snapshot) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(base).unwrap().to_path_buf();
            let mode = m.permissions().mode();
            let ft = m.file_type();
            if ft.is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(
                    rel,
                    ("link".into(), mode, t.into_os_string().into_encoded_bytes()),
                );
            } else if ft.is_dir() {
                out.insert(rel, ("dir".into(), mode, Vec::new()));
                walk(base, &p, out);
            } else if ft.is_file() {
                let body = std::fs::read(&p).unwrap();
                // Not its link count: a name of it inside the root replaced by the agent
                // (as it must be) takes one link away, and the file is unchanged.
                out.insert(rel, ("file".into(), mode, body));
            } else {
                out.insert(rel, ("special".into(), mode, Vec::new()));
            }
        }
    }
    let mut out = Snapshot::new();
    walk(dir, dir, &mut out);
    out
}

impl Node {
    /// R seeded like a small image (passwd, group, hostname), the hostile seed outside it.
    pub fn new() -> Node {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("r");
        let outside = t.path().join("outside");
        for d in ["etc", "run", "var/log", "var/lib"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
        std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
        std::fs::write(root.join("etc/hostname"), "image\n").unwrap();
        for d in ["seed", "gi"] {
            std::fs::create_dir_all(outside.join(d)).unwrap();
        }
        std::fs::write(outside.join("victim"), "untouched\n").unwrap();
        std::fs::write(outside.join("seed/meta-data"), OUTSIDE_MD).unwrap();
        std::fs::write(outside.join("seed/user-data"), OUTSIDE_UD).unwrap();
        std::fs::write(outside.join("gi/guestinfo.metadata"), OUTSIDE_MD).unwrap();
        std::fs::write(outside.join("gi/guestinfo.userdata"), OUTSIDE_UD).unwrap();
        let facts = t.path().join("facts.yaml");
        std::fs::write(&facts, FACTS).unwrap();
        Node {
            t,
            root,
            outside,
            facts,
        }
    }

    /// A scratch directory beside R and outside (for the test's own files).
    pub fn scratch(&self) -> PathBuf {
        let p = self.t.path().join("scratch");
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// `/etc/nodeagent/config.yaml` in R with this transport order.
    pub fn transports(&self, specs: &[&str]) {
        let list: Vec<String> = specs.iter().map(|s| format!("'{s}'")).collect();
        self.put(
            "etc/nodeagent/config.yaml",
            format!("transports: [{}]\n", list.join(", ")).as_bytes(),
        );
    }

    /// Write `rel` in R (its parents made).
    pub fn put(&self, rel: &str, data: &[u8]) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }

    /// A symlink at `rel` in R pointing at `target`.
    pub fn link(&self, rel: &str, target: impl AsRef<Path>) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    /// A FIFO at `rel` in R.
    pub fn fifo(&self, rel: &str) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    }

    /// A character device at `rel` in R (`/dev/zero`'s numbers), when the test runs as root.
    pub fn zero_device(&self, rel: &str) -> bool {
        if !nix::unistd::Uid::effective().is_root() {
            return false;
        }
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        use nix::sys::stat::{Mode, SFlag, makedev, mknod};
        mknod(
            &p,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o644),
            makedev(1, 5),
        )
        .is_ok()
    }

    /// A hard link at `rel` in R to `target` outside it.
    pub fn hard_link(&self, rel: &str, target: &Path) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::hard_link(target, p).unwrap();
    }

    /// `nodeagent run --root R --facts F` plus `extra`, bounded.
    pub fn run(&self, extra: &[&str]) -> Outcome {
        let mut args: Vec<&OsStr> = vec!["run".as_ref(), "--root".as_ref(), self.root.as_os_str()];
        args.extend(["--facts".as_ref(), self.facts.as_os_str()]);
        args.extend(extra.iter().map(OsStr::new));
        agent(&args, &[])
    }

    /// Whether the outside seed was applied (its file written, its instance-id taken).
    pub fn outside_applied(&self) -> bool {
        self.root.join("etc/outside-applied").exists()
            || std::fs::read_to_string(self.root.join("var/lib/nodeagent/instance-id"))
                .is_ok_and(|id| id.trim() == "i-outside")
    }

    /// Whether the inside seed was applied.
    pub fn inside_applied(&self) -> bool {
        self.root.join("etc/inside-applied").exists()
    }

    /// The outside directory as it is now.
    pub fn outside_now(&self) -> Snapshot {
        snapshot(&self.outside)
    }
}

/// The agent binary with `args` and extra environment, as a bounded child.
pub fn agent(args: &[&OsStr], env: &[(&str, &OsStr)]) -> Outcome {
    let bin =
        std::env::var_os("MATRIX_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_nodeagent").into());
    let mut m = hostile_common::measured(bin);
    m.command
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .env("NODEAGENT_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        m.command.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: ADDRESS_SPACE_BYTES,
                rlim_max: ADDRESS_SPACE_BYTES,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = m.run(KILL_AFTER);
    Outcome {
        code: r.output.status.code(),
        killed: r.killed,
        max_rss_kib: r.max_rss_kib,
        cpu: r.cpu,
        stderr: String::from_utf8_lossy(&r.output.stderr).into_owned(),
    }
}

/// YAML of at most `bytes` whose one anchor, aliased `copies` times, expands to `copies`
/// times its size in memory: the class-1 attack that aborted the agent on the memory limit.
pub fn alias_bomb(prefix: &str, key: &str) -> String {
    let anchor = "x".repeat(64 * 1024);
    let mut s = format!("{prefix}{key}: &a \"{anchor}\"\nbomb:\n");
    for _ in 0..5000 {
        s.push_str("- *a\n");
    }
    s
}

/// Nested flow sequences deeper than any bound.
pub fn depth_bomb() -> String {
    "[".repeat(100_000) + &"]".repeat(100_000)
}
