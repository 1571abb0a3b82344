//! Every parser boundary (issue 41, class 1): each kind of YAML document the agent and its
//! tools read goes through the one bounded entry point (`libnodeagent::formats::yaml`), so one anchor
//! aliased thousands of times, or nesting past the bound, is refused by a child that ends by
//! itself, fast and inside its memory bound, wherever the document comes from. Also the JSON
//! metadata and the OVF environment's XML, and the files the YAML readers open themselves.

use crate::harness::{self, INSIDE_MD, INSIDE_UD, Node, Outcome, alias_bomb, depth_bomb};
use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

/// A node with the `dir:` transport inside R holding `metadata` and `userdata`.
fn dir_node(metadata: &str, userdata: &str) -> Node {
    let node = Node::new();
    node.transports(&["dir:/gi"]);
    node.put("gi/guestinfo.metadata", metadata.as_bytes());
    node.put("gi/guestinfo.userdata", userdata.as_bytes());
    node
}

/// `text` indented under a YAML block scalar.
fn indented(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

fn agent_in(node: &Node, args: &[&OsStr]) -> Outcome {
    let _ = node;
    harness::agent(args, &[])
}

// ---- yaml-userdata, yaml-metadata --------------------------------------------------------

#[test]
fn cell_yaml_userdata_bomb() {
    for bomb in [
        alias_bomb("#cloud-config\n", "anchor"),
        format!("#cloud-config\nruncmd: {}\n", depth_bomb()),
    ] {
        let node = dir_node(INSIDE_MD, &bomb);
        node.run(&[]).refused();
        assert!(!node.inside_applied());
    }
}

#[test]
fn cell_yaml_metadata_bomb() {
    for bomb in [
        alias_bomb("instance-id: i-1\n", "anchor"),
        format!("instance-id: i-1\nx: {}\n", depth_bomb()),
    ] {
        let node = dir_node(&bomb, INSIDE_UD);
        node.run(&[]).refused();
        assert!(!node.inside_applied());
    }
}

/// Metadata in JSON (read first as JSON, as cloud-init does): sixteen MiB of empty objects,
/// millions of values, and nesting past the bound.
#[test]
fn cell_json_metadata_bomb() {
    let n = (libnodeagent::base::limits::MAX_DECODED_BYTES - 64) / 3;
    let wide = format!(
        "{{\"instance-id\": \"i-1\", \"x\": [{}{{}}]}}",
        "{},".repeat(n - 1)
    );
    let deep = format!(
        "{{\"instance-id\": \"i-1\", \"x\": {}0{}}}",
        "[".repeat(120),
        "]".repeat(120)
    );
    for bomb in [wide, deep] {
        let node = dir_node(&bomb, INSIDE_UD);
        node.run(&[]).refused();
        assert!(!node.inside_applied());
    }
}

// ---- yaml-kubeadm -------------------------------------------------------------------------

const KUBEADM_HEAD: &str = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n";

/// A kubeadm config written by write_files for `kubeadm init`: pre-flight reads it. The same
/// file on disk, read by `nodeagent certs --root` to find the PKI directory.
#[test]
fn cell_yaml_kubeadm_bomb() {
    let bomb = alias_bomb(KUBEADM_HEAD, "anchor");
    let userdata = format!(
        "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n{}runcmd:\n- kubeadm init --config /run/kubeadm/kubeadm.yaml\n",
        indented(&bomb)
    );
    let node = dir_node(INSIDE_MD, &userdata);
    node.run(&[]).refused();
    assert!(!node.root.join("run/kubeadm/kubeadm.yaml").exists());
    // `certs --root`: the config found on disk.
    let node = Node::new();
    node.put("run/kubeadm/kubeadm.yaml", bomb.as_bytes());
    std::fs::create_dir_all(node.root.join("etc/kubernetes/pki")).unwrap();
    let out = agent_in(
        &node,
        &["certs".as_ref(), "--root".as_ref(), node.root.as_os_str()],
    );
    out.bounded();
}

/// A secret split across lines of a kubeadm config that is refused: neither part of it is in
/// anything the run leaves (stderr, status, events, published status).
#[test]
fn cell_yaml_kubeadm_split_secret() {
    let (head, tail) = ("abcdef", "0123456789abcdef");
    let config = format!(
        "{KUBEADM_HEAD}bootstrapTokens:\n- token: >-\n    {head}.\n    {tail}\n  ttl: forever\n"
    );
    let userdata = format!(
        "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n{}runcmd:\n- kubeadm init --config /run/kubeadm/kubeadm.yaml\n",
        indented(&config)
    );
    let node = dir_node(INSIDE_MD, &userdata);
    let out = node.run(&[]);
    out.refused();
    let sinks = crate::hostile_common::leak_sinks(&node.root, &node.root.join("gi"));
    for s in [&out.stderr, &sinks] {
        assert!(!s.contains(tail), "the token leaked:\n{s}");
    }
}

// ---- yaml-kubeconfig-discovery (kubeadm join's discovery file) ---------------------------

/// A join config naming a discovery kubeconfig inside R.
fn join_node(kubeconfig: Option<&str>) -> Node {
    let node = Node::new();
    node.put(
        "run/kubeadm/join.yaml",
        b"apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  file:\n    kubeConfigPath: /etc/kubernetes/discovery.conf\n",
    );
    if let Some(k) = kubeconfig {
        node.put("etc/kubernetes/discovery.conf", k.as_bytes());
    }
    node
}

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n"
    )
}

