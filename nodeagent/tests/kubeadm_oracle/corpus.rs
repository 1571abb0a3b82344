//! The documents the oracle tests judge: every kubeadm config nodeagent mints (init,
//! control-plane join, worker join; v1beta3 and v1beta4), CABPK's rendered config from the
//! shared corpus, hand-written valid documents, and deterministic mutations of all of them
//! (unknown fields, wrong kinds and apiVersions, the other version's fields, bad durations,
//! bad token/hash/endpoint shapes, duplicates). No randomness: the same list every run.

#![allow(clippy::string_slice)]

use minter::bootstrap::{self, KubeadmApi, Role, Spec};
use minter::pki::{Algorithm, Pki};
use serde_norway::{Mapping, Value};

/// One config file to judge. `name` says where it came from and what was changed.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub text: String,
}

/// The Kubernetes version the oracle (kubeadm v1.34) deploys: it refuses a control plane
/// older than 1.33 ("this version of kubeadm only supports deploying clusters with the
/// control plane version >= 1.33.0"), a version-skew rule, not a reader rule.
pub const ORACLE_VERSION: &str = "v1.34.4";

pub const TOKEN: &str = "abcdef.0123456789abcdef";

/// The kubeadm file in minted userdata for `role`/`api`, as the node sees it after the jinja
/// render (`{{ local_hostname }}` → the node's name).
pub fn minted(role: Role, api: KubeadmApi, version: &str, pki: &Pki) -> String {
    let minor: u32 = version
        .trim_start_matches("v1.")
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .expect("version v1.N.x");
    let mut s = Spec::capv(role, "demo", "10.0.0.10:6443", version, minor, api);
    s.ca_cert_hashes =
        libnodeagent::pki::hash::discovery_hashes(pki.ca.cert_pem.as_bytes()).unwrap();
    s.token = Some(TOKEN.into());
    if api == KubeadmApi::V1beta4 {
        s.encryption_algorithm = Some("ECDSA-P256".into());
    }
    s.pki = Some(pki.clone());
    let ud: Value = serde_norway::from_str(&bootstrap::userdata(&s).unwrap()).unwrap();
    let path = if role == Role::Init {
        bootstrap::INIT_CONFIG_PATH
    } else {
        bootstrap::JOIN_CONFIG_PATH
    };
    ud["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str() == Some(path))
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .replace("{{ local_hostname }}", "node-0")
}

/// Every minted kubeadm document: 3 roles × 2 APIs × 2 Kubernetes versions.
pub fn minted_cases() -> Vec<Case> {
    let pki = Pki::generate(Algorithm::EcdsaP256, time::Duration::days(3650)).unwrap();
    let mut out = Vec::new();
    for version in ["v1.33.7", ORACLE_VERSION] {
        for (role, r) in [
            (Role::Init, "init"),
            (Role::ControlPlane, "control-plane"),
            (Role::Worker, "worker"),
        ] {
            for (api, a) in [
                (KubeadmApi::V1beta3, "v1beta3"),
                (KubeadmApi::V1beta4, "v1beta4"),
            ] {
                out.push(Case {
                    name: format!("minted {r} {a} {version}"),
                    text: minted(role, api, version, &pki),
                });
            }
        }
    }
    out
}

/// The kubeadm files of a rendered CABPK cloud-config (`/run/kubeadm/*.yaml`).
pub fn corpus_configs(path: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let body = text.split_once('\n').map(|(_, b)| b).unwrap_or(&text);
    let doc: Value = serde_norway::from_str(body).unwrap();
    doc["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|f| {
            f["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/run/kubeadm/"))
        })
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `kubernetesVersion: vX` → the oracle's version (the corpus is v1.26.6).
pub fn at_oracle_version(text: &str) -> String {
    text.lines()
        .map(|l| match l.strip_prefix("kubernetesVersion: ") {
            Some(_) => format!("kubernetesVersion: {ORACLE_VERSION}"),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

const HASH: &str = "sha256:4b0f6e0c8b1b36c1d77a9b5a4e6a5bb86bb3f0f3b1b2f8a7e2b5f6b0f4e2f8aa";

/// Hand-written valid documents: shapes the minter does not make.
pub fn hand_written_valid() -> Vec<Case> {
    let v = ORACLE_VERSION;
    let cases = [
        (
            "worker join v1beta4, timeouts and list kubeletExtraArgs",
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.10:6443\n    caCertHashes:\n    - {HASH}\n    token: {TOKEN}\nnodeRegistration:\n  kubeletExtraArgs:\n  - name: cloud-provider\n    value: external\n  name: node-0\ntimeouts:\n  discovery: 5m0s\n  tlsBootstrap: 5m0s\n"
            ),
        ),
        (
            "worker join v1beta3, discovery.timeout",
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: api.example.com:6443\n    caCertHashes:\n    - {HASH}\n    token: {TOKEN}\n  timeout: 5m0s\n  tlsBootstrapToken: {TOKEN}\nnodeRegistration:\n  kubeletExtraArgs:\n    cloud-provider: external\n"
            ),
        ),
        (
            "worker join, unsafeSkipCAVerification without hashes",
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.10:6443\n    token: {TOKEN}\n    unsafeSkipCAVerification: true\n"
            ),
        ),
        (
            "worker join, file discovery by https URL",
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  file:\n    kubeConfigPath: https://10.0.0.10/discovery.conf\n  tlsBootstrapToken: abcdef.0123456789abcdef\n".to_string(),
        ),
        (
            "worker join, IPv6 endpoint",
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: '[fd00::10]:6443'\n    caCertHashes:\n    - {HASH}\n    token: {TOKEN}\n"
            ),
        ),
        (
            "init v1beta4, tokens, external etcd, kubelet component config",
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nbootstrapTokens:\n- token: {TOKEN}\n  ttl: 24h0m0s\n  usages: [signing, authentication]\n  groups: ['system:bootstrappers:kubeadm:default-node-token']\nlocalAPIEndpoint:\n  advertiseAddress: 10.0.0.10\n  bindPort: 6443\nnodeRegistration:\n  name: cp-0\n  taints: []\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: {v}\ncontrolPlaneEndpoint: api.example.com:6443\ncertificatesDir: /etc/kubernetes/pki\netcd:\n  external:\n    endpoints: ['https://10.0.0.5:2379']\n    caFile: /etc/etcd/ca.crt\n    certFile: /etc/etcd/client.crt\n    keyFile: /etc/etcd/client.key\nnetworking:\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\n  dnsDomain: cluster.local\napiServer:\n  certSANs: [api.example.com, 10.0.0.10]\n  extraArgs:\n  - name: audit-log-maxage\n    value: '30'\ncertificateValidityPeriod: 8760h0m0s\ncaCertificateValidityPeriod: 87600h0m0s\n---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
            ),
        ),
        (
            "init v1beta3, local etcd extraArgs map, timeoutForControlPlane, trailing ---",
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nkubernetesVersion: {v}\ncontrolPlaneEndpoint: 10.0.0.10:6443\napiServer:\n  timeoutForControlPlane: 4m0s\n  extraArgs:\n    cloud-provider: external\netcd:\n  local:\n    dataDir: /var/lib/etcd\n    extraArgs:\n      listen-metrics-urls: http://127.0.0.1:2381\n---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nlocalAPIEndpoint:\n  advertiseAddress: 10.0.0.10\n  bindPort: 6443\n---\n"
            ),
        ),
        (
            "init v1beta4 with ResetConfiguration, UpgradeConfiguration, KubeProxyConfiguration",
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: {v}\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nnodeRegistration:\n  name: cp-0\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ResetConfiguration\ncleanupTmpDir: true\nforce: true\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: UpgradeConfiguration\napply:\n  forceUpgrade: true\ntimeouts:\n  upgradeManifests: 5m0s\n---\napiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n"
            ),
        ),
        (
            "worker join v1beta4 with ResetConfiguration",
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.10:6443\n    caCertHashes:\n    - {HASH}\n    token: {TOKEN}\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ResetConfiguration\nunmountFlags: [MNT_FORCE]\n"
            ),
        ),
    ];
    cases
        .into_iter()
        .map(|(n, t)| Case {
            name: format!("hand-written: {n}"),
            text: t,
        })
        .collect()
}

