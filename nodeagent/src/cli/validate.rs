//! `nodeagent validate FILE`: render, parse and plan a userdata file; exit 1 with the errors.

use super::common::DataArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The userdata file to check.
    pub file: std::path::PathBuf,
    #[command(flatten)]
    pub data: DataArgs,
}

pub fn run(args: Args) -> i32 {
    let name = args.file.display().to_string();
    let result = crate::pipeline::read_userdata_file(&args.file)
        .and_then(|u| crate::pipeline::gather_with_userdata(&args.data.options(), u))
        .and_then(|i| crate::pipeline::prepare(&i));
    match result {
        Ok(p) => {
            for w in &p.warnings {
                println!("{name}: warning: {w}");
            }
            println!("{name}: valid ({} steps)", p.plan.steps.len());
            crate::error::exit::OK
        }
        Err(e) => {
            println!("{name}: invalid: {e}");
            crate::error::exit::FAILED
        }
    }
}
