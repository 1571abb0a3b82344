//! kubeadm execution against the kubeadm stand-in (tests/kubeadm-standin: there is no real
//! kubeadm here; the stand-in checks its arguments and config, records each call, and fails
//! on request). Plans are hand-built from the real CABPK corpus until the full pipeline lands.

mod kubeadm_common;
mod prereq;
use kubeadm_common::*;
use libnodeagent::kubeadm::run::execute_with;
use libnodeagent::plan::{Action, KubeadmSpec};
use libnodeagent::report::{Phase, Reporter, read_status};
use std::time::{Duration, Instant};

fn spec_of(plan: &libnodeagent::plan::Plan) -> KubeadmSpec {
    plan.steps
        .iter()
        .find_map(|s| match &s.action {
            Action::Kubeadm(k) => Some(k.clone()),
            _ => None,
        })
        .unwrap()
}

fn join_files(port: u16) -> Vec<(String, Vec<u8>)> {
    vec![(
        JOIN_PATH.to_string(),
        worker_join_config(&format!("127.0.0.1:{port}"), &[]).into_bytes(),
    )]
}

#[test]
fn init_success_writes_sentinel_and_redacts_output() {
    if !prereq::corpus_present() {
        return;
    }
    let node = Node::new(&[]);
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    node.put(&files);
    let plan = plan_of(&files, &runcmd[0]);
    let t = MemTransport::default();
    let mut rep = Reporter::new(Some(&t), node.root(), "i-1");
    execute_with(
        &spec_of(&plan),
        &fast_settings(),
        node.root(),
        &mut rep,
        &node.runner,
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(node.sentinel()).unwrap(),
        "success\n"
    );
    let calls = node.calls();
    assert_eq!(node.cmds(), ["init:0"]);
    assert_eq!(
        calls[0]["config"],
        node.root()
            .join("run/kubeadm/kubeadm.yaml")
            .display()
            .to_string()
    );
    assert_eq!(
        calls[0]["config_sha256"],
        libnodeagent::plan::Content(files[8].1.clone()).sha256_hex()
    );
    // The stand-in printed kubeadm's join hint with a token: the log has it redacted.
    let out = node.kubeadm_log();
    assert!(
        out.contains("kubeadm join 127.0.0.1:6443 --token <redacted>"),
        "{out}"
    );
    assert!(!out.contains("q1w2e3.r4t5y6u7i8o9p0a1"));
    assert_eq!(t.statuses().last().unwrap()["phase"], "kubeadm");
}

#[test]
fn join_waits_for_a_late_endpoint() {
    let node = Node::new(&[]);
    let port = free_port();
    let files = join_files(port);
    node.put(&files);
    let plan = plan_of(&files, JOIN_LINE);
    listen_later(port, Duration::from_millis(1500));
    let t = MemTransport::default();
    let mut rep = Reporter::new(Some(&t), node.root(), "i-1");
    let start = Instant::now();
    execute_with(
        &spec_of(&plan),
        &fast_settings(),
        node.root(),
        &mut rep,
        &node.runner,
    )
    .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(1400));
    // kubeadm ran once, after the endpoint appeared, and succeeded.
    assert_eq!(node.cmds(), ["join:0"]);
    assert_eq!(node.calls()[0]["endpoint"], format!("127.0.0.1:{port}"));
    let waiting = t
        .statuses()
        .into_iter()
        .find(|s| s["phase"] == "waiting" && s.get("detail").is_some())
        .expect("a waiting status");
    assert!(
        waiting["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("127.0.0.1:{port}")),
        "{waiting}"
    );
    assert!(node.sentinel().exists());
}

