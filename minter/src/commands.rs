//! The work of each `nodeagent mint` subcommand, given its flags: checks them, reads and
//! writes files (through `files`), and returns what to print. `cli::mint` only dispatches and
//! prints.

use crate::{files, kubeconfig, pki, secrets, token, validate};
use clap::builder::PossibleValuesParser;
use libnodeagent::base::error::{Error, Result, Stage};
use std::path::{Path, PathBuf};

/// What a subcommand leaves for the terminal: text for stdout, notes for stderr.
pub struct Output {
    pub stdout: String,
    pub notes: Vec<String>,
}

impl Output {
    fn stdout(text: String) -> Output {
        Output {
            stdout: text,
            notes: Vec::new(),
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct SecretsArgs {
    /// Cluster name (Secret names `NAME-ca`, ...; with --from-secrets, picks one cluster).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Namespace of the Secrets (the Cluster's namespace).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// PKI directory (kubeadm layout) to turn into Secrets.
    #[arg(long, conflicts_with = "from_secrets")]
    pub from: Option<PathBuf>,
    /// Control-plane endpoint HOST:PORT for the admin kubeconfig in `NAME-kubeconfig`.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Read CAPI Secrets (YAML) and restore the PKI files into --out.
    #[arg(long)]
    pub from_secrets: Option<PathBuf>,
    /// Output: a YAML file (0600) for --from, a PKI directory for --from-secrets.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the Secrets (private keys included) on stdout.
    #[arg(long)]
    pub stdout: bool,
    /// Replace an existing PKI in --out (with --from-secrets).
    #[arg(long)]
    pub force: bool,
}

#[derive(clap::Args, Debug)]
pub struct KubeconfigArgs {
    /// PKI directory holding ca.crt and ca.key.
    #[arg(long)]
    pub pki: PathBuf,
    #[arg(long)]
    pub cluster: String,
    /// API server HOST:PORT.
    #[arg(long)]
    pub endpoint: String,
    /// Client certificate CN (`kubernetes-admin` gets CAPI's `NAME-admin` entry names).
    #[arg(long)]
    pub user: String,
    /// Client certificate O (a Kubernetes group, e.g. system:masters).
    #[arg(long)]
    pub group: Option<String>,
    /// Client certificate validity: 1y, 365d, 8760h.
    #[arg(long, default_value = "1y")]
    pub validity: String,
    /// Write the kubeconfig here (0600).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print it (private key included) on stdout.
    #[arg(long)]
    pub stdout: bool,
}

#[derive(clap::Args, Debug)]
pub struct BootstrapArgs {
    /// init (first control plane), control-plane (joining control plane) or worker.
    #[arg(long, value_parser = PossibleValuesParser::new(["init", "control-plane", "worker"]))]
    pub role: String,
    #[arg(long)]
    pub cluster: String,
    /// Node (VM) name; with --nodes N the nodes are NODE-0 .. NODE-(N-1).
    #[arg(long)]
    pub node: String,
    /// Control-plane endpoint HOST:PORT.
    #[arg(long)]
    pub endpoint: String,
    /// Kubernetes version of the node, vX.Y.Z.
    #[arg(long)]
    pub kubernetes_version: String,
    /// PKI directory (init/control-plane: the CAs and keys; worker: ca.crt for the discovery hash).
    #[arg(long)]
    pub pki: Option<PathBuf>,
    /// Read the PKI from CAPI Secrets instead of --pki.
    #[arg(long, conflicts_with = "pki")]
    pub from_secrets: Option<PathBuf>,
    /// Bootstrap token for joins (default: a fresh one per node).
    #[arg(long)]
    pub token: Option<String>,
    /// Lifetime written into the bootstrap-token Secrets.
    #[arg(long, default_value = "24h")]
    pub token_ttl: String,
    /// v1beta3 or v1beta4 (default by version, as CAPI chooses).
    #[arg(long, value_parser = PossibleValuesParser::new(["v1beta3", "v1beta4"]))]
    pub kubeadm_api: Option<String>,
    /// dhcp, dhcp6, or static:ADDR/PREFIX,gw=IP,dns=IP[,dns=IP...]
    #[arg(long, default_value = "dhcp", value_hint = clap::ValueHint::Other)]
    pub network: String,
    /// NIC MAC address (with --nodes N, node i gets MAC+i); default: random locally administered.
    #[arg(long)]
    pub mac: Option<String>,
    /// SSH public key file for the `capv` user (sudo), as CAPV templates set it up.
    #[arg(long)]
    pub ssh_key: Option<PathBuf>,
    /// Output directory (one subdirectory per node).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// dir, guestinfo, fwcfg or govc.
    #[arg(long, default_value = "dir",
          value_parser = PossibleValuesParser::new(["dir", "guestinfo", "fwcfg", "govc"]))]
    pub format: String,
    /// base64 or gzip+base64.
    #[arg(long, default_value = "base64",
          value_parser = PossibleValuesParser::new(["base64", "gzip+base64"]))]
    pub encoding: String,
    /// Number of worker bundles to mint.
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    /// kubeadm verbosity (`--v N` on the kubeadm line).
    #[arg(long)]
    pub verbosity: Option<u32>,
    /// Allow printing bundles that carry private keys on stdout.
    #[arg(long)]
    pub stdout: bool,
    /// `external`: CAPV's templates (`cloud-provider: external` for the kubelet and the
    /// controller manager; a cloud controller manager sets the Nodes' addresses). `none`: no
    /// cloud provider flags, the kubelet sets its Node's addresses (clusters without a CCM).
    #[arg(long, default_value = "external",
          value_parser = PossibleValuesParser::new(["external", "none"]))]
    pub cloud_provider: String,
    /// kubeadm phases to skip (`skipPhases` of the Init/JoinConfiguration), comma-separated,
    /// e.g. addon/kube-proxy,addon/coredns.
    #[arg(long, value_delimiter = ',')]
    pub skip_phases: Vec<String>,
    /// An extra file as a KubeadmConfig's `files:` entry (root:root, 0644): DEST=LOCAL writes
    /// the text of LOCAL to DEST on the node. Repeatable.
    #[arg(long = "file", value_name = "DEST=LOCAL")]
    pub files: Vec<String>,
    /// A command run before kubeadm (a KubeadmConfig's `preKubeadmCommands` item, in the
    /// userdata's runcmd). Repeatable.
    #[arg(long = "pre-command", value_name = "COMMAND")]
    pub pre_commands: Vec<String>,
    /// A kubeadm v1beta4 timeout (`timeouts` of the Init/JoinConfiguration) as NAME=DURATION,
    /// e.g. controlPlaneComponentHealthCheck=15m for a slow (emulated) machine. Repeatable.
    #[arg(long = "kubeadm-timeout", value_name = "NAME=DURATION")]
    pub kubeadm_timeouts: Vec<String>,
    /// kubeadm's patches directory on the node (`patches.directory` of the Init/Join
    /// configuration), e.g. /etc/kubernetes/patches with its files given by --file.
    #[arg(long = "kubeadm-patches", value_name = "DIR")]
    pub kubeadm_patches: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct PkiArgs {
    /// Cluster name (recorded nowhere in the certificates: CAPI uses CN=kubernetes).
    #[arg(long)]
    pub cluster: String,
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// ecdsa-p256 (default), ecdsa-p384, rsa-2048 or rsa-4096.
    #[arg(long, default_value = "ecdsa-p256", ignore_case = true,
          value_parser = PossibleValuesParser::new(["ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-4096"]))]
    pub algorithm: String,
    /// CA validity: 10y, 3650d, 87600h.
    #[arg(long, default_value = "10y")]
    pub validity: String,
    /// Replace an existing PKI in --out.
    #[arg(long)]
    pub force: bool,
}

