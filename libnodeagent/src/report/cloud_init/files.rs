//! The files cloud-init's tools read, written where cloud-init keeps them, from nodeagent's own
//! status (docs/cloud-init-surface.md):
//!
//! ```text
//! var/lib/cloud/data/status.json     0644  progress.rs's document, at every status change
//! var/lib/cloud/data/result.json     0644  at the end of the boot (done or failed)
//! run/cloud-init/status.json         link  -> ../../var/lib/cloud/data/status.json
//! run/cloud-init/result.json         link  -> ../../var/lib/cloud/data/result.json
//! run/cloud-init/instance-data.json            0644  redacted (what non-root reads)
//! run/cloud-init/instance-data-sensitive.json  0600
//! var/lib/cloud/instances/<iid>/boot-finished  0644  at the end of the boot
//! var/lib/cloud/instance             link  -> /var/lib/cloud/instances/<iid>
//! ```
//!
//! plus the lines of `/var/log/cloud-init.log` and the banners of
//! `/var/log/cloud-init-output.log` (through `outlog.rs`, the one log sink). As cloud-init, the
//! local stage starts the boot afresh: it removes the status and result files and the last
//! boot's `boot-finished` (`purge_cache`). Every write is made relative to a directory opened
//! inside the root (`confine::Dir`), through the atomic writer (`fsio.rs`); no failure here
//! fails a run: it is logged, and nodeagent's own status is unaffected.

use super::progress::{Progress, Stage};
use crate::base::confine::Dir;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const DATA_DIR: &str = "var/lib/cloud/data";
pub const RUN_DIR: &str = "run/cloud-init";
pub const CLOUD_DIR: &str = "var/lib/cloud";
pub const STATUS: &str = "status.json";
pub const RESULT: &str = "result.json";
pub const INSTANCE_DATA: &str = "instance-data.json";
pub const INSTANCE_DATA_SENSITIVE: &str = "instance-data-sensitive.json";
pub const BOOT_FINISHED: &str = "boot-finished";
/// Longest status.json read back (cloud-init's is a few KiB; errors are cut by the reporter).
const MAX_STATUS_BYTES: u64 = 1024 * 1024;

/// `str(datasource)` as cloud-init writes it into status.json for the transport the agent read
/// (its `datasource` key and `cloud-init status`'s `detail`). `fwcfg` and `dir` carry guestinfo
/// keys outside VMware (QEMU tests, debugging): no cloud-init datasource does that, so they
/// name nodeagent.
pub fn datasource(transport: &str, nocloud_seed: Option<&str>) -> String {
    match transport {
        "vmware" => "DataSourceVMware [seed=guestinfo]".into(),
        "ovf" => "DataSourceOVF [seed=com.vmware.guestInfo]".into(),
        "nocloud" => format!(
            "DataSourceNoCloud [seed={}]",
            nocloud_seed.unwrap_or("/var/lib/cloud/seed/nocloud")
        ),
        other => format!("DataSourceNodeagent [seed={other}]"),
    }
}

/// cloud-init's name for an instance's directory (`instances/<iid>`, `/` made `_`); `None` for
/// an id that cannot be one path component.
pub fn instance_dir(iid: &str) -> Option<String> {
    let name = iid.replace('/', "_");
    (!name.is_empty() && name != "." && name != ".." && !name.contains('\0')).then_some(name)
}

/// What the tracker follows of a status nodeagent publishes (`report::Status`; the reporter
/// hands it over, this module does not reach back).
pub struct Seen<'a> {
    /// `reading`, `applying`, `waiting`, `kubeadm`, `done` or `failed`.
    pub phase: &'a str,
    pub step: Option<&'a str>,
    pub detail: Option<&'a str>,
    pub error: Option<&'a str>,
    pub warnings: &'a [String],
    pub instance_id: &'a str,
}

/// The reporter's side: cloud-init's status document of this boot, moved on at every status
/// nodeagent publishes.
pub struct Tracker {
    root: PathBuf,
    /// This process runs the local stage (cloud-init's init-local).
    local: bool,
    progress: Progress,
    /// Nothing published by this tracker yet: the first publish reads or resets the document.
    fresh: bool,
    datasource: Option<String>,
    /// `DATA_DIR` and `RUN_DIR`, opened at the first write and held: status.json is written at
    /// every status, without walking its path again.
    dirs: Option<(Arc<Dir>, Arc<Dir>)>,
    /// The names this tracker has linked from `RUN_DIR` (a link is made once).
    linked: Vec<&'static str>,
    /// The status.json this tracker wrote last. Most statuses change nothing in it (it moves
    /// with cloud-init's stages, not with nodeagent's phases); rewriting the same bytes would
    /// cost a rename over a file on disk, which ext4 flushes with the next sync of the node's
    /// own files (`auto_da_alloc`).
    written: Option<String>,
}

