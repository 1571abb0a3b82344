//! Command line: argument parsing and dispatch only; every command's work lives in the library.

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "nodeagent", version, about = "Kubernetes node bootstrap agent (cloud-init replacement for Cluster API nodes)")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {}

pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {}
}
