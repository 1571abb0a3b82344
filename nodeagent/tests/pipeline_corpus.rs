//! The core pipeline against real data: CAPV metadata goldens, the real CABPK init
//! userdata, and every cloud-init documentation example (shared/corpus).

mod prereq;
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus() -> PathBuf {
    Path::new(prereq::CORPUS).to_path_buf()
}

fn nodeagent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nodeagent"))
}

const CABPK_INIT: &str =
    "capi/cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml";

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
    out.sort();
}

#[test]
fn capv_metadata_goldens_parse_into_identity_and_network() {
    if !prereq::corpus_present() {
        return;
    }
    let mut files = Vec::new();
    for d in [
        "capi/capv/metadata-golden-head",
        "capi/capv/metadata-golden-v1.10.0",
    ] {
        files_under(&corpus().join(d), &mut files);
    }
    assert!(
        files.len() >= 20,
        "expected the CAPV goldens, found {}",
        files.len()
    );
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let md = libnodeagent::source::metadata::parse(&text, "guestinfo.metadata")
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        // Oracle independent of the parser: the goldens' own quoted lines.
        let quoted = |key: &str| {
            text.lines().find_map(|l| {
                l.strip_prefix(&format!("{key}: \""))
                    .map(|v| v.trim_end_matches('"').to_string())
            })
        };
        assert_eq!(md.instance_id, quoted("instance-id"), "{}", f.display());
        assert_eq!(
            md.local_hostname,
            quoted("local-hostname"),
            "{}",
            f.display()
        );
        let net = md
            .network
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no network", f.display()));
        assert_eq!(net["version"], 2, "{}", f.display());
        let macs = text.matches("macaddress:").count();
        assert_eq!(
            net["ethernets"].as_object().unwrap().len(),
            macs,
            "{}",
            f.display()
        );
        assert_eq!(
            md.tree["network"]["config"], *net,
            "network kept under network.config as cloud-init does"
        );
    }
}

/// (path, owner, permissions) of every write_files entry, read straight off CABPK's text grammar.
fn cabpk_entries(text: &str) -> Vec<(String, String, u32)> {
    let mut out: Vec<(String, String, u32)> = Vec::new();
    for line in text.lines() {
        if let Some(p) = line.strip_prefix("-   path: ") {
            out.push((p.to_string(), String::new(), 0o644));
        } else if let Some(o) = line.strip_prefix("    owner: ") {
            out.last_mut().unwrap().1 = o.to_string();
        } else if let Some(m) = line.strip_prefix("    permissions: ") {
            out.last_mut().unwrap().2 = u32::from_str_radix(m.trim_matches('\''), 8).unwrap();
        }
    }
    out
}

fn dir_transport(userdata: &Path, metadata: Option<&Path>) -> tempfile::TempDir {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(std::fs::read(userdata).unwrap());
    std::fs::write(dir.path().join("guestinfo.userdata"), b64).unwrap();
    std::fs::write(dir.path().join("guestinfo.userdata.encoding"), "base64").unwrap();
    let md = match metadata {
        Some(m) => std::fs::read_to_string(m).unwrap(),
        None => "instance-id: \"cp-0\"\nlocal-hostname: \"cp-0\"\n".into(),
    };
    std::fs::write(dir.path().join("guestinfo.metadata"), md).unwrap();
    std::fs::write(
        dir.path().join("facts.yaml"),
        "hostname: cp-0\nfqdn: cp-0\nlocal-ipv4: 10.0.0.10\nnetwork-renderer: networkd\n",
    )
    .unwrap();
    dir
}