#[test]
fn join_fails_twice_then_succeeds_with_reset_between() {
    let node = Node::new(&[("KUBEADM_STANDIN_FAIL_JOINS", "2")]);
    let port = free_port();
    listen_now(port);
    let files = join_files(port);
    node.put(&files);
    let mut rep = Reporter::new(None, node.root(), "i-1");
    execute_with(
        &spec_of(&plan_of(&files, JOIN_LINE)),
        &fast_settings(),
        node.root(),
        &mut rep,
        &node.runner,
    )
    .unwrap();
    assert_eq!(
        node.cmds(),
        ["join:1", "reset:0", "join:1", "reset:0", "join:0"]
    );
    assert_eq!(node.calls()[1]["argv"], serde_json::json!(["reset", "-f"]));
    assert!(node.sentinel().exists());
}

#[test]
fn join_gives_up_after_the_attempts() {
    let node = Node::new(&[("KUBEADM_STANDIN_FAIL_JOINS", "99")]);
    let port = free_port();
    listen_now(port);
    let files = join_files(port);
    node.put(&files);
    let t = MemTransport::default();
    let mut rep = Reporter::new(Some(&t), node.root(), "i-1");
    let mut s = fast_settings();
    s.join_attempts = 3;
    let e = execute_with(
        &spec_of(&plan_of(&files, JOIN_LINE)),
        &s,
        node.root(),
        &mut rep,
        &node.runner,
    )
    .unwrap_err();
    assert_eq!(
        e.kind(),
        libnodeagent::base::error::ErrorKind::CommandFailed,
        "{e}"
    );
    assert!(e.message.contains("after 3 attempt(s)"), "{e}");
    assert_eq!(
        node.cmds(),
        ["join:1", "reset:0", "join:1", "reset:0", "join:1"]
    );
    assert!(!node.sentinel().exists());
    let st = read_status(node.root()).unwrap();
    assert_eq!(st.phase, Phase::Failed);
    assert!(
        st.output_tail
            .iter()
            .any(|l| l.contains("KUBEADM_STANDIN_FAIL_JOINS")),
        "{:?}",
        st.output_tail
    );
    let last = t.statuses().pop().unwrap();
    assert_eq!(last["phase"], "failed");
    assert!(
        last["error"].as_str().unwrap().contains("last output"),
        "{last}"
    );
}

