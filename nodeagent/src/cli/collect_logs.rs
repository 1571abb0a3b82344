//! `nodeagent collect-logs`: write the redacted log bundle (`libnodeagent::report::logbundle`).

use libnodeagent::base::error::exit;
use libnodeagent::report::logbundle::{gather, write_archive};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output file (default: nodeagent-logs-<UTC time>.tar.gz in the current directory).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Node root to collect from.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Print `{"output": FILE, "files": [NAME...]}` (errors as JSON too).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> i32 {
    let out = args.output.clone().unwrap_or_else(|| {
        let t = time::OffsetDateTime::now_utc();
        PathBuf::from(format!(
            "nodeagent-logs-{:04}{:02}{:02}T{:02}{:02}{:02}Z.tar.gz",
            t.year(),
            t.month() as u8,
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ))
    });
    let entries = gather(&args.root);
    match write_archive(&out, &entries) {
        Ok(()) if args.json => {
            let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
            super::common::print_json(&serde_json::json!({"output": out, "files": names}));
            exit::OK
        }
        Ok(()) => {
            eprintln!("wrote {} ({} files)", out.display(), entries.len());
            exit::OK
        }
        Err(e) => {
            let e = libnodeagent::base::error::Error::io(
                libnodeagent::base::error::Stage::State,
                out.display().to_string(),
                "",
                e,
            );
            super::common::fail("collect-logs", &e, args.json)
        }
    }
}
