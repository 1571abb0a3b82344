//! Bootstrap-data files per transport (issue 41, class 2): the NoCloud seed, the `dir:`
//! guestinfo files, the OVF `seedfrom` seed and fw_cfg's `by_name` tree, each detected under
//! `--root R` from the image config, and the status the agent writes back into the seed
//! directory. A link or `..` out of R, a FIFO or device, a hard link, an oversized file or a
//! file swapped while the agent runs: the outside seed is never applied, nothing outside R
//! changes, the agent never hangs and stays inside its memory bound.

use crate::harness::{self, INSIDE_MD, INSIDE_UD, Node, OUTSIDE_MD, Outcome};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where a transport keeps its files inside R.
#[derive(Clone, Copy)]
struct Layout {
    /// Image-config transport spec.
    spec: &'static str,
    /// The seed directory inside R.
    dir: &'static str,
    metadata: &'static str,
    userdata: &'static str,
    /// The file the agent's status goes to in `dir`, if the transport writes one there.
    status: Option<&'static str>,
}

const NOCLOUD: Layout = Layout {
    spec: "nocloud:/seed",
    dir: "seed",
    metadata: "meta-data",
    userdata: "user-data",
    status: Some("nodeagent.nodeagent.status"),
};
const DIR: Layout = Layout {
    spec: "dir:/gi",
    dir: "gi",
    metadata: "guestinfo.metadata",
    userdata: "guestinfo.userdata",
    status: Some("guestinfo.nodeagent.status"),
};
const FWCFG: Layout = Layout {
    spec: "fwcfg",
    dir: "sys/firmware/qemu_fw_cfg/by_name/opt",
    metadata: "guestinfo.metadata/raw",
    userdata: "guestinfo.userdata/raw",
    status: None,
};
/// The OVF environment (from a fake `vmware-rpctool`) names the seed `/seed/`.
const OVF: Layout = Layout {
    spec: "ovf",
    dir: "seed",
    metadata: "meta-data",
    userdata: "user-data",
    status: None,
};

/// A node whose image config picks `layout`, with the inside seed written (unless `seed` is
/// false), and what the transport needs besides (the OVF environment and its helper).
struct Trial {
    node: Node,
    layout: Layout,
    /// Extra environment of the agent (the fake helper's PATH for OVF).
    env: Vec<(&'static str, std::ffi::OsString)>,
}

impl Trial {
    fn new(layout: Layout, seed: bool) -> Trial {
        let node = Node::new();
        node.transports(&[layout.spec]);
        let mut env = Vec::new();
        if layout.spec == "ovf" {
            env.push(("PATH", ovf_helper(&node, OVF_ENV)));
        }
        if layout.spec == "fwcfg" {
            // The status port: a plain file here (a virtio-serial device on a node).
            node.put("dev/virtio-ports/org.nodeagent.status", b"");
        }
        let t = Trial { node, layout, env };
        if seed {
            t.put_md(INSIDE_MD.as_bytes());
            t.put_ud(INSIDE_UD.as_bytes());
        }
        t
    }

    fn md(&self) -> String {
        format!("{}/{}", self.layout.dir, self.layout.metadata)
    }

    fn ud(&self) -> String {
        format!("{}/{}", self.layout.dir, self.layout.userdata)
    }

    fn put_md(&self, data: &[u8]) {
        self.node.put(&self.md(), data);
    }

    fn put_ud(&self, data: &[u8]) {
        self.node.put(&self.ud(), data);
    }

    /// The outside copy of this layout's seed, made beside R (what a link would reach).
    fn outside_seed(&self) -> PathBuf {
        let base = self.node.outside.join("mirror");
        for (name, data) in [
            (self.layout.metadata, OUTSIDE_MD),
            (self.layout.userdata, harness::OUTSIDE_UD),
        ] {
            let p = base.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, data).unwrap();
        }
        base
    }

    fn run(&self) -> Outcome {
        let args: Vec<&OsStr> = vec![
            "run".as_ref(),
            "--root".as_ref(),
            self.node.root.as_os_str(),
            "--facts".as_ref(),
            self.node.facts.as_os_str(),
        ];
        let env: Vec<(&str, &OsStr)> = self.env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
        harness::agent(&args, &env)
    }