impl Tracker {
    pub fn new(root: &Path, local: bool, datasource: Option<String>) -> Tracker {
        Tracker {
            root: root.to_path_buf(),
            local,
            progress: Progress::default(),
            fresh: true,
            datasource,
            dirs: None,
            linked: Vec::new(),
            written: None,
        }
    }

    /// The local half of `--stage all` hands over to the main half, same document.
    pub fn into_main(mut self) -> Tracker {
        self.local = false;
        self
    }

    /// Follow nodeagent's status `s` (what the reporter just published).
    pub fn publish(&mut self, s: &Seen) {
        let now = super::uptime();
        if self.fresh {
            self.fresh = false;
            self.begin(now);
        }
        if self.datasource.is_some() {
            self.progress.datasource = self.datasource.clone();
        }
        let (done, failed) = (s.phase == "done", s.phase == "failed");
        let stage = if self.local {
            Stage::InitLocal
        } else if done || s.phase == "kubeadm" {
            Stage::ModulesFinal
        } else {
            s.step.map_or(Stage::Init, Stage::of_step)
        };
        if !(failed && self.progress.stage.is_some()) {
            for entered in self.progress.enter(stage, now) {
                self.banner(entered);
            }
        }
        if done {
            self.progress.warnings(s.warnings);
            for w in s.warnings {
                log(&self.root, "WARNING", w);
            }
        }
        if failed {
            let why = s.error.unwrap_or("failed");
            self.progress.error(why);
            log(&self.root, "ERROR", why);
        } else {
            let mut line = format!("nodeagent status: {}", s.phase);
            if let Some(step) = s.step {
                line.push_str(&format!(" ({step})"));
            }
            if let Some(d) = s.detail {
                line.push_str(&format!(": {d}"));
            }
            log(&self.root, "INFO", &line);
        }
        if done || failed {
            self.progress.finish(now);
        }
        self.write_status();
        if (done || failed) && !self.local {
            self.end_of_boot(s.instance_id, now);
        }
    }

    /// A step of the run starts: in the main stage, cloud-init's status goes on to the stage
    /// of the step's module (written only when that changes).
    pub fn step(&mut self, step: &str) {
        if self.local || self.fresh {
            return;
        }
        let entered = self.progress.enter(Stage::of_step(step), super::uptime());
        if entered.is_empty() {
            return;
        }
        for s in entered {
            self.banner(s);
        }
        self.write_status();
    }

    /// The local stage is over (nodeagent-local.service ends, or the local half of
    /// `--stage all`): init-local finishes.
    pub fn end_stage(&mut self) {
        if self.fresh || self.progress.stage.is_none() {
            return;
        }
        self.progress.finish(super::uptime());
        self.write_status();
    }

    /// The document this tracker goes on from. The local stage starts the boot afresh, as
    /// cloud-init's init-local does; the main stage goes on from the document as the local
    /// stage (or an earlier reporter of this run) left it, unless that is of a finished boot (a
    /// second run of the main stage) or of an earlier boot (its times are later than this
    /// boot's uptime): then the main stages start again.
    fn begin(&mut self, now: f64) {
        if self.local {
            purge(&self.root);
            self.progress = Progress::default();
            return;
        }
        let mut p = read_status(&self.root).unwrap_or_default();
        let finished =
            crate::base::confine::metadata(&self.root, &format!("{DATA_DIR}/{RESULT}")).is_ok();
        let stale = p
            .entry(Stage::InitLocal)
            .start
            .is_some_and(|t| t > now + 1.0);
        if stale {
            p = Progress::default();
        }
        if finished || stale {
            for s in [Stage::Init, Stage::ModulesConfig, Stage::ModulesFinal] {
                p.stages[s as usize] = Default::default();
            }
            p.stage = None;
            purge_result(&self.root);
        }
        self.progress = p;
    }

    /// cloud-init's banner of a stage, in both logs.
    fn banner(&self, stage: Stage) {
        let text = format!(
            "Cloud-init v. {} running '{}' at {}. Up {:.2} seconds.",
            super::version(),
            stage.banner(),
            rfc2822_now(),
            super::uptime()
        );
        crate::base::outlog::cloud_init_output(&self.root, &text);
        log(&self.root, "INFO", &text);
    }