#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    /// Use this token instead of generating one (for --secret).
    #[arg(long)]
    pub token: Option<String>,
    /// Print the bootstrap-token Secret manifest (kube-system) instead of the bare token.
    #[arg(long)]
    pub secret: bool,
    /// Token lifetime for the Secret's expiration: 15m, 24h, 7d.
    #[arg(long, default_value = "24h")]
    pub ttl: String,
}

#[derive(clap::Args, Debug)]
pub struct HashArgs {
    /// CA certificate file (PEM; one hash per certificate).
    #[arg(long)]
    pub ca: PathBuf,
}

fn usage(place: &str, message: impl Into<String>) -> Error {
    Error::invalid(Stage::Usage, place, message)
}

/// Cluster and node names end up in Secret names and file names: DNS-1123 labels only.
pub fn check_name(flag: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(usage(
            flag,
            format!(
                "{name:?} is not a DNS-1123 label (lower-case letters, digits, '-', at most 63)"
            ),
        ))
    }
}

/// `mint pki`: a fresh cluster PKI written to --out.
pub fn run_pki(a: &PkiArgs) -> Result<Output> {
    check_name("--cluster", &a.cluster)?;
    let algorithm = pki::Algorithm::parse(&a.algorithm)?;
    let validity = pki::parse_validity(&a.validity, "--validity")?;
    let p = pki::Pki::generate(algorithm, validity)?;
    p.write(&a.out, a.force)?;
    Ok(Output::stdout(format!(
        "wrote {} PKI for cluster {} to {}\n",
        algorithm.name(),
        a.cluster,
        a.out.display()
    )))
}

