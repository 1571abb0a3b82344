//! `nodeagent mint`: argument parsing only; the work is in `crate::mint`.

use crate::error::{Error, Result, Stage};
use crate::mint::{pki, token};
use clap::Subcommand;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Make the cluster CA, etcd CA, front-proxy CA and service-account keys (kubeadm layout).
    Pki(PkiArgs),
    /// Make a bootstrap token; --secret prints its kube-system Secret manifest instead.
    Token(TokenArgs),
    /// Print the kubeadm discovery hash (`sha256:<hex>`) of each certificate in a CA file.
    Hash(HashArgs),
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
    #[arg(long, default_value = "ecdsa-p256")]
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

pub fn run(args: Args) -> i32 {
    let result = match args.command {
        Cmd::Pki(a) => run_pki(a),
        Cmd::Token(a) => run_token(a),
        Cmd::Hash(a) => run_hash(a),
    };
    match result {
        Ok(()) => crate::error::exit::OK,
        Err(e) => {
            eprintln!("nodeagent mint: {e}");
            crate::error::exit::FAILED
        }
    }
}

fn usage(place: &str, message: impl Into<String>) -> Error {
    Error::new(Stage::Usage, place, message)
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

fn run_pki(a: PkiArgs) -> Result<()> {
    check_name("--cluster", &a.cluster)?;
    let algorithm = pki::Algorithm::parse(&a.algorithm)?;
    let validity = pki::parse_validity(&a.validity, "--validity")?;
    let p = pki::Pki::generate(algorithm, validity)?;
    p.write(&a.out, a.force)?;
    println!(
        "wrote {} PKI for cluster {} to {}",
        algorithm.name(),
        a.cluster,
        a.out.display()
    );
    Ok(())
}

fn run_token(a: TokenArgs) -> Result<()> {
    let t = match a.token {
        Some(t) => {
            token::parse(&t)?;
            t
        }
        None => token::generate()?,
    };
    if a.secret {
        let ttl = token::parse_ttl(&a.ttl)?;
        print!(
            "{}",
            token::secret_manifest(&t, ttl, time::OffsetDateTime::now_utc())?
        );
    } else {
        println!("{t}");
    }
    Ok(())
}

fn run_hash(a: HashArgs) -> Result<()> {
    let bytes = read_bounded(&a.ca, pki::MAX_PEM_BYTES)?;
    for h in crate::pki::hash::discovery_hashes(&bytes)
        .map_err(|e| e.within(&a.ca.display().to_string()))?
    {
        println!("{h}");
    }
    Ok(())
}

/// Read a file no larger than `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path)
        .map_err(|e| Error::new(Stage::Mint, path.display().to_string(), e.to_string()))?;
    let mut buf = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::new(Stage::Mint, path.display().to_string(), e.to_string()))?;
    if buf.len() as u64 > max {
        return Err(Error::new(
            Stage::Mint,
            path.display().to_string(),
            format!("larger than {max} bytes"),
        ));
    }
    Ok(buf)
}