/// `join_endpoint` of `node`, in a thread given `limit` to answer.
fn endpoint(node: &Node, limit: Duration) -> Option<String> {
    let root = node.root.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(libnodeagent::kubeadm::run::join_endpoint(
            &root,
            "/run/kubeadm/join.yaml",
        ));
    });
    rx.recv_timeout(limit).expect("join_endpoint hung")
}

#[test]
fn cell_yaml_kubeconfig_discovery_link() {
    // Inside: read.
    let node = join_node(Some(&kubeconfig("https://10.0.0.1:6443")));
    assert_eq!(
        endpoint(&node, Duration::from_secs(10)).as_deref(),
        Some("10.0.0.1:6443")
    );
    // An absolute link and a `..` link to a kubeconfig outside R: not followed out.
    let outside = node.outside.join("discovery.conf");
    std::fs::write(&outside, kubeconfig("https://203.0.113.9:6443")).unwrap();
    for target in [
        outside.clone(),
        Path::new("../../../outside/discovery.conf").to_path_buf(),
    ] {
        let node = join_node(None);
        std::fs::write(
            node.outside.join("discovery.conf"),
            kubeconfig("https://203.0.113.9:6443"),
        )
        .unwrap();
        node.link("etc/kubernetes/discovery.conf", &target);
        assert_eq!(endpoint(&node, Duration::from_secs(10)), None);
    }
}

#[test]
fn cell_yaml_kubeconfig_discovery_special() {
    let node = join_node(None);
    node.fifo("etc/kubernetes/discovery.conf");
    assert_eq!(endpoint(&node, Duration::from_secs(10)), None);
    let node = join_node(None);
    if node.zero_device("etc/kubernetes/discovery.conf") {
        assert_eq!(endpoint(&node, Duration::from_secs(10)), None);
    }
}

#[test]
fn cell_yaml_kubeconfig_discovery_hardlink() {
    let node = join_node(None);
    let outside = node.outside.join("discovery.conf");
    std::fs::write(&outside, kubeconfig("https://203.0.113.9:6443")).unwrap();
    node.hard_link("etc/kubernetes/discovery.conf", &outside);
    assert_eq!(endpoint(&node, Duration::from_secs(10)), None);
}

#[test]
fn cell_yaml_kubeconfig_discovery_bomb() {
    let node = join_node(Some(&alias_bomb(
        &kubeconfig("https://10.0.0.1:6443"),
        "anchor",
    )));
    // In-process: a bounded reader answers at once (an unbounded one would take gigabytes).
    let t0 = std::time::Instant::now();
    assert_eq!(endpoint(&node, Duration::from_secs(30)), None);
    assert!(t0.elapsed() < Duration::from_secs(30));
}