/// `mint token`: the token given (checked) or a fresh one, or with --secret its Secret
/// manifest.
pub fn run_token(a: &TokenArgs) -> Result<Token> {
    let t = match &a.token {
        Some(t) => {
            token::parse(t)?;
            t.clone()
        }
        None => token::generate()?,
    };
    if a.secret {
        let ttl = token::parse_ttl(&a.ttl)?;
        let manifest = token::secret_manifest(&t, ttl, time::OffsetDateTime::now_utc())?;
        Ok(Token::Manifest(manifest))
    } else {
        Ok(Token::Bare(t))
    }
}

/// What `mint token` prints.
pub enum Token {
    Bare(String),
    Manifest(String),
}

/// `mint hash`: the discovery hash of each certificate in the CA file.
pub fn run_hash(a: &HashArgs) -> Result<Vec<String>> {
    let bytes = read_bounded(&a.ca, pki::MAX_PEM_BYTES)?;
    libnodeagent::pki::hash::discovery_hashes(&bytes)
        .map_err(|e| e.within(&a.ca.display().to_string()))
}

/// Read a file no larger than `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path)
        .map_err(|e| Error::io(Stage::Mint, path.display().to_string(), "", e))?;
    let mut buf = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(Stage::Mint, path.display().to_string(), "", e))?;
    if buf.len() as u64 > max {
        return Err(Error::too_large(
            Stage::Mint,
            path.display().to_string(),
            format!("larger than {max} bytes"),
        ));
    }
    Ok(buf)
}

/// Secret-bearing output: to --out (0600), or stdout only when asked with --stdout.
fn emit_secret_text(text: String, out: Option<&Path>, stdout: bool, what: &str) -> Result<Output> {
    match (out, stdout) {
        (Some(p), _) => {
            files::write_atomic(p, text.as_bytes(), 0o600)?;
            Ok(Output {
                stdout: String::new(),
                notes: vec![format!("wrote {what} to {}", p.display())],
            })
        }
        (None, true) => Ok(Output::stdout(text)),
        (None, false) => Err(usage(
            "--out",
            format!("{what} contains private keys: pass --out FILE, or --stdout to print it"),
        )),
    }
}

/// `mint secrets`: a PKI directory as CAPI Secrets, or (--from-secrets) Secrets back to a
/// PKI directory.
pub fn run_secrets(a: &SecretsArgs) -> Result<Output> {
    if let Some(file) = &a.from_secrets {
        let out = a
            .out
            .as_ref()
            .ok_or_else(|| usage("--out", "--from-secrets needs --out DIR for the PKI files"))?;
        let bytes = read_bounded(file, secrets::MAX_SECRETS_BYTES as u64)?;
        let text =
            String::from_utf8(bytes).map_err(|_| usage("--from-secrets", "not UTF-8 YAML"))?;
        let parsed = secrets::parse(&text, a.cluster.as_deref())
            .map_err(|e| e.within(&file.display().to_string()))?;
        parsed.pki.write(out, a.force)?;
        return Ok(Output::stdout(format!(
            "restored the PKI of cluster {} to {}\n",
            parsed.cluster,
            out.display()
        )));
    }
    let from = a
        .from
        .as_ref()
        .ok_or_else(|| usage("--from", "give --from PKI_DIR (or --from-secrets FILE)"))?;
    let cluster = a
        .cluster
        .as_deref()
        .ok_or_else(|| usage("--cluster", "required with --from"))?;
    check_name("--cluster", cluster)?;
    check_name("--namespace", &a.namespace)?;
    let endpoint = a
        .endpoint
        .as_deref()
        .ok_or_else(|| usage("--endpoint", "required for the NAME-kubeconfig Secret"))?;
    let (host, port) = validate::endpoint("--endpoint", endpoint)?;
    let p = pki::Pki::read(from)?;
    let alg = p.algorithm()?;
    let kc = kubeconfig::build(
        cluster,
        &format!("https://{host}:{port}"),
        &p.ca,
        "kubernetes-admin",
        Some("system:masters"),
        alg,
        time::Duration::days(365),
    )?;
    emit_secret_text(
        secrets::render(cluster, &a.namespace, &p, &kc),
        a.out.as_deref(),
        a.stdout,
        "the Secrets",
    )
}