/// Hand-written invalid files no mutation of one document makes.
pub fn hand_written_invalid() -> Vec<Case> {
    let cases = [
        ("a Pod", "apiVersion: v1\nkind: Pod\n".to_string()),
        ("no kind", "apiVersion: kubeadm.k8s.io/v1beta4\n".to_string()),
        ("not a mapping", "- apiVersion: kubeadm.k8s.io/v1beta4\n".to_string()),
        (
            "not YAML",
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: [JoinConfiguration\n".to_string(),
        ),
        (
            "join without discovery",
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration: {}\n"
                .to_string(),
        ),
        (
            "join with empty discovery",
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery: {}\n"
                .to_string(),
        ),
        (
            "join with bootstrapToken and file",
            format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.10:6443\n    token: {TOKEN}\n    unsafeSkipCAVerification: true\n  file:\n    kubeConfigPath: /etc/kubernetes/discovery.conf\n"
            ),
        ),
        (
            "discovery file not on disk",
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  file:\n    kubeConfigPath: /nonexistent/discovery.conf\n  tlsBootstrapToken: abcdef.0123456789abcdef\n".to_string(),
        ),
    ];
    cases
        .into_iter()
        .map(|(n, t)| Case {
            name: format!("hand-written invalid: {n}"),
            text: t,
        })
        .collect()
}

