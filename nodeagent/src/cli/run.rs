//! `nodeagent run`.

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> i32 {
    eprintln!("nodeagent run: not implemented yet");
    crate::error::exit::FAILED
}
