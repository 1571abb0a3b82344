//! kubeadm-standin: a TEST STAND-IN for kubeadm (see README.md). It checks its arguments,
//! reads its config file with nodeagent's own reader (`config.rs`; real kubeadm judges configs
//! in the tests, not the stand-in), does to the filesystem what kubeadm
//! does (`node.rs`: init/join create kubeconfigs, manifests, kubelet files and missing PKI,
//! `reset -f` deletes what kubeadm's reset deletes), records every call, and fails on request.
//! It starts no kubelet, container or network service.

mod config;
mod node;

use node::Node;
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `config validate` changes nothing on the node: it is not one of the recorded calls
    // (tests count init/join/reset), only noted in $KUBEADM_STANDIN_VALIDATE_LOG when set.
    if args.first().map(String::as_str) == Some("config") {
        let (code, reason) = config_validate(args.get(1..).unwrap_or_default());
        if let Ok(p) = std::env::var("KUBEADM_STANDIN_VALIDATE_LOG")
            && let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
        {
            let _ = writeln!(f, "{}", json!({"argv": args, "exit": code}));
        }
        if code != 0 {
            eprintln!("error: {reason}");
        }
        std::process::exit(code);
    }
    let log = PathBuf::from(
        std::env::var("KUBEADM_STANDIN_LOG")
            .unwrap_or_else(|_| "/var/log/kubeadm-standin.jsonl".into()),
    );
    let state_path = std::env::var("KUBEADM_STANDIN_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let mut p = log.clone().into_os_string();
            p.push(".state");
            PathBuf::from(p)
        });
    if let Some(s) = std::env::var("KUBEADM_STANDIN_SLEEP")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_secs_f64(s));
    }
    let node = Node {
        root: match node::root_from_env() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("kubeadm-standin: {e}");
                std::process::exit(2);
            }
        },
    };
    let mut state = load_state(&state_path);
    let mut record = json!({
        "ts_ms": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
        "pid": std::process::id(),
        "argv": args.iter().map(|a| libnodeagent::base::redact::redact_text(a)).collect::<Vec<_>>(),
    });
    let (code, reason) = run(&args, &node, &mut state, &mut record);
    record["exit"] = json!(code);
    record["reason"] = json!(reason);
    save_state(&state_path, &state);
    if let Some(dir) = log.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .expect("KUBEADM_STANDIN_LOG not writable");
    writeln!(f, "{record}").expect("record not written");
    if code != 0 {
        eprintln!("error: {reason}");
    }
    std::process::exit(code);
}

fn load_state(p: &PathBuf) -> Value {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_else(|| json!({"inits": 0, "joins": 0, "resets": 0}))
}

fn save_state(p: &PathBuf, s: &Value) {
    std::fs::write(p, s.to_string()).expect("state file not writable");
}

fn bump(state: &mut Value, key: &str) -> u64 {
    let n = state[key].as_u64().unwrap_or(0) + 1;
    state[key] = json!(n);
    n
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1" || v == "true")
}

