//! `nodeagent clean`: reset nodeagent's state so the next boot runs as a new instance
//! (as `cloud-init clean`).

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also delete nodeagent's logs (/var/log/nodeagent/, /var/log/nodeagent-output.log*) and /run/nodeagent.
    #[arg(short = 'l', long)]
    pub logs: bool,
    /// Reset /etc/machine-id to `uninitialized` (golden-image preparation).
    #[arg(long)]
    pub machine_id: bool,
    /// Also delete the NoCloud seed directories the image config reads (default /var/lib/cloud/seed/nocloud).
    #[arg(short = 's', long)]
    pub seed: bool,
    /// Reboot once cleaned, so nodeagent runs again (`shutdown -r now`; not with --root).
    #[arg(short = 'r', long)]
    pub reboot: bool,
    /// Act on the tree under DIR instead of /.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Print `{"removed": [PATH...]}` (errors as JSON too).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> i32 {
    // Rebooting the machine for a tree under --root would reboot the wrong system.
    if args.reboot && args.root != std::path::Path::new("/") {
        let e = libnodeagent::report::output::usage(
            "--reboot",
            "--reboot reboots this machine: not with --root",
        );
        return super::common::fail("clean", &e, args.json);
    }
    let opts = libnodeagent::base::state::CleanOpts {
        logs: args.logs,
        seed: args.seed,
        machine_id: args.machine_id,
    };
    match libnodeagent::base::state::clean(&args.root, opts) {
        Ok(paths) => {
            if args.json {
                super::common::print_json(&serde_json::json!({"removed": paths}));
            } else {
                for p in &paths {
                    println!("removed {}", p.display());
                }
            }
            if args.reboot {
                return reboot(args.json);
            }
            libnodeagent::base::error::exit::OK
        }
        Err(e) => super::common::fail("clean", &e, args.json),
    }
}

/// `shutdown -r now`, as `cloud-init clean --reboot` runs it.
pub(crate) fn reboot(json: bool) -> i32 {
    use libnodeagent::base::error::{Error, Stage};
    let e = match std::process::Command::new("shutdown")
        .args(["-r", "now"])
        .status()
    {
        Ok(s) if s.success() => return libnodeagent::base::error::exit::OK,
        Ok(s) => Error::command_failed(Stage::State, "--reboot", format!("shutdown -r now: {s}")),
        Err(e) => Error::io(Stage::State, "--reboot", "shutdown -r now", e),
    };
    super::common::fail("clean", &e, json)
}
