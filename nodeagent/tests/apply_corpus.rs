//! `nodeagent run --transport dir:D --root R` on the real Cluster API inputs of the shared
//! corpus: CABPK's control-plane init userdata and every CAPV metadata golden. The files the
//! userdata asks for must exist with exactly its content, owner and mode; the network metadata
//! must become networkd files; the journal must record every step.

mod prereq;
use libnodeagent::base::state::{DoneResult, Event};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus/capi");
const CABPK: &str = "cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml";

fn goldens() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in ["capv/metadata-golden-head", "capv/metadata-golden-v1.10.0"] {
        for e in std::fs::read_dir(Path::new(CORPUS).join(dir)).unwrap() {
            v.push(e.unwrap().path());
        }
    }
    v.sort();
    assert!(v.len() >= 20, "{v:?}");
    v
}

fn agent(d: &Path, r: &Path, extra: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["run", "--transport"])
        .arg(format!("dir:{}", d.display()))
        .arg("--root")
        .arg(r)
        .args(extra)
        .env("NODEAGENT_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn setup(userdata: Option<&str>, metadata: &Path) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (d, r) = (t.path().join("d"), t.path().join("r"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::create_dir_all(&r).unwrap();
    if let Some(u) = userdata {
        std::fs::copy(Path::new(CORPUS).join(u), d.join("guestinfo.userdata")).unwrap();
    }
    std::fs::copy(metadata, d.join("guestinfo.metadata")).unwrap();
    (t, d, r)
}

fn journal(r: &Path) -> Vec<libnodeagent::base::state::Record> {
    let st = libnodeagent::base::state::State::open(r).unwrap();
    let iid = st.current_instance_id().unwrap();
    libnodeagent::base::state::read_journal(&st.instance_dir(&iid).join("journal.jsonl")).unwrap()
}

