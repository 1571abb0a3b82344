//! Flags shared by every command that reads bootstrap data.

use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct DataArgs {
    /// Where to read bootstrap data: vmware, ovf, fwcfg, dir:PATH or nocloud:PATH (default: detect).
    #[arg(long, value_name = "T")]
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
    pub fn options(&self) -> crate::pipeline::Options {
        crate::pipeline::Options {
            transport: self.transport.clone(),
            facts: self.facts.clone(),
            compat: self.compat,
            root: self.root.clone(),
        }
    }
}

/// Print an error the same way from every command (redacted, like `run`'s: a template or YAML
/// error may quote the userdata line it is about) and return the failure exit code.
pub fn fail(command: &str, err: &crate::error::Error) -> i32 {
    eprintln!(
        "nodeagent {command}: {}",
        crate::redact::redact_text(&err.to_string())
    );
    crate::error::exit::FAILED
}
