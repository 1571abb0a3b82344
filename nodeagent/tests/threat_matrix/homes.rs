//! Boundaries `home` (a directory a user other than root owns, where the agent writes on that
//! user's behalf: a deferred `write_files` entry owned by them, `~/.kube/config`,
//! `~/.ssh/authorized_keys`) and `write-files` (every path a `write_files` entry names, its
//! `append` base and its `source` file), against the matrix's attacks (matrix-homes.tsv).
//!
//! Both go through one resolver, `confine::Dir::reach`: a link is followed only where root
//! controls it (the image's `/lib -> usr/lib`, `/var/run -> /run`), never in or below a
//! directory a user other than root can change; missing directories are made with the
//! file's owner as one unit; a file read where such a user could have put it is read only
//! as a regular file with one link, within a bound. Each cell runs the real binary on a root
//! of its own and judges outcomes: exit status, a time bound, files outside the home (or the
//! root) unchanged, nothing of a root-only file copied out. The race cells' attacker is a
//! real non-root process (uid 1000, this test binary run again as that user: `attacker`).

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

const UID: u32 = 1000;
const SECRET: &str = "SECRET-ROOT-ONLY-5b1e\n";
/// Every run of the agent here ends within this (the slowest boot step here is a few ms).
const BOUND: Duration = Duration::from_secs(20);

fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

fn own(p: &Path) {
    std::os::unix::fs::lchown(p, Some(UID), Some(UID)).unwrap();
}