    fn write_status(&mut self) {
        let json = crate::formats::pyjson::to_python_json(&self.progress.to_json());
        if self.written.as_ref() == Some(&json) {
            return;
        }
        match self.write_linked(STATUS, json.as_bytes()) {
            Ok(()) => self.written = Some(json),
            Err(e) => tracing::warn!("cloud-init's {RUN_DIR}/{STATUS} not written: {e}"),
        }
    }

    /// result.json, `boot-finished` and cloud-init's final message: the boot is over.
    fn end_of_boot(&mut self, iid: &str, now: f64) {
        let json = crate::formats::pyjson::to_python_json(&self.progress.result_json());
        if let Err(e) = self.write_linked(RESULT, json.as_bytes()) {
            tracing::warn!("cloud-init's {RUN_DIR}/{RESULT} not written: {e}");
        }
        let stamp = rfc2822_now();
        if let Some(dir) = instance_dir(iid) {
            let text = format!("{now:.2} - {stamp} - v. {}\n", super::version());
            if let Err(e) = write_boot_finished(&self.root, &dir, text.as_bytes()) {
                tracing::warn!(
                    "cloud-init's {CLOUD_DIR}/instance/{BOOT_FINISHED} not written: {e}"
                );
            }
        }
        let ds = self.progress.datasource.as_deref().unwrap_or("None");
        let text = format!(
            "Cloud-init v. {} finished at {stamp}. Datasource {ds}.  Up {now:.2} seconds",
            super::version()
        );
        crate::base::outlog::cloud_init_output(&self.root, &text);
        log(&self.root, "INFO", &text);
    }

    /// `name` written in `DATA_DIR` (0644) and linked from `RUN_DIR`, as cloud-init does.
    fn write_linked(&mut self, name: &'static str, data: &[u8]) -> std::io::Result<()> {
        let (data_dir, run) = match &self.dirs {
            Some(dirs) => dirs.clone(),
            None => {
                let dirs = (
                    open_dir(&self.root, DATA_DIR)?,
                    open_dir(&self.root, RUN_DIR)?,
                );
                self.dirs.insert(dirs).clone()
            }
        };
        write_in(&data_dir, name, data, 0o644)?;
        if !self.linked.contains(&name) {
            run.replace_symlink(&format!("../../{DATA_DIR}/{name}"), name)?;
            self.linked.push(name);
        }
        Ok(())
    }
}

/// A line of `/var/log/cloud-init.log`, redacted.
fn log(root: &Path, level: &str, message: &str) {
    crate::base::outlog::cloud_init_log(root, level, &crate::base::redact::redact_text(message));
}

/// `Sat, 28 Nov 2026 12:00:00 +0000`, as cloud-init's `util.time_rfc2822`.
pub fn rfc2822_now() -> String {
    let fmt = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] +0000"
    );
    time::OffsetDateTime::now_utc()
        .format(&fmt)
        .unwrap_or_default()
}

/// The in-root directory `rel` (made 0755 with the missing ones above it), opened.
fn open_dir(root: &Path, rel: &str) -> std::io::Result<Arc<Dir>> {
    Ok(Arc::new(crate::base::confine::own_dir(root, rel)?))
}

fn write_in(dir: &Arc<Dir>, name: &str, data: &[u8], mode: u32) -> std::io::Result<()> {
    let opts = crate::base::fsio::Options::new(mode).volatile().shared();
    Ok(crate::base::fsio::write_in(dir, name, data, &opts)?)
}

/// `instances/<dir>/boot-finished`, and the `instance` link cloud-init's tools reach it by.
fn write_boot_finished(root: &Path, dir: &str, data: &[u8]) -> std::io::Result<()> {
    let instance = open_dir(root, &format!("{CLOUD_DIR}/instances/{dir}"))?;
    write_in(&instance, BOOT_FINISHED, data, 0o644)?;
    open_dir(root, CLOUD_DIR)?.replace_symlink(&format!("/{CLOUD_DIR}/instances/{dir}"), "instance")
}