// ---- mutations --------------------------------------------------------------------------

fn docs_of(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn join_docs(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| format!("---\n{}", serde_norway::to_string(d).unwrap()))
        .collect()
}

fn key(k: &str) -> Value {
    Value::String(k.to_string())
}

/// The mapping at `path` (keys), if there is one.
fn at_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Mapping> {
    let mut cur = v;
    for k in path {
        cur = cur.as_mapping_mut()?.get_mut(key(k))?;
    }
    cur.as_mapping_mut()
}

/// Set `path.last` in the mapping at `path[..last]` when that mapping exists.
fn set(v: &mut Value, path: &[&str], value: Value) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    match at_mut(v, parent) {
        Some(m) => {
            m.insert(key(last), value);
            true
        }
        None => false,
    }
}

/// Set only when the field already exists.
fn replace(v: &mut Value, path: &[&str], value: Value) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    match at_mut(v, parent) {
        Some(m) if m.contains_key(key(last)) => {
            m.insert(key(last), value);
            true
        }
        _ => false,
    }
}

fn remove(v: &mut Value, path: &[&str]) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    at_mut(v, parent).is_some_and(|m| m.remove(key(last)).is_some())
}

fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

fn n(v: i64) -> Value {
    Value::Number(v.into())
}

const EXTRA_ARGS: &[&[&str]] = &[
    &["nodeRegistration", "kubeletExtraArgs"],
    &["apiServer", "extraArgs"],
    &["controllerManager", "extraArgs"],
];
const DURATIONS_V4: &[&[&str]] = &[
    &["timeouts", "discovery"],
    &["timeouts", "tlsBootstrap"],
    &["certificateValidityPeriod"],
];
const DURATIONS_V3: &[&[&str]] = &[
    &["discovery", "timeout"],
    &["apiServer", "timeoutForControlPlane"],
];

/// A mutation of one document: its name and what it does (false: not applicable).
type Mutation = (String, Box<dyn Fn(&mut Value) -> bool>);

fn kind_of(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or("")
}

fn api_of(doc: &Value) -> &str {
    doc["apiVersion"].as_str().unwrap_or("")
}

