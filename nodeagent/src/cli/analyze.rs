//! `nodeagent analyze [blame|show|boot]`: where the bootstrap time went, like
//! `cloud-init analyze` (the work is in `libnodeagent::report::analyze`).

use super::common::{fail, print_json};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub what: Option<What>,
    /// Node root to read the journal under.
    #[arg(long, value_name = "DIR", default_value = "/", global = true)]
    pub root: PathBuf,
    /// Instance to analyze (default: the current one).
    #[arg(long, value_name = "ID", global = true)]
    pub instance_id: Option<String>,
    /// Print JSON (errors as JSON too).
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(clap::Subcommand, Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// Steps slowest first, phases and runs of the latest boot (the default).
    Blame,
    /// Every boot's records and phase changes in time order.
    Show,
    /// Kernel start → userspace → agent start → done, from systemd's timestamps.
    Boot,
}

pub fn run(args: Args) -> i32 {
    let what = args.what.unwrap_or(What::Blame);
    if what == What::Boot {
        return match libnodeagent::report::analyze::systemd_boot_times() {
            Ok(t) if args.json => {
                print_json(&t);
                libnodeagent::base::error::exit::OK
            }
            Ok(t) => {
                print!("{}", libnodeagent::report::analyze::render_boot(&t));
                libnodeagent::base::error::exit::OK
            }
            Err(e) => fail("analyze", &e, args.json),
        };
    }
    let (iid, records, events) =
        match libnodeagent::report::analyze::load(&args.root, args.instance_id.as_deref()) {
            Ok(x) => x,
            Err(e) => return fail("analyze", &e, args.json),
        };
    if what == What::Show {
        let boots = libnodeagent::report::analyze::show(&iid, &records, &events);
        if args.json {
            print_json(&boots);
        } else {
            print!("{}", libnodeagent::report::analyze::render_show(&boots));
        }
    } else {
        let a = libnodeagent::report::analyze::analyze(&iid, &records, &events);
        if args.json {
            print_json(&a);
        } else {
            print!("{}", libnodeagent::report::analyze::render(&a));
        }
    }
    libnodeagent::base::error::exit::OK
}
