//! Race harness (issue 33) for the atomic writer every step writes through
//! (apply/files.rs over fsio.rs): a process racing the agent inside `--root` swaps a directory
//! on the written path with an absolute link to a directory outside the root
//! (`renameat2(RENAME_EXCHANGE)` in a tight loop) while the writer writes into it again and
//! again, into the directory itself and into a subdirectory it has to make first. An escape
//! is anything appearing outside the root. Runs for `NODEAGENT_RACE_SECS` (default 60) and
//! prints the writes, their outcomes and the swaps.

use libnodeagent::apply::{Target, UserDb, files};
use libnodeagent::plan::{Content, FileWrite, Owner};
use nix::fcntl::{OFlag, RenameFlags, renameat2};
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, unlinkat};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn entry(path: &str, n: u64) -> FileWrite {
    FileWrite {
        path: path.into(),
        content: Content(format!("write {n}\n").into_bytes()),
        owner: Owner::default(),
        mode: Some(0o600),
        append: false,
        defer: false,
        secret: false,
        source: None,
    }
}

/// Every path under `dir`, recursively (links not followed).
fn everything(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        out.push(e.path().display().to_string());
        if e.file_type().unwrap().is_dir() {
            out.extend(everything(&e.path()));
        }
    }
    out
}

#[test]
fn atomic_writer_never_escapes_a_root_whose_directories_are_swapped() {
    let secs: u64 = std::env::var("NODEAGENT_RACE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let t = tempfile::tempdir().unwrap();
    let (r, out) = (t.path().join("r"), t.path().join("outside"));
    std::fs::create_dir_all(r.join("etc/d")).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    // `etc/l` -> the outside directory; `etc/d` is the real one. Swapped, `etc/d` is the link.
    std::os::unix::fs::symlink(&out, r.join("etc/l")).unwrap();
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let etc = Arc::new(nix::fcntl::open(&r.join("etc"), flags, Mode::empty()).unwrap());
    // The real directory, whatever its name is at the moment: to remove what a write made.
    let real = nix::fcntl::open(&r.join("etc/d"), flags, Mode::empty()).unwrap();
    let (stop, swaps) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let swapper = {
        let (etc, stop, swaps) = (etc.clone(), stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if renameat2(&*etc, "d", &*etc, "l", RenameFlags::RENAME_EXCHANGE).is_ok() {
                    n += 1;
                }
            }
            swaps.fetch_add(n, Ordering::Relaxed);
        })
    };
    let target = Target::new(&r);
    let db = UserDb::default();
    let (mut runs, mut ok, mut failed) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        runs += 1;
        // Into the swapped directory itself, then into a subdirectory made for the write.
        let path = if runs % 2 == 0 {
            "/etc/d/f"
        } else {
            "/etc/d/new/f"
        };
        let f = entry(path, runs);
        match files::write_bytes(&target, &f, &f.content.0, &db) {
            Ok(()) => ok += 1,
            Err(_) => failed += 1,
        }
        if runs % 2 == 1 {
            let _ = unlinkat(&real, "new/f", UnlinkatFlags::NoRemoveDir);
            let _ = unlinkat(&real, "new", UnlinkatFlags::RemoveDir);
        }
        if runs % 1024 == 0 {
            assert_eq!(
                everything(&out),
                Vec::<String>::new(),
                "escaped after {runs} writes"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    let escaped = everything(&out);
    // Where the link pointed, seen from inside the root: the writes that went through it.
    let mirror = r.join(out.strip_prefix("/").unwrap());
    let mirrored = if mirror.exists() {
        everything(&mirror).len()
    } else {
        0
    };
    println!(
        "atomic writer race: {runs} writes ({ok} written, {failed} failed), {swaps} swaps, \
         {mirrored} entries under the link's target inside the root, {} escapes",
        escaped.len()
    );
    assert_eq!(escaped, Vec::<String>::new(), "a write escaped the root");
    assert!(swaps > 1000, "the race did not happen: {swaps} swaps");
    assert!(ok > 0, "no write succeeded: {failed} failed");
}