    /// Run, then: the outside seed not applied, nothing outside R changed, bounded.
    fn run_confined(&self) -> Outcome {
        let before = self.node.outside_now();
        let out = self.run();
        out.bounded();
        assert!(
            !self.node.outside_applied(),
            "the outside seed was applied\n{}",
            out.stderr
        );
        assert_eq!(
            before,
            self.node.outside_now(),
            "outside the root changed\n{}",
            out.stderr
        );
        out
    }
}

/// The OVF environment: no properties but `seedfrom`, the seed inside R.
const OVF_ENV: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1">
  <PropertySection>
    <Property oe:key="seedfrom" oe:value="/seed/"/>
  </PropertySection>
</Environment>
"#;

/// A fake `vmware-rpctool` answering `info-get guestinfo.ovfEnv` with `xml` (every other
/// key absent, every `info-set` accepted), DMI saying VMware in R; the PATH to give the agent.
pub(crate) fn ovf_helper(node: &Node, xml: &str) -> std::ffi::OsString {
    use std::os::unix::fs::PermissionsExt;
    node.put(
        "sys/class/dmi/id/product_name",
        b"VMware Virtual Platform\n",
    );
    let bin = node.scratch().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let env = bin.join("ovfEnv.xml");
    std::fs::write(&env, xml).unwrap();
    let tool = bin.join("vmware-rpctool");
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n'info-get guestinfo.ovfEnv') cat '{}' ;;\n'info-get '*) echo 'No value found' >&2; exit 1 ;;\nesac\n",
            env.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path))).unwrap()
}

// ---- link: a symlink or `..` out of the root --------------------------------------------

/// The seed directory as an absolute link and as a relative `..` link to the outside copy,
/// then each seed file as a link to it: never applied. Where the transport writes its status
/// into the directory, a link at that name is replaced, not written through.
fn link(layout: Layout) {
    let top = layout.dir.split('/').next().unwrap();
    let depth = layout.dir.matches('/').count();
    // The whole seed directory (its first component) leads out, absolute or by `..`.
    for relative in [false, true] {
        let t = Trial::new(layout, false);
        let mirror = t.outside_seed();
        let target: PathBuf = if relative {
            // From R/<top>: up past R, then into outside/mirror.
            Path::new("..").join("outside").join("mirror")
        } else {
            mirror.clone()
        };
        if depth == 0 {
            t.node.link(top, &target);
        } else {
            // A deeper seed directory (fw_cfg): its last component leads out.
            let parent = Path::new(layout.dir).parent().unwrap();
            std::fs::create_dir_all(t.node.root.join(parent)).unwrap();
            let up: PathBuf = std::iter::repeat_n("..", depth + 1).collect();
            let target = if relative {
                up.join("outside/mirror")
            } else {
                mirror
            };
            t.node.link(layout.dir, target);
        }
        // Nothing there inside R: no data (an OVF environment still gives its defaults).
        let out = t.run_confined();
        if layout.spec != "ovf" {
            assert_eq!(out.code, Some(1), "{}", out.stderr);
        }
    }
    // Each seed file a link out (absolute), the other file inside.
    for which in [0, 1] {
        let t = Trial::new(layout, true);
        let mirror = t.outside_seed();
        let (rel, name) = if which == 0 {
            (t.md(), layout.metadata)
        } else {
            (t.ud(), layout.userdata)
        };
        std::fs::remove_file(t.node.root.join(&rel)).unwrap();
        t.node.link(&rel, mirror.join(name));
        // The link leads nowhere inside R: that file is absent (a NoCloud or OVF seed then
        // takes its default instance-id and may apply the other file, which is inside).
        t.run_confined();
    }
    // The status written back: a link at its name, out of the root.
    if let Some(status) = layout.status {
        let t = Trial::new(layout, true);
        let victim = t.node.outside.join("victim");
        t.node.link(&format!("{}/{status}", layout.dir), &victim);
        t.run_confined().succeeded();
        assert!(t.node.inside_applied());
        let written = t.node.root.join(layout.dir).join(status);
        assert!(std::fs::symlink_metadata(&written).unwrap().is_file());
    }
}

#[test]
fn cell_seed_nocloud_link() {
    link(NOCLOUD);
}

#[test]
fn cell_guestinfo_dir_link() {
    link(DIR);
}

#[test]
fn cell_seed_ovf_link() {
    link(OVF);
}

