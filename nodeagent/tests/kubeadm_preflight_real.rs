//! Real kubeadm in pre-flight (`kubeadm::validate`): when kubeadm is on the node's PATH,
//! `kubeadm config validate` judges the kubeadm config before the first write, besides
//! nodeagent's reader, and a refusal names which of the two refused.
//!
//! With the real kubeadm (tests/k8s/build; skipped without it unless NODEAGENT_REQUIRE_K8S=1),
//! with the stand-in (which answers `config validate` with nodeagent's reader) and with fake
//! kubeadm scripts (their tests say so in their names: a refusal's redaction, a kubeadm that
//! cannot start or overruns), through the library and through `nodeagent run --root --exec`.

mod kubeadm_common;
#[allow(clippy::duplicate_mod)]
#[path = "prereq/mod.rs"]
mod prereq;

use kubeadm_common::*;
use libnodeagent::kubeadm::validate::{self, Checked};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn nothing_finished() -> BTreeSet<String> {
    BTreeSet::new()
}

/// A PATH holding only `dir`.
fn path_of(dir: &Path) -> OsString {
    dir.as_os_str().to_owned()
}

/// `dir/kubeadm`: a shell script with `body`.
fn fake_kubeadm(dir: &Path, body: &str) {
    let p = dir.join("kubeadm");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The corpus's init plan with its kubeadm config's Kubernetes version replaced.
fn corpus_plan_at(version: &str) -> libnodeagent::plan::Plan {
    let (mut files, runcmd) = corpus_parts(CORPUS_INIT);
    let cfg = String::from_utf8(file(&files, "/run/kubeadm/kubeadm.yaml").to_vec()).unwrap();
    let cfg = cfg.replace(
        "kubernetesVersion: v1.26.6",
        &format!("kubernetesVersion: {version}"),
    );
    replace_file(&mut files, "/run/kubeadm/kubeadm.yaml", cfg.into_bytes());
    let line = runcmd.iter().find(|l| l.contains("kubeadm init")).unwrap();
    plan_of(&files, line)
}

#[test]
fn real_kubeadm_judges_the_config_in_preflight() {
    if !prereq::corpus_present() {
        return;
    }
    let Some(bin) = prereq::k8s_bin("kubeadm") else {
        return;
    };
    let path = path_of(&bin);
    let root = Path::new("/");
    // At a version kubeadm v1.34 deploys: accepted.
    let ok = corpus_plan_at("v1.34.4");
    let t0 = std::time::Instant::now();
    assert_eq!(
        validate::check(&ok, root, true, Some(&path), false, &nothing_finished).unwrap(),
        Checked::Accepted(1)
    );
    println!(
        "real kubeadm config validate in pre-flight: {:?}",
        t0.elapsed()
    );
    // The corpus as CABPK rendered it, v1.26.6: nodeagent's reader accepts it (it does not
    // know the node's kubeadm), kubeadm v1.34 refuses to deploy a control plane that old.
    let old = corpus_plan();
    let e = validate::check(&old, root, true, Some(&path), false, &nothing_finished).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("real kubeadm refused it"), "{msg}");
    assert!(msg.contains("nodeagent's reader accepted it"), "{msg}");
    assert!(msg.contains(">= 1.33.0"), "{msg}");
    assert!(e.place.contains("/run/kubeadm/kubeadm.yaml"), "{e:?}");
    // Where the kubeadm step will not run, nor does the check.
    assert_eq!(
        validate::check(&old, root, false, Some(&path), false, &nothing_finished).unwrap(),
        Checked::NotRun
    );
    let finished = || BTreeSet::from(["kubeadm".to_string()]);
    assert_eq!(
        validate::check(&old, root, true, Some(&path), false, &finished).unwrap(),
        Checked::Accepted(0)
    );
}