/// Returns (exit code, reason); prints kubeadm-like output.
fn run(args: &[String], node: &Node, state: &mut Value, record: &mut Value) -> (i32, String) {
    let Some(cmd) = args.first().map(String::as_str) else {
        return (2, "no command".into());
    };
    record["cmd"] = json!(cmd);
    if cmd == "reset" {
        if !matches!(&args[1..], [f] if f == "-f" || f == "--force") {
            return (2, format!("reset expects exactly -f, got {:?}", &args[1..]));
        }
        bump(state, "resets");
        // Reset reads certificatesDir from the cluster's kubeadm-config; the stand-in
        // remembers it from the last init/join config it was given.
        let cert_dir = state["cert_dir"]
            .as_str()
            .unwrap_or("/etc/kubernetes/pki")
            .to_string();
        let removed = node::reset(node, &cert_dir);
        println!("[reset] Deleted contents of the etcd data directory: /var/lib/etcd");
        println!(
            "[reset] Deleting contents of directories: [{} {} {cert_dir}]",
            node::MANIFESTS_DIR,
            node::KUBELET_DIR
        );
        println!(
            "The reset process does not clean CNI configuration. To do so, you must remove /etc/cni/net.d"
        );
        record["removed"] = json!(removed);
        return (0, String::new());
    }
    if cmd != "init" && cmd != "join" {
        return (2, format!("unknown command {cmd:?}"));
    }
    let mut config = None;
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--config" => config = it.next().cloned(),
            "--v" => {
                if it.next().and_then(|v| v.parse::<u8>().ok()).is_none() {
                    return (2, "--v needs a number".into());
                }
            }
            a if a.starts_with("--config=") => {
                config = a.strip_prefix("--config=").map(str::to_string)
            }
            a if a
                .strip_prefix("--v=")
                .is_some_and(|v| v.parse::<u8>().is_ok()) => {}
            other => {
                return (
                    2,
                    format!(
                        "unexpected argument {:?}",
                        libnodeagent::base::redact::redact_text(other)
                    ),
                );
            }
        }
    }
    let Some(config) = config else {
        return (2, "--config FILE is required".into());
    };
    record["config"] = json!(config);
    let text = match std::fs::read_to_string(&config) {
        Ok(t) => t,
        Err(e) => return (3, format!("config {config}: {e}")),
    };
    record["config_sha256"] = json!(sha256_hex(text.as_bytes()));
    let cfg = match config::parse(&text, &config) {
        Ok(c) => c,
        Err(e) => return (3, e),
    };
    state["cert_dir"] = json!(cfg.cert_dir());
    let echo = env_flag("KUBEADM_STANDIN_ECHO_SECRETS");
    if cmd == "init" {
        let n = bump(state, "inits");
        record["attempt"] = json!(n);
        // kubeadm init ignores a JoinConfiguration beside them.
        if cfg.init().is_none() && cfg.cluster().is_none() {
            return (
                3,
                "no InitConfiguration or ClusterConfiguration kind was found in the configuration file"
                    .into(),
            );
        }
        println!("[init] Using Kubernetes version: stand-in");
        let token = cfg
            .init()
            .and_then(|i| i.bootstrap_tokens.as_ref())
            .and_then(|t| t.first())
            .map(|t| t.token.clone())
            .unwrap_or_else(|| "q1w2e3.r4t5y6u7i8o9p0a1".into());
        let ep = cfg
            .cluster()
            .and_then(|c| c.control_plane_endpoint.clone())
            .unwrap_or_else(|| "127.0.0.1:6443".into());
        let fail = env_flag("KUBEADM_STANDIN_FAIL_INIT");
        match node::init(node, &cfg, fail) {
            Ok(made) => record["created"] = json!(made),
            Err(e) => {
                println!(
                    "[wait-control-plane] Waiting for the kubelet to boot up the control plane (stand-in)"
                );
                return (1, e);
            }
        }
        println!("Your Kubernetes control-plane has initialized successfully! (stand-in)");
        println!(
            "You can now join any number of machines by running the following on each node as root:"
        );
        println!("  kubeadm join {ep} --token {token} \\");
        println!(
            "\t--discovery-token-ca-cert-hash sha256:0000000000000000000000000000000000000000000000000000000000000000"
        );
        return (0, String::new());
    }
    // join
    let n = bump(state, "joins");
    record["attempt"] = json!(n);
    // kubeadm join ignores an InitConfiguration beside it.
    let Some(join) = cfg.join() else {
        return (
            3,
            "no JoinConfiguration found in the supplied config".into(),
        );
    };
    let bt = join.discovery.bootstrap_token.as_ref();
    if echo {
        if let Some(bt) = bt {
            println!("[discovery] Using token: {}", bt.token);
        }
        if let Some(k) = join
            .control_plane
            .as_ref()
            .and_then(|c| c.certificate_key.as_ref())
        {
            println!("[download-certs] Using certificate key:\n{k}");
        }
    }
    println!("[preflight] Running pre-flight checks");
    if let Err(e) = node::join_preflight(node, &cfg) {
        return (1, e);
    }
    let endpoint = bt.and_then(|b| b.api_server_endpoint.clone());
    if let Some(ep) = &endpoint {
        record["endpoint"] = json!(ep);
        let reachable = std::net::ToSocketAddrs::to_socket_addrs(ep.as_str())
            .ok()
            .and_then(|mut a| a.next())
            .is_some_and(|a| {
                std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)).is_ok()
            });
        if !reachable {
            return (
                1,
                format!("[discovery] couldn't connect to the API server at {ep}"),
            );
        }
    }
    if let Err(e) = node::control_plane_ready(node, &cfg) {
        return (1, e);
    }
    let fail_joins = std::env::var("KUBEADM_STANDIN_FAIL_JOINS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let ep = endpoint.unwrap_or_else(|| "127.0.0.1:6443".into());
    match node::join(node, &cfg, &ep, n <= fail_joins) {
        Ok(made) => record["created"] = json!(made),
        Err(e) if e.is_empty() => {
            println!(
                "[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap (stand-in)"
            );
            return (
                1,
                format!(
                    "error execution phase kubelet-start: failure {n} of {fail_joins} requested by KUBEADM_STANDIN_FAIL_JOINS"
                ),
            );
        }
        Err(e) => return (1, e),
    }
    println!("This node has joined the cluster (stand-in)");
    (0, String::new())
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `config validate --config FILE` (kubeadm 1.28+): whether the stand-in can read FILE
/// (nodeagent's reader, no judgement of its own; real kubeadm's is `kubeadm_oracle.rs`'s),
/// nothing written. Exit 0 (prints `ok`, as kubeadm does) or 3 with the reason.
fn config_validate(args: &[String]) -> (i32, String) {
    let config = match args {
        [v, c, path] if v == "validate" && c == "--config" => path.clone(),
        [v, c] if v == "validate" => match c.strip_prefix("--config=") {
            Some(path) => path.to_string(),
            None => return (2, "config validate needs --config FILE".into()),
        },
        _ => {
            return (
                2,
                "only `config validate --config FILE` is supported".into(),
            );
        }
    };
    let text = match std::fs::read_to_string(&config) {
        Ok(t) => t,
        Err(e) => return (3, format!("config {config}: {e}")),
    };
    match config::parse(&text, &config) {
        Ok(_) => {
            println!("ok");
            (0, String::new())
        }
        Err(e) => (3, e),
    }
}
