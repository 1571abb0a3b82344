//! `nodeagent query KEY`: an instance-data value by dotted path, as `cloud-init query` prints it.

use super::common::{DataArgs, fail};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Dotted path, aliases allowed: `v1.local_hostname`, `ds.meta_data.local_ipv4`.
    pub key: Option<String>,
    /// Print all instance data.
    #[arg(long, conflicts_with_all = ["key", "list_keys"])]
    pub all: bool,
    /// List the keys at KEY (or the top level).
    #[arg(long)]
    pub list_keys: bool,
    #[command(flatten)]
    pub data: DataArgs,
}

pub fn run(args: Args) -> i32 {
    if args.key.is_none() && !args.all && !args.list_keys {
        eprintln!("nodeagent query: give a KEY, --all or --list-keys");
        return crate::error::exit::FAILED;
    }
    let tree = match crate::pipeline::gather(&args.data.options())
        .and_then(|i| crate::pipeline::instance_data(&i))
    {
        Ok(tree) => tree,
        Err(e) => return fail("query", &e),
    };
    let value = match &args.key {
        Some(k) => match crate::instance::query(&tree, k) {
            Ok(v) => v,
            Err(e) => return fail("query", &e),
        },
        None => tree,
    };
    if args.list_keys {
        let serde_json::Value::Object(m) = &value else {
            eprintln!("nodeagent query: --list-keys needs a mapping");
            return crate::error::exit::FAILED;
        };
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort();
        keys.iter().for_each(|k| println!("{k}"));
    } else if let serde_json::Value::String(s) = &value {
        println!("{s}");
    } else {
        print!("{}", crate::instance::to_python_json(&value));
    }
    crate::error::exit::OK
}