/// The boot's instance data where cloud-init keeps it: the whole tree root-only, the redacted
/// one for everyone (what `cloud-init query` reads without root).
pub fn write_instance_data(root: &Path, sensitive: &str, public: &str) {
    let res = open_dir(root, RUN_DIR).and_then(|dir| {
        let opts = crate::base::fsio::Options::new(0o600).volatile().shared();
        let a =
            crate::base::fsio::stage_in(&dir, INSTANCE_DATA_SENSITIVE, sensitive.as_bytes(), &opts);
        let opts = crate::base::fsio::Options::new(0o644).volatile().shared();
        let b = crate::base::fsio::stage_in(&dir, INSTANCE_DATA, public.as_bytes(), &opts);
        let staged = match (a, b) {
            (Ok(a), Ok(b)) => vec![a, b],
            (Ok(s), Err(e)) | (Err(e), Ok(s)) => {
                crate::base::fsio::discard(vec![s]);
                return Err(e.into());
            }
            (Err(e), Err(_)) => return Err(e.into()),
        };
        Ok(crate::base::fsio::commit(staged)?)
    });
    if let Err(e) = res {
        tracing::warn!("cloud-init's {RUN_DIR}/{INSTANCE_DATA} not written: {e}");
    }
}

/// status.json of this root, if there is one that reads.
pub fn read_status(root: &Path) -> Option<Progress> {
    let text = read_capped(root, &format!("{RUN_DIR}/{STATUS}"))?;
    serde_json::from_slice(&text)
        .ok()
        .map(|v| Progress::from_json(&v))
}

/// An in-root file, links resolved inside the root, at most `MAX_STATUS_BYTES`.
pub fn read_capped(root: &Path, rel: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = crate::base::confine::open_read(root, rel).ok()?;
    let mut out = Vec::new();
    f.take(MAX_STATUS_BYTES).read_to_end(&mut out).ok()?;
    Some(out)
}

/// What cloud-init's init-local removes before it runs: the status and result files and
/// links, and the last boot's `boot-finished`.
fn purge(root: &Path) {
    for (dir, name) in [(DATA_DIR, STATUS), (RUN_DIR, STATUS)] {
        if let Ok(d) = Dir::open(root, dir) {
            let _ = d.remove_tree(name);
        }
    }
    purge_result(root);
}