/// Every mutation that applies to `doc`.
fn mutations(doc: &Value) -> Vec<Mutation> {
    let mut m: Vec<Mutation> = Vec::new();
    let mut add = |name: String, f: Box<dyn Fn(&mut Value) -> bool>| m.push((name, f));
    // Unknown fields: at the top and inside every mapping one level down.
    add(
        "unknown field at the top".into(),
        Box::new(|d| set(d, &["bogusField"], n(1))),
    );
    if let Some(map) = doc.as_mapping() {
        for (k, v) in map {
            if let (Some(k), true) = (k.as_str(), v.is_mapping()) {
                let k = k.to_string();
                add(
                    format!("unknown field in {k}"),
                    Box::new(move |d| set(d, &[&k, "bogusField"], s("x"))),
                );
            }
        }
    }
    for (k, sub) in [
        ("discovery", "bootstrapToken"),
        ("etcd", "local"),
        ("etcd", "external"),
    ] {
        add(
            format!("unknown field in {k}.{sub}"),
            Box::new(move |d| {
                at_mut(d, &[k, sub]).is_some() && set(d, &[k, sub, "bogusField"], s("x"))
            }),
        );
    }
    // Kinds and API versions.
    let kind = kind_of(doc).to_string();
    add(
        "kind with a typo".into(),
        Box::new(move |d| set(d, &["kind"], s(&format!("{kind}s")))),
    );
    for other in [
        "InitConfiguration",
        "JoinConfiguration",
        "ClusterConfiguration",
    ] {
        if other != kind_of(doc) {
            add(
                format!("kind changed to {other}"),
                Box::new(move |d| set(d, &["kind"], s(other))),
            );
        }
    }
    let other_api = if api_of(doc).ends_with("v1beta3") {
        "kubeadm.k8s.io/v1beta4"
    } else {
        "kubeadm.k8s.io/v1beta3"
    };
    add(
        format!("apiVersion changed to {other_api}"),
        Box::new(move |d| set(d, &["apiVersion"], s(other_api))),
    );
    for api in ["kubeadm.k8s.io/v1beta2", "kubeadm.k8s.io/v1", "v1"] {
        add(
            format!("apiVersion {api}"),
            Box::new(move |d| set(d, &["apiVersion"], s(api))),
        );
    }
    add(
        "no apiVersion".into(),
        Box::new(|d| remove(d, &["apiVersion"])),
    );
    add("no kind".into(), Box::new(|d| remove(d, &["kind"])));
    // The other version's fields.
    let v4 = api_of(doc).ends_with("v1beta4");
    let foreign: Vec<(&'static [&'static str], Value)> = if v4 {
        vec![
            (&["apiServer", "timeoutForControlPlane"], s("4m0s")),
            (&["discovery", "timeout"], s("5m0s")),
        ]
    } else {
        vec![
            (
                &["timeouts"],
                serde_norway::from_str("{discovery: 5m0s}").unwrap(),
            ),
            (&["dryRun"], Value::Bool(false)),
            (&["encryptionAlgorithm"], s("RSA-2048")),
            (&["certificateValidityPeriod"], s("8760h0m0s")),
            (
                &["proxy"],
                serde_norway::from_str("{disabled: true}").unwrap(),
            ),
            (&["nodeRegistration", "imagePullSerial"], Value::Bool(true)),
            (&["dns", "disabled"], Value::Bool(true)),
        ]
    };
    for (path, value) in foreign {
        add(
            format!("other version's field {}", path.join(".")),
            Box::new(move |d| set(d, path, value.clone())),
        );
    }
    // extraArgs in the other shape.
    for path in EXTRA_ARGS {
        let other: Value = if v4 {
            serde_norway::from_str("{cloud-provider: external}").unwrap()
        } else {
            serde_norway::from_str("[{name: cloud-provider, value: external}]").unwrap()
        };
        add(
            format!("{} in the other version's shape", path.join(".")),
            Box::new(move |d| replace(d, path, other.clone())),
        );
    }
    // Durations.
    let duration_fields = if v4 { DURATIONS_V4 } else { DURATIONS_V3 };
    for path in duration_fields {
        for d in [
            "5 minutes",
            "10",
            "1x",
            "m5",
            "1.5h",
            "90s",
            "-1s",
            "0",
            "1h30m",
            "",
            "1d",
        ] {
            let path: Vec<&'static str> = path.to_vec();
            add(
                format!("duration {} = {d:?}", path.join(".")),
                Box::new(move |doc| {
                    let ok = match path.as_slice() {
                        [top, _] => {
                            at_mut(doc, &[top]).is_some()
                                || set(doc, &[top], Value::Mapping(Mapping::new()))
                        }
                        _ => true,
                    };
                    ok && match_kind_for(doc, &path) && set(doc, &path, s(d))
                }),
            );
        }
    }
    for d in ["24h0m0s", "1d", "-1h", "abc"] {
        add(
            format!("duration bootstrapTokens[0].ttl = {d:?}"),
            Box::new(move |doc| {
                kind_of(doc) == "InitConfiguration"
                    && set(
                        doc,
                        &["bootstrapTokens"],
                        serde_norway::from_str(&format!("[{{token: {TOKEN}, ttl: '{d}'}}]"))
                            .unwrap(),
                    )
            }),
        );
    }
    // Tokens.
    for t in [
        "ABCDEF.0123456789abcdef",
        "abcdef0123456789abcdef",
        "abcde.0123456789abcdef",
        "abcdef.0123456789abcdefg",
        "abcdef.0123456789abcde_",
        "",
    ] {
        add(
            format!("discovery token {t:?}"),
            Box::new(move |d| replace(d, &["discovery", "bootstrapToken", "token"], s(t))),
        );
        add(
            format!("bootstrapTokens[0].token {t:?}"),
            Box::new(move |d| {
                kind_of(d) == "InitConfiguration"
                    && set(
                        d,
                        &["bootstrapTokens"],
                        Value::Sequence(vec![
                            serde_norway::from_str(&format!("{{token: '{t}'}}")).unwrap(),
                        ]),
                    )
            }),
        );
        add(
            format!("tlsBootstrapToken {t:?}"),
            Box::new(move |d| {
                kind_of(d) == "JoinConfiguration"
                    && set(d, &["discovery", "tlsBootstrapToken"], s(t))
            }),
        );
    }
    // CA hashes.
    let hex64 = "4b0f6e0c8b1b36c1d77a9b5a4e6a5bb86bb3f0f3b1b2f8a7e2b5f6b0f4e2f8aa";
    for h in [
        format!("sha256:{}", &hex64[..63]),
        format!("sha256:{hex64}0"),
        format!("SHA256:{hex64}"),
        format!("sha256:{}", hex64.to_uppercase()),
        format!("sha256:{}zz", &hex64[..62]),
        format!("md5:{}", &hex64[..32]),
        hex64.to_string(),
        String::new(),
    ] {
        add(
            format!("caCertHashes[0] {h:?}"),
            Box::new(move |d| {
                replace(
                    d,
                    &["discovery", "bootstrapToken", "caCertHashes"],
                    Value::Sequence(vec![s(&h)]),
                )
            }),
        );
    }
    add(
        "no caCertHashes".into(),
        Box::new(|d| remove(d, &["discovery", "bootstrapToken", "caCertHashes"])),
    );
    add(
        "empty caCertHashes, unsafeSkipCAVerification".into(),
        Box::new(|d| {
            replace(
                d,
                &["discovery", "bootstrapToken", "caCertHashes"],
                Value::Sequence(vec![]),
            ) && set(
                d,
                &["discovery", "bootstrapToken", "unsafeSkipCAVerification"],
                Value::Bool(true),
            )
        }),
    );
    add(
        "no discovery".into(),
        Box::new(|d| remove(d, &["discovery"])),
    );
    add(
        "no discovery token".into(),
        Box::new(|d| remove(d, &["discovery", "bootstrapToken", "token"])),
    );
    add(
        "no apiServerEndpoint".into(),
        Box::new(|d| remove(d, &["discovery", "bootstrapToken", "apiServerEndpoint"])),
    );
    // Endpoints and addresses.
    for e in [
        "10.0.0.10",
        "10.0.0.10:0",
        "10.0.0.10:99999",
        "bad_host:6443",
        "api.example.com:6443",
        "[fd00::10]:6443",
        ":6443",
    ] {
        add(
            format!("apiServerEndpoint {e:?}"),
            Box::new(move |d| {
                replace(
                    d,
                    &["discovery", "bootstrapToken", "apiServerEndpoint"],
                    s(e),
                )
            }),
        );
        add(
            format!("controlPlaneEndpoint {e:?}"),
            Box::new(move |d| {
                kind_of(d) == "ClusterConfiguration" && set(d, &["controlPlaneEndpoint"], s(e))
            }),
        );
    }
    for a in ["not-an-ip", "10.0.0.300", "fd00::10", ""] {
        add(
            format!("localAPIEndpoint.advertiseAddress {a:?}"),
            Box::new(move |d| {
                kind_of(d) == "InitConfiguration"
                    && set(
                        d,
                        &["localAPIEndpoint"],
                        serde_norway::from_str(&format!("{{advertiseAddress: '{a}'}}")).unwrap(),
                    )
            }),
        );
    }
    for p in [0, 6443, 70000, -1] {
        add(
            format!("localAPIEndpoint.bindPort {p}"),
            Box::new(move |d| {
                kind_of(d) == "InitConfiguration"
                    && set(
                        d,
                        &["localAPIEndpoint"],
                        serde_norway::from_str(&format!(
                            "{{advertiseAddress: 10.0.0.10, bindPort: {p}}}"
                        ))
                        .unwrap(),
                    )
            }),
        );
    }
    for k in ["abc".to_string(), "0".repeat(64), "g".repeat(64)] {
        add(
            format!(
                "certificateKey {:?}",
                if k.len() > 8 { &k[..8] } else { &k }
            ),
            Box::new(move |d| match kind_of(d) {
                "InitConfiguration" => set(d, &["certificateKey"], s(&k)),
                "JoinConfiguration" => {
                    at_mut(d, &["controlPlane"]).is_some()
                        && set(d, &["controlPlane", "certificateKey"], s(&k))
                }
                _ => false,
            }),
        );
    }
    // Value shapes.
    add(
        "taint effect NoFoo".into(),
        Box::new(|d| {
            set(
                d,
                &["nodeRegistration", "taints"],
                serde_norway::from_str("[{key: k, effect: NoFoo}]").unwrap(),
            )
        }),
    );
    add(
        "taint without effect".into(),
        Box::new(|d| {
            set(
                d,
                &["nodeRegistration", "taints"],
                serde_norway::from_str("[{key: k}]").unwrap(),
            )
        }),
    );
    add(
        "imagePullPolicy Sometimes".into(),
        Box::new(|d| set(d, &["nodeRegistration", "imagePullPolicy"], s("Sometimes"))),
    );
    add(
        "encryptionAlgorithm RSA-1024".into(),
        Box::new(|d| {
            kind_of(d) == "ClusterConfiguration"
                && api_of(d).ends_with("v1beta4")
                && set(d, &["encryptionAlgorithm"], s("RSA-1024"))
        }),
    );
    add(
        "bindPort as a string".into(),
        Box::new(|d| {
            kind_of(d) == "InitConfiguration"
                && set(
                    d,
                    &["localAPIEndpoint"],
                    serde_norway::from_str("{bindPort: '6443'}").unwrap(),
                )
        }),
    );
    add(
        "taints as a string".into(),
        Box::new(|d| set(d, &["nodeRegistration", "taints"], s("none"))),
    );
    add(
        "featureGates NoSuchGate".into(),
        Box::new(|d| {
            kind_of(d) == "ClusterConfiguration"
                && set(
                    d,
                    &["featureGates"],
                    serde_norway::from_str("{NoSuchGate: true}").unwrap(),
                )
        }),
    );
    add(
        "etcd local and external".into(),
        Box::new(|d| {
            kind_of(d) == "ClusterConfiguration"
                && set(
                    d,
                    &["etcd"],
                    serde_norway::from_str("{local: {dataDir: /var/lib/etcd}, external: {endpoints: ['https://10.0.0.5:2379']}}")
                        .unwrap(),
                )
        }),
    );
    add(
        "apiServer.certSANs bad_name".into(),
        Box::new(|d| {
            kind_of(d) == "ClusterConfiguration"
                && at_mut(d, &["apiServer"]).is_some()
                && set(
                    d,
                    &["apiServer", "certSANs"],
                    serde_norway::from_str("[bad_name]").unwrap(),
                )
        }),
    );
    add(
        "discovery file relative path".into(),
        Box::new(|d| {
            kind_of(d) == "JoinConfiguration"
                && remove(d, &["discovery", "bootstrapToken"])
                && set(
                    d,
                    &["discovery", "file"],
                    serde_norway::from_str("{kubeConfigPath: discovery.conf}").unwrap(),
                )
        }),
    );
    m
}

