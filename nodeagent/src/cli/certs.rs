//! `nodeagent certs`: `kubeadm certs check-expiration`'s tables plus signer-by-signature,
//! key proof, chain and SAN checks (`pki::audit`).
//! Exit 0 all good, 1 a problem (expired, wrong key, broken chain, missing SAN, unreadable),
//! 2 only warnings (`--warn-within`: something expires soon), for monitoring.

use libnodeagent::pki::audit;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// PKI directory (default: the kubeadm config's certificatesDir, else
    /// /etc/kubernetes/pki, under --root).
    pub dir: Option<PathBuf>,
    /// Print JSON instead of tables (errors too).
    #[arg(long)]
    pub json: bool,
    /// Node root the default paths and kubeconfig file paths are taken from.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Where admin.conf, kubelet.conf, … are (default: the PKI directory's parent).
    #[arg(long, value_name = "DIR")]
    pub kubeconfig_dir: Option<PathBuf>,
    /// kubeadm config for the SAN checks (default: ROOT/run/kubeadm/kubeadm*.yaml, then
    /// ROOT/etc/kubernetes/kubeadm*.yaml).
    #[arg(long, value_name = "FILE")]
    pub kubeadm_config: Option<PathBuf>,
    /// Warn (exit 2) about certificates expiring within this time: 30d, 720h, 1y.
    #[arg(long, value_name = "DURATION", value_parser = parse_within)]
    pub warn_within: Option<i64>,
}

fn parse_within(s: &str) -> Result<i64, String> {
    minter::pki::parse_validity(s, "--warn-within")
        .map(|d| d.whole_seconds())
        .map_err(|e| e.message)
}

pub fn run(args: Args) -> i32 {
    let pki_dir = args
        .dir
        .clone()
        .unwrap_or_else(|| audit::default_pki_dir(&args.root, args.kubeadm_config.as_deref()));
    let kubeconfig_dir = args.kubeconfig_dir.clone().unwrap_or_else(|| {
        pki_dir
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| args.root.join("etc/kubernetes"))
    });
    let input = audit::Input {
        root: &args.root,
        pki_dir: &pki_dir,
        kubeconfig_dir: &kubeconfig_dir,
        kubeadm_config: args.kubeadm_config.as_deref(),
        now: audit::now_ceil(),
        warn_within: args.warn_within,
    };
    match audit::audit(&input) {
        Ok(report) => {
            if args.json {
                crate::cli::common::print_json(&report);
            } else {
                print!("{}", audit::render_text(&report));
            }
            report.exit_code()
        }
        Err(e) => crate::cli::common::fail("certs", &e, args.json),
    }
}