/// `mint kubeconfig`: a client kubeconfig signed by the PKI directory's CA.
pub fn run_kubeconfig(a: &KubeconfigArgs) -> Result<Output> {
    check_name("--cluster", &a.cluster)?;
    let (host, port) = validate::endpoint("--endpoint", &a.endpoint)?;
    if a.user.is_empty() || a.user.chars().any(|c| c.is_control()) {
        return Err(usage("--user", "must be a non-empty printable name"));
    }
    let validity = pki::parse_validity(&a.validity, "--validity")?;
    let read = |name: &str| -> Result<String> {
        let p = a.pki.join(name);
        String::from_utf8(read_bounded(&p, pki::MAX_PEM_BYTES)?)
            .map_err(|_| Error::invalid(Stage::Mint, p.display().to_string(), "not UTF-8 PEM"))
    };
    let ca = pki::CaPair {
        cert_pem: read("ca.crt")?,
        key_pem: read("ca.key")?,
    };
    let alg = pki::Key::from_pem(&ca.key_pem, "ca.key")?.algorithm;
    let kc = kubeconfig::build(
        &a.cluster,
        &format!("https://{host}:{port}"),
        &ca,
        &a.user,
        a.group.as_deref(),
        alg,
        validity,
    )?;
    emit_secret_text(kc, a.out.as_deref(), a.stdout, "the kubeconfig")
}

/// Validate an SSH public key line: it is printed raw into YAML (as CABPK does), so it must
/// be one line that stays a plain scalar.
/// `--file DEST=LOCAL`: DEST absolute and plain, LOCAL's text (bounded, UTF-8).
fn extra_file(arg: &str) -> Result<(String, String)> {
    let (dest, local) = arg
        .split_once('=')
        .ok_or_else(|| usage("--file", format!("{arg:?} is not DEST=LOCAL")))?;
    let dest = node_path("--file", dest)?;
    let text = String::from_utf8(read_bounded(
        Path::new(local),
        libnodeagent::base::limits::MAX_DECODED_BYTES as u64,
    )?)
    .map_err(|_| usage("--file", format!("{local}: not UTF-8 text")))?;
    Ok((dest.to_string(), text))
}

/// A path on the node: absolute, without `..`, `.`, a trailing `/`, spaces or control characters.
fn node_path<'a>(flag: &str, dest: &'a str) -> Result<&'a str> {
    let plain = dest.starts_with('/')
        && dest.len() > 1
        && !dest.ends_with('/')
        && dest.split('/').all(|c| c != ".." && c != ".")
        && !dest.chars().any(|c| c.is_control() || c.is_whitespace());
    if !plain {
        return Err(usage(
            flag,
            format!(
                "{dest:?} is not an absolute path without '..', '.', spaces or control characters"
            ),
        ));
    }
    Ok(dest)
}

fn ssh_key_line(path: &Path) -> Result<String> {
    let text = String::from_utf8(read_bounded(
        path,
        libnodeagent::base::limits::MAX_SSH_KEY_BYTES,
    )?)
    .map_err(|_| usage("--ssh-key", "not UTF-8"))?;
    let line = text.trim();
    let known = [
        "ssh-ed25519 ",
        "ssh-rsa ",
        "ecdsa-sha2-",
        "sk-ssh-ed25519@openssh.com ",
        "sk-ecdsa-sha2-",
    ];
    if line.contains('\n') || !known.iter().any(|k| line.starts_with(k)) {
        return Err(usage(
            "--ssh-key",
            format!("{} is not a single OpenSSH public key line", path.display()),
        ));
    }
    if line.contains(": ") || line.contains(" #") || line.chars().any(|c| c.is_control()) {
        return Err(usage(
            "--ssh-key",
            "the key comment contains ': ', ' #' or control characters, which would change the YAML",
        ));
    }
    Ok(line.to_string())
}

