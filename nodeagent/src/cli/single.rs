//! `nodeagent single --name MODULE [--frequency instance|always]`: run one module's steps
//! of the plan, as `cloud-init single` (the selection is `libnodeagent::plan::single`; the run is `run`'s).

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freq {
    /// The module's own frequency: a step finished earlier (this instance, or this boot
    /// for per-boot steps) is not done again.
    Instance,
    /// Run the module's steps again now, whatever the journal says.
    Always,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Module to run: bootcmd, write_files, users_groups, set_hostname, network, ntp,
    /// disk_setup, mounts, growpart, resizefs, runcmd (cloud-init's names; `cc_` and `-` accepted).
    #[arg(short = 'n', long, value_name = "MODULE")]
    pub name: String,
    /// `instance` (default): as `run` would; `always`: run again.
    #[arg(long, value_enum, default_value = "instance")]
    pub frequency: Freq,
    /// With --root: also run commands, disk tools and kubeadm (always on when the root is /).
    #[arg(long)]
    pub exec: bool,
    /// Print the outcome as JSON (errors as JSON too).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub data: super::common::DataArgs,
}

pub fn run(args: Args) -> i32 {
    let module = match libnodeagent::plan::single::module(&args.name) {
        Ok(m) => m,
        Err(e) => return super::common::fail("single", &e, args.json),
    };
    super::run::run(super::run::Args {
        stage: libnodeagent::plan::RunStage::All,
        exec: args.exec,
        data: args.data,
        json: args.json,
        only: Some(libnodeagent::plan::single::Selection {
            module,
            always: args.frequency == Freq::Always,
        }),
    })
}
