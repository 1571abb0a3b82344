//! Real kubeadm (v1.34, built by `tests/k8s/build`) as the oracle for what nodeagent reads,
//! mints and reports:
//!
//! - `oracle_validates_every_document`: every kubeadm config nodeagent mints (init,
//!   control-plane join, worker join; v1beta3 and v1beta4) and CABPK's rendered config in the
//!   shared corpus pass `kubeadm config validate`;
//! - `oracle_judges_the_reader`: nodeagent's strict reader and kubeadm agree on
//!   accept/refuse for every document of a deterministic corpus of valid documents and their
//!   mutations (`kubeadm_oracle/corpus.rs`); the kubeadm stand-in (`tests/kubeadm-standin`)
//!   reads with that reader and judges nothing itself (`the_standin_reads_with_the_reader`,
//!   which needs no kubeadm);
//! - `oracle_certs_phase_keeps_minted_pki`: `kubeadm init phase certs all` over a
//!   `nodeagent mint pki` directory (ECDSA and RSA) keeps every minted file byte for byte and
//!   issues leaves that chain to it; `kubeadm init phase kubeconfig all` accepts the minted CA;
//! - `oracle_certs_rows_agree`: `nodeagent certs` and `kubeadm certs check-expiration` print
//!   the same rows on the same PKI, before and after the certs and kubeconfig phases.
//!
//! The binaries come from `NODEAGENT_K8S_BIN` or `tests/k8s/build --print`; without them the
//! tests skip, unless `NODEAGENT_REQUIRE_K8S=1` (`tests/run-all`). `reader_regressions` needs
//! no kubeadm: it keeps every disagreement found as a row with kubeadm's verdict.

#[path = "kubeadm_oracle/corpus.rs"]
mod corpus;
mod kubeadm_common;
#[allow(clippy::duplicate_mod)]
#[path = "prereq/mod.rs"]
mod prereq;

use corpus::Case;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn kubeadm() -> Option<PathBuf> {
    prereq::k8s_bin("kubeadm").map(|d| d.join("kubeadm"))
}

fn nodeagent(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(args)
        .output()
        .unwrap()
}

/// A verdict: accepted, or refused with the first line of why.
type Verdict = Result<(), String>;

/// kubeadm's `error: …` line (klog warnings come first), else the first line.
fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| l.starts_with("error"))
        .or_else(|| s.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("")
        .to_string()
}

/// `PROGRAM config validate --config FILE` on `text`.
fn validate_with(program: &Path, text: &str, dir: &Path, n: usize) -> Verdict {
    let f = dir.join(format!("doc-{n}.yaml"));
    std::fs::write(&f, text).unwrap();
    let o = Command::new(program)
        .args(["config", "validate", "--config"])
        .arg(&f)
        .env("KUBEADM_STANDIN_LOG", dir.join("standin.jsonl"))
        .output()
        .unwrap();
    if o.status.success() {
        Ok(())
    } else {
        Err(first_line(&String::from_utf8_lossy(&o.stderr)))
    }
}