/// result.json (file and link) and `boot-finished`: the boot is not over.
fn purge_result(root: &Path) {
    for (dir, name) in [
        (DATA_DIR, RESULT),
        (RUN_DIR, RESULT),
        ("var/lib/cloud/instance", BOOT_FINISHED),
    ] {
        if let Ok(d) = Dir::open(root, dir) {
            let _ = d.remove_tree(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status as the reporter hands it over.
    struct St {
        phase: &'static str,
        step: Option<&'static str>,
        error: Option<String>,
        warnings: Vec<String>,
    }

    impl St {
        fn seen(&self) -> Seen<'_> {
            Seen {
                phase: self.phase,
                step: self.step,
                detail: None,
                error: self.error.as_deref(),
                warnings: &self.warnings,
                instance_id: "vm/1",
            }
        }
    }

    fn status(phase: &'static str, step: Option<&'static str>) -> St {
        St {
            phase,
            step,
            error: None,
            warnings: Vec::new(),
        }
    }

    fn json(root: &Path, rel: &str) -> serde_json::Value {
        serde_json::from_slice(&crate::base::confine::read(root, rel).unwrap()).unwrap()
    }

    #[test]
    fn the_two_units_write_cloud_init_files_with_its_layout() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let ds = Some(datasource("nocloud", Some("/seed")));
        let mut local = Tracker::new(r, true, ds.clone());
        local.publish(&status("reading", None).seen());
        local.publish(&status("applying", Some("network")).seen());
        let doc = json(r, "run/cloud-init/status.json");
        assert_eq!(doc["v1"]["stage"], "init-local");
        assert!(doc["v1"]["init-local"]["start"].is_number());
        local.end_stage();
        let doc = json(r, "run/cloud-init/status.json");
        assert!(doc["v1"]["stage"].is_null());
        assert!(doc["v1"]["init-local"]["finished"].is_number());
        assert!(doc["v1"]["init"]["start"].is_null());
        assert!(crate::base::confine::metadata(r, "run/cloud-init/result.json").is_err());

        let mut main = Tracker::new(r, false, ds);
        main.publish(&status("applying", Some("write_files[0]:/etc/x")).seen());
        assert_eq!(json(r, "run/cloud-init/status.json")["v1"]["stage"], "init");
        main.publish(&status("applying", Some("runcmd[0]")).seen());
        let doc = json(r, "run/cloud-init/status.json");
        assert_eq!(doc["v1"]["stage"], "modules-final");
        assert!(doc["v1"]["modules-config"]["finished"].is_number());
        let mut done = status("done", None);
        done.warnings = vec!["growpart: no room".into()];
        main.publish(&done.seen());
        let doc = json(r, "run/cloud-init/status.json");
        assert!(doc["v1"]["stage"].is_null());
        assert_eq!(
            doc["v1"]["modules-final"]["recoverable_errors"]["WARNING"][0],
            "growpart: no room"
        );
        assert_eq!(
            json(r, "run/cloud-init/result.json"),
            serde_json::json!({"v1": {"datasource": "DataSourceNoCloud [seed=/seed]", "errors": []}})
        );
        // Where cloud-init keeps them: files in var/lib/cloud/data, links in run/cloud-init.
        assert_eq!(
            std::fs::read_link(r.join("run/cloud-init/status.json")).unwrap(),
            Path::new("../../var/lib/cloud/data/status.json")
        );
        assert_eq!(
            std::fs::read_link(r.join("var/lib/cloud/instance")).unwrap(),
            Path::new("/var/lib/cloud/instances/vm_1")
        );
        let bf =
            std::fs::read_to_string(r.join("var/lib/cloud/instances/vm_1/boot-finished")).unwrap();
        assert!(bf.contains(" - v. 25.1 (nodeagent "), "{bf}");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &str| std::fs::metadata(r.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("var/lib/cloud/data/status.json"), 0o644);
        assert_eq!(mode("var/lib/cloud/instances/vm_1/boot-finished"), 0o644);
        // The next boot's local stage starts afresh: no result, no boot-finished.
        let mut next = Tracker::new(r, true, None);
        next.publish(&status("reading", None).seen());
        assert!(crate::base::confine::metadata(r, "run/cloud-init/result.json").is_err());
        assert!(
            !r.join("var/lib/cloud/instances/vm_1/boot-finished")
                .exists()
        );
        assert!(json(r, "run/cloud-init/status.json")["v1"]["init"]["start"].is_null());
    }

    #[test]
    fn a_status_that_changes_nothing_in_the_document_leaves_the_file_alone() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let ino = || {
            std::fs::metadata(r.join("var/lib/cloud/data/status.json"))
                .unwrap()
                .ino()
        };
        let mut main = Tracker::new(r, false, None);
        main.publish(&status("applying", Some("write_files[0]:/etc/x")).seen());
        let first = ino();
        // Another step of the same stage, a detail: the same document, the same file.
        main.publish(&status("applying", Some("write_files[1]:/etc/y")).seen());
        main.step("write_files[2]:/etc/z");
        assert_eq!(ino(), first, "rewritten although nothing in it changed");
        // A new stage changes the document: written (a new file renamed into place).
        main.publish(&status("applying", Some("runcmd[0]")).seen());
        assert_ne!(ino(), first);
        assert_eq!(
            json(r, "run/cloud-init/status.json")["v1"]["stage"],
            "modules-final"
        );
    }

    #[test]
    fn a_failed_main_stage_ends_the_boot_with_its_error() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let mut main = Tracker::new(r, false, None);
        main.publish(&status("applying", Some("runcmd[1]")).seen());
        let mut failed = status("failed", Some("runcmd[1]"));
        failed.error = Some("runcmd[1]: exit status 3".into());
        main.publish(&failed.seen());
        let doc = json(r, "run/cloud-init/status.json");
        assert_eq!(
            doc["v1"]["modules-final"]["errors"][0],
            "runcmd[1]: exit status 3"
        );
        assert_eq!(
            json(r, "run/cloud-init/result.json")["v1"]["errors"][0],
            "runcmd[1]: exit status 3"
        );
        // A second main run (an operator's retry) starts the main stages again.
        let mut again = Tracker::new(r, false, None);
        again.publish(&status("reading", None).seen());
        let doc = json(r, "run/cloud-init/status.json");
        assert_eq!(doc["v1"]["modules-final"]["errors"], serde_json::json!([]));
        assert!(crate::base::confine::metadata(r, "run/cloud-init/result.json").is_err());
    }

    #[test]
    fn a_link_planted_in_the_root_does_not_lead_the_files_out() {
        let outside = tempfile::tempdir().unwrap();
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("var/lib")).unwrap();
        // An absolute link: inside the root it means <root>/elsewhere, never the host's.
        std::os::unix::fs::symlink(outside.path(), r.join("var/lib/cloud")).unwrap();
        let mut t = Tracker::new(r, false, None);
        t.publish(&status("done", None).seen());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let inside = r.join(outside.path().strip_prefix("/").unwrap());
        assert!(
            inside.join("data/status.json").exists(),
            "written inside the root"
        );
    }
}
