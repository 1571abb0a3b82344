//! `nodeagent mint`: argument parsing only; the work is in `minter`.

use clap::Subcommand;
use minter::commands::{self, Output, Token};
pub use minter::commands::{
    BootstrapArgs, HashArgs, KubeconfigArgs, PkiArgs, SecretsArgs, TokenArgs,
};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Cmd,
    /// Errors as JSON on stdout (`{"error": {kind, place, message}}`); `token` and `hash`
    /// print their result as JSON too (the others write Kubernetes YAML or files).
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Make the cluster CA, etcd CA, front-proxy CA and service-account keys (kubeadm layout).
    Pki(PkiArgs),
    /// Make a bootstrap token; --secret prints its kube-system Secret manifest instead.
    Token(TokenArgs),
    /// Print the kubeadm discovery hash (`sha256:<hex>`) of each certificate in a CA file.
    Hash(HashArgs),
    /// Cluster API Secrets for a PKI (`kubectl apply -f -`), or --from-secrets back to a PKI directory.
    Secrets(SecretsArgs),
    /// A kubeconfig with a client certificate signed by the cluster CA.
    Kubeconfig(KubeconfigArgs),
    /// Per-node bootstrap data (CABPK-shaped userdata + CAPV-shaped metadata).
    Bootstrap(Box<BootstrapArgs>),
}

pub fn run(args: Args) -> i32 {
    let json = args.json;
    let result = match args.command {
        Cmd::Pki(a) => commands::run_pki(&a).map(print),
        Cmd::Token(a) => commands::run_token(&a).map(|t| match t {
            Token::Manifest(m) => print!("{m}"),
            Token::Bare(t) if json => super::common::print_json(&serde_json::json!({ "token": t })),
            Token::Bare(t) => println!("{t}"),
        }),
        Cmd::Hash(a) => commands::run_hash(&a).map(|hashes| {
            if json {
                super::common::print_json(&serde_json::json!({ "hashes": hashes }));
            } else {
                for h in hashes {
                    println!("{h}");
                }
            }
        }),
        Cmd::Secrets(a) => commands::run_secrets(&a).map(print),
        Cmd::Kubeconfig(a) => commands::run_kubeconfig(&a).map(print),
        Cmd::Bootstrap(a) => commands::run_bootstrap(&a).map(print),
    };
    match result {
        Ok(()) => libnodeagent::base::error::exit::OK,
        // Bad flag values are usage errors (64); everything else is a failure (1).
        Err(e) => super::common::fail("mint", &e, json),
    }
}

fn print(out: Output) {
    for note in &out.notes {
        eprintln!("{note}");
    }
    print!("{}", out.stdout);
}
