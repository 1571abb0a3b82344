//! `nodeagent certs`.

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> i32 {
    eprintln!("nodeagent certs: not implemented yet");
    crate::error::exit::FAILED
}
