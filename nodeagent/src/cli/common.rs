//! Flags shared by every command that reads bootstrap data.

use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct DataArgs {
    /// Where to read bootstrap data: vmware, ovf, fwcfg, dir:PATH or nocloud:PATH (default: detect).
    #[arg(long, value_name = "T", value_hint = clap::ValueHint::Other)]
    pub transport: Option<String>,
    /// Host facts (YAML or JSON) replacing detection, for reproducible renders.
    #[arg(long, value_name = "FILE")]
    pub facts: Option<PathBuf>,
    /// cloud-init compatibility: placeholders for undefined variables, warnings for unknown keys.
    #[arg(long)]
    pub compat: bool,
    /// Treat DIR as the root filesystem for every path nodeagent reads or writes.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
}

impl DataArgs {
    pub fn options(&self) -> libnodeagent::pipeline::Options {
        libnodeagent::pipeline::Options {
            transport: self.transport.clone(),
            facts: self.facts.clone(),
            compat: self.compat,
            root: self.root.clone(),
        }
    }
}

/// Print an error the same way from every command (redacted, like `run`'s: a template or YAML
/// error may quote the userdata line it is about) and return its exit code (64 for usage, 1
/// otherwise). With `--json`, the error is also JSON on stdout, where the script reads; the
/// line on stderr stays for the human watching.
pub fn fail(command: &str, err: &libnodeagent::base::error::Error, json: bool) -> i32 {
    if json {
        println!("{}", libnodeagent::report::output::error_json(err));
    }
    eprintln!(
        "nodeagent {command}: {}",
        libnodeagent::base::redact::redact_text(&err.to_string())
    );
    libnodeagent::report::output::error_exit(err)
}

/// Pretty JSON of a command's result on stdout.
pub fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    );
}

/// Warnings on stderr, redacted, as `run` prints them (plan, render and query too).
pub fn print_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {}", libnodeagent::base::redact::redact_text(w));
    }
}