/// fw_cfg's tree and its status port: a link out of R is resolved inside it.
#[test]
fn cell_seed_fwcfg_link() {
    link(FWCFG);
    let t = Trial::new(FWCFG, true);
    let victim = t.node.outside.join("victim");
    std::fs::remove_file(t.node.root.join("dev/virtio-ports/org.nodeagent.status")).unwrap();
    t.node
        .link("dev/virtio-ports/org.nodeagent.status", &victim);
    // The status cannot be published (the port's name leads nowhere inside R): the run still
    // applies the data, and the victim is untouched.
    let out = t.run_confined();
    assert!(t.node.inside_applied(), "{}", out.stderr);
}

// ---- special: a FIFO or a device in place of a file -------------------------------------

fn special(layout: Layout) {
    for which in [0, 1] {
        for device in [false, true] {
            let t = Trial::new(layout, true);
            let rel = if which == 0 { t.md() } else { t.ud() };
            std::fs::remove_file(t.node.root.join(&rel)).unwrap();
            if device {
                if !t.node.zero_device(&rel) {
                    continue; // not root: no device nodes
                }
            } else {
                t.node.fifo(&rel);
            }
            let out = t.run_confined();
            assert_eq!(out.code, Some(1), "{}", out.stderr);
            assert!(!t.node.inside_applied());
        }
    }
}

#[test]
fn cell_seed_nocloud_special() {
    special(NOCLOUD);
}

#[test]
fn cell_guestinfo_dir_special() {
    special(DIR);
}

#[test]
fn cell_seed_ovf_special() {
    special(OVF);
}

#[test]
fn cell_seed_fwcfg_special() {
    special(FWCFG);
}

// ---- hardlink: a seed file that is also a file outside the root -------------------------

/// A seed file hard-linked to the outside seed is refused; a status file hard-linked to a
/// file outside is replaced, the outside file untouched.
fn hardlink(layout: Layout) {
    for which in [0, 1] {
        let t = Trial::new(layout, true);
        let mirror = t.outside_seed();
        let (rel, name) = if which == 0 {
            (t.md(), layout.metadata)
        } else {
            (t.ud(), layout.userdata)
        };
        std::fs::remove_file(t.node.root.join(&rel)).unwrap();
        t.node.hard_link(&rel, &mirror.join(name));
        let out = t.run_confined();
        assert_eq!(out.code, Some(1), "{}", out.stderr);
    }
    if let Some(status) = layout.status {
        let t = Trial::new(layout, true);
        t.node.hard_link(
            &format!("{}/{status}", layout.dir),
            &t.node.outside.join("victim"),
        );
        t.run_confined().succeeded();
    }
}

#[test]
fn cell_seed_nocloud_hardlink() {
    hardlink(NOCLOUD);
}

#[test]
fn cell_guestinfo_dir_hardlink() {
    hardlink(DIR);
}

#[test]
fn cell_seed_ovf_hardlink() {
    hardlink(OVF);
}

#[test]
fn cell_seed_fwcfg_hardlink() {
    hardlink(FWCFG);
}

// ---- bomb: a seed file past the size bound ----------------------------------------------

/// One byte over MAX_RAW_VALUE_BYTES (sparse: nothing to write) is refused without being read
/// into memory; a YAML bomb inside the bound is refused by the YAML bounds (yaml.rs cells).
fn bomb(layout: Layout) {
    let t = Trial::new(layout, true);
    let f = std::fs::File::create(t.node.root.join(t.ud())).unwrap();
    f.set_len(libnodeagent::base::limits::MAX_RAW_VALUE_BYTES as u64 + 1)
        .unwrap();
    let out = t.run_confined();
    assert_eq!(out.code, Some(1), "{}", out.stderr);
}

#[test]
fn cell_seed_nocloud_bomb() {
    bomb(NOCLOUD);
}

#[test]
fn cell_guestinfo_dir_bomb() {
    bomb(DIR);
}

#[test]
fn cell_seed_ovf_bomb() {
    bomb(OVF);
}

/// fw_cfg: an oversized `raw`, and a `size` file claiming more than the bound (refused before
/// a byte of `raw` is read).
#[test]
fn cell_seed_fwcfg_bomb() {
    bomb(FWCFG);
    let t = Trial::new(FWCFG, true);
    t.node.put(
        &format!("{}/guestinfo.userdata/size", FWCFG.dir),
        b"1099511627776\n",
    );
    let out = t.run_confined();
    assert_eq!(out.code, Some(1), "{}", out.stderr);
}