/// Durations under `timeouts` exist in Init and Join configs; `discovery.timeout` in Join;
/// `apiServer.*` and `certificateValidityPeriod` in ClusterConfiguration.
fn match_kind_for(doc: &Value, path: &[&str]) -> bool {
    let k = kind_of(doc);
    match path.first().copied() {
        Some("timeouts") => k == "InitConfiguration" || k == "JoinConfiguration",
        Some("discovery") => k == "JoinConfiguration",
        Some("apiServer") | Some("certificateValidityPeriod") => k == "ClusterConfiguration",
        _ => false,
    }
}

/// Every mutation of every document of `base`, one changed document per case, plus the
/// file with its first document twice and with every document's apiVersion flipped.
pub fn mutated(base: &Case) -> Vec<Case> {
    let docs = docs_of(&base.text);
    let mut out = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        for (name, f) in mutations(doc) {
            let mut all = docs.clone();
            if f(&mut all[i]) {
                out.push(Case {
                    name: format!(
                        "{} / document {} ({}): {name}",
                        base.name,
                        i + 1,
                        kind_of(doc)
                    ),
                    text: join_docs(&all),
                });
            }
        }
    }
    if let Some(first) = docs.first() {
        let mut twice = docs.clone();
        twice.push(first.clone());
        out.push(Case {
            name: format!("{} / document 1 twice", base.name),
            text: join_docs(&twice),
        });
    }
    let flipped: Vec<Value> = docs
        .iter()
        .cloned()
        .map(|mut d| {
            let to = if api_of(&d).ends_with("v1beta3") {
                "kubeadm.k8s.io/v1beta4"
            } else {
                "kubeadm.k8s.io/v1beta3"
            };
            if api_of(&d).starts_with("kubeadm.k8s.io/") {
                set(&mut d, &["apiVersion"], s(to));
            }
            d
        })
        .collect();
    out.push(Case {
        name: format!("{} / every apiVersion flipped", base.name),
        text: join_docs(&flipped),
    });
    out
}