fn link(target: &str, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// A node's root with a local user `capv` (uid 1000) who owns their home, a root-only file
/// inside the root (`/etc/secret`) and a directory outside it (`outside`), the agent's seed.
struct Node {
    t: tempfile::TempDir,
    root: PathBuf,
    seed: PathBuf,
    facts: PathBuf,
    outside: PathBuf,
    /// The agent's TMPDIR, apart from `t` (which snapshots walk): a `single` killed before
    /// it returns leaves its reporter's scratch directory there, not in the machine's /tmp.
    tmp: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let t = tempfile::tempdir().unwrap();
        // The user's process must reach its home below this directory.
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = t.path().join("r");
        let (seed, facts, outside) = (
            t.path().join("d"),
            t.path().join("facts.yaml"),
            t.path().join("outside"),
        );
        write(
            &root.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\ncapv:x:1000:1000::/home/capv:/bin/sh\n",
        );
        write(&root.join("etc/group"), "root:x:0:\ncapv:x:1000:\n");
        write(&root.join("etc/secret"), SECRET);
        std::fs::set_permissions(
            root.join("etc/secret"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::create_dir_all(root.join("etc/kubernetes")).unwrap();
        // The agent's state goes below these (its own, not compared).
        std::fs::create_dir_all(root.join("var/lib")).unwrap();
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::create_dir_all(root.join("home/capv")).unwrap();
        own(&root.join("home/capv"));
        write(&outside.join("keep"), "outside the root\n");
        write(
            &facts,
            "hostname: node1\nlocal-ipv4: 10.0.0.5\nnetwork-renderer: networkd\n",
        );
        Node {
            t,
            root,
            seed,
            facts,
            outside,
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn home(&self) -> PathBuf {
        self.root.join("home/capv")
    }

    fn userdata(&self, text: &str) {
        write(
            &self.seed.join("guestinfo.metadata"),
            "instance-id: i-matrix\nlocal-hostname: node1\n",
        );
        write(&self.seed.join("guestinfo.userdata"), text);
    }

    /// `nodeagent single --name write_files --frequency always` on this node.
    fn command(&self) -> Command {
        let mut c = self.once();
        c.args(["--frequency", "always"]);
        c
    }

    /// `nodeagent single --name write_files`: what the journal has as done is not done again.
    fn once(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nodeagent"));
        c.args(["single", "--name", "write_files"])
            .arg("--transport")
            .arg(format!("dir:{}", self.seed.display()))
            .arg("--root")
            .arg(&self.root)
            .arg("--facts")
            .arg(&self.facts)
            .env("TMPDIR", self.tmp.path())
            .env("NODEAGENT_LOG", "error");
        c
    }

    /// The write_files module once, within [`BOUND`].
    fn single(&self) -> Output {
        let start = Instant::now();
        let o = self.command().output().unwrap();
        assert!(
            start.elapsed() < BOUND,
            "the run took {:?}",
            start.elapsed()
        );
        o
    }

    /// Every path under the test's directory except `skip` (relative to the root) and the
    /// agent's own state (its own, and cloud-init's surface it keeps: docs/cloud-init-surface.md):
    /// kind, mode, owner and content.
    fn snapshot(&self, skip: &[&str]) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        let skip: Vec<PathBuf> = skip
            .iter()
            .chain(&[
                "var/lib/nodeagent",
                "run/nodeagent",
                "run/cloud-init",
                "var/lib/cloud",
            ])
            .map(|s| self.root.join(s))
            .collect();
        let mut todo = vec![self.t.path().to_path_buf()];
        while let Some(p) = todo.pop() {
            if skip.iter().any(|s| p.starts_with(s)) {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.is_dir() {
                for e in std::fs::read_dir(&p).unwrap() {
                    todo.push(e.unwrap().path());
                }
                String::new()
            } else if m.file_type().is_symlink() {
                std::fs::read_link(&p).unwrap().display().to_string()
            } else if m.is_file() && m.len() < 1 << 20 {
                String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()
            } else {
                format!("{} bytes", m.len())
            };
            let desc = format!("{:o} {}:{} {what}", m.mode(), m.uid(), m.gid());
            out.insert(p, desc);
        }
        out
    }
}

/// Peak resident memory of the children waited for so far, in bytes.
fn children_maxrss() -> u64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    u.ru_maxrss as u64 * 1024
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Files whose content holds the root-only secret, under `dir`.
fn holding_secret(dir: &Path, except: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if m.is_file()
            && m.len() < 1 << 20
            && p != except
            && std::fs::read_to_string(&p).is_ok_and(|s| s.contains(SECRET.trim()))
        {
            found.push(p);
        }
    }
    found
}

/// Not a cell: the attacking user. Run by [`attack`] as this test binary again, as uid 1000:
/// exchanges the names of each pair in its directory (`renameat2(RENAME_EXCHANGE)`) in a
/// tight loop until its time is up or it is killed.
#[test]
#[ignore = "the race cells run it as another user"]
fn attacker() {
    let Ok(spec) = std::env::var("NODEAGENT_MATRIX_ATTACK") else {
        return;
    };
    assert_eq!(
        nix::unistd::getuid().as_raw(),
        UID,
        "the attacker runs as the user"
    );
    let mut parts = spec.split('\n');
    let dir = parts.next().unwrap();
    let secs: u64 = parts.next().unwrap().parse().unwrap();
    let pairs: Vec<(String, String)> = parts
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|c| (c[0].to_string(), c[1].to_string()))
        .collect();
    let fd = nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_RDONLY,
        nix::sys::stat::Mode::empty(),
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(secs);
    let mut swaps = 0u64;
    while Instant::now() < end {
        for (a, b) in &pairs {
            use nix::fcntl::{RenameFlags, renameat2};
            if renameat2(
                &fd,
                a.as_str(),
                &fd,
                b.as_str(),
                RenameFlags::RENAME_EXCHANGE,
            )
            .is_ok()
            {
                swaps += 1;
            }
        }
    }
    println!("attacker: {swaps} swaps");
}

/// The attacker process, as uid/gid 1000, swapping `pairs` in `dir` for `secs`.
fn attack(dir: &Path, pairs: &[(&str, &str)], secs: u64) -> Child {
    let mut spec = format!("{}\n{}", dir.display(), secs);
    for (a, b) in pairs {
        spec.push_str(&format!("\n{a}\n{b}"));
    }
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "homes::attacker",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("NODEAGENT_MATRIX_ATTACK", spec)
        .uid(UID)
        .gid(UID)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn race_secs() -> u64 {
    std::env::var("NODEAGENT_RACE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
}

/// The attacker's own count of swaps, once its time is up (it ends by itself).
fn stop(c: Child) -> u64 {
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "the attacker failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.split_once("attacker: ").map(|(_, n)| n))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

// --- home ---------------------------------------------------------------------------------

const HOME_ENTRIES: &str = "#cloud-config\nwrite_files:\n\
- path: /home/capv/.kube/config\n  owner: capv:capv\n  permissions: '0600'\n  defer: true\n  content: |\n    apiVersion: v1\n\
- path: /home/capv/.ssh/authorized_keys\n  owner: capv:capv\n  permissions: '0600'\n  defer: true\n  content: ssh-ed25519 AAAAkey capv@matrix\n";

/// Links the user planted in their home (to `/etc/kubernetes` inside the root, to a directory
/// outside it) are not followed: the run fails naming the link, before any write.
#[test]
fn cell_home_link() {
    let n = Node::new();
    let home = n.home();
    link("/etc/kubernetes", &home.join(".kube"));
    link(&n.outside.display().to_string(), &home.join(".ssh"));
    own(&home.join(".kube"));
    own(&home.join(".ssh"));
    n.userdata(&format!(
        "{HOME_ENTRIES}- path: /etc/written-first\n  content: x\n"
    ));
    let before = n.snapshot(&[]);
    let o = n.single();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("/home/capv/.kube"), "{}", stderr(&o));
    assert_eq!(n.snapshot(&[]), before, "the root or the outside changed");
}

/// A FIFO the user put where their file is appended to: refused at once, not opened for a
/// read that would block the boot; so is a FIFO named as a `source`.
#[test]
fn cell_home_special() {
    let n = Node::new();
    let kube = n.home().join(".kube");
    std::fs::create_dir(&kube).unwrap();
    own(&kube);
    nix::unistd::mkfifo(
        &kube.join("config"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    nix::unistd::mkfifo(
        &kube.join("src"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    n.userdata(
        "#cloud-config\nwrite_files:\n- path: /home/capv/.kube/config\n  owner: capv\n  append: true\n  defer: true\n  content: x\n",
    );
    let o = n.single();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    n.userdata(
        "#cloud-config\nwrite_files:\n- path: /etc/from-home\n  source: {uri: 'file:///home/capv/.kube/src'}\n  content: fallback\n",
    );
    let o = n.single();
    assert_eq!(o.status.code(), Some(2), "degraded: {}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(n.root.join("etc/from-home")).unwrap(),
        "fallback"
    );
    assert!(
        std::fs::symlink_metadata(kube.join("config"))
            .unwrap()
            .file_type()
            .is_fifo_like()
    );
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_fifo(self)
    }
}

/// Hard links to the root-only file in the user's home (what `fs.protected_hardlinks=0`
/// lets a user make): never read into a file, never written through.
#[test]
fn cell_home_hardlink() {
    let n = Node::new();
    let home = n.home();
    for name in [".bashrc", ".profile", "src"] {
        std::fs::hard_link(n.root.join("etc/secret"), home.join(name)).unwrap();
    }
    n.userdata(
        "#cloud-config\nwrite_files:\n\
- path: /home/capv/.bashrc\n  owner: capv\n  append: true\n  defer: true\n  content: extra\n\
- path: /etc/copied\n  permissions: '0644'\n  source: {uri: /home/capv/src}\n  content: fallback\n",
    );
    let o = n.single();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    n.userdata(
        "#cloud-config\nwrite_files:\n\
- path: /home/capv/.profile\n  owner: capv\n  defer: true\n  content: new profile\n\
- path: /etc/copied\n  permissions: '0644'\n  source: {uri: /home/capv/src}\n  content: fallback\n",
    );
    let o = n.single();
    assert_eq!(o.status.code(), Some(2), "degraded: {}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(n.root.join("etc/secret")).unwrap(),
        SECRET
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".profile")).unwrap(),
        "new profile"
    );
    assert_eq!(
        std::fs::read_to_string(n.root.join("etc/copied")).unwrap(),
        "fallback"
    );
    let leaked = holding_secret(&n.root, &n.root.join("etc/secret"));
    let leaked: Vec<_> = leaked
        .into_iter()
        .filter(|p| {
            std::fs::metadata(p).unwrap().ino()
                != std::fs::metadata(n.root.join("etc/secret")).unwrap().ino()
        })
        .collect();
    assert!(leaked.is_empty(), "the secret was copied: {leaked:?}");
}

/// Size and depth the user controls: a 100 GiB sparse file as the append base or the
/// source, a 300-level tree where the agent's temp chain goes. Each run ends within the
/// bound, in bounded memory, with an exit status (no crash), and writes nothing of them.
#[test]
fn cell_home_bomb() {
    let n = Node::new();
    let home = n.home();
    let big = home.join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(100 << 30)
        .unwrap();
    own(&big);
    // The temp name the agent builds a missing `~/.kube` chain under.
    let mut deep = home.join("..kube.nodeagent-tmpd");
    for _ in 0..300 {
        deep = deep.join("a");
    }
    std::fs::create_dir_all(&deep).unwrap();
    n.userdata(
        "#cloud-config\nwrite_files:\n- path: /home/capv/big\n  owner: capv\n  append: true\n  defer: true\n  content: x\n",
    );
    let o = n.single();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    n.userdata(
        "#cloud-config\nwrite_files:\n- path: /etc/from-big\n  source: {uri: /home/capv/big}\n  content: fallback\n",
    );
    let o = n.single();
    assert_eq!(o.status.code(), Some(2), "degraded: {}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(n.root.join("etc/from-big")).unwrap(),
        "fallback"
    );
    n.userdata(HOME_ENTRIES);
    let o = n.single();
    assert_eq!(
        o.status.code(),
        Some(1),
        "the tree in the way: {}",
        stderr(&o)
    );
    assert!(deep.is_dir(), "the user's tree is left alone");
    assert!(children_maxrss() < 256 << 20, "{} bytes", children_maxrss());
}

/// The user (a real uid-1000 process) swaps `~/.kube` and `~/.ssh` with links to
/// `/etc/kubernetes` and to a directory outside the root, as fast as the kernel allows,
/// while the deferred entries are written again and again: nothing is ever written outside
/// the home, and every run ends with an exit status within the bound.
#[test]
fn cell_home_race() {
    let n = Node::new();
    let home = n.home();
    for d in [".kube", ".ssh"] {
        std::fs::create_dir(home.join(d)).unwrap();
        own(&home.join(d));
    }
    link("/etc/kubernetes", &home.join(".kube-link"));
    link(&n.outside.display().to_string(), &home.join(".ssh-link"));
    own(&home.join(".kube-link"));
    own(&home.join(".ssh-link"));
    n.userdata(&HOME_ENTRIES.replace("/.kube/config", "/.kube/cache/discovery/config"));
    let before = n.snapshot(&["home/capv"]);
    let secs = race_secs();
    let attacker = attack(
        &home,
        &[(".kube", ".kube-link"), (".ssh", ".ssh-link")],
        secs,
    );
    let (mut runs, mut ok, mut refused) = (0, 0, 0);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        let o = n.single();
        runs += 1;
        match o.status.code() {
            Some(0) => ok += 1,
            Some(1) => refused += 1,
            other => panic!("run {runs} ended {other:?}: {}", stderr(&o)),
        }
        assert_eq!(
            n.snapshot(&["home/capv"]),
            before,
            "run {runs} wrote outside the home"
        );
    }
    let swaps = stop(attacker);
    eprintln!(
        "home race: {runs} runs ({ok} wrote, {refused} refused a link), {swaps} swaps by uid {UID}"
    );
    assert!(swaps > 0, "the attacker did not run");
    assert!(holding_secret(&n.outside, Path::new("")).is_empty());
}

/// The agent killed at random points while it makes `~/.kube/cache` and writes the user's
/// file, then run to the end: the home ends as one undisturbed run leaves it (directories
/// and file the user's, no temp names left), nothing outside it changed.
#[test]
fn cell_home_kill() {
    let n = Node::new();
    n.userdata(&HOME_ENTRIES.replace("/.kube/config", "/.kube/cache/discovery/config"));
    let before = n.snapshot(&["home/capv"]);
    for i in 0..30u64 {
        let mut c = n.command().spawn().unwrap();
        std::thread::sleep(Duration::from_micros(500 + (i * 7919) % 40_000));
        let _ = c.kill();
        c.wait().unwrap();
    }
    let o = n.single();
    assert!(o.status.success(), "{}", stderr(&o));
    let home = n.home();
    for p in [".kube", ".kube/cache", ".kube/cache/discovery", ".ssh"] {
        let m = std::fs::metadata(home.join(p)).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            (UID, UID, 0o755),
            "{p}"
        );
    }
    for p in [".kube/cache/discovery/config", ".ssh/authorized_keys"] {
        let m = std::fs::symlink_metadata(home.join(p)).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            (UID, UID, 0o600),
            "{p}"
        );
    }
    let left: Vec<_> = n
        .snapshot(&[])
        .into_keys()
        .filter(|p| p.to_string_lossy().contains("nodeagent-tmp"))
        .collect();
    assert!(left.is_empty(), "temp names left: {left:?}");
    assert_eq!(n.snapshot(&["home/capv"]), before);
}

// --- write-files --------------------------------------------------------------------------

/// The image's links are followed inside the root (relative `/lib -> usr/lib`, absolute
/// `/var/run -> /run`), as the node follows them; an absolute link naming a host directory
/// outside the root leads to the root's own copy of that path, never to the host's.
#[test]
fn cell_write_files_link() {
    let n = Node::new();
    let r = &n.root;
    std::fs::create_dir_all(r.join("usr/lib/modules-load.d")).unwrap();
    std::fs::create_dir_all(r.join("run")).unwrap();
    std::fs::create_dir_all(r.join("var")).unwrap();
    link("usr/lib", &r.join("lib"));
    link("/run", &r.join("var/run"));
    link(&n.outside.display().to_string(), &r.join("etc/app"));
    n.userdata(
        "#cloud-config\nwrite_files:\n\
- path: /lib/modules-load.d/k8s.conf\n  content: br_netfilter\n\
- path: /var/run/app/a/pid\n  owner: capv\n  content: '1'\n\
- path: /etc/app/escape\n  content: x\n",
    );
    let outside = n.snapshot(&["."]);
    let o = n.single();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(r.join("usr/lib/modules-load.d/k8s.conf")).unwrap(),
        "br_netfilter"
    );
    assert_eq!(
        std::fs::metadata(r.join("run/app/a")).unwrap().uid(),
        UID,
        "parents get the owner"
    );
    let inside_copy = r.join(n.outside.strip_prefix("/").unwrap()).join("escape");
    assert!(inside_copy.is_file(), "the link resolved inside the root");
    assert_eq!(n.snapshot(&["."]), outside, "outside the root changed");
}

/// A FIFO, a character device and a socket where a file is appended to or read as a source:
/// refused or replaced by the content, never opened for a blocking read.
#[test]
fn cell_write_files_special() {
    let n = Node::new();
    let r = &n.root;
    nix::unistd::mkfifo(
        &r.join("etc/fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    std::fs::create_dir_all(r.join("dev")).unwrap();
    nix::sys::stat::mknod(
        &r.join("dev/zero"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 5),
    )
    .unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(r.join("etc/sock")).unwrap();
    for path in ["/etc/fifo", "/dev/zero", "/etc/sock"] {
        n.userdata(&format!(
            "#cloud-config\nwrite_files:\n- path: {path}\n  append: true\n  content: x\n"
        ));
        let o = n.single();
        assert_eq!(o.status.code(), Some(1), "{path}: {}", stderr(&o));
        n.userdata(&format!(
            "#cloud-config\nwrite_files:\n- path: /etc/from\n  source: {{uri: 'file://{path}'}}\n  content: fallback\n"
        ));
        let o = n.single();
        assert_eq!(o.status.code(), Some(2), "{path}: {}", stderr(&o));
        assert_eq!(
            std::fs::read_to_string(r.join("etc/from")).unwrap(),
            "fallback"
        );
    }
    assert!(
        std::fs::symlink_metadata(r.join("etc/fifo"))
            .unwrap()
            .file_type()
            .is_fifo_like()
    );
}

/// The path is one of two hard links to a file: the entry replaces its own name, the other
/// name keeps the old content.
#[test]
fn cell_write_files_hardlink() {
    let n = Node::new();
    let r = &n.root;
    std::fs::hard_link(r.join("etc/secret"), r.join("etc/linked")).unwrap();
    n.userdata("#cloud-config\nwrite_files:\n- path: /etc/linked\n  content: replaced\n");
    let o = n.single();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(r.join("etc/linked")).unwrap(),
        "replaced"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("etc/secret")).unwrap(),
        SECRET
    );
    assert_eq!(std::fs::metadata(r.join("etc/secret")).unwrap().nlink(), 1);
}

/// A 100 GiB sparse append base or source: refused within the bound, in bounded memory.
#[test]
fn cell_write_files_bomb() {
    let n = Node::new();
    let r = &n.root;
    std::fs::File::create(r.join("etc/big"))
        .unwrap()
        .set_len(100 << 30)
        .unwrap();
    n.userdata("#cloud-config\nwrite_files:\n- path: /etc/big\n  append: true\n  content: x\n");
    let o = n.single();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    n.userdata(
        "#cloud-config\nwrite_files:\n- path: /etc/from-big\n  source: {uri: 'file:///etc/big'}\n  content: fallback\n",
    );
    let o = n.single();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(r.join("etc/from-big")).unwrap(),
        "fallback"
    );
    assert_eq!(
        std::fs::metadata(r.join("etc/big")).unwrap().len(),
        100 << 30
    );
    assert!(children_maxrss() < 256 << 20, "{} bytes", children_maxrss());
}

