//! Race harness (issue 33): a local user who owns their home swaps names in it while the
//! ssh-keys step runs, as fast as the kernel allows. Two threads exchange names with
//! `renameat2(RENAME_EXCHANGE)` in tight loops: `~/.ssh` with a link to a directory outside
//! the root (standing for `/root/.ssh`), and `~/.ssh/authorized_keys` with a link to a
//! root-only file; meanwhile `nodeagent single --name users_groups --frequency always` runs
//! again and again. An escape is any file appearing in the outside directory, the root-only
//! file changing, or its content reaching a file in the user's `.ssh`. Runs for
//! `NODEAGENT_RACE_SECS` (default 60) and prints the runs, their outcomes and the swaps.

use nix::fcntl::{OFlag, RenameFlags, renameat2};
use nix::sys::stat::Mode;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const SECRET: &str = "SECRET-ROOT-ONLY-7f3a\n";
const UID: u32 = 1000;

fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

fn open_dir(p: &Path) -> OwnedFd {
    nix::fcntl::open(
        p,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .unwrap()
}

/// Swap `a` and `b` in `dir` until `stop`; counts successful exchanges. `replant` puts the
/// link back when the agent replaced it by a regular file (its rename over the name).
fn swapper(
    dir: Arc<OwnedFd>,
    a: &'static str,
    b: &'static str,
    link_target: PathBuf,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            if renameat2(&*dir, a, &*dir, b, RenameFlags::RENAME_EXCHANGE).is_ok() {
                n += 1;
            }
            if n.is_multiple_of(4096) {
                let is_link = |name: &str| {
                    nix::sys::stat::fstatat(&*dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                        .is_ok_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFLNK)
                };
                if !is_link(a) && !is_link(b) {
                    let _ =
                        nix::unistd::unlinkat(&*dir, b, nix::unistd::UnlinkatFlags::NoRemoveDir);
                    let _ = nix::unistd::symlinkat(&link_target, &*dir, b);
                }
            }
        }
        swaps.fetch_add(n, Ordering::Relaxed);
    })
}

#[test]
fn ssh_keys_step_never_escapes_a_home_whose_names_are_swapped() {
    let secs: u64 = std::env::var("NODEAGENT_RACE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let t = tempfile::tempdir().unwrap();
    let (d, r, out) = (
        t.path().join("d"),
        t.path().join("r"),
        t.path().join("outside"),
    );
    write(
        &r.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\ncapv:x:1000:1000::/home/capv:/bin/sh\n",
    );
    write(&r.join("etc/group"), "root:x:0:\ncapv:x:1000:\n");
    write(
        &r.join("etc/shadow"),
        "root:*:19000:0:99999:7:::\ncapv:!:19000:0:99999:7:::\n",
    );
    write(&r.join("etc/login.defs"), "USERGROUPS_ENAB yes\n");
    write(
        &r.join("etc/default/useradd"),
        "SHELL=/bin/sh\nHOME=/home\n",
    );
    for tool in ["useradd", "usermod", "groupadd", "chpasswd"] {
        write(&r.join("usr/sbin").join(tool), "");
    }
    let home = r.join("home/capv");
    let ssh = home.join(".ssh");
    write(
        &ssh.join("authorized_keys"),
        "ssh-ed25519 AAAAold capv@old\n",
    );
    for p in [&home, &ssh, &ssh.join("authorized_keys")] {
        std::os::unix::fs::lchown(p, Some(UID), Some(UID)).unwrap();
    }
    // Outside the root: the directory `.ssh` is swapped with a link to, and the root-only
    // file `authorized_keys` is swapped with a link to.
    let victim_dir = out.join("root-ssh");
    std::fs::create_dir_all(&victim_dir).unwrap();
    let secret = out.join("root-only");
    write(&secret, SECRET);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&victim_dir, home.join(".ssh-link")).unwrap();
    std::os::unix::fs::symlink(&secret, ssh.join("ak-link")).unwrap();
    write(
        &d.join("guestinfo.metadata"),
        "instance-id: i-race\nlocal-hostname: node1\n",
    );
    write(
        &d.join("guestinfo.userdata"),
        "#cloud-config\nusers:\n- name: capv\n  ssh_authorized_keys: [ssh-ed25519 AAAAnew capv@new]\n",
    );
    let facts = t.path().join("facts.yaml");
    write(
        &facts,
        "hostname: node1\nlocal-ipv4: 10.0.0.5\nnetwork-renderer: networkd\n",
    );

    let single = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .args(["single", "--name", "users_groups", "--frequency", "always"])
            .arg("--transport")
            .arg(format!("dir:{}", d.display()))
            .arg("--root")
            .arg(&r)
            .arg("--facts")
            .arg(&facts)
            .env("NODEAGENT_LOG", "error")
            .output()
            .unwrap()
    };
    // Undisturbed, the step merges the new key into the user's file, the user's 0600.
    let o = single();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ak = ssh.join("authorized_keys");
    assert_eq!(
        std::fs::read_to_string(&ak).unwrap(),
        "ssh-ed25519 AAAAold capv@old\nssh-ed25519 AAAAnew capv@new\n"
    );
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(&ak).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (UID, UID, 0o600));

    let home_fd = Arc::new(open_dir(&home));
    let ssh_fd = Arc::new(open_dir(&ssh));
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let threads = [
        swapper(
            home_fd,
            ".ssh",
            ".ssh-link",
            victim_dir.clone(),
            stop.clone(),
            swaps.clone(),
        ),
        swapper(
            ssh_fd.clone(),
            "authorized_keys",
            "ak-link",
            secret.clone(),
            stop.clone(),
            swaps.clone(),
        ),
    ];
    let (mut runs, mut ok, mut failed, mut escapes) = (0u64, 0u64, 0u64, Vec::new());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        let o = single();
        runs += 1;
        if o.status.success() {
            ok += 1;
        } else {
            failed += 1;
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains(".ssh") || err.contains("authorized_keys"),
                "a run failed for another reason: {err}"
            );
        }
        // Escapes: anything written outside, the root-only file changed or read in.
        let outside: Vec<_> = std::fs::read_dir(&victim_dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        if !outside.is_empty() {
            escapes.push(format!("run {runs}: wrote outside the home: {outside:?}"));
        }
        if std::fs::read_to_string(&secret).unwrap() != SECRET {
            escapes.push(format!("run {runs}: the root-only file changed"));
        }
        // Every regular file in the user's real `.ssh`, opened without following a link
        // (the swappers are still running: a path check here would race too).
        let listing = format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&*ssh_fd)
        );
        for e in std::fs::read_dir(listing).unwrap().flatten() {
            let Ok(fd) = nix::fcntl::openat(
                &*ssh_fd,
                e.file_name().as_os_str(),
                OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut text);
            if text.contains("SECRET-ROOT-ONLY") {
                escapes.push(format!(
                    "run {runs}: root-only content in {:?}",
                    e.file_name()
                ));
            }
        }
        if !escapes.is_empty() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for th in threads {
        th.join().unwrap();
    }
    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!(
        "race harness: {:?}, {runs} runs ({ok} exit 0, {failed} refused a swapped name), {swaps} swaps, {} escapes",
        started.elapsed(),
        escapes.len()
    );
    assert!(escapes.is_empty(), "{escapes:#?}");
    assert!(
        ok > 0 && failed > 0,
        "both outcomes must occur, or the race did not happen"
    );
    assert!(swaps > 1000, "{swaps} swaps");
}