/// The vmware helper printing far more than a value may hold: cut at the bound, refused.
#[test]
fn cell_seed_vmware_bomb() {
    use std::os::unix::fs::PermissionsExt;
    let node = Node::new();
    node.transports(&["vmware"]);
    node.put(
        "sys/class/dmi/id/product_name",
        b"VMware Virtual Platform\n",
    );
    let bin = node.scratch().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join("vmware-rpctool");
    std::fs::write(
        &tool,
        "#!/bin/sh\ncase \"$1\" in\n'info-get guestinfo.metadata') printf 'instance-id: i-1\\n' ;;\n'info-get guestinfo.userdata') exec head -c 200000000 /dev/zero ;;\n'info-get '*) echo 'No value found' >&2; exit 1 ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path))).unwrap();
    let args: Vec<&OsStr> = vec![
        "run".as_ref(),
        "--root".as_ref(),
        node.root.as_os_str(),
        "--facts".as_ref(),
        node.facts.as_os_str(),
    ];
    let out = harness::agent(&args, &[("PATH", path.as_os_str())]);
    out.refused();
}

// ---- race: the seed swapped while the agent reads it ------------------------------------

/// A thread swaps the metadata between the inside file, absolute and `..` links to the
/// outside copy and a FIFO, as fast as it can, while the agent runs again and again: no run
/// ever takes the outside instance-id or hangs.
fn race(layout: Layout) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = Trial::new(layout, true);
    let mirror = t.outside_seed();
    let md = t.node.root.join(t.md());
    let dir = md.parent().unwrap().to_path_buf();
    let inside = dir.join(".inside");
    std::fs::write(&inside, INSIDE_MD).unwrap();
    let depth = t.md().matches('/').count();
    let up: PathBuf = std::iter::repeat_n("..", depth + 1).collect();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, md, dir) = (stop.clone(), md.clone(), dir.clone());
        let outside = mirror.join(t.layout.metadata);
        let relative = up.join("outside/mirror").join(t.layout.metadata);
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let tmp = dir.join(format!(".swap{}", n % 2));
                let _ = std::fs::remove_file(&tmp);
                let made = match n % 4 {
                    0 => std::fs::copy(&inside, &tmp).map(|_| ()),
                    1 => std::os::unix::fs::symlink(&outside, &tmp),
                    2 => std::os::unix::fs::symlink(&relative, &tmp),
                    _ => nix::unistd::mkfifo(&tmp, nix::sys::stat::Mode::from_bits_truncate(0o644))
                        .map_err(std::io::Error::from),
                };
                if made.is_ok() {
                    let _ = std::fs::rename(&tmp, &md);
                }
                n += 1;
            }
        })
    };
    let before = t.node.outside_now();
    for _ in 0..12 {
        let out = t.run();
        out.bounded();
        assert!(
            !t.node.outside_applied(),
            "the outside seed was applied\n{}",
            out.stderr
        );
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(before, t.node.outside_now());
}

#[test]
fn cell_seed_nocloud_race() {
    race(NOCLOUD);
}

#[test]
fn cell_guestinfo_dir_race() {
    race(DIR);
}

#[test]
fn cell_seed_ovf_race() {
    race(OVF);
}

// ---- kill: the agent killed while it writes its status back -----------------------------

/// The agent killed at a spread of instants in its run: the status file in the seed
/// directory is absent or whole JSON after each kill, nothing outside changes, and a run
/// after the last kill succeeds.
fn kill(layout: Layout) {
    let t = Trial::new(layout, true);
    let status = t.node.root.join(layout.dir).join(layout.status.unwrap());
    let before = t.node.outside_now();
    let args: Vec<std::ffi::OsString> = vec![
        "run".into(),
        "--root".into(),
        t.node.root.clone().into(),
        "--facts".into(),
        t.node.facts.clone().into(),
    ];
    for delay_ms in (0..120).step_by(8) {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .args(&args)
            .env("NODEAGENT_LOG", "error")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        if let Ok(text) = std::fs::read(&status) {
            let v: Result<serde_json::Value, _> = serde_json::from_slice(&text);
            assert!(
                v.is_ok(),
                "torn status after a kill at {delay_ms} ms: {text:?}"
            );
        }
    }
    t.run().succeeded();
    assert!(t.node.inside_applied());
    assert_eq!(before, t.node.outside_now());
}

#[test]
fn cell_seed_nocloud_kill() {
    kill(NOCLOUD);
}

#[test]
fn cell_guestinfo_dir_kill() {
    kill(DIR);
}
