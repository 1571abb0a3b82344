//! Race test: while the agent writes private keys (0600) over and over, a watcher thread
//! lists the directory and stats every entry (temp files included) as fast as it can. No
//! observation may show a mode wider than 0600 or another owner. A naive writer (create with
//! the default mode, then chmod) run against the same watcher is caught, which shows the
//! watcher is fast enough to see such a window.

mod apply_common;
use apply_common::*;
use libnodeagent::apply::{Target, UserDb, files};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Watch {
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicUsize>,
    wider: Arc<AtomicUsize>,
    handle: Option<std::thread::JoinHandle<()>>,
}

fn watch(dir: PathBuf, allowed: u32) -> Watch {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let wider = Arc::new(AtomicUsize::new(0));
    let (s, n, w) = (stop.clone(), seen.clone(), wider.clone());
    let handle = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                if let Ok(m) = std::fs::symlink_metadata(e.path())
                    && m.is_file()
                {
                    n.fetch_add(1, Ordering::Relaxed);
                    if m.mode() & 0o7777 & !allowed != 0 || m.uid() != 0 {
                        w.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    });
    Watch {
        stop,
        seen,
        wider,
        handle: Some(handle),
    }
}

impl Watch {
    fn finish(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap();
        (
            self.seen.load(Ordering::Relaxed),
            self.wider.load(Ordering::Relaxed),
        )
    }
}

fn naive_write(p: &Path, data: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(p);
    std::fs::write(p, data).unwrap(); // 0644 under the usual umask
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn private_key_never_visible_with_a_wider_mode() {
    let d = tempfile::tempdir().unwrap();
    let t = Target::new(d.path());
    let db = UserDb::default();
    let pki = d.path().join("etc/kubernetes/pki");
    std::fs::create_dir_all(&pki).unwrap();
    let key = "-----BEGIN PRIVATE KEY-----\n".to_string()
        + &"A".repeat(16 * 1024)
        + "\n-----END PRIVATE KEY-----\n";
    let w = watch(pki.clone(), 0o600);
    let rounds = 1000;
    for i in 0..rounds {
        // New files and replacements of existing ones.
        let f = file(
            &format!("/etc/kubernetes/pki/k{}.key", i % 7),
            &key,
            "root:root",
            0o600,
        );
        files::write_bytes(&t, &f, &f.content.0, &db).unwrap();
    }
    let (seen, wider) = w.finish();
    eprintln!("race test: {rounds} atomic writes, {seen} observations, {wider} with a wider mode");
    assert!(seen > 1000, "watcher too slow to mean anything: {seen}");
    assert_eq!(wider, 0);

    // Control: the watcher does catch a writer that chmods after creating.
    let ctl = d.path().join("control");
    std::fs::create_dir(&ctl).unwrap();
    let w = watch(ctl.clone(), 0o600);
    let mut caught_after = None;
    for i in 0..20_000 {
        naive_write(&ctl.join("k.key"), key.as_bytes());
        if i % 100 == 99 && w.wider.load(Ordering::Relaxed) > 0 {
            caught_after = Some(i + 1);
            break;
        }
    }
    let (_, wider) = w.finish();
    eprintln!("control: naive writer caught {wider} times (after {caught_after:?} writes)");
    assert!(
        wider > 0,
        "the watcher never saw the naive writer's 0644 window"
    );
}