/// A world-writable sticky directory in the root (`/srv`, shared as `/tmp` is): the user (a real uid-1000 process) swaps their
/// own `/srv/drop` with a link to `/etc` while root's entries are written into it again and
/// again; nothing ever lands in `/etc` or outside the root.
#[test]
fn cell_write_files_race() {
    let n = Node::new();
    let tmp = n.root.join("srv");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::create_dir(tmp.join("drop")).unwrap();
    own(&tmp.join("drop"));
    link("/etc", &tmp.join("drop-link"));
    own(&tmp.join("drop-link"));
    n.userdata(
        "#cloud-config\nwrite_files:\n- path: /srv/drop/f\n  content: x\n- path: /srv/drop/sub/g\n  content: y\n",
    );
    let before = n.snapshot(&["srv"]);
    let secs = race_secs();
    let attacker = attack(&tmp, &[("drop", "drop-link")], secs);
    let (mut runs, mut ok) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        let o = n.single();
        runs += 1;
        match o.status.code() {
            Some(0) => ok += 1,
            Some(1) => {}
            other => panic!("run {runs} ended {other:?}: {}", stderr(&o)),
        }
        assert_eq!(
            n.snapshot(&["srv"]),
            before,
            "run {runs} wrote outside /srv/drop"
        );
    }
    let swaps = stop(attacker);
    eprintln!("write_files race: {runs} runs ({ok} wrote), {swaps} swaps by uid {UID}");
    assert!(swaps > 0, "the attacker did not run");
}

