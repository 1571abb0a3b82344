//! `nodeagent render`: the userdata as the agent will parse it (template header removed,
//! variables bound), on stdout, byte for byte.

use super::common::{DataArgs, fail};
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub data: DataArgs,
    /// Render this userdata file instead of the platform's.
    #[arg(long, value_name = "FILE")]
    pub userdata: Option<std::path::PathBuf>,
}

pub fn run(args: Args) -> i32 {
    let opts = args.data.options();
    let inputs = match &args.userdata {
        Some(f) => crate::pipeline::read_userdata_file(f)
            .and_then(|u| crate::pipeline::gather_with_userdata(&opts, u)),
        None => crate::pipeline::gather(&opts),
    };
    let result = inputs.and_then(|inputs| {
        let tree = crate::pipeline::instance_data(&inputs)?;
        let Some(text) = inputs.raw.userdata.as_ref().map(|d| d.text.clone()) else {
            return Err(crate::error::Error::new(
                crate::error::Stage::Transport,
                "guestinfo.userdata",
                "no userdata",
            ));
        };
        crate::pipeline::render_userdata(&text, &tree, inputs.compat)
    });
    match result {
        Ok((rendered, _, warnings)) => {
            for w in &warnings {
                eprintln!("warning: {w}");
            }
            let _ = std::io::stdout().write_all(rendered.unwrap_or_default().as_bytes());
            crate::error::exit::OK
        }
        Err(e) => fail("render", &e),
    }
}