// ---- yaml-kubeconfig-audit (`nodeagent certs`) --------------------------------------------

#[test]
fn cell_yaml_kubeconfig_audit_bomb() {
    let node = Node::new();
    std::fs::create_dir_all(node.root.join("etc/kubernetes/pki")).unwrap();
    node.put(
        "etc/kubernetes/admin.conf",
        alias_bomb("apiVersion: v1\n", "anchor").as_bytes(),
    );
    let out = agent_in(
        &node,
        &["certs".as_ref(), "--root".as_ref(), node.root.as_os_str()],
    );
    out.bounded();
}

#[test]
fn cell_yaml_kubeconfig_audit_special() {
    let node = Node::new();
    std::fs::create_dir_all(node.root.join("etc/kubernetes/pki")).unwrap();
    node.fifo("etc/kubernetes/admin.conf");
    let out = agent_in(
        &node,
        &["certs".as_ref(), "--root".as_ref(), node.root.as_os_str()],
    );
    out.bounded();
}

// ---- yaml-ovf-properties, yaml-seed-metadata ----------------------------------------------

fn ovf_env(properties: &[(&str, &str)]) -> String {
    let props: String = properties
        .iter()
        .map(|(k, v)| format!("    <Property oe:key=\"{k}\" oe:value=\"{v}\"/>\n"))
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Environment xmlns=\"http://schemas.dmtf.org/ovf/environment/1\" xmlns:oe=\"http://schemas.dmtf.org/ovf/environment/1\">\n  <PropertySection>\n{props}  </PropertySection>\n</Environment>\n"
    )
}

fn ovf_run(node: &Node, xml: &str) -> Outcome {
    node.transports(&["ovf"]);
    let path = crate::seeds::ovf_helper(node, xml);
    let args: Vec<&OsStr> = vec![
        "run".as_ref(),
        "--root".as_ref(),
        node.root.as_os_str(),
        "--facts".as_ref(),
        node.facts.as_os_str(),
    ];
    harness::agent(&args, &[("PATH", path.as_os_str())])
}

