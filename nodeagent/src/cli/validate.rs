//! `nodeagent validate FILE`: render, parse and plan a userdata file; exit 1 with every error
//! found (all of the document's bad keys and fields at once), or "cannot read".

use super::common::{DataArgs, print_json};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The userdata file to check.
    pub file: std::path::PathBuf,
    /// Print `{"file", "valid", "steps", "warnings", "errors": [{kind, place, message}]}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub data: DataArgs,
}

pub fn run(args: Args) -> i32 {
    let name = args.file.display().to_string();
    let read = libnodeagent::pipeline::read_userdata_file(&args.file)
        .and_then(|u| libnodeagent::pipeline::gather_with_userdata(&args.data.options(), u));
    let (result, unreadable) = match read {
        Ok(inputs) => (libnodeagent::pipeline::prepare_all(&inputs), false),
        Err(e) => {
            let unreadable = e.message.starts_with("cannot read");
            (Err(vec![e]), unreadable)
        }
    };
    let redact = |s: &str| libnodeagent::base::redact::redact_text(s);
    match result {
        Ok(p) => {
            if args.json {
                print_json(&serde_json::json!({
                    "file": name, "valid": true, "steps": p.plan.steps.len(),
                    "warnings": p.warnings.iter().map(|w| redact(w)).collect::<Vec<_>>(),
                    "errors": [],
                }));
            } else {
                for w in &p.warnings {
                    println!("{name}: warning: {}", redact(w));
                }
                println!("{name}: valid ({} steps)", p.plan.steps.len());
            }
            libnodeagent::base::error::exit::OK
        }
        Err(errors) => {
            if args.json {
                let list: Vec<_> = errors
                    .iter()
                    .map(|e| libnodeagent::report::output::error_json(e)["error"].clone())
                    .collect();
                print_json(&serde_json::json!({
                    "file": name, "valid": false, "warnings": [], "errors": list,
                }));
            } else if unreadable {
                // `FILE: cannot read: <why>` (the place is the file).
                for e in &errors {
                    println!("{}", redact(&e.to_string()));
                }
            } else {
                for e in &errors {
                    println!("{name}: invalid: {}", redact(&e.to_string()));
                }
            }
            libnodeagent::base::error::exit::FAILED
        }
    }
}
