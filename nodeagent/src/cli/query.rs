//! `nodeagent query KEY`: an instance-data value by dotted path, as `cloud-init query` prints
//! it, from the data this boot saved (the platform only with --transport or --facts).

use super::common::{DataArgs, fail, print_json, print_warnings};
use libnodeagent::report::output::usage;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Dotted path, aliases allowed: `v1.local_hostname`, `ds.meta_data.local_ipv4`,
    /// `userdata` (root only).
    pub key: Option<String>,
    /// Print all instance data.
    #[arg(short = 'a', long, conflicts_with_all = ["key", "list_keys", "format"])]
    pub all: bool,
    /// List the keys at KEY (or the top level).
    #[arg(short = 'l', long)]
    pub list_keys: bool,
    /// A jinja template over the instance data, e.g. '{{ v1.local_hostname }}'.
    #[arg(short = 'f', long, value_name = "TEMPLATE", value_hint = clap::ValueHint::Other,
          conflicts_with_all = ["key", "list_keys"])]
    pub format: Option<String>,
    /// Print the value as JSON (errors as JSON too).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub data: DataArgs,
}

pub fn run(args: Args) -> i32 {
    if args.key.is_none() && !args.all && !args.list_keys && args.format.is_none() {
        let e = usage("KEY", "give a KEY, --all, --list-keys or --format");
        return fail("query", &e, args.json);
    }
    let (tree, warnings) = match instance_data(&args.data) {
        Ok(t) => t,
        Err(e) => return fail("query", &e, args.json),
    };
    print_warnings(&warnings);
    if let Some(tmpl) = &args.format {
        return match libnodeagent::report::query::format(tmpl, &tree, args.data.compat) {
            Ok((text, w)) => {
                print_warnings(&w);
                if args.json {
                    print_json(&serde_json::json!({"rendered": text}));
                } else {
                    println!("{text}");
                }
                libnodeagent::base::error::exit::OK
            }
            Err(e) => fail("query", &e, args.json),
        };
    }
    let value = match &args.key {
        Some(k) => match libnodeagent::render::instance::query(&tree, k) {
            Ok(v) => v,
            Err(e) => return fail("query", &e, args.json),
        },
        None => tree,
    };
    if args.list_keys {
        match libnodeagent::report::query::list_keys(&value, args.key.as_deref()) {
            Ok(keys) if args.json => print_json(&keys),
            Ok(keys) => keys.iter().for_each(|k| println!("{k}")),
            Err(e) => return fail("query", &e, args.json),
        }
    } else if args.json {
        print_json(&value);
    } else if let serde_json::Value::String(s) = &value {
        println!("{s}");
    } else {
        print!("{}", libnodeagent::render::instance::to_python_json(&value));
    }
    libnodeagent::base::error::exit::OK
}

/// The boot's saved instance data (sensitive as root, as cloud-init's), or with --transport
/// or --facts the platform's, read now; plus the decoding warnings of a fresh read.
fn instance_data(
    data: &DataArgs,
) -> libnodeagent::base::error::Result<(serde_json::Value, Vec<String>)> {
    if data.transport.is_none() && data.facts.is_none() {
        let root = nix::unistd::geteuid().is_root();
        return libnodeagent::report::query::saved(&data.root, root).map(|t| (t, Vec::new()));
    }
    let inputs = libnodeagent::pipeline::gather(&data.options())?;
    let tree = libnodeagent::pipeline::instance_data(&inputs)?;
    Ok((tree, inputs.raw.warnings()))
}
