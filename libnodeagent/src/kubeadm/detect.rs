//! Recognise Cluster API's kubeadm `runcmd` line so it runs as a first-class step.
//!
//! CABPK writes exactly (docs/formats.md a.5):
//! `kubeadm init|join --config /run/kubeadm/<file>.yaml <V> && echo success > /run/cluster-api/bootstrap-success.complete`
//! where `<V>` is empty (two spaces before `&&`) or `--v N`. Anything with more shell in it
//! (other flags, pipes, `;`, variables, a path to another kubeadm binary) stays an ordinary
//! shell command: we only take over what we fully understand.

use crate::plan::{KubeadmMode, KubeadmSpec};

pub const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

pub fn recognise(item: &str) -> Option<KubeadmSpec> {
    let (main, sentinel) = match item.split_once("&&") {
        Some((main, tail)) => {
            if !is_sentinel_echo(tail) {
                return None;
            }
            (main, true)
        }
        None => (item, false),
    };
    // Anything shell-ish outside the recognised shape: leave it to the shell.
    if main.contains(|c: char| {
        matches!(
            c,
            ';' | '|'
                | '&'
                | '$'
                | '`'
                | '<'
                | '>'
                | '('
                | ')'
                | '\''
                | '"'
                | '\\'
                | '\n'
                | '*'
                | '?'
        )
    }) {
        return None;
    }
    let words: Vec<&str> = main.split_whitespace().collect();
    let mode = match words.as_slice() {
        ["kubeadm", "init", ..] => KubeadmMode::Init,
        ["kubeadm", "join", ..] => KubeadmMode::Join,
        _ => return None,
    };
    let mut config_path = None;
    let mut extra_args = Vec::new();
    let mut rest = words[2..].iter();
    while let Some(w) = rest.next() {
        match *w {
            "--config" => config_path = Some(rest.next()?.to_string()),
            "--v" | "-v" => {
                let n = rest.next()?;
                n.parse::<u8>().ok()?;
                extra_args.extend(["--v".to_string(), n.to_string()]);
            }
            w if w.starts_with("--config=") => {
                config_path = w.strip_prefix("--config=").map(str::to_string)
            }
            w if w.starts_with("--v=") => {
                w.strip_prefix("--v=")?.parse::<u8>().ok()?;
                extra_args.push(w.to_string());
            }
            _ => return None,
        }
    }
    let config_path = config_path.filter(|p| p.starts_with('/') && !p.contains("/../"))?;
    Some(KubeadmSpec {
        mode,
        config_path,
        extra_args,
        sentinel,
        endpoint: None,
        original: item.to_string(),
    })
}

/// `echo success > /run/cluster-api/bootstrap-success.complete` (whitespace-insensitive).
fn is_sentinel_echo(tail: &str) -> bool {
    let compact: String = tail.split_whitespace().collect::<Vec<_>>().join(" ");
    compact == format!("echo success > {SENTINEL}")
        || compact == format!("echo success >{SENTINEL}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cabpk_lines() {
        let init = recognise("kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete").unwrap();
        assert_eq!(init.mode, KubeadmMode::Init);
        assert_eq!(init.config_path, "/run/kubeadm/kubeadm.yaml");
        assert!(init.sentinel && init.extra_args.is_empty() && init.endpoint.is_none());
        let join = recognise("kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml --v 5 && echo success > /run/cluster-api/bootstrap-success.complete").unwrap();
        assert_eq!(join.mode, KubeadmMode::Join);
        assert_eq!(join.extra_args, vec!["--v", "5"]);
        let bare = recognise("kubeadm join --config=/tmp/kubeadm-node.yaml").unwrap();
        assert!(!bare.sentinel);
        assert_eq!(bare.config_path, "/tmp/kubeadm-node.yaml");
    }

    #[test]
    fn everything_else_is_a_command() {
        for s in [
            "kubeadm reset -f",
            "kubeadm init --config /run/kubeadm/kubeadm.yaml --ignore-preflight-errors=all",
            "kubeadm init --config /run/kubeadm/kubeadm.yaml && rm -rf /",
            "kubeadm init --config /run/kubeadm/kubeadm.yaml; echo hi",
            "kubeadm init --config $CFG",
            "kubeadm init",
            "kubeadm init --config relative.yaml",
            "kubeadm init --config /run/kubeadm/kubeadm.yaml --v x",
            "/usr/local/bin/kubeadm-bootstrap-script && echo success > /run/cluster-api/bootstrap-success.complete",
            "/usr/bin/kubeadm init --config /run/kubeadm/kubeadm.yaml",
            "echo kubeadm init --config /run/kubeadm/kubeadm.yaml",
            "kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success > /tmp/other",
            "",
        ] {
            assert!(recognise(s).is_none(), "{s}");
        }
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn cabpk_shapes_always_recognised(join in any::<bool>(), v in proptest::option::of(0u8..11), file in "[a-z0-9-]{1,20}", sentinel in any::<bool>()) {
                let mode = if join { "join" } else { "init" };
                let vflag = v.map(|n| format!(" --v {n}")).unwrap_or_default();
                let tail = if sentinel { format!(" && echo success > {SENTINEL}") } else { String::new() };
                // Two spaces before && when there is no --v, as CABPK renders it.
                let line = format!("kubeadm {mode} --config /run/kubeadm/{file}.yaml{} {tail}", vflag);
                let spec = recognise(line.trim_end()).expect("recognised");
                prop_assert_eq!(spec.mode, if join { KubeadmMode::Join } else { KubeadmMode::Init });
                prop_assert_eq!(spec.config_path, format!("/run/kubeadm/{file}.yaml"));
                prop_assert_eq!(spec.sentinel, sentinel);
                prop_assert_eq!(spec.extra_args.len(), if v.is_some() { 2 } else { 0 });
            }

            #[test]
            fn arbitrary_text_never_panics(s in "\\PC{0,120}") {
                let _ = recognise(&s);
                let _ = crate::kubeadm::config::parse(&s, "x");
            }
        }
    }
}
