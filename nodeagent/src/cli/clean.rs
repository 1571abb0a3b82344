//! `nodeagent clean`: reset nodeagent's state so the next boot runs as a new instance
//! (as `cloud-init clean`).

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also delete nodeagent's log files and /run/nodeagent.
    #[arg(short = 'l', long)]
    pub logs: bool,
    /// Reset /etc/machine-id to `uninitialized` (golden-image preparation).
    #[arg(long)]
    pub machine_id: bool,
    /// Act on the tree under DIR instead of /.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
}

pub fn run(args: Args) -> i32 {
    let opts = crate::state::CleanOpts {
        logs: args.logs,
        machine_id: args.machine_id,
    };
    match crate::state::clean(&args.root, opts) {
        Ok(paths) => {
            for p in paths {
                println!("removed {}", p.display());
            }
            crate::error::exit::OK
        }
        Err(e) => {
            eprintln!("nodeagent clean: {e}");
            crate::error::exit::FAILED
        }
    }
}
