//! The systemd units in units/: the ordering rules that keep a node from
//! deadlocking or running kubeadm too early. `systemd-analyze verify` (packaging/ci-check)
//! checks syntax and cycles; these tests check the intent, which verify cannot see.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// section -> key -> every value (dependency lists split on whitespace, lines accumulated).
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn parse(text: &str) -> Unit {
    let mut unit = Unit::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line}"));
        assert!(
            !line.ends_with('\\'),
            "continuation lines are not used here: {line}"
        );
        let values = unit
            .entry(section.clone())
            .or_default()
            .entry(key.trim().to_string())
            .or_default();
        if matches!(
            key.trim(),
            "After" | "Before" | "Wants" | "Requires" | "WantedBy" | "Conflicts"
        ) {
            values.extend(value.split_whitespace().map(String::from));
        } else {
            values.push(value.trim().to_string());
        }
    }
    unit
}

fn load(name: &str) -> Unit {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../units")
        .join(name);
    parse(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn get<'a>(u: &'a Unit, section: &str, key: &str) -> &'a [String] {
    u.get(section)
        .and_then(|s| s.get(key))
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn has(u: &Unit, section: &str, key: &str, value: &str) -> bool {
    get(u, section, key).iter().any(|v| v == value)
}

#[test]
fn both_units_are_oneshot_remain_after_exit_and_can_be_disabled() {
    for name in ["nodeagent-local.service", "nodeagent.service"] {
        let u = load(name);
        assert_eq!(get(&u, "Service", "Type"), ["oneshot"], "{name}");
        assert_eq!(get(&u, "Service", "RemainAfterExit"), ["yes"], "{name}");
        assert!(
            has(
                &u,
                "Unit",
                "ConditionPathExists",
                "!/etc/nodeagent/disabled"
            ),
            "{name}"
        );
        assert!(
            has(&u, "Install", "WantedBy", "multi-user.target"),
            "{name} is not started on boot"
        );
    }
}

#[test]
fn exec_start_runs_the_right_stage_of_the_packaged_binary() {
    assert_eq!(
        get(&load("nodeagent-local.service"), "Service", "ExecStart"),
        ["/usr/bin/nodeagent run --stage local"]
    );
    assert_eq!(
        get(&load("nodeagent.service"), "Service", "ExecStart"),
        ["/usr/bin/nodeagent run --stage main"]
    );
}

#[test]
fn local_stage_runs_after_local_fs_and_before_any_network_service() {
    let u = load("nodeagent-local.service");
    assert!(has(&u, "Unit", "After", "local-fs.target"));
    assert!(has(&u, "Unit", "Before", "network-pre.target"));
    // network-pre.target is passive: without Wants= nothing orders the network after us.
    assert!(has(&u, "Unit", "Wants", "network-pre.target"));
    // Default dependencies would put us after basic.target, i.e. after the network.
    assert_eq!(get(&u, "Unit", "DefaultDependencies"), ["no"]);
    for late in [
        "network.target",
        "network-online.target",
        "basic.target",
        "sysinit.target",
        "multi-user.target",
    ] {
        assert!(
            !has(&u, "Unit", "After", late),
            "local stage must not wait for {late}"
        );
    }
}

#[test]
fn main_stage_waits_for_network_online_vmtoolsd_and_local_stage_but_not_the_runtime() {
    let u = load("nodeagent.service");
    for dep in [
        "network-online.target",
        "vmtoolsd.service",
        "nodeagent-local.service",
    ] {
        assert!(has(&u, "Unit", "After", dep), "main stage not After={dep}");
    }
    // network-online.target is passive too: it must be pulled in or it is reached at once.
    assert!(has(&u, "Unit", "Wants", "network-online.target"));
    // The read, plan and writes overlap the runtime's start: only the commands wait for it
    // (nodeagent-cri.target, started by the agent: apply/runtime.rs).
    for runtime in ["containerd.service", "crio.service", "nodeagent-cri.target"] {
        assert!(
            !has(&u, "Unit", "After", runtime),
            "After={runtime} puts the whole stage behind the runtime's start"
        );
    }
    // Pulled in, so the runtime starts at once.
    assert!(has(&u, "Unit", "Wants", "nodeagent-cri.target"));
}

#[test]
fn the_cri_target_is_reached_once_containerd_or_crio_serves() {
    let t = load("nodeagent-cri.target");
    // containerd is Type=notify: after it means its socket serves (image-builder issue 173).
    assert!(has(&t, "Unit", "After", "containerd.service"));
    assert!(has(&t, "Unit", "After", "crio.service"));
    assert!(has(&t, "Unit", "Wants", "containerd.service"));
    // Not Requires=/BindsTo=: a runtime that fails must not keep the commands from running
    // (kubeadm's pre-flight says what is wrong), as the main unit's Wants= did before.
    for key in ["Requires", "Requisite", "BindsTo"] {
        assert!(get(&t, "Unit", key).is_empty(), "{key}= on the target");
    }
    // Nothing orders it against the main unit, which starts it from inside its run.
    for key in ["After", "Before"] {
        assert!(
            !get(&t, "Unit", key)
                .iter()
                .any(|v| v.starts_with("nodeagent")),
            "{key}= a nodeagent unit would deadlock the wait"
        );
    }
    assert!(
        !t.contains_key("Install"),
        "pulled in by nodeagent.service, not enabled"
    );
    // The name the agent starts is this file's.
    assert_eq!(
        libnodeagent::apply::runtime::CRI_TARGET,
        "nodeagent-cri.target"
    );
}

#[test]
fn main_stage_is_not_ordered_against_what_kubeadm_starts_nor_multi_user() {
    let u = load("nodeagent.service");
    for key in [
        "After",
        "Before",
        "Requires",
        "Requisite",
        "BindsTo",
        "PartOf",
    ] {
        for v in get(&u, "Unit", key) {
            assert!(
                !v.starts_with("kubelet"),
                "{key}={v}: kubeadm restarts kubelet from inside this unit"
            );
            assert_ne!(v, "multi-user.target", "{key}={v}");
            assert_ne!(v, "graphical.target", "{key}={v}");
        }
    }
    // WantedBy=multi-user.target orders the target after us unless default dependencies
    // are off; then the basic ones must be spelled out by hand.
    assert_eq!(get(&u, "Unit", "DefaultDependencies"), ["no"]);
    assert!(
        has(&u, "Unit", "After", "basic.target") && has(&u, "Unit", "Requires", "sysinit.target")
    );
    assert!(
        has(&u, "Unit", "Conflicts", "shutdown.target")
            && has(&u, "Unit", "Before", "shutdown.target")
    );
}

#[test]
fn main_stage_keeps_kubeadm_possible() {
    let u = load("nodeagent.service");
    // Settings that would break kubeadm (modules, sysctls, devices, cgroups, /etc, /usr).
    for forbidden in [
        "ProtectSystem",
        "ProtectKernelModules",
        "ProtectKernelTunables",
        "PrivateDevices",
        "ProtectControlGroups",
        "NoNewPrivileges",
        "PrivateNetwork",
        "ProtectHome",
        "User",
        "CapabilityBoundingSet",
    ] {
        let v = get(&u, "Service", forbidden);
        assert!(
            v.is_empty() || v == ["no"],
            "{forbidden}={v:?} would stop kubeadm or runcmd"
        );
    }
    assert_eq!(
        get(&u, "Service", "TimeoutStartSec"),
        ["infinity"],
        "systemd must not kill a long join"
    );
}

#[test]
fn local_stage_is_hardened_but_may_set_the_hostname() {
    let u = load("nodeagent-local.service");
    assert_eq!(get(&u, "Service", "NoNewPrivileges"), ["yes"]);
    assert_eq!(get(&u, "Service", "IPAddressDeny"), ["any"]);
    // Writes are confined by the agent itself (Landlock, libnodeagent/src/source/writeguard.rs), not
    // by a mount namespace; `full`/`strict` would also make /etc read-only.
    let protect_system = get(&u, "Service", "ProtectSystem");
    assert!(
        protect_system.iter().all(|v| v != "full" && v != "strict"),
        "ProtectSystem={protect_system:?} makes /etc read-only"
    );
    assert!(
        get(&u, "Service", "ExecStart")
            .join(" ")
            .ends_with("nodeagent run --stage local"),
        "the local stage's own sandbox applies to `run --stage local`"
    );
    assert!(
        get(&u, "Service", "ProtectHostname").is_empty(),
        "this stage sets the hostname"
    );
    assert!(get(&u, "Service", "ProtectKernelTunables").is_empty());
}

#[test]
fn parser_rejects_what_it_cannot_read() {
    let r = std::panic::catch_unwind(|| parse("[Unit]\nno equals sign\n"));
    assert!(r.is_err());
    let u = parse("[Unit]\nAfter=a.target b.service\nAfter=c.service\n");
    assert_eq!(
        get(&u, "Unit", "After"),
        ["a.target", "b.service", "c.service"]
    );
}