#[test]
fn a_fake_refusing_kubeadm_is_named_and_redacted() {
    if !prereq::corpus_present() {
        return;
    }
    let plan = corpus_plan_at("v1.34.4");
    let t = tempfile::tempdir().unwrap();
    let root = Path::new("/");
    // Refuses, quoting a token as kubeadm quotes offending values.
    fake_kubeadm(
        t.path(),
        "cat >/dev/null\necho 'discovery.bootstrapToken.token: Invalid value: \"abcdef.0123456789abcdef\": the bootstrap token is invalid' >&2\necho 'To see the stack trace of this error execute with --v=5 or higher' >&2\nexit 1",
    );
    let path = path_of(t.path());
    let e = validate::check(&plan, root, true, Some(&path), false, &nothing_finished).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("real kubeadm refused it"), "{msg}");
    assert!(msg.contains("the bootstrap token is invalid"), "{msg}");
    assert!(!msg.contains("0123456789abcdef"), "{msg}");
    assert!(!msg.contains("stack trace"), "{msg}");
    // It was handed the config on stdin, with the arguments kubeadm takes.
    fake_kubeadm(
        t.path(),
        &format!(
            "echo \"$@\" > {0}/argv\ncat > {0}/stdin",
            t.path().display()
        ),
    );
    assert_eq!(
        validate::check(&plan, root, true, Some(&path), false, &nothing_finished).unwrap(),
        Checked::Accepted(1)
    );
    assert_eq!(
        std::fs::read_to_string(t.path().join("argv")).unwrap(),
        "config validate --config /proc/self/fd/0\n"
    );
    let (files, _) = corpus_parts(CORPUS_INIT);
    let want = String::from_utf8(file(&files, "/run/kubeadm/kubeadm.yaml").to_vec())
        .unwrap()
        .replace("v1.26.6", "v1.34.4");
    assert_eq!(
        std::fs::read_to_string(t.path().join("stdin")).unwrap(),
        want
    );
    // The same bytes again in this process: judged once.
    assert_eq!(
        validate::check(&plan, root, true, Some(&path), false, &nothing_finished).unwrap(),
        Checked::Accepted(0)
    );
    // A join whose discovery kubeconfig is not on disk yet (the plan writes it): left to
    // nodeagent's pre-flight, since `config validate` would refuse the absent file.
    let file_join = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  file:\n    kubeConfigPath: /nonexistent/discovery.conf\n";
    let files = vec![(
        "/run/kubeadm/kubeadm-join-config.yaml".to_string(),
        file_join.as_bytes().to_vec(),
    )];
    let join_plan = plan_of(
        &files,
        "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml",
    );
    assert_eq!(
        validate::check(
            &join_plan,
            root,
            true,
            Some(&path),
            false,
            &nothing_finished
        )
        .unwrap(),
        Checked::Accepted(0)
    );
    // No kubeadm on the PATH (a workstation), or not executable: not run, as today.
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(
        validate::check(
            &plan,
            root,
            true,
            Some(&path_of(empty.path())),
            false,
            &nothing_finished
        )
        .unwrap(),
        Checked::NotRun
    );
    assert_eq!(
        validate::check(&plan, root, true, None, false, &nothing_finished).unwrap(),
        Checked::NotRun
    );
    std::fs::write(empty.path().join("kubeadm"), "#!/bin/sh\nexit 1\n").unwrap();
    assert_eq!(
        validate::check(
            &plan,
            root,
            true,
            Some(&path_of(empty.path())),
            false,
            &nothing_finished
        )
        .unwrap(),
        Checked::NotRun
    );
    // Under --root R, kubeadm is looked up on the PATH inside R and run chrooted into R, as
    // the kubeadm step runs it: it sees R's files (the config in R's /run/nodeagent, removed
    // after) and none of the host's; a CAPI sentinel in R (kubeadm succeeded) means the step
    // will not run, nor does the check.
    let r = tempfile::tempdir().unwrap();
    if !prereq::exec_root(r.path(), &["/bin/cat"]) {
        return;
    }
    std::fs::create_dir_all(r.path().join("usr/bin")).unwrap();
    fake_kubeadm(
        &r.path().join("usr/bin"),
        "[ -e /inside-r ] || exit 9
/bin/cat \"$4\" > /seen.yaml
echo 'error: refused in the root' >&2; exit 1",
    );
    std::fs::write(r.path().join("inside-r"), "").unwrap();
    let inside = OsString::from("/usr/bin");
    let e = validate::check(
        &plan,
        r.path(),
        true,
        Some(&inside),
        false,
        &nothing_finished,
    )
    .unwrap_err();
    assert!(e.to_string().contains("refused in the root"), "{e}");
    let seen = std::fs::read_to_string(r.path().join("seen.yaml")).unwrap();
    assert!(seen.contains("kubernetesVersion: v1.34.4"), "{seen}");
    assert!(
        !r.path()
            .join("run/nodeagent/kubeadm-validate.yaml")
            .exists()
    );
    let sentinel = r.path().join("run/cluster-api/bootstrap-success.complete");
    std::fs::create_dir_all(sentinel.parent().unwrap()).unwrap();
    std::fs::write(&sentinel, "success\n").unwrap();
    assert_eq!(
        validate::check(
            &plan,
            r.path(),
            true,
            Some(&inside),
            false,
            &nothing_finished
        )
        .unwrap(),
        Checked::NotRun
    );
    // A kubeadm that cannot start gives no verdict: a warning, not a refusal.
    let broken = tempfile::tempdir().unwrap();
    std::fs::write(
        broken.path().join("kubeadm"),
        "#!/nonexistent/interpreter\n",
    )
    .unwrap();
    std::fs::set_permissions(
        broken.path().join("kubeadm"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let plan2 = corpus_plan_at("v1.34.3");
    match validate::check(
        &plan2,
        root,
        true,
        Some(&path_of(broken.path())),
        false,
        &nothing_finished,
    ) {
        Ok(Checked::Warning(w)) => assert!(w.contains("gave no verdict"), "{w}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_standin_answers_config_validate() {
    if !prereq::corpus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = standin_path_dir(dir.path());
    let plan = corpus_plan_at("v1.34.2");
    assert_eq!(
        validate::check(
            &plan,
            Path::new("/"),
            true,
            Some(path.as_os_str()),
            false,
            &nothing_finished
        )
        .unwrap(),
        Checked::Accepted(1)
    );
}

/// `nodeagent run --root R --exec` with real kubeadm v1.34.4 as R's kubeadm: it refuses the
/// corpus's v1.26.6 control plane (v1.34 deploys 1.33 and newer), so the run exits 1, the
/// error names real kubeadm, and nothing of the plan, and nothing kubeadm init writes, is on disk.
#[test]
fn run_stops_before_the_first_write_when_real_kubeadm_refuses() {
    if !prereq::corpus_present() {
        return;
    }
    let Some(bin) = prereq::k8s_bin("kubeadm") else {
        return;
    };
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    let line = runcmd.iter().find(|l| l.contains("kubeadm init")).unwrap();
    let e2e = E2e::new(
        &userdata(&files, line),
        &image_config(""),
        &[("PATH", "/usr/local/bin:/usr/bin:/bin")],
    );
    let root = e2e.node.root().to_path_buf();
    let local_bin = root.join("usr/local/bin");
    std::fs::create_dir_all(&local_bin).unwrap();
    // Statically linked (CGO_ENABLED=0): the binary alone runs chrooted.
    std::fs::copy(bin.join("kubeadm"), local_bin.join("kubeadm")).unwrap();
    let Some((code, stderr)) = e2e.run() else {
        return;
    };
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("real kubeadm refused it"), "{stderr}");
    assert!(stderr.contains("1.33"), "kubeadm's reason: {stderr}");
    for p in [
        "run/kubeadm/kubeadm.yaml",
        "etc/kubernetes/pki/ca.key",
        "etc/kubernetes/manifests",
        "etc/kubernetes/admin.conf",
        "var/lib/kubelet/config.yaml",
    ] {
        assert!(!root.join(p).exists(), "/{p} was written");
    }
    assert!(e2e.node.calls().is_empty(), "the stand-in was called");
    let status = e2e.status();
    assert!(
        format!("{status:?}").contains("real kubeadm refused"),
        "{status:?}"
    );
}

/// The same with a fake kubeadm script that refuses like v1.34 and records every call that is
/// not `config validate`: nothing of the plan is written and kubeadm init is never called.
#[test]
fn run_stops_before_the_first_write_when_a_fake_kubeadm_refuses() {
    if !prereq::corpus_present() {
        return;
    }
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    let line = runcmd.iter().find(|l| l.contains("kubeadm init")).unwrap();
    let e2e = E2e::new(
        &userdata(&files, line),
        &image_config(""),
        &[("PATH", "/usr/local/bin:/usr/bin:/bin")],
    );
    let root = e2e.node.root().to_path_buf();
    let local_bin = root.join("usr/local/bin");
    std::fs::create_dir_all(&local_bin).unwrap();
    fake_kubeadm(
        &local_bin,
        "[ \"$1\" = config ] || { echo \"$@\" >> /not-validate; exit 0; }\necho 'error: this version of kubeadm only supports deploying clusters with the control plane version >= 1.33.0' >&2\nexit 1",
    );
    let Some((code, stderr)) = e2e.run() else {
        return;
    };
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("real kubeadm refused it"), "{stderr}");
    assert!(!root.join("run/kubeadm/kubeadm.yaml").exists());
    assert!(!root.join("etc/kubernetes/pki/ca.key").exists());
    assert!(
        !root.join("not-validate").exists(),
        "kubeadm ran past the check"
    );
    assert!(e2e.node.calls().is_empty());
    let status = e2e.status();
    assert!(
        format!("{status:?}").contains("real kubeadm refused"),
        "{status:?}"
    );
}

/// The same run with the stand-in as R's kubeadm: its `config validate` accepts, once per
/// stage, and the run goes on to `kubeadm init` as before.
#[test]
fn run_with_the_accepting_standin_goes_on() {
    if !prereq::corpus_present() {
        return;
    }
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    let line = runcmd.iter().find(|l| l.contains("kubeadm init")).unwrap();
    let e2e = E2e::new(
        &userdata(&files, line),
        &image_config(""),
        &[
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("KUBEADM_STANDIN_VALIDATE_LOG", "/validate.jsonl"),
        ],
    );
    let Some((code, stderr)) = e2e.run() else {
        return;
    };
    // The corpus is v1.26.6, which the stand-in does not judge (real kubeadm v1.34 would).
    assert_eq!(code, 0, "{stderr}");
    // Chrooted into the root as the step runs kubeadm, the stand-in noted its one verdict
    // inside the root.
    let notes = std::fs::read_to_string(e2e.node.root().join("validate.jsonl")).unwrap();
    assert_eq!(notes.lines().count(), 1, "{notes}");
    assert!(notes.contains("\"exit\":0"), "{notes}");
    assert_eq!(e2e.node.cmds(), ["init:0"]);
}

/// The two units of one boot (`run --stage local`, then `--stage main`): the local unit asks
/// kubeadm before its first write and keeps the verdict in the root's `/run`; the main unit,
/// with the same config and kubeadm, does not ask again.
#[test]
fn the_main_unit_takes_the_local_units_verdict() {
    if !prereq::corpus_present() {
        return;
    }
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    let line = runcmd.iter().find(|l| l.contains("kubeadm init")).unwrap();
    let notes = tempfile::tempdir().unwrap();
    let e2e = E2e::new(
        &userdata(&files, line),
        &image_config(""),
        &[
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("KUBEADM_STANDIN_VALIDATE_LOG", "/validate.jsonl"),
        ],
    );
    let Some(env) = e2e.node.chrooted_env() else {
        return;
    };
    let facts = notes.path().join("facts.yaml");
    std::fs::write(&facts, "hostname: node-1\nlocal-ipv4: 10.0.0.10\n").unwrap();
    for stage in ["local", "main"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .args(["run", "--exec", "--stage", stage, "--transport"])
            .arg(format!("dir:{}", e2e.data().display()))
            .arg("--facts")
            .arg(&facts)
            .arg("--root")
            .arg(e2e.node.root())
            .envs(env.clone())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{stage}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let calls = std::fs::read_to_string(e2e.node.root().join("validate.jsonl")).unwrap();
    assert_eq!(calls.lines().count(), 1, "{calls}");
    let kept =
        std::fs::read_to_string(e2e.node.root().join("run/nodeagent/kubeadm-accepted")).unwrap();
    assert_eq!(kept.lines().count(), 1, "{kept}");
    assert_eq!(e2e.node.cmds(), ["init:0"]);
}

/// `kubeadm.preflight_validate: false` in the image config: pre-flight does not ask kubeadm
/// (the refusing fake is never called with `config validate`), the plan is written and the
/// kubeadm step runs kubeadm init, which this fake accepts.
#[test]
fn the_image_config_turns_real_kubeadm_in_preflight_off() {
    if !prereq::corpus_present() {
        return;
    }
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    let line = runcmd.iter().find(|l| l.contains("kubeadm init")).unwrap();
    let e2e = E2e::new(
        &userdata(&files, line),
        &image_config("  preflight_validate: false\n"),
        &[("PATH", "/usr/local/bin:/usr/bin:/bin")],
    );
    let root = e2e.node.root().to_path_buf();
    let local_bin = root.join("usr/local/bin");
    std::fs::create_dir_all(&local_bin).unwrap();
    fake_kubeadm(
        &local_bin,
        "echo \"$@\" >> /kubeadm-calls\n[ \"$1\" = config ] || exit 0\necho 'error: refused' >&2\nexit 1",
    );
    let Some((code, stderr)) = e2e.run() else {
        return;
    };
    assert_eq!(code, 0, "{stderr}");
    let calls = std::fs::read_to_string(root.join("kubeadm-calls")).unwrap();
    assert!(!calls.contains("config validate"), "{calls}");
    assert!(calls.contains("init --config"), "{calls}");
    assert!(root.join("run/kubeadm/kubeadm.yaml").exists());
    assert!(!root.join("run/nodeagent/kubeadm-accepted").exists());
}

/// A worker's join config is not judged in pre-flight (`kubeadm join` validates it first
/// thing, before it changes the node); a control-plane join's still is.
#[test]
fn a_workers_join_config_is_left_to_kubeadm_join() {
    let t = tempfile::tempdir().unwrap();
    fake_kubeadm(
        t.path(),
        &format!(
            "echo \"$@\" >> {}/calls\ncat >/dev/null",
            t.path().display()
        ),
    );
    let path = path_of(t.path());
    let worker = worker_join_config("10.0.0.10:6443", &[]);
    let plan = plan_of(
        &[(JOIN_PATH.to_string(), worker.clone().into_bytes())],
        JOIN_LINE,
    );
    assert_eq!(
        validate::check(
            &plan,
            Path::new("/"),
            true,
            Some(&path),
            false,
            &nothing_finished
        )
        .unwrap(),
        Checked::Accepted(0)
    );
    assert!(!t.path().join("calls").exists(), "kubeadm was asked");
    let control_plane = format!(
        "{worker}controlPlane:\n  localAPIEndpoint:\n    advertiseAddress: 10.0.0.11\n    bindPort: 6443\n"
    );
    let plan = plan_of(
        &[(JOIN_PATH.to_string(), control_plane.into_bytes())],
        JOIN_LINE,
    );
    assert_eq!(
        validate::check(
            &plan,
            Path::new("/"),
            true,
            Some(&path),
            false,
            &nothing_finished
        )
        .unwrap(),
        Checked::Accepted(1)
    );
    let calls = std::fs::read_to_string(t.path().join("calls")).unwrap();
    assert_eq!(calls, "config validate --config /proc/self/fd/0\n");
}

/// A worker whose join config the node's kubeadm refuses: pre-flight did not ask, so the plan
/// is written and `kubeadm join` runs once; its failure is then put to `config validate`,
/// which refuses, and the step stops at once, the refusal named, with no reset and no retry.
#[test]
fn a_refused_workers_join_stops_after_its_first_attempt() {
    let port = free_port();
    listen_now(port);
    let cfg = worker_join_config(&format!("127.0.0.1:{port}"), &[]);
    let e2e = E2e::new(
        &userdata(&[(JOIN_PATH.to_string(), cfg.into_bytes())], JOIN_LINE),
        &image_config(""),
        &[("PATH", "/usr/local/bin:/usr/bin:/bin")],
    );
    let root = e2e.node.root().to_path_buf();
    let local_bin = root.join("usr/local/bin");
    std::fs::create_dir_all(&local_bin).unwrap();
    fake_kubeadm(
        &local_bin,
        "echo \"$1 $2\" >> /kubeadm-calls\necho 'error: no kind \"JoinConfiguration\" is registered for version \"kubeadm.k8s.io/v1beta4\"' >&2\nexit 1",
    );
    let Some((code, stderr)) = e2e.run() else {
        return;
    };
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("real kubeadm refused it"), "{stderr}");
    assert!(stderr.contains("is registered for version"), "{stderr}");
    let calls = std::fs::read_to_string(root.join("kubeadm-calls")).unwrap();
    assert_eq!(calls, "join --config\nconfig validate\n");
    assert!(root.join("run/kubeadm/kubeadm-join-config.yaml").exists());
    assert!(
        !root
            .join("run/cluster-api/bootstrap-success.complete")
            .exists()
    );
}

/// The same worker with a kubeadm that accepts: `config validate` is never run, on the way
/// to a joined node.
#[test]
fn an_accepted_workers_join_never_runs_config_validate() {
    let port = free_port();
    listen_now(port);
    let cfg = worker_join_config(&format!("127.0.0.1:{port}"), &[]);
    let e2e = E2e::new(
        &userdata(&[(JOIN_PATH.to_string(), cfg.into_bytes())], JOIN_LINE),
        &image_config(""),
        &[("PATH", "/usr/local/bin:/usr/bin:/bin")],
    );
    let root = e2e.node.root().to_path_buf();
    let local_bin = root.join("usr/local/bin");
    std::fs::create_dir_all(&local_bin).unwrap();
    fake_kubeadm(&local_bin, "echo \"$1 $2\" >> /kubeadm-calls");
    let Some((code, stderr)) = e2e.run() else {
        return;
    };
    assert_eq!(code, 0, "{stderr}");
    let calls = std::fs::read_to_string(root.join("kubeadm-calls")).unwrap();
    assert_eq!(calls, "join --config\n");
    assert!(
        root.join("run/cluster-api/bootstrap-success.complete")
            .exists()
    );
}