/// The cluster a bootstrap bundle joins: the full PKI for control planes, only the CA
/// certificate (PEM) for workers; from `--pki DIR` or `--from-secrets FILE`.
fn load_cluster(
    a: &BootstrapArgs,
    role: crate::bootstrap::Role,
) -> Result<(Option<pki::Pki>, String)> {
    match (&a.pki, &a.from_secrets) {
        (_, Some(file)) => {
            let bytes = read_bounded(file, secrets::MAX_SECRETS_BYTES as u64)?;
            let text =
                String::from_utf8(bytes).map_err(|_| usage("--from-secrets", "not UTF-8 YAML"))?;
            let parsed = secrets::parse(&text, Some(&a.cluster))
                .map_err(|e| e.within(&file.display().to_string()))?;
            let ca = parsed.pki.ca.cert_pem.clone();
            Ok((Some(parsed.pki), ca))
        }
        (Some(dir), None) if role.ships_pki() => {
            let p = pki::Pki::read(dir)?;
            let ca = p.ca.cert_pem.clone();
            Ok((Some(p), ca))
        }
        (Some(dir), None) => {
            let f = dir.join("ca.crt");
            let ca = String::from_utf8(read_bounded(&f, pki::MAX_PEM_BYTES)?)
                .map_err(|_| usage("--pki", "ca.crt is not UTF-8"))?;
            Ok((None, ca))
        }
        (None, None) => Err(usage(
            "--pki",
            "give the cluster's --pki DIR (or --from-secrets FILE)",
        )),
    }
}

/// Formats that write files need --out; bundles with CA keys go to stdout only when asked.
fn check_output(
    a: &BootstrapArgs,
    format: crate::emit::Format,
    role: crate::bootstrap::Role,
) -> Result<()> {
    use crate::emit::Format;
    let needs_out = matches!(format, Format::Dir | Format::Fwcfg);
    if needs_out && a.out.is_none() {
        return Err(usage(
            "--out",
            format!("--format {} writes files: pass --out DIR", a.format),
        ));
    }
    if !needs_out && a.out.is_none() && role.ships_pki() && !a.stdout {
        return Err(usage(
            "--stdout",
            "control-plane bundles carry the CA keys: pass --out DIR, or --stdout to print them",
        ));
    }
    Ok(())
}

/// The options a whole cluster's bundles share beyond CABPK's defaults: the cloud provider,
/// kubeadm phases skipped and its v1beta4 timeouts, extra files and commands.
fn cluster_options(
    a: &BootstrapArgs,
    api: crate::bootstrap::KubeadmApi,
    spec: &mut crate::bootstrap::Spec,
) -> Result<()> {
    use crate::bootstrap::KubeadmApi;
    if a.cloud_provider == "none" {
        spec.kubelet_extra_args
            .retain(|(k, _)| k != "cloud-provider");
        spec.controller_manager_extra_args
            .retain(|(k, _)| k != "cloud-provider");
    }
    spec.skip_phases = a
        .skip_phases
        .iter()
        .map(|p| validate::kubeadm_phase("--skip-phases", p))
        .collect::<Result<_>>()?;
    spec.pre_commands = a.pre_commands.clone();
    if !a.kubeadm_timeouts.is_empty() && api != KubeadmApi::V1beta4 {
        return Err(usage(
            "--kubeadm-timeout",
            "kubeadm's `timeouts` exist in v1beta4 only (Kubernetes 1.31 and later)",
        ));
    }
    for t in &a.kubeadm_timeouts {
        let (name, value) = t
            .split_once('=')
            .ok_or_else(|| usage("--kubeadm-timeout", format!("{t:?} is not NAME=DURATION")))?;
        spec.timeouts.push((
            validate::kubeadm_timeout_name("--kubeadm-timeout", name)?,
            validate::go_duration("--kubeadm-timeout", value)?,
        ));
    }
    if let Some(dir) = &a.kubeadm_patches {
        spec.patches_dir = Some(node_path("--kubeadm-patches", dir)?.to_string());
    }
    spec.files = a
        .files
        .iter()
        .map(|f| extra_file(f))
        .collect::<Result<_>>()?;
    Ok(())
}