fn b64(data: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// The `network-config` property: base64 YAML, an alias bomb in it.
#[test]
fn cell_yaml_ovf_network_config_bomb() {
    let node = Node::new();
    let bomb = b64(&alias_bomb("network:\n  version: 2\n", "anchor"));
    let xml = ovf_env(&[
        ("instance-id", "i-1"),
        ("user-data", &b64(INSIDE_UD)),
        ("network-config", &bomb),
    ]);
    ovf_run(&node, &xml).refused();
    assert!(!node.inside_applied());
}

/// The seed's meta-data (OVF `seedfrom`, and a NoCloud seed's `network-config`).
#[test]
fn cell_yaml_seed_metadata_bomb() {
    let node = Node::new();
    node.put(
        "seed/meta-data",
        alias_bomb("instance-id: i-1\n", "anchor").as_bytes(),
    );
    node.put("seed/user-data", INSIDE_UD.as_bytes());
    ovf_run(&node, &ovf_env(&[("seedfrom", "/seed/")])).refused();
    assert!(!node.inside_applied());
    let node = Node::new();
    node.transports(&["nocloud:/seed"]);
    node.put("seed/meta-data", INSIDE_MD.as_bytes());
    node.put("seed/user-data", INSIDE_UD.as_bytes());
    node.put(
        "seed/network-config",
        alias_bomb("version: 2\n", "anchor").as_bytes(),
    );
    node.run(&[]).refused();
    assert!(!node.inside_applied());
}

/// The OVF environment itself: an entity bomb (a DTD) and a flood of elements.
#[test]
fn cell_xml_ovf_bomb() {
    let entities: String = (1..10)
        .map(|i| {
            format!(
                "<!ENTITY e{i} \"&e{p};&e{p};&e{p};&e{p};&e{p};&e{p};&e{p};&e{p};&e{p};&e{p};\">",
                p = i - 1
            )
        })
        .collect();
    let laughs = format!(
        "<?xml version=\"1.0\"?>\n<!DOCTYPE Environment [<!ENTITY e0 \"lol\">{entities}]>\n{}",
        ovf_env(&[("instance-id", "&e9;")])
            .split_once("?>\n")
            .unwrap()
            .1
    );
    let flood = ovf_env(&[("instance-id", "i-1")]).replace(
        "  </PropertySection>",
        &format!("{}  </PropertySection>", "<x/>".repeat(100_000)),
    );
    for xml in [laughs, flood] {
        let node = Node::new();
        ovf_run(&node, &xml).refused();
    }
}

// ---- yaml-collect-logs, yaml-mint-secrets, yaml-image-config, yaml-facts -----------------

/// collect-logs redacts the stored userdata by reading it as YAML.
#[test]
fn cell_yaml_collect_logs_bomb() {
    let node = Node::new();
    node.put("var/lib/nodeagent/instance-id", b"i-1\n");
    node.put(
        "var/lib/nodeagent/instances/i-1/userdata.txt",
        alias_bomb("#cloud-config\n", "anchor").as_bytes(),
    );
    let archive = node.scratch().join("logs.tar.gz");
    let out = agent_in(
        &node,
        &[
            "collect-logs".as_ref(),
            "--root".as_ref(),
            node.root.as_os_str(),
            "--output".as_ref(),
            archive.as_os_str(),
        ],
    );
    out.succeeded();
}

#[test]
fn cell_yaml_mint_secrets_bomb() {
    let node = Node::new();
    let file = node.scratch().join("secrets.yaml");
    std::fs::write(
        &file,
        alias_bomb("apiVersion: v1\nkind: Secret\n", "anchor"),
    )
    .unwrap();
    let out_dir = node.scratch().join("pki");
    let out = agent_in(
        &node,
        &[
            "mint".as_ref(),
            "secrets".as_ref(),
            "--from-secrets".as_ref(),
            file.as_os_str(),
            "--out".as_ref(),
            out_dir.as_os_str(),
        ],
    );
    out.bounded();
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(!out_dir.join("ca.key").exists());
}

/// The image config inside R.
#[test]
fn cell_yaml_image_config_bomb() {
    for bomb in [
        alias_bomb("compat: false\n", "anchor"),
        format!("transports: {}\n", depth_bomb()),
    ] {
        let node = Node::new();
        node.put("etc/nodeagent/config.yaml", bomb.as_bytes());
        node.run(&[]).refused();
    }
}

/// A node whose image config, if read, picks the inside `dir:` seed; without it (a link
/// resolved inside R leads nowhere) the default transports find nothing.
fn image_config_node() -> Node {
    let node = Node::new();
    node.put("gi/guestinfo.metadata", INSIDE_MD.as_bytes());
    node.put("gi/guestinfo.userdata", INSIDE_UD.as_bytes());
    std::fs::write(
        node.outside.join("config.yaml"),
        "transports: ['dir:/gi']\n",
    )
    .unwrap();
    node
}

#[test]
fn cell_yaml_image_config_link() {
    for relative in [false, true] {
        let node = image_config_node();
        let target = if relative {
            Path::new("../../../outside/config.yaml").to_path_buf()
        } else {
            node.outside.join("config.yaml")
        };
        node.link("etc/nodeagent/config.yaml", &target);
        let before = node.outside_now();
        let out = node.run(&[]);
        out.refused(); // the outside config was not read: no transport had data
        assert!(!node.inside_applied(), "{}", out.stderr);
        assert_eq!(before, node.outside_now());
    }
}

#[test]
fn cell_yaml_image_config_special() {
    let node = image_config_node();
    node.fifo("etc/nodeagent/config.yaml");
    node.run(&[]).refused();
    let node = image_config_node();
    if node.zero_device("etc/nodeagent/config.yaml") {
        node.run(&[]).refused();
    }
}

#[test]
fn cell_yaml_image_config_hardlink() {
    let node = image_config_node();
    node.hard_link(
        "etc/nodeagent/config.yaml",
        &node.outside.join("config.yaml"),
    );
    let before = node.outside_now();
    node.run(&[]).refused();
    assert!(!node.inside_applied());
    assert_eq!(before, node.outside_now());
}

/// `--facts FILE` (the operator's, named on the command line).
#[test]
fn cell_yaml_facts_bomb() {
    let node = dir_node(INSIDE_MD, INSIDE_UD);
    std::fs::write(&node.facts, alias_bomb("hostname: node1\n", "anchor")).unwrap();
    node.run(&[]).refused();
    assert!(!node.inside_applied());
}

// ---- the kubeadm config and collect-logs' userdata as files -------------------------------

/// The join config itself read from disk (the kubeadm step's `join_endpoint`): a link out of
/// R, a FIFO or device, a hard link to a file outside: not read.
fn config_replaced(make: impl Fn(&Node, &str, &Path)) -> Option<String> {
    let node = join_node(Some(&kubeconfig("https://10.0.0.1:6443")));
    let outside = node.outside.join("join.yaml");
    std::fs::write(
        &outside,
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 203.0.113.9:6443\n",
    )
    .unwrap();
    std::fs::remove_file(node.root.join("run/kubeadm/join.yaml")).unwrap();
    make(&node, "run/kubeadm/join.yaml", &outside);
    endpoint(&node, Duration::from_secs(10))
}

#[test]
fn cell_yaml_kubeadm_link() {
    assert_eq!(
        config_replaced(|n, rel, outside| n.link(rel, outside)),
        None
    );
    let up = Path::new("../../../outside/join.yaml");
    assert_eq!(config_replaced(|n, rel, _| n.link(rel, up)), None);
}

#[test]
fn cell_yaml_kubeadm_special() {
    assert_eq!(config_replaced(|n, rel, _| n.fifo(rel)), None);
    assert_eq!(
        config_replaced(|n, rel, _| {
            n.zero_device(rel);
        }),
        None
    );
}

#[test]
fn cell_yaml_kubeadm_hardlink() {
    assert_eq!(
        config_replaced(|n, rel, outside| n.hard_link(rel, outside)),
        None
    );
}

/// collect-logs' copy of the stored userdata: a link out of R, or a FIFO, is left out of the
/// archive, which is still made.
fn collect_logs_with(make: impl Fn(&Node, &str)) -> String {
    let node = Node::new();
    node.put("var/lib/nodeagent/instance-id", b"i-1\n");
    std::fs::write(
        node.outside.join("userdata"),
        "#cloud-config\nhostname: outside-secret\n",
    )
    .unwrap();
    make(&node, "var/lib/nodeagent/instances/i-1/userdata.txt");
    let archive = node.scratch().join("logs.tar.gz");
    let out = agent_in(
        &node,
        &[
            "collect-logs".as_ref(),
            "--root".as_ref(),
            node.root.as_os_str(),
            "--output".as_ref(),
            archive.as_os_str(),
        ],
    );
    out.succeeded();
    let mut text = String::new();
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(&archive).unwrap());
    for entry in tar::Archive::new(gz).entries().unwrap() {
        let mut entry = entry.unwrap();
        std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
    }
    text
}

#[test]
fn cell_yaml_collect_logs_link() {
    let text = collect_logs_with(|n, rel| n.link(rel, n.outside.join("userdata")));
    assert!(!text.contains("outside-secret"), "{text}");
    let text = collect_logs_with(|n, rel| n.link(rel, "../../../../../../outside/userdata"));
    assert!(!text.contains("outside-secret"), "{text}");
}

#[test]
fn cell_yaml_collect_logs_special() {
    collect_logs_with(|n, rel| n.fifo(rel));
    collect_logs_with(|n, rel| {
        n.zero_device(rel);
    });
}
