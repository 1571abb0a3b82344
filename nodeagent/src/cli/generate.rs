//! `nodeagent generate`.

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> i32 {
    eprintln!("nodeagent generate: not implemented yet");
    crate::error::exit::FAILED
}