#[test]
fn cabpk_init_userdata_renders_and_plans_every_file_and_the_kubeadm_step() {
    if !prereq::corpus_present() {
        return;
    }
    let userdata = corpus().join(CABPK_INIT);
    let text = std::fs::read_to_string(&userdata).unwrap();
    let dir = dir_transport(&userdata, None);
    let transport = format!("dir:{}", dir.path().display());
    let facts = dir.path().join("facts.yaml");

    let out = nodeagent()
        .args(["render", "--transport", &transport, "--facts"])
        .arg(&facts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = text.split_once('\n').unwrap().1;
    // guestinfo values lose trailing whitespace (A.5); the file itself ends without a newline.
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        body.trim_end(),
        "no variables: render is the body minus the header"
    );

    let out = nodeagent()
        .args(["plan", "--json", "--transport", &transport, "--facts"])
        .arg(&facts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = plan["steps"].as_array().unwrap();
    let files: Vec<(String, String, u32)> = steps
        .iter()
        .filter(|s| s["action"]["kind"] == "write-file")
        .map(|s| {
            let a = &s["action"];
            let owner = format!(
                "{}:{}",
                a["owner"]["user"].as_str().unwrap(),
                a["owner"]["group"].as_str().unwrap()
            );
            (
                a["path"].as_str().unwrap().to_string(),
                owner,
                // `plan --json` writes modes as operators do: "0644".
                u32::from_str_radix(a["mode"].as_str().unwrap(), 8).unwrap(),
            )
        })
        .collect();
    let expected = cabpk_entries(&text);
    assert_eq!(expected.len(), 10);
    assert_eq!(files, expected);
    let kubeadm: Vec<&serde_json::Value> = steps
        .iter()
        .filter(|s| s["action"]["kind"] == "kubeadm")
        .collect();
    assert_eq!(
        kubeadm.len(),
        1,
        "the runcmd kubeadm line becomes one kubeadm step"
    );
    assert_eq!(kubeadm[0]["action"]["mode"], "init");
    assert_eq!(
        kubeadm[0]["action"]["config_path"],
        "/run/kubeadm/kubeadm.yaml"
    );
    assert_eq!(kubeadm[0]["action"]["sentinel"], true);
    let plan_text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !plan_text.contains("PRIVATE KEY") && !plan_text.contains("MIIE"),
        "plan output must not carry key material"
    );
}

#[test]
fn every_cloud_init_example_is_classified_without_a_crash() {
    if !prereq::corpus_present() {
        return;
    }
    let mut files = Vec::new();
    files_under(&corpus().join("cloud-init-examples"), &mut files);
    files.retain(|f| f.file_name().is_some_and(|n| n != "README.md"));
    let facts = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(facts.path(), "hostname: node\nfqdn: node.example.com\nlocal-ipv4: 10.0.0.2\nnetwork-renderer: networkd\n").unwrap();
    let (mut accepted, mut rejected) = (Vec::new(), Vec::new());
    for f in &files {
        let out = nodeagent()
            .arg("validate")
            .arg(f)
            .arg("--facts")
            .arg(facts.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        match out.status.code() {
            Some(0) => {
                assert!(stdout.contains(": valid ("), "{}: {stdout}", f.display());
                accepted.push(f);
            }
            Some(1) => {
                let msg = stdout.lines().last().unwrap_or_default().to_string();
                assert!(msg.contains(": invalid: "), "{}: {stdout}", f.display());
                let reason = msg.split(": invalid: ").nth(1).unwrap();
                assert!(
                    reason.len() > 10,
                    "{}: the reason is too thin: {reason}",
                    f.display()
                );
                rejected.push((f, reason.to_string()));
            }
            other => panic!(
                "{}: exit {other:?} (crash?)\n{}",
                f.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
    let by_kind = |needle: &str| rejected.iter().filter(|(_, r)| r.contains(needle)).count();
    println!(
        "cloud-init examples: {} files, {} accepted, {} rejected ({} unsupported module, {} unsupported userdata type, {} other)",
        files.len(),
        accepted.len(),
        rejected.len(),
        by_kind("unsupported module"),
        by_kind("unsupported userdata type"),
        rejected.len() - by_kind("unsupported module") - by_kind("unsupported userdata type"),
    );
    for (f, r) in &rejected {
        println!(
            "  rejected {}: {r}",
            f.strip_prefix(corpus()).unwrap().display()
        );
    }
    assert!(files.len() > 150, "corpus missing? {} files", files.len());
    assert!(accepted.len() >= 20, "too few accepted: {}", accepted.len());
    // Examples of modules we implement must be accepted.
    for ok in [
        "module-docs/cc_write_files/example1.yaml",
        "module-docs/cc_runcmd/example1.yaml",
        "module-docs/cc_bootcmd/example1.yaml",
    ] {
        assert!(
            accepted.iter().any(|f| f.ends_with(ok)),
            "{ok} should be accepted"
        );
    }
}
