//! `nodeagent plan`.

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> i32 {
    eprintln!("nodeagent plan: not implemented yet");
    crate::error::exit::FAILED
}