#[test]
fn endpoint_never_reachable_fails_within_the_deadline() {
    let node = Node::new(&[]);
    let port = free_port();
    let files = join_files(port);
    node.put(&files);
    let t = MemTransport::default();
    let mut rep = Reporter::new(Some(&t), node.root(), "i-1");
    let mut s = fast_settings();
    s.endpoint_wait_secs = 2;
    let start = Instant::now();
    let e = execute_with(
        &spec_of(&plan_of(&files, JOIN_LINE)),
        &s,
        node.root(),
        &mut rep,
        &node.runner,
    )
    .unwrap_err();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let ep = format!("127.0.0.1:{port}");
    assert_eq!(
        e.kind(),
        libnodeagent::base::error::ErrorKind::Timeout,
        "{e}"
    );
    assert!(e.message.contains(&ep), "{e}");
    assert!(node.calls().is_empty(), "kubeadm must not run");
    let phases: Vec<String> = t
        .statuses()
        .iter()
        .map(|s| s["phase"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(phases.first().map(String::as_str), Some("waiting"));
    assert_eq!(phases.last().map(String::as_str), Some("failed"));
    let st = read_status(node.root()).unwrap();
    assert!(st.error.unwrap().contains(&ep));
    assert!(!node.sentinel().exists());
}

#[test]
fn failed_init_stops_without_retry_or_reset() {
    if !prereq::corpus_present() {
        return;
    }
    let node = Node::new(&[("KUBEADM_STANDIN_FAIL_INIT", "1")]);
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    node.put(&files);
    let mut rep = Reporter::new(None, node.root(), "i-1");
    let e = execute_with(
        &spec_of(&plan_of(&files, &runcmd[0])),
        &fast_settings(),
        node.root(),
        &mut rep,
        &node.runner,
    )
    .unwrap_err();
    assert_eq!(
        e.kind(),
        libnodeagent::base::error::ErrorKind::CommandFailed,
        "{e}"
    );
    assert!(
        e.message.contains("kubeadm init failed: exit status: 1"),
        "{e}"
    );
    assert_eq!(node.cmds(), ["init:1"]);
    assert!(!node.sentinel().exists());
    let st = read_status(node.root()).unwrap();
    assert!(
        st.output_tail
            .iter()
            .any(|l| l.contains("wait-control-plane")),
        "{:?}",
        st.output_tail
    );
}

#[test]
fn kubeadm_deadline_kills_a_hung_kubeadm() {
    if !prereq::corpus_present() {
        return;
    }
    let node = Node::new(&[("KUBEADM_STANDIN_SLEEP", "30")]);
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    node.put(&files);
    let mut rep = Reporter::new(None, node.root(), "i-1");
    let mut s = fast_settings();
    s.timeout_secs = 1;
    let start = Instant::now();
    let e = execute_with(
        &spec_of(&plan_of(&files, &runcmd[0])),
        &s,
        node.root(),
        &mut rep,
        &node.runner,
    )
    .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(
        e.kind(),
        libnodeagent::base::error::ErrorKind::Timeout,
        "{e}"
    );
    assert!(e.message.contains("after 1s"), "{e}");
}

#[test]
fn sentinel_present_means_done() {
    if !prereq::corpus_present() {
        return;
    }
    let node = Node::new(&[]);
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    node.put(&files);
    libnodeagent::kubeadm::run::write_sentinel(node.root()).unwrap();
    let mut rep = Reporter::new(None, node.root(), "i-1");
    execute_with(
        &spec_of(&plan_of(&files, &runcmd[0])),
        &fast_settings(),
        node.root(),
        &mut rep,
        &node.runner,
    )
    .unwrap();
    assert!(node.calls().is_empty());
}

#[test]
fn standin_rejects_bad_arguments_and_configs() {
    // Arguments nodeagent never passes are refused (exit 2); a config the stand-in cannot read
    // with nodeagent's reader is refused (exit 3). Whether kubeadm accepts a config is real
    // kubeadm's to say (kubeadm_oracle.rs), not the stand-in's.
    let node = Node::new(&[]);
    let run = |args: &[&str]| {
        std::process::Command::new(standin())
            .args(args)
            .envs(node.runner.env.iter().cloned())
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(run(&["init"]), Some(2));
    assert_eq!(run(&["join", "--config", "/nonexistent.yaml"]), Some(3));
    assert_eq!(run(&["reset"]), Some(2));
    let bad = node.root().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nbogus: 1\n",
    )
    .unwrap();
    assert_eq!(run(&["init", "--config", bad.to_str().unwrap()]), Some(3));
    assert_eq!(
        run(&[
            "init",
            "--config",
            bad.to_str().unwrap(),
            "--ignore-preflight-errors=all"
        ]),
        Some(2)
    );
    assert_eq!(node.calls().len(), 5);
}

#[test]
fn file_discovery_waits_for_the_kubeconfig_server() {
    let node = Node::new(&[]);
    let port = free_port();
    let cfg = "apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\ndiscovery:\n  file:\n    kubeConfigPath: /etc/kubernetes/discovery.conf\n";
    let kc = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n"
    );
    let files = vec![
        (
            "/etc/kubernetes/discovery.conf".to_string(),
            kc.into_bytes(),
        ),
        (JOIN_PATH.to_string(), cfg.as_bytes().to_vec()),
    ];
    node.put(&files);
    listen_later(port, Duration::from_millis(800));
    let t = MemTransport::default();
    let mut rep = Reporter::new(Some(&t), node.root(), "i-1");
    execute_with(
        &spec_of(&plan_of(&files, JOIN_LINE)),
        &fast_settings(),
        node.root(),
        &mut rep,
        &node.runner,
    )
    .unwrap();
    assert!(t.statuses().iter().any(|s| {
        s["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&format!("127.0.0.1:{port}")))
    }));
    assert_eq!(node.cmds(), ["join:0"]);
}