/// The agent killed at random points while it writes a set of entries with new parents owned
/// by a user, then run to the end: the tree is the one an undisturbed run leaves.
#[test]
fn cell_write_files_kill() {
    let entries = "#cloud-config\nwrite_files:\n\
- path: /etc/app/a/b/one\n  owner: capv:capv\n  content: one\n\
- path: /etc/app/a/two\n  permissions: '0600'\n  content: two\n\
- path: /etc/app/c/three\n  owner: capv\n  append: true\n  content: three\n";
    let clean = Node::new();
    clean.userdata(entries);
    assert!(clean.once().output().unwrap().status.success());
    let want = tree(&clean.root.join("etc/app"));
    let n = Node::new();
    n.userdata(entries);
    // Once per instance (the journal's), as a boot runs them: an `append` a killed run had
    // done before its record is adopted by the next run, never done twice.
    for i in 0..30u64 {
        let mut c = n.once().spawn().unwrap();
        std::thread::sleep(Duration::from_micros(500 + (i * 7919) % 40_000));
        let _ = c.kill();
        c.wait().unwrap();
    }
    let o = n.once().output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(tree(&n.root.join("etc/app")), want);
}

/// Relative path -> mode, owner and content, below `dir`.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let content = if m.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            String::new()
        } else {
            std::fs::read_to_string(&p).unwrap()
        };
        let rel = p.strip_prefix(dir).unwrap().to_path_buf();
        out.insert(
            rel,
            format!("{:o} {}:{} {content}", m.mode(), m.uid(), m.gid()),
        );
    }
    out
}
