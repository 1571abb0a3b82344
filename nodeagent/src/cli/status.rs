//! `nodeagent status`.

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> i32 {
    eprintln!("nodeagent status: not implemented yet");
    crate::error::exit::FAILED
}
