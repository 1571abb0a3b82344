//! `nodeagent`: the command line over libnodeagent (the node side) and minter.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
