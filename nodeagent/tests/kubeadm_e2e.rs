//! End to end through `nodeagent run --exec` with the kubeadm stand-in on PATH (there is no
//! real kubeadm here: tests/kubeadm-standin checks and records what it is given).

mod kubeadm_common;
mod prereq;
use kubeadm_common::*;
use std::time::Duration;

fn join_userdata(port: u16) -> String {
    let cfg = worker_join_config(&format!("127.0.0.1:{port}"), &[]);
    userdata(&[(JOIN_PATH.to_string(), cfg.into_bytes())], JOIN_LINE)
}

#[test]
fn init_success() {
    if !prereq::corpus_present() {
        return;
    }
    let ud = std::fs::read_to_string(CORPUS_INIT).unwrap();
    let e = E2e::new(&ud, &image_config(""), &[]);
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 0, "{err}");
    assert_eq!(e.node.cmds(), ["init:0"]);
    assert!(e.node.sentinel().exists());
    assert_eq!(e.status().phase, libnodeagent::report::Phase::Done);
    assert_eq!(e.guestinfo_status()["phase"], "done");
    assert_eq!(e.guestinfo_status()["instance_id"], "i-e2e");
    // kubeadm ran chrooted into the root: the config it got is the file the plan wrote, by
    // its path inside the root, and it was there to be read.
    assert_eq!(e.node.calls()[0]["config"], "/run/kubeadm/kubeadm.yaml");
    assert!(e.node.root().join("run/kubeadm/kubeadm.yaml").is_file());
}

#[test]
fn join_succeeds_when_the_endpoint_comes_up_late() {
    let port = free_port();
    let e = E2e::new(&join_userdata(port), &image_config(""), &[]);
    listen_later(port, Duration::from_millis(2000));
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 0, "{err}");
    assert_eq!(e.node.cmds(), ["join:0"]);
    let events =
        std::fs::read_to_string(e.node.root().join("var/log/nodeagent/events.jsonl")).unwrap();
    assert!(
        events.contains("\"phase\":\"waiting\"") && events.contains(&format!("127.0.0.1:{port}")),
        "{events}"
    );
    assert!(e.node.sentinel().exists());
}

#[test]
fn join_fails_twice_then_succeeds() {
    let port = free_port();
    listen_now(port);
    let e = E2e::new(
        &join_userdata(port),
        &image_config(""),
        &[("KUBEADM_STANDIN_FAIL_JOINS", "2")],
    );
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        e.node.cmds(),
        ["join:1", "reset:0", "join:1", "reset:0", "join:0"]
    );
    assert!(e.node.sentinel().exists());
}

#[test]
fn endpoint_never_reachable() {
    let port = free_port();
    let e = E2e::new(
        &join_userdata(port),
        &image_config("").replace("endpoint_wait_secs: 20", "endpoint_wait_secs: 2"),
        &[],
    );
    let start = std::time::Instant::now();
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 1, "{err}");
    assert!(start.elapsed() < Duration::from_secs(15));
    let ep = format!("127.0.0.1:{port}");
    let g = e.guestinfo_status();
    assert_eq!(g["phase"], "failed");
    assert!(g["error"].as_str().unwrap().contains(&ep), "{g}");
    assert!(e.node.calls().is_empty());
    assert!(!e.node.sentinel().exists());
    // One terminal report, although both the kubeadm executor and the run loop report it.
    let events =
        std::fs::read_to_string(e.node.root().join("var/log/nodeagent/events.jsonl")).unwrap();
    assert_eq!(
        events.matches("\"phase\":\"failed\"").count(),
        1,
        "{events}"
    );
}

/// Files the run created on the node, outside nodeagent's own status/log/state.
fn node_files(root: &std::path::Path) -> Vec<String> {
    fn walk(d: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, root, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut v = Vec::new();
    walk(root, root, &mut v);
    v.retain(|p| {
        !p.starts_with("run/nodeagent/")
            && !p.starts_with("var/log/nodeagent/")
            && !p.starts_with("run/cloud-init/")
            && !p.starts_with("var/lib/cloud/")
            && !p.starts_with("var/log/cloud-init")
            && p != "etc/nodeagent/config.yaml"
            // What the test put in the root for the chrooted kubeadm (Node::chrooted_env).
            && !["usr/bin/kubeadm", "bin/sh", "lib/", "lib64/"]
                .iter()
                .any(|t| p.starts_with(t))
    });
    v
}

#[test]
fn bad_pki_and_bad_config_fail_before_any_write() {
    if !prereq::corpus_present() {
        return;
    }
    let (mut files, runcmd) = corpus_parts(CORPUS_INIT);
    let other = file(&files, "/etc/kubernetes/pki/etcd/ca.key").to_vec();
    replace_file(&mut files, "/etc/kubernetes/pki/ca.key", other);
    let bad_pki = userdata(&files, &runcmd[0]);
    let (mut files, _) = corpus_parts(CORPUS_INIT);
    let cfg = String::from_utf8(file(&files, "/run/kubeadm/kubeadm.yaml").to_vec()).unwrap();
    replace_file(
        &mut files,
        "/run/kubeadm/kubeadm.yaml",
        cfg.replace("clusterName: test", "clusterName: test\nclusterNmae: typo")
            .into_bytes(),
    );
    let bad_cfg = userdata(&files, &runcmd[0]);
    for (ud, want) in [
        (bad_pki, "/etc/kubernetes/pki/ca.key"),
        (bad_cfg, "clusterNmae"),
    ] {
        let e = E2e::new(&ud, &image_config(""), &[]);
        let Some((code, err)) = e.run() else {
            return;
        };
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(want), "{err}");
        assert!(e.node.calls().is_empty(), "kubeadm never invoked");
        assert_eq!(
            node_files(e.node.root()),
            Vec::<String>::new(),
            "nothing written"
        );
        let g = e.guestinfo_status();
        assert_eq!(g["phase"], "failed");
        assert!(g["error"].as_str().unwrap().contains(want), "{g}");
    }
}
