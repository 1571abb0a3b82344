//! What `kubeadm reset -f` deletes between two join attempts, and which of the plan's files
//! must therefore be written again before the next attempt (pure: no I/O).
//!
//! kubeadm's reset (kubernetes/kubernetes, cmd/kubeadm/app/cmd/phases/reset/):
//! - `cleanupnode.go` `runCleanupNode` + `resetConfigDir`: the contents of
//!   /etc/kubernetes/manifests, /var/lib/kubelet and the certificates dir (default
//!   /etc/kubernetes/pki), and the kubeconfigs admin.conf, super-admin.conf, kubelet.conf,
//!   bootstrap-kubelet.conf, controller-manager.conf, scheduler.conf in /etc/kubernetes;
//! - `removeetcdmember.go` `runRemoveETCDMemberPhase`: the contents of the etcd data dir
//!   (without a config or etcd.yaml: the default /var/lib/etcd).
//!
//! Not deleted: /run/kubeadm (the kubeadm configs CABPK writes), other files in
//! /etc/kubernetes, /etc/cni/net.d, $HOME/.kube.
//!
//! Decision, per role: every retry starts from the bootstrap state the first attempt started
//! from. Before a retry, every plain `write_files` entry that reset deleted is written again
//! from the plan, with the same atomic write (owner and mode before the first byte), plus
//! the kubeadm `--config` file itself. For a control-plane join that is the CA and
//! service-account keys (without them the retry fails "failure loading certificate
//! authority") and any static pod manifest such as kube-vip; for a worker join usually only
//! what the user put there; `kubeadm init` is not retried (one attempt, as CABPK's runcmd).

use crate::plan::{Action, FileWrite, KubeadmSpec, Plan};

/// Directories whose contents reset deletes, besides the certificates dir.
pub const RESET_DIRS: [&str; 3] = [
    "/etc/kubernetes/manifests",
    "/var/lib/kubelet",
    "/var/lib/etcd",
];

/// Files in /etc/kubernetes reset deletes (`resetConfigDir` filesToClean).
pub const RESET_FILES: [&str; 6] = [
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/super-admin.conf",
    "/etc/kubernetes/kubelet.conf",
    "/etc/kubernetes/bootstrap-kubelet.conf",
    "/etc/kubernetes/controller-manager.conf",
    "/etc/kubernetes/scheduler.conf",
];

fn inside(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1)
}

/// Whether `kubeadm reset -f` deletes the (normalised, absolute) `path`.
pub fn removed_by_reset(path: &str, cert_dir: &str) -> bool {
    RESET_FILES.contains(&path)
        || inside(path, cert_dir)
        || RESET_DIRS.iter().any(|d| inside(path, d))
}

/// The certificates dir reset cleans: `certificatesDir` of a ClusterConfiguration in the
/// plan's kubeadm config, else kubeadm's default.
fn cert_dir(plan: &Plan, spec: &KubeadmSpec) -> String {
    plan.steps
        .iter()
        .find_map(|s| match &s.action {
            Action::WriteFile(f) if f.path == spec.config_path && !f.append => Some(f),
            _ => None,
        })
        .and_then(|f| std::str::from_utf8(&f.content.0).ok())
        .and_then(|text| super::config::parse(text, &spec.config_path).ok())
        .map(|c| c.certificates_dir())
        .unwrap_or_else(|| "/etc/kubernetes/pki".into())
}

/// The plan's files to write again after a reset, before the next kubeadm attempt: plain
/// (not `append`) write_files entries reset deletes, and the kubeadm config file. A path
/// written twice in the plan keeps its last entry, as on disk after apply.
pub fn restore_set<'a>(plan: &'a Plan, spec: &KubeadmSpec) -> Vec<&'a FileWrite> {
    let pki = cert_dir(plan, spec);
    let mut out: Vec<&FileWrite> = Vec::new();
    for s in &plan.steps {
        let Action::WriteFile(f) = &s.action else {
            continue;
        };
        if f.append || !(removed_by_reset(&f.path, &pki) || f.path == spec.config_path) {
            continue;
        }
        out.retain(|o| o.path != f.path);
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Content, Frequency, KubeadmMode, Owner, RunStage, Step};

    fn wf(path: &str, append: bool) -> Step {
        Step {
            id: path.into(),
            stage: RunStage::Main,
            frequency: Frequency::PerInstance,
            action: Action::WriteFile(FileWrite {
                path: path.into(),
                content: Content(b"x".to_vec()),
                owner: Owner::default(),
                mode: Some(0o600),
                append,
                defer: false,
                secret: true,
                source: None,
            }),
        }
    }

    #[test]
    fn reset_paths_follow_kubeadm() {
        let pki = "/etc/kubernetes/pki";
        for p in [
            "/etc/kubernetes/pki/ca.key",
            "/etc/kubernetes/pki/etcd/ca.crt",
            "/etc/kubernetes/manifests/kube-vip.yaml",
            "/etc/kubernetes/super-admin.conf",
            "/var/lib/kubelet/config.yaml",
            "/var/lib/etcd/member/x",
        ] {
            assert!(removed_by_reset(p, pki), "{p}");
        }
        for p in [
            "/run/kubeadm/kubeadm-join-config.yaml",
            "/etc/kubernetes/azure.json",
            "/etc/kubernetes/pki",
            "/etc/kubernetes/pkix/a",
            "/etc/cni/net.d/10-x.conf",
        ] {
            assert!(!removed_by_reset(p, pki), "{p}");
        }
        assert!(removed_by_reset("/srv/pki/ca.crt", "/srv/pki"));
    }

    #[test]
    fn restore_set_is_what_reset_removed_plus_the_config() {
        let spec = KubeadmSpec {
            mode: KubeadmMode::Join,
            config_path: "/run/kubeadm/kubeadm-join-config.yaml".into(),
            extra_args: vec![],
            sentinel: true,
            endpoint: None,
            original: String::new(),
        };
        let plan = Plan {
            version: 1,
            instance_id: "i".into(),
            steps: vec![
                wf("/etc/kubernetes/pki/ca.crt", false),
                wf("/etc/hosts", false),
                wf("/etc/kubernetes/manifests/kube-vip.yaml", true),
                wf("/run/kubeadm/kubeadm-join-config.yaml", false),
                wf("/etc/kubernetes/pki/ca.crt", false),
            ],
            warnings: vec![],
        };
        let got: Vec<&str> = restore_set(&plan, &spec)
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(
            got,
            [
                "/run/kubeadm/kubeadm-join-config.yaml",
                "/etc/kubernetes/pki/ca.crt"
            ]
        );
    }
}