#[test]
fn cabpk_init_userdata_files_exact() {
    if !prereq::corpus_present() {
        return;
    }
    let md = Path::new(CORPUS).join("capv/metadata-golden-head/dhcp4.yaml");
    let (_t, d, r) = setup(Some(CABPK), &md);
    let (code, err) = agent(&d, &r, &["--compat"]);
    assert_eq!(
        code, 2,
        "degraded: the golden's 5-octet test MAC is repaired with a warning\n{err}"
    );
    assert!(err.contains("macaddress"), "{err}");

    let text = std::fs::read_to_string(Path::new(CORPUS).join(CABPK)).unwrap();
    let doc: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let files = doc["write_files"].as_sequence().unwrap();
    assert_eq!(files.len(), 10);
    for f in files {
        let path = f["path"].as_str().unwrap();
        let want = f["content"].as_str().unwrap();
        let p = r.join(path.trim_start_matches('/'));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), want, "{path}");
        let m = std::fs::symlink_metadata(&p).unwrap();
        let mode = u32::from_str_radix(f["permissions"].as_str().unwrap(), 8).unwrap();
        assert_eq!(m.mode() & 0o7777, mode, "{path}");
        assert_eq!(f["owner"].as_str(), Some("root:root"));
        assert_eq!((m.uid(), m.gid()), (0, 0), "{path}");
        assert!(m.file_type().is_file());
    }
    // Nothing else under the PKI directory (no temp files), private keys 0600.
    let names: Vec<String> = std::fs::read_dir(r.join("etc/kubernetes/pki"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    assert_eq!(
        std::fs::read_to_string(r.join("etc/hostname")).unwrap(),
        "test-vm\n"
    );
    // The kubeadm step is recorded as skipped (no --exec), every file step done.
    let recs = journal(&r);
    let done = |id: &str| {
        recs.iter()
            .any(|x| matches!(x.event, Event::Done { .. }) && x.event.step() == Some(id))
    };
    assert!(
        recs.iter().any(|x| matches!(
            &x.event,
            Event::Done { step, result: DoneResult::Skipped, .. } if step.contains("kubeadm")
        )),
        "{recs:?}"
    );
    assert_eq!(
        recs.iter()
            .filter(
                |x| matches!(&x.event, Event::Done { step, .. } if step.starts_with("write_files"))
            )
            .count(),
        10
    );
    assert!(done("network"));
    // State: userdata 0600, instance data 0600/0644, directory 0700.
    let st = libnodeagent::base::state::State::open(&r).unwrap();
    let idir = st.instance_dir("test-vm");
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(r.join("var/lib/nodeagent")), 0o700);
    assert_eq!(mode(idir.join("userdata.txt")), 0o600);
    assert_eq!(mode(idir.join("instance-data-sensitive.json")), 0o600);
    assert_eq!(mode(idir.join("instance-data.json")), 0o644);
    // The rendered userdata: the template header line removed, nothing else changed.
    let kept = std::fs::read_to_string(idir.join("userdata.txt")).unwrap();
    assert!(
        kept == text.strip_prefix("## template: jinja\n").unwrap(),
        "stored userdata differs"
    );

    // Same instance again: nothing runs twice; only the skipped kubeadm, growpart and
    // resizefs steps are visited again (they stay pending until a run with --exec).
    let (code, err) = agent(&d, &r, &["--compat"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(" 0 steps done, 3 skipped (commands and disk tools"),
        "{err}"
    );
    assert!(err.contains(", 12 already finished"), "{err}");
    let recs = journal(&r);
    let files_done = recs.iter().filter(
        |x| matches!(&x.event, Event::Done { step, .. } if step.starts_with("write_files")),
    );
    assert_eq!(files_done.count(), 10);
}

#[test]
fn capv_goldens_network_files() {
    if !prereq::corpus_present() {
        return;
    }
    for md in goldens() {
        let (_t, d, r) = setup(None, &md);
        // Strict: the test MACs are rejected, naming the field, and nothing is written.
        let (code, err) = agent(&d, &r, &["--stage", "local"]);
        assert_eq!(code, 1, "{}: {err}", md.display());
        assert!(
            err.contains("network.ethernets.id0.match.macaddress"),
            "{}: {err}",
            md.display()
        );
        assert!(
            !r.join("etc").exists(),
            "{}: strict failure wrote files",
            md.display()
        );

        let (code, err) = agent(&d, &r, &["--stage", "local", "--compat"]);
        assert_eq!(code, 2, "{}: {err}", md.display());
        let doc: serde_norway::Value =
            serde_norway::from_str(&std::fs::read_to_string(&md).unwrap()).unwrap();
        let eths = doc["network"]["ethernets"].as_mapping().unwrap();
        for (_, e) in eths {
            let name = e["set-name"].as_str().unwrap();
            let mac = e["match"]["macaddress"].as_str().unwrap();
            let net = std::fs::read_to_string(
                r.join(format!("etc/systemd/network/10-nodeagent-{name}.network")),
            )
            .unwrap();
            assert!(
                // Matched by MAC alone: udev may have named the NIC before the .link renames it.
                net.contains(&format!("[Match]\nMACAddress={mac}\n\n")) && !net.contains("Name="),
                "{net}"
            );
            let dhcp = match (
                e["dhcp4"].as_bool() == Some(true),
                e["dhcp6"].as_bool() == Some(true),
            ) {
                (true, true) => "yes",
                (true, false) => "ipv4",
                (false, true) => "ipv6",
                _ => "no",
            };
            assert!(
                net.contains(&format!("DHCP={dhcp}\n")),
                "{}: {net}",
                md.display()
            );
            for a in e["addresses"].as_sequence().into_iter().flatten() {
                assert!(
                    net.contains(&format!("Address={}", a.as_str().unwrap())),
                    "{net}"
                );
            }
            if let Some(g) = e["gateway4"].as_str() {
                assert!(net.contains(&format!("Gateway={g}\n")), "{net}");
            }
            let link = std::fs::read_to_string(
                r.join(format!("etc/systemd/network/10-nodeagent-{name}.link")),
            )
            .unwrap();
            assert!(link.contains(&format!("[Link]\nName={name}\n")), "{link}");
            // cloud-init 22.4's networkd renderer ignores `wakeonlan`; so does nodeagent's.
            assert!(!link.contains("WakeOnLan"), "{link}");
        }
        let recs = journal(&r);
        assert!(
            recs.iter()
                .any(|x| matches!(x.event, Event::Done { .. }) && x.event.step() == Some("network"))
        );
        assert_eq!(
            std::fs::read_to_string(r.join("etc/hostname")).unwrap(),
            "test-vm\n"
        );
    }
}

#[test]
fn clean_resets_the_instance() {
    if !prereq::corpus_present() {
        return;
    }
    let md = Path::new(CORPUS).join("capv/metadata-golden-head/dhcp4.yaml");
    let (_t, d, r) = setup(Some(CABPK), &md);
    assert_eq!(agent(&d, &r, &["--compat"]).0, 2);
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["clean", "--logs", "--root"])
        .arg(&r)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_dir(r.join("var/lib/nodeagent"))
            .unwrap()
            .count(),
        0
    );
    assert!(!r.join("run/nodeagent").exists());
    // Everything runs again afterwards.
    let (code, err) = agent(&d, &r, &["--compat"]);
    assert_eq!(code, 2);
    assert!(err.contains(" 12 steps done, 3 skipped"), "{err}");
    assert!(err.contains(", 0 already"), "{err}");
}

#[test]
fn exec_run_with_relative_root_redacts_userdata_after_success() {
    if !prereq::corpus_present() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (d, r) = (t.path().join("d"), t.path().join("r"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::create_dir_all(&r).unwrap();
    // The runcmd item runs chrooted into r.
    if !prereq::exec_root(&r, &[]) {
        return;
    }
    let md =
        std::fs::read_to_string(Path::new(CORPUS).join("capv/metadata-golden-head/dhcp4.yaml"))
            .unwrap();
    std::fs::write(
        d.join("guestinfo.metadata"),
        md.replace("00:00:00:00:00", "00:50:56:00:00:01"),
    )
    .unwrap();
    std::fs::write(
        d.join("guestinfo.userdata"),
        "#cloud-config\nwrite_files:\n- path: /etc/x\n  content: hi\nruncmd:\n- echo ran >> \"/ran\"\n",
    )
    .unwrap();
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .current_dir(t.path())
            .args(["run", "--transport", "dir:d", "--root", "r", "--exec"])
            .output()
            .unwrap()
    };
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(r.join("ran")).unwrap(), "ran\n");
    assert_eq!(std::fs::read_to_string(r.join("etc/x")).unwrap(), "hi");
    // Userdata overwritten with `---` on the platform after success (image config default).
    assert_eq!(
        std::fs::read_to_string(d.join("guestinfo.userdata")).unwrap(),
        "---"
    );
    let out = run();
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(r.join("ran")).unwrap(),
        "ran\n",
        "runcmd ran once"
    );
}
