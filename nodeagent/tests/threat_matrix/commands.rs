//! Boundary `command-text`: a bootcmd/runcmd list's text on its way to the shell. It is
//! written to a root-only script file (0600 in the 0700 `cmd/` directory) and run as
//! `/bin/sh FILE`: never in an argv or an environment another user can read, never written
//! through a link, a FIFO or a hard link planted at its files, bounded in time whatever its
//! size.

use crate::apply_common::*;
use libnodeagent::plan::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Secrets a list carries in its text: a bootstrap token, a password in an assignment, and a
/// PEM body split over the lines of one item.
pub const TOKEN: &str = "abcdef.0123456789abcdef";
pub const PASSWORD: &str = "hunter2-db-secret";
pub const PEM_BODY: &str = "MIIEpAIBAAKCAQEAsecretbodyline0123456789ABCDEFabcdef";

pub fn secret_items() -> Vec<Step> {
    vec![
        sh(
            "runcmd[0]",
            &format!("export PGPASSWORD={PASSWORD}; echo item0 >> /record; sleep 0.4"),
            Frequency::PerInstance,
        ),
        sh(
            "runcmd[1]",
            &format!(
                "cat > /key.pem <<'EOF'\n-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----\nEOF\nsleep 0.4"
            ),
            Frequency::PerInstance,
        ),
        sh(
            "runcmd[2]",
            &format!(": kubeadm join --token {TOKEN}; echo item2 >> /record; sleep 0.4"),
            Frequency::PerInstance,
        ),
    ]
}

/// The instance's `cmd/` directory of `iid` under `root`.
pub fn cmd_dir(root: &Path, iid: &str) -> PathBuf {
    let st = libnodeagent::base::state::State::open(root).unwrap();
    st.instance_dir(iid).join("cmd")
}

/// The file `<h>.EXT` of a list's program (`runcmd`, per instance) in `cmd/`.
pub fn program_file(root: &Path, iid: &str, ext: &str) -> PathBuf {
    let h = libnodeagent::apply::files::sha256_hex(b"runcmd:program");
    cmd_dir(root, iid).join(format!("{}.{ext}", h.get(..16).unwrap()))
}

/// Every process's command line, as any local user can read it in /proc.
fn cmdlines() -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        if let Ok(b) = std::fs::read(e.path().join("cmdline")) {
            out.push(String::from_utf8_lossy(&b).replace('\0', " "));
        }
    }
    out
}

/// While a list with secrets runs, a watcher polls every process's argv, as another local
/// user would: no secret is ever there, and the shell it saw runs the script file.
#[test]
fn cell_command_text_race() {
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path().to_path_buf();
    let p = plan("vm-argv", secret_items());
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new((Vec::<String>::new(), 0usize)));
    let watcher = {
        let (stop, seen) = (stop.clone(), seen.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for line in cmdlines() {
                    let mut s = seen.lock().unwrap();
                    if line.contains("/bin/sh ")
                        && line.contains("/cmd/")
                        && line.trim_end().ends_with(".sh")
                    {
                        s.1 += 1;
                    }
                    if [TOKEN, PASSWORD, PEM_BODY].iter().any(|x| line.contains(x)) {
                        s.0.push(line);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let res = run(&r, &p, true, false, "b");
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    res.unwrap();
    let (leaks, shells) = std::mem::take(&mut *seen.lock().unwrap());
    assert!(leaks.is_empty(), "secrets in argv: {leaks:?}");
    assert!(shells > 0, "the watcher never saw `/bin/sh FILE` run");
    assert_eq!(
        std::fs::read_to_string(r.join("record")).unwrap(),
        "item0\nitem2\n"
    );
    assert!(
        std::fs::read_to_string(r.join("key.pem"))
            .unwrap()
            .contains(PEM_BODY)
    );
}

/// The list's text reaches no log, status or leftover file: the script is deleted when its
/// program is over, and every log line went through the redactor.
#[test]
fn cell_command_text_split_secret() {
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    let p = plan("vm-text", secret_items());
    run(r, &p, true, false, "b").unwrap();
    assert!(
        !program_file(r, "vm-text", "sh").exists(),
        "script left behind"
    );
    let mode = std::fs::metadata(cmd_dir(r, "vm-text"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    for f in walk_files(r) {
        let rel = f.strip_prefix(r).unwrap().to_string_lossy().into_owned();
        // What the items wrote on purpose, and the state records the next item restores
        // from (0600, never logged: shell.rs).
        if rel == "key.pem" || rel.ends_with(".vars") || rel.ends_with(".env") {
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        for secret in [TOKEN, PASSWORD, PEM_BODY] {
            assert!(!text.contains(secret), "{secret} in {rel}");
        }
    }
}

/// Every regular file under `dir` (not following links).
pub fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            out.extend(walk_files(&e.path()));
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
    out
}

fn simple_plan(iid: &str) -> Plan {
    plan(
        iid,
        vec![
            sh("runcmd[0]", "echo one >> /record", Frequency::PerInstance),
            sh("runcmd[1]", "echo two >> /record", Frequency::PerInstance),
        ],
    )
}

/// Plant `make(path)` at the program's script, output and pause files and at the first
/// item's record, then run: the list runs once, in time, and `outside` is unchanged.
fn planted(iid: &str, make: &dyn Fn(&Path, &Path)) {
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    let outside_dir = tempfile::tempdir_in(r.parent().unwrap()).unwrap();
    let outside = outside_dir.path().join("victim");
    std::fs::write(&outside, "untouched\n").unwrap();
    std::fs::create_dir_all(cmd_dir(r, iid)).unwrap();
    for ext in ["sh", "out", "at", "ack"] {
        make(&program_file(r, iid, ext), &outside);
    }
    let t = Instant::now();
    run(r, &simple_plan(iid), true, false, "b").unwrap();
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    assert_eq!(
        std::fs::read_to_string(r.join("record")).unwrap(),
        "one\ntwo\n"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched\n");
    let m = std::fs::metadata(&outside).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o644);
}

#[test]
fn cell_command_text_link() {
    planted("vm-link", &|at, outside| {
        std::os::unix::fs::symlink(outside, at).unwrap();
    });
}

#[test]
fn cell_command_text_hardlink() {
    planted("vm-hard", &|at, outside| {
        std::fs::hard_link(outside, at).unwrap();
    });
}

#[test]
fn cell_command_text_special() {
    planted("vm-fifo", &|at, _| {
        nix::unistd::mkfifo(at, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    });
}

/// A list of 500 items, one of them 512 KiB long: every item runs once, in time, and the
/// shell's argv stays a path.
#[test]
fn cell_command_text_bomb() {
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    let mut steps: Vec<Step> = (0..500)
        .map(|i| {
            sh(
                &format!("runcmd[{i}]"),
                "echo x >> /record",
                Frequency::PerInstance,
            )
        })
        .collect();
    steps.push(sh(
        "runcmd[500]",
        &format!(": {}; echo big >> /record", "y".repeat(512 * 1024)),
        Frequency::PerInstance,
    ));
    let t = Instant::now();
    run(r, &plan("vm-bomb", steps), true, false, "b").unwrap();
    assert!(t.elapsed() < Duration::from_secs(120), "{:?}", t.elapsed());
    let record = std::fs::read_to_string(r.join("record")).unwrap();
    assert_eq!(record.lines().filter(|l| *l == "x").count(), 500);
    assert!(record.ends_with("big\n"));
}
