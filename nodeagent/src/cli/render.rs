//! `nodeagent render`: the userdata as the agent will parse it (template header removed,
//! variables bound), on stdout, byte for byte.

use super::common::{DataArgs, fail, print_json, print_warnings};
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub data: DataArgs,
    /// Render this userdata file instead of the platform's.
    #[arg(long, value_name = "FILE")]
    pub userdata: Option<std::path::PathBuf>,
    /// Print `{"userdata": TEXT, "warnings": [...]}` (errors as JSON too).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> i32 {
    let opts = args.data.options();
    let inputs = match &args.userdata {
        Some(f) => libnodeagent::pipeline::read_userdata_file(f)
            .and_then(|u| libnodeagent::pipeline::gather_with_userdata(&opts, u)),
        None => libnodeagent::pipeline::gather(&opts),
    };
    let result = inputs.and_then(|inputs| {
        let tree = libnodeagent::pipeline::instance_data(&inputs)?;
        let Some(text) = inputs.raw.userdata.as_ref().map(|d| d.text.clone()) else {
            return Err(libnodeagent::base::error::Error::not_found(
                libnodeagent::base::error::Stage::Transport,
                "guestinfo.userdata",
                "no userdata",
            ));
        };
        let (rendered, _, warnings) =
            libnodeagent::pipeline::render_userdata(&text, &tree, inputs.compat)?;
        // Decoding warnings (an unknown `.encoding`) come first, as `run` prints them.
        Ok((rendered, [inputs.raw.warnings(), warnings].concat()))
    });
    match result {
        Ok((rendered, warnings)) => {
            let rendered = rendered.unwrap_or_default();
            if args.json {
                print_json(&serde_json::json!({"userdata": rendered, "warnings": warnings}));
            } else {
                print_warnings(&warnings);
                let _ = std::io::stdout().write_all(rendered.as_bytes());
            }
            libnodeagent::base::error::exit::OK
        }
        Err(e) => fail("render", &e, args.json),
    }
}