/// `mint bootstrap`: per-node bundles written to --out (or printed), with the bootstrap-token
/// Secrets beside them.
pub fn run_bootstrap(a: &BootstrapArgs) -> Result<Output> {
    use crate::bootstrap::{KubeadmApi, Role, Spec, User};
    use crate::emit::{self, Encoding, Format};
    use crate::fleet;

    let role = Role::parse(&a.role)?;
    check_name("--cluster", &a.cluster)?;
    check_name("--node", &a.node)?;
    let (host, port) = validate::endpoint("--endpoint", &a.endpoint)?;
    let (minor, version) =
        validate::kubernetes_version("--kubernetes-version", &a.kubernetes_version)?;
    let api = match &a.kubeadm_api {
        Some(v) => KubeadmApi::parse(v, minor)?,
        None => KubeadmApi::for_minor(minor),
    };
    let format = Format::parse(&a.format)?;
    let encoding = Encoding::parse(&a.encoding)?;
    let network = fleet::parse_network(&a.network)?;
    let mac = a
        .mac
        .as_deref()
        .map(|m| validate::mac("--mac", m))
        .transpose()?;
    if let Some(t) = &a.token {
        token::parse(t)?;
    }
    let ttl = token::parse_ttl(&a.token_ttl).map_err(|mut e| {
        e.place = "--token-ttl".into();
        e
    })?;

    let (pki, ca_pem) = load_cluster(a, role)?;
    let hashes = libnodeagent::pki::hash::discovery_hashes(ca_pem.as_bytes())
        .map_err(|e| e.within("--pki ca.crt"))?;

    let endpoint = format!("{host}:{port}");
    let mut spec = Spec::capv(role, &a.cluster, &endpoint, &version, minor, api);
    if let Some(p) = &pki {
        let alg = p.algorithm()?;
        // kubeadm's leaf certificates follow the CA's algorithm; ECDSA-P384 exists from kubeadm 1.34.
        let known = alg != pki::Algorithm::EcdsaP384 || minor >= 34;
        if api == KubeadmApi::V1beta4 && alg != pki::Algorithm::Rsa2048 && known {
            spec.encryption_algorithm = Some(alg.kubeadm_name().to_string());
        }
    }
    spec.pki = if role.ships_pki() { pki } else { None };
    spec.ca_cert_hashes = hashes;
    spec.verbosity = a.verbosity;
    cluster_options(a, api, &mut spec)?;
    if let Some(k) = &a.ssh_key {
        spec.users.push(User {
            name: "capv".into(),
            sudo: Some("ALL=(ALL) NOPASSWD:ALL".into()),
            ssh_authorized_keys: vec![ssh_key_line(k)?],
        });
    }

    let bundles = fleet::build(&fleet::Input {
        spec,
        node: a.node.clone(),
        nodes: a.nodes,
        network,
        mac,
        token: a.token.clone(),
    })?;

    check_output(a, format, role)?;

    let (mut files, printed) = emit::outputs(&bundles, format, encoding, a.out.as_deref())?;
    let tokens: Vec<&str> = bundles.iter().filter_map(|b| b.token.as_deref()).collect();
    let mut notes = Vec::new();
    match (&a.out, tokens.is_empty()) {
        (Some(out), false) => files.push((
            out.join("bootstrap-tokens.yaml"),
            token::secret_manifests(&tokens, ttl, time::OffsetDateTime::now_utc())?.into_bytes(),
            0o600,
        )),
        (None, false) => notes.push(
            "note: no --out, so the bootstrap-token Secrets were not written; create them in the workload cluster before the nodes boot".to_string(),
        ),
        _ => {}
    }
    // Bundles with CA keys are fsynced like the PKI; worker bundles carry no private key and
    // are regenerated by running the command again, so they are written atomically but not
    // fsynced (4000 fsyncs would dominate a 1000-node fleet).
    files::write_batch(&files, role.ships_pki())?;
    Ok(Output {
        stdout: printed,
        notes,
    })
}