/// Each case judged by `program`, two at a time (the machine has two cores).
fn judge_all(program: &Path, cases: &[Case]) -> Vec<Verdict> {
    let dir = tempfile::tempdir().unwrap();
    let half = cases.len().div_ceil(2).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .chunks(half)
            .enumerate()
            .map(|(c, chunk)| {
                let dir = dir.path();
                s.spawn(move || {
                    chunk
                        .iter()
                        .enumerate()
                        .map(|(i, case)| validate_with(program, &case.text, dir, c * half + i))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

fn nodeagent_verdict(text: &str) -> Verdict {
    libnodeagent::kubeadm::config::parse(text, "f.yaml")
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The valid documents: minted, the corpus (at the oracle's version), hand-written.
fn valid_cases() -> Vec<Case> {
    let mut cases = corpus::minted_cases();
    if prereq::corpus_present() {
        for (path, text) in corpus::corpus_configs(kubeadm_common::CORPUS_INIT) {
            cases.push(Case {
                name: format!(
                    "corpus {path} (kubernetesVersion {})",
                    corpus::ORACLE_VERSION
                ),
                text: corpus::at_oracle_version(&text),
            });
        }
    }
    cases.extend(corpus::hand_written_valid());
    cases
}

/// Valid documents, then every mutation of each, then the hand-written invalid ones; each
/// text once (the first name kept).
fn differential_cases() -> Vec<Case> {
    let valid = valid_cases();
    let mut all: Vec<Case> = valid.clone();
    for v in &valid {
        all.extend(corpus::mutated(v));
    }
    all.extend(corpus::hand_written_invalid());
    all.extend(regressions().into_iter().map(|(c, _)| c));
    let mut seen = std::collections::BTreeSet::new();
    all.retain(|c| seen.insert(c.text.clone()));
    all
}

// ---- disagreements found, kept as rows ---------------------------------------------------

/// Where nodeagent's reader and kubeadm v1.34's `config validate` still differ on purpose:
/// (what the case name contains, whether nodeagent accepts, why it keeps its verdict). Every
/// other difference fails the test. README "kubeadm, pre-flight and status" lists them.
const DIFFERENT_ON_PURPOSE: &[(&str, bool, &str)] = &[
    (
        "caCertHashes[0]",
        false,
        "a malformed CA pin passes `config validate` but fails the join's discovery (pubkeypin.Set.Allow: unknown format, wrong length, not hex)",
    ),
    (
        "apiServerEndpoint \"10.0.0.10:0\"",
        false,
        "port 0 passes net.SplitHostPort but no join can dial it",
    ),
    (
        "apiServerEndpoint \"10.0.0.10:99999\"",
        false,
        "port 99999 passes net.SplitHostPort but no join can dial it",
    ),
    (
        "apiServerEndpoint \":6443\"",
        false,
        "an empty host dials this node itself: discovery of a joining node fails (and the endpoint wait has nothing to wait for)",
    ),
    (
        "apiServerEndpoint \"bad_host:6443\"",
        false,
        "not a DNS-1123 name: kubeadm refuses it in controlPlaneEndpoint and certSANs, so no API server certificate covers it and discovery's TLS check fails",
    ),
    (
        "taint effect NoFoo",
        false,
        "kubeadm passes taints on (kubelet --register-with-taints, the mark-control-plane patch), where an unknown effect fails the kubelet or the API server",
    ),
    (
        "taint without effect",
        false,
        "the effect is required by the kubelet's taint flag and by the API server's Node validation",
    ),
    (
        "featureGates NoSuchGate",
        true,
        "the set of kubeadm feature gates is per release (1.34: five); nodeagent reads configs for kubeadm 1.22-1.36 and leaves gate names to the node's own kubeadm (pre-flight runs it)",
    ),
    (
        "discovery file not on disk",
        true,
        "`config validate` looks the discovery kubeconfig up on disk; nodeagent's reader judges the document, and pre-flight checks the file the plan writes or the disk holds",
    ),
    (
        "(KubeletConfiguration): unknown field",
        true,
        "component configs' fields change with each kubelet release; nodeagent checks their apiVersion and leaves their fields to the node's kubeadm (pre-flight runs it)",
    ),
    (
        "(KubeProxyConfiguration): ",
        true,
        "as for the KubeletConfiguration: kube-proxy's fields are the node's kubeadm's to judge",
    ),
    (
        "(KubeletConfiguration): other version's field",
        true,
        "as above: a field unknown to the KubeletConfiguration is the node's kubeadm's to judge",
    ),
];

/// Each disagreement the differential test found, as a document with kubeadm v1.34's verdict
/// (true: accepted). Checked against nodeagent's reader always, and against kubeadm when it
/// is there.
fn regressions() -> Vec<(Case, bool)> {
    let join = |extra: &str| {
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.10:6443\n    token: {}\n    unsafeSkipCAVerification: true\n{extra}",
            corpus::TOKEN
        )
    };
    let init = |extra: &str| {
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: {}\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n---\n{extra}",
            corpus::ORACLE_VERSION
        )
    };
    let rows: Vec<(&str, String, bool)> = vec![
        (
            "an empty tlsBootstrapToken is unset (kubeadm defaults it to the discovery token)",
            join("  tlsBootstrapToken: ''\n"),
            true,
        ),
        (
            "a KubeletConfiguration under kubeadm.k8s.io/v1beta3",
            init("apiVersion: kubeadm.k8s.io/v1beta3\nkind: KubeletConfiguration\n"),
            false,
        ),
        (
            "a KubeletConfiguration under v1",
            init("apiVersion: v1\nkind: KubeletConfiguration\n"),
            false,
        ),
        (
            "a KubeProxyConfiguration under kubelet.config.k8s.io/v1beta1",
            init("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n"),
            false,
        ),
        (
            "a v1beta4 ResetConfiguration beside an init (init ignores it)",
            init("apiVersion: kubeadm.k8s.io/v1beta4\nkind: ResetConfiguration\nforce: true\n"),
            true,
        ),
        (
            "a v1beta4 UpgradeConfiguration beside an init",
            init(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: UpgradeConfiguration\nnode:\n  etcdUpgrade: false\n",
            ),
            true,
        ),
        (
            "a v1beta4 ResetConfiguration beside a join",
            join(
                "---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ResetConfiguration\ncleanupTmpDir: true\n",
            ),
            true,
        ),
        (
            "an unknown field in a ResetConfiguration",
            init("apiVersion: kubeadm.k8s.io/v1beta4\nkind: ResetConfiguration\nbogus: 1\n"),
            false,
        ),
        (
            "an unknown field in UpgradeConfiguration.apply",
            init(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: UpgradeConfiguration\napply:\n  bogus: 1\n",
            ),
            false,
        ),
        (
            "a ResetConfiguration under v1beta3 (no such kind there)",
            init("apiVersion: kubeadm.k8s.io/v1beta3\nkind: ResetConfiguration\n"),
            false,
        ),
    ];
    rows.into_iter()
        .map(|(name, text, ok)| {
            (
                Case {
                    name: format!("regression: {name}"),
                    text,
                },
                ok,
            )
        })
        .collect()
}

#[test]
fn reader_regressions() {
    let rows = regressions();
    for (case, kubeadm_accepts) in &rows {
        let ours = nodeagent_verdict(&case.text);
        assert_eq!(
            ours.is_ok(),
            *kubeadm_accepts,
            "{}: nodeagent {ours:?}, kubeadm v1.34 {}",
            case.name,
            if *kubeadm_accepts {
                "accepts"
            } else {
                "refuses"
            }
        );
    }
    println!(
        "reader_regressions: {} rows agree with kubeadm v1.34's recorded verdicts",
        rows.len()
    );
    let Some(k) = kubeadm() else { return };
    let cases: Vec<Case> = rows.iter().map(|(c, _)| c.clone()).collect();
    for ((case, want), got) in rows.iter().zip(judge_all(&k, &cases)) {
        assert_eq!(
            got.is_ok(),
            *want,
            "{}: kubeadm now says {got:?}",
            case.name
        );
    }
}

// ---- the oracle tests -------------------------------------------------------------------

#[test]
fn oracle_validates_every_document() {
    let Some(k) = kubeadm() else { return };
    let cases = valid_cases();
    let verdicts = judge_all(&k, &cases);
    let refused: Vec<String> = cases
        .iter()
        .zip(&verdicts)
        .filter_map(|(c, v)| v.as_ref().err().map(|e| format!("{}: {e}", c.name)))
        .collect();
    // The corpus as CABPK rendered it (v1.26.6) is refused for its version only.
    let mut as_is = 0;
    if prereq::corpus_present() {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in corpus::corpus_configs(kubeadm_common::CORPUS_INIT) {
            let v = validate_with(&k, &text, dir.path(), as_is);
            as_is += 1;
            let e = v.expect_err("kubeadm v1.34 deploys 1.33 or newer only");
            assert!(
                e.contains("control plane version >= 1.33.0"),
                "{path} as rendered: refused for another reason than its version: {e}"
            );
        }
    }
    println!(
        "oracle_validates_every_document: {} documents validated by kubeadm {}, {} accepted; {} corpus file(s) as rendered refused for their Kubernetes version only",
        cases.len(),
        corpus::ORACLE_VERSION,
        cases.len() - refused.len(),
        as_is
    );
    assert!(
        refused.is_empty(),
        "kubeadm refused:\n{}",
        refused.join("\n")
    );
}

/// Compare `verdicts` of `who` with kubeadm's on `cases`: (agreements, listed differences,
/// unexplained differences).
fn compare(
    who: &str,
    cases: &[Case],
    theirs: &[Verdict],
    oracle: &[Verdict],
    on_purpose: &[(&str, bool, &str)],
) -> (usize, Vec<String>, Vec<String>) {
    let mut agree = 0;
    let mut listed = Vec::new();
    let mut unexplained = Vec::new();
    for ((case, t), o) in cases.iter().zip(theirs).zip(oracle) {
        if t.is_ok() == o.is_ok() {
            agree += 1;
            continue;
        }
        let line = format!(
            "{}\n    {who}: {}\n    kubeadm: {}",
            case.name,
            t.as_ref()
                .err()
                .map_or("accepts".to_string(), |e| format!("refuses: {e}")),
            o.as_ref()
                .err()
                .map_or("accepts".to_string(), |e| format!("refuses: {e}")),
        );
        match on_purpose
            .iter()
            .find(|(pat, accepts, _)| case.name.contains(pat) && *accepts == t.is_ok())
        {
            Some((_, _, why)) => listed.push(format!("{line}\n    on purpose: {why}")),
            None => unexplained.push(line),
        }
    }
    (agree, listed, unexplained)
}

/// nodeagent's reader against kubeadm's own verdicts on the same documents (a kubeadm process
/// per document, about 90 s of the suite's CPU on the 2-core machine).
#[test]
fn oracle_judges_the_reader() {
    let Some(k) = kubeadm() else { return };
    let cases = differential_cases();
    let oracle = judge_all(&k, &cases);
    let ours: Vec<Verdict> = cases.iter().map(|c| nodeagent_verdict(&c.text)).collect();
    let (agree, listed, unexplained) =
        compare("nodeagent", &cases, &ours, &oracle, DIFFERENT_ON_PURPOSE);
    let refused = oracle.iter().filter(|v| v.is_err()).count();
    println!(
        "reader: {} documents ({} accepted, {} refused by kubeadm); {agree} agreements, {} differences on purpose, {} unexplained",
        cases.len(),
        cases.len() - refused,
        refused,
        listed.len(),
        unexplained.len()
    );
    for l in &listed {
        println!("  {l}");
    }
    assert!(
        unexplained.is_empty(),
        "{} disagreements with kubeadm:\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
}

/// The kubeadm stand-in judges no config of its own: it reads with nodeagent's reader, so its
/// `config validate` says what that reader says on every document of the corpus (which
/// `oracle_judges_the_reader` holds to kubeadm's verdicts). Needs no kubeadm.
#[test]
fn the_standin_reads_with_the_reader() {
    let cases = differential_cases();
    let standin = judge_all(&kubeadm_common::standin(), &cases);
    let differ: Vec<String> = cases
        .iter()
        .zip(&standin)
        .filter(|(c, v)| v.is_ok() != nodeagent_verdict(&c.text).is_ok())
        .map(|(c, v)| format!("{}: stand-in {v:?}", c.name))
        .collect();
    println!(
        "the_standin_reads_with_the_reader: {} documents, {} verdicts differ",
        cases.len(),
        differ.len()
    );
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

// ---- PKI: the certs and kubeconfig phases, check-expiration ------------------------------

fn mint_pki(dir: &Path, algorithm: &str) {
    let o = nodeagent(&[
        "mint",
        "pki",
        "--cluster",
        "c1",
        "--out",
        dir.to_str().unwrap(),
        "--algorithm",
        algorithm,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// An init config for node cp-0 whose certificatesDir is `pki` (a path as kubeadm sees it).
fn init_config(pki: &str, algorithm: &str) -> String {
    let enc = if algorithm.starts_with("rsa") {
        "RSA-2048"
    } else {
        "ECDSA-P256"
    };
    format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nlocalAPIEndpoint:\n  advertiseAddress: 10.0.0.10\n  bindPort: 6443\nnodeRegistration:\n  name: cp-0\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: {}\nclusterName: c1\ncontrolPlaneEndpoint: 10.0.0.10:6443\ncertificatesDir: {pki}\nencryptionAlgorithm: {enc}\n",
        corpus::ORACLE_VERSION
    )
}

/// Every file under `dir` (relative path → bytes).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn run_ok(program: &Path, args: &[&str]) -> String {
    let o = Command::new(program).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{} {args:?}: {}{}",
        program.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// (leaf, its CA) as kubeadm's certs phase issues them with local etcd.
const LEAVES: &[(&str, &str)] = &[
    ("apiserver", "ca"),
    ("apiserver-kubelet-client", "ca"),
    ("front-proxy-client", "front-proxy-ca"),
    ("etcd/server", "etcd/ca"),
    ("etcd/peer", "etcd/ca"),
    ("etcd/healthcheck-client", "etcd/ca"),
    ("apiserver-etcd-client", "etcd/ca"),
];

#[test]
fn oracle_certs_phase_keeps_minted_pki() {
    let Some(k) = kubeadm() else { return };
    if !prereq::command("openssl", &["version"]) {
        return;
    }
    let mut kept = 0;
    let mut chained = 0;
    let mut kubeconfigs = 0;
    let mut kept_kubeconfigs = 0;
    for alg in ["ecdsa-p256", "rsa-2048"] {
        let t = tempfile::tempdir().unwrap();
        let pki = t.path().join("pki");
        mint_pki(&pki, alg);
        let minted = snapshot(&pki);
        let cfg = t.path().join("kubeadm.yaml");
        std::fs::write(&cfg, init_config(pki.to_str().unwrap(), alg)).unwrap();
        let cfg = cfg.to_str().unwrap();
        let out = run_ok(&k, &["init", "phase", "certs", "all", "--config", cfg]);
        for ca in ["ca", "front-proxy-ca", "etcd/ca"] {
            assert!(
                out.contains(&format!("Using existing {ca} certificate authority")),
                "{alg}: kubeadm did not use the minted {ca}:\n{out}"
            );
        }
        assert!(
            out.contains("Using the existing \"sa\" key"),
            "{alg}:\n{out}"
        );
        let after = snapshot(&pki);
        for (path, bytes) in &minted {
            assert_eq!(after.get(path), Some(bytes), "{alg}: {path} changed");
            kept += 1;
        }
        for (leaf, ca) in LEAVES {
            let leaf_crt = pki.join(format!("{leaf}.crt"));
            let ca_crt = pki.join(format!("{ca}.crt"));
            assert!(leaf_crt.is_file(), "{alg}: no {leaf}.crt");
            let v = run_ok(
                Path::new("openssl"),
                &[
                    "verify",
                    "-CAfile",
                    ca_crt.to_str().unwrap(),
                    leaf_crt.to_str().unwrap(),
                ],
            );
            assert!(v.trim_end().ends_with(": OK"), "{alg}: {leaf}: {v}");
            chained += 1;
        }
        // The kubeconfig phase: `nodeagent mint kubeconfig`'s admin.conf and super-admin.conf
        // are kept as they are; the others it writes embed the minted CA; a second run finds
        // them all valid against it. A kubeconfig of another cluster's CA is refused.
        let kdir = t.path().join("kubeconfigs");
        let kd = kdir.to_str().unwrap();
        let other = t.path().join("other-pki");
        mint_pki(&other, alg);
        let mint_kubeconfig = |pki: &Path, user: &str, group: &str, out: &Path| {
            let o = nodeagent(&[
                "mint",
                "kubeconfig",
                "--pki",
                pki.to_str().unwrap(),
                "--cluster",
                "c1",
                "--endpoint",
                "10.0.0.10:6443",
                "--user",
                user,
                "--group",
                group,
                "--out",
                out.to_str().unwrap(),
            ]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        std::fs::create_dir_all(&kdir).unwrap();
        mint_kubeconfig(
            &other,
            "kubernetes-admin",
            "kubeadm:cluster-admins",
            &kdir.join("admin.conf"),
        );
        let o = Command::new(&k)
            .args([
                "init",
                "phase",
                "kubeconfig",
                "admin",
                "--config",
                cfg,
                "--kubeconfig-dir",
                kd,
            ])
            .output()
            .unwrap();
        assert!(
            !o.status.success()
                && String::from_utf8_lossy(&o.stderr).contains("does not contain a trusted CA"),
            "{alg}: a kubeconfig of another CA was not refused: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        mint_kubeconfig(
            &pki,
            "kubernetes-admin",
            "kubeadm:cluster-admins",
            &kdir.join("admin.conf"),
        );
        mint_kubeconfig(
            &pki,
            "kubernetes-super-admin",
            "system:masters",
            &kdir.join("super-admin.conf"),
        );
        let minted_kubeconfigs = snapshot(&kdir);
        let first = run_ok(
            &k,
            &[
                "init",
                "phase",
                "kubeconfig",
                "all",
                "--config",
                cfg,
                "--kubeconfig-dir",
                kd,
            ],
        );
        for name in ["admin.conf", "super-admin.conf"] {
            assert!(
                first.contains(&format!(
                    "Using existing kubeconfig file: \"{}\"",
                    kdir.join(name).display()
                )),
                "{alg}: kubeadm did not keep the minted {name}:\n{first}"
            );
            assert_eq!(
                std::fs::read(kdir.join(name)).unwrap(),
                minted_kubeconfigs[name],
                "{alg}: {name} changed"
            );
            kept_kubeconfigs += 1;
        }
        let again = run_ok(
            &k,
            &[
                "init",
                "phase",
                "kubeconfig",
                "all",
                "--config",
                cfg,
                "--kubeconfig-dir",
                kd,
            ],
        );
        let ca_b64 = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(&minted["ca.crt"])
        };
        for name in [
            "admin.conf",
            "super-admin.conf",
            "kubelet.conf",
            "controller-manager.conf",
            "scheduler.conf",
        ] {
            let text = std::fs::read_to_string(kdir.join(name)).unwrap();
            assert!(
                text.contains(&format!("certificate-authority-data: {ca_b64}")),
                "{alg}: {name} does not embed the minted ca.crt"
            );
            assert!(
                again.contains(&format!(
                    "Using existing kubeconfig file: \"{}\"",
                    kdir.join(name).display()
                )),
                "{alg}: second kubeconfig phase did not keep {name}:\n{again}"
            );
            kubeconfigs += 1;
        }
        assert_eq!(
            after,
            snapshot(&pki),
            "{alg}: the kubeconfig phase changed the PKI"
        );
    }
    println!(
        "oracle_certs_phase_keeps_minted_pki: {kept} minted files kept byte for byte (ECDSA and RSA), {chained} leaves chain to the minted CAs, {kubeconfigs} kubeconfigs accepted with the minted CA ({kept_kubeconfigs} of them minted by `mint kubeconfig` and kept byte for byte), another CA's kubeconfig refused"
    );
}

/// The rows of the table under `header` in `text` (columns split at runs of 2+ spaces).
fn table(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with(header) {
            inside = true;
            continue;
        }
        if inside {
            if line.trim().is_empty() {
                break;
            }
            rows.push(
                line.split("  ")
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
            );
        }
    }
    rows
}

/// kubeadm's check-expiration and `nodeagent certs` on the node root `root`: the same rows.
fn rows_agree(k: &Path, root: &Path, what: &str) -> usize {
    let o = Command::new(k)
        .args([
            "certs",
            "check-expiration",
            "--rootfs",
            root.to_str().unwrap(),
            "--config",
            "/etc/kubernetes/kubeadm.yaml",
        ])
        .output()
        .unwrap();
    let theirs = String::from_utf8_lossy(&o.stdout).into_owned();
    let o2 = nodeagent(&["certs", "--root", root.to_str().unwrap()]);
    let ours = String::from_utf8_lossy(&o2.stdout).into_owned();
    let mut n = 0;
    for header in ["CERTIFICATE  ", "CERTIFICATE AUTHORITY"] {
        let t = table(&theirs, header);
        let u = table(&ours, header);
        assert!(
            !t.is_empty(),
            "{what}: kubeadm printed no {header:?} table:\n{theirs}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            u, t,
            "{what}: {header:?} rows differ\nkubeadm:\n{theirs}\nnodeagent:\n{ours}"
        );
        n += t.len();
    }
    n
}

#[test]
fn oracle_certs_rows_agree() {
    let Some(k) = kubeadm() else { return };
    // `--rootfs` makes kubeadm chroot into the node root, so its fixed /etc/kubernetes paths
    // (kubeconfigs) are the test's, not this host's.
    if !prereq::privileged(&[]) {
        return;
    }
    let mut rows = 0;
    for alg in ["ecdsa-p256", "rsa-2048"] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let pki = root.join("etc/kubernetes/pki");
        mint_pki(&pki, alg);
        std::fs::write(
            root.join("etc/kubernetes/kubeadm.yaml"),
            init_config("/etc/kubernetes/pki", alg),
        )
        .unwrap();
        rows += rows_agree(&k, root, &format!("{alg}, minted CAs only"));
        let r = root.to_str().unwrap();
        let cfg = "/etc/kubernetes/kubeadm.yaml";
        run_ok(
            &k,
            &[
                "init", "phase", "certs", "all", "--rootfs", r, "--config", cfg,
            ],
        );
        rows += rows_agree(&k, root, &format!("{alg}, after the certs phase"));
        run_ok(
            &k,
            &[
                "init",
                "phase",
                "kubeconfig",
                "all",
                "--rootfs",
                r,
                "--config",
                cfg,
            ],
        );
        rows += rows_agree(&k, root, &format!("{alg}, after the kubeconfig phase"));
    }
    println!("oracle_certs_rows_agree: {rows} rows compared (2 algorithms x 3 states), all equal");
}
