//! `cloud-init`: the binary run by that name (the package's `/usr/bin/cloud-init` link) speaks
//! cloud-init's command line and answers from nodeagent's state (docs/cloud-init-surface.md).
//! Parsing and dispatch only: the work is in `cloud_init::command` and the nodeagent commands
//! it maps to. Where the image also has cloud-init's own command (the package diverts it to
//! `/usr/bin/cloud-init.cloud-init`), that one runs instead when nodeagent is disabled (cloud-init
//! is then the node's agent) and for the subcommands nodeagent does not provide (`init`,
//! `modules`, `devel`, …: cloud-init's own units and hooks call them); without it, those exit 2
//! (cloud-init's usage error) with a message saying what is provided.

use clap::{Parser, Subcommand};
use libnodeagent::report::cloud_init::command::{self, Format};
use std::path::{Path, PathBuf};

/// cloud-init's exit status for a command line it does not take (argparse).
const USAGE: i32 = 2;
/// The subcommands this command answers itself.
const PROVIDED: [&str; 7] = [
    "status",
    "query",
    "analyze",
    "collect-logs",
    "single",
    "clean",
    "schema",
];
/// Tests only: the node's root, as `--root` of the nodeagent commands.
pub const ROOT_ENV: &str = "NODEAGENT_CLOUD_INIT_ROOT";

#[derive(Parser, Debug)]
#[command(
    name = "cloud-init",
    disable_version_flag = true,
    disable_help_subcommand = true,
    about = "cloud-init's commands on a nodeagent node: answers from nodeagent's state"
)]
struct Cli {
    /// Show the version (cloud-init's surface release, then nodeagent's).
    #[arg(short = 'v', long)]
    version: bool,
    /// Accepted as cloud-init accepts it; changes nothing here.
    #[arg(short = 'd', long, hide = true)]
    debug: bool,
    /// Accepted as cloud-init accepts it; changes nothing here.
    #[arg(long, hide = true)]
    force: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Report the bootstrap's status as `cloud-init status` does.
    Status {
        #[arg(long, value_parser = ["json", "tabular", "yaml"], default_value = "tabular")]
        format: String,
        #[arg(short = 'l', long)]
        long: bool,
        #[arg(short = 'w', long)]
        wait: bool,
    },
    /// Query instance data (`nodeagent query`).
    Query {
        varname: Option<String>,
        #[arg(short = 'a', long)]
        all: bool,
        #[arg(short = 'l', long)]
        list_keys: bool,
        #[arg(short = 'f', long)]
        format: Option<String>,
        #[arg(short = 'd', long)]
        debug: bool,
        #[arg(short = 'i', long)]
        instance_data: Option<PathBuf>,
        #[arg(short = 'u', long)]
        user_data: Option<PathBuf>,
        #[arg(short = 'v', long)]
        vendor_data: Option<PathBuf>,
    },
    /// Where the boot's time went, in cloud-init's layout (`show`, `blame`).
    Analyze {
        #[arg(value_parser = ["show", "blame", "dump", "boot"])]
        what: String,
        #[arg(short = 'o', long)]
        outfile: Option<PathBuf>,
        #[arg(short = 'i', long)]
        infile: Option<PathBuf>,
    },
    /// Write the redacted log bundle (`nodeagent collect-logs`) as cloud-init's tarball.
    CollectLogs {
        #[arg(short = 't', long, default_value = "cloud-init.tar.gz")]
        tarfile: PathBuf,
        #[arg(short = 'v', long, action = clap::ArgAction::Count)]
        verbosity: u8,
        /// Always on: nothing sensitive is collected.
        #[arg(short = 'r', long = "redact-sensitive", alias = "redact")]
        redact: bool,
        #[arg(short = 'u', long, hide = true)]
        include_userdata: bool,
    },
    /// Run one module's steps (`nodeagent single`).
    Single {
        #[arg(short = 'n', long)]
        name: String,
        #[arg(long, value_parser = ["instance", "always", "once"])]
        frequency: Option<String>,
        #[arg(long)]
        report: bool,
    },
    /// Remove nodeagent's state and cloud-init's files so the next boot is a new instance.
    Clean {
        #[arg(short = 'l', long)]
        logs: bool,
        #[arg(short = 's', long)]
        seed: bool,
        #[arg(short = 'r', long)]
        reboot: bool,
        #[arg(long)]
        machine_id: bool,
        #[arg(short = 'c', long, num_args = 1..)]
        configs: Vec<String>,
    },
    /// Validate a cloud-config file (`nodeagent validate`).
    Schema {
        #[arg(short = 'c', long)]
        config_file: Option<PathBuf>,
        #[arg(long)]
        system: bool,
        #[arg(short = 't', long)]
        schema_type: Option<String>,
        #[arg(short = 'a', long)]
        annotate: bool,
        #[arg(short = 'i', long)]
        instance_data: Option<PathBuf>,
    },
}

/// Whether the program was started by the name `cloud-init`.
pub fn invoked_as(arg0: &std::ffi::OsStr) -> bool {
    Path::new(arg0)
        .file_name()
        .is_some_and(|n| n == "cloud-init")
}

pub fn main(args: &[std::ffi::OsString]) -> i32 {
    let root = std::env::var_os(ROOT_ENV).map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let sub = subcommand(args);
    if let Some(real) = command::real_cloud_init(&root) {
        let ours = sub.as_deref().is_none_or(|s| PROVIDED.contains(&s));
        if !ours || command::boot_status(&root).disabled() {
            return exec(&real, args);
        }
    }
    if let Some(s) = sub.as_deref().filter(|s| !PROVIDED.contains(s)) {
        return not_provided(&format!("'{s}'"));
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => USAGE,
            };
        }
    };
    if cli.version {
        println!(
            "{} {}",
            program(args),
            libnodeagent::report::cloud_init::version()
        );
        return 0;
    }
    match cli.command {
        None => {
            eprintln!("{}: error: a subcommand is required", program(args));
            USAGE
        }
        Some(cmd) => run(cmd, &root),
    }
}

fn run(cmd: Cmd, root: &Path) -> i32 {
    let data = || super::common::DataArgs {
        root: root.to_path_buf(),
        ..Default::default()
    };
    match cmd {
        Cmd::Status { format, long, wait } => {
            let format = match format.as_str() {
                "json" => Format::Json,
                "yaml" => Format::Yaml,
                _ => Format::Tabular,
            };
            command::status(root, format, long, wait)
        }
        Cmd::Query {
            varname,
            all,
            list_keys,
            format,
            instance_data,
            user_data,
            vendor_data,
            ..
        } => {
            if instance_data.is_some() || user_data.is_some() || vendor_data.is_some() {
                return not_provided("query --instance-data, --user-data and --vendor-data");
            }
            query(data(), varname, all, list_keys, format)
        }
        Cmd::Analyze {
            what,
            outfile,
            infile,
        } => {
            if infile.is_some() {
                return not_provided("analyze --infile (the steps come from nodeagent's journal)");
            }
            if what != "show" && what != "blame" {
                return not_provided(&format!("analyze {what}"));
            }
            analyze(root, &what, outfile.as_deref())
        }
        Cmd::CollectLogs { tarfile, .. } => {
            match libnodeagent::report::logbundle::collect_cloud_init(root, &tarfile) {
                Ok(_) => {
                    eprintln!("Wrote {}", tarfile.display());
                    0
                }
                Err(e) => {
                    eprintln!("cloud-init collect-logs: {}: {e}", tarfile.display());
                    1
                }
            }
        }
        Cmd::Single {
            name, frequency, ..
        } => single(data(), name, frequency.as_deref()),
        Cmd::Clean {
            logs,
            seed,
            reboot,
            machine_id,
            configs,
        } => {
            if !configs.is_empty() {
                return not_provided(
                    "clean --configs (nodeagent's configuration files are the node's)",
                );
            }
            clean(root, logs, seed, reboot, machine_id)
        }
        Cmd::Schema {
            config_file,
            system,
            schema_type,
            annotate,
            ..
        } => {
            let Some(file) = config_file.filter(|_| !system && !annotate) else {
                return not_provided(
                    "schema without --config-file, or with --system or --annotate",
                );
            };
            if schema_type.as_deref().is_some_and(|t| t != "cloud-config") {
                return not_provided("schema --schema-type other than cloud-config");
            }
            schema(&file)
        }
    }
}

/// `nodeagent query`, with cloud-init's error for no question and its exit status 1 for any
/// failure.
fn query(
    data: super::common::DataArgs,
    key: Option<String>,
    all: bool,
    list_keys: bool,
    format: Option<String>,
) -> i32 {
    if key.is_none() && !all && !list_keys && format.is_none() {
        eprintln!("ERROR: Expected one of the options: --all, --format, --list-keys or varname");
        return 1;
    }
    let code = super::query::run(super::query::Args {
        key,
        all,
        list_keys,
        format,
        json: false,
        data,
    });
    if code == 0 { 0 } else { 1 }
}

/// `nodeagent single` (`once` is `instance`): exit 1 when the module failed or does not exist,
/// else 0, as cloud-init's single.
fn single(data: super::common::DataArgs, name: String, frequency: Option<&str>) -> i32 {
    let frequency = if frequency == Some("always") {
        super::single::Freq::Always
    } else {
        super::single::Freq::Instance
    };
    let code = super::single::run(super::single::Args {
        name,
        frequency,
        exec: false,
        json: false,
        data,
    });
    if code == 0 || code == libnodeagent::base::error::exit::DEGRADED {
        0
    } else {
        1
    }
}

fn analyze(root: &Path, what: &str, outfile: Option<&Path>) -> i32 {
    let records = match libnodeagent::report::analyze::load(root, None) {
        Ok((_, records, _)) => records,
        Err(e) => {
            eprintln!(
                "cloud-init analyze: {}",
                libnodeagent::base::redact::redact_text(&e.to_string())
            );
            return 1;
        }
    };
    let text = if what == "show" {
        libnodeagent::report::analyze::cloud_init::show(&records)
    } else {
        libnodeagent::report::analyze::cloud_init::blame(&records)
    };
    match outfile {
        Some(p) if p != Path::new("-") => match std::fs::write(p, text) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("cloud-init analyze: {}: {e}", p.display());
                1
            }
        },
        _ => {
            print!("{text}");
            0
        }
    }
}

/// cloud-init's clean: nodeagent's state (and logs), then what cloud-init's clean removes of
/// its own files; quiet on success, `Error:` and exit 1 otherwise, then the reboot if asked.
fn clean(root: &Path, logs: bool, seed: bool, reboot: bool, machine_id: bool) -> i32 {
    if reboot && root != Path::new("/") {
        return not_provided("clean --reboot outside the node's root");
    }
    let opts = libnodeagent::base::state::CleanOpts {
        logs,
        seed,
        machine_id,
    };
    if let Err(e) = libnodeagent::base::state::clean(root, opts) {
        eprintln!(
            "Error:\n{}",
            libnodeagent::base::redact::redact_text(&e.to_string())
        );
        return 1;
    }
    if let Err(e) = command::clean(root, logs, seed) {
        eprintln!("Error:\n{e}");
        return 1;
    }
    if reboot {
        return super::clean::reboot(false);
    }
    0
}

/// `schema --config-file FILE`: nodeagent's validation of a userdata file, in cloud-init's
/// words (`Valid schema FILE`, or `Invalid user-data FILE` and the errors).
fn schema(file: &Path) -> i32 {
    let name = file.display().to_string();
    let read = libnodeagent::pipeline::read_userdata_file(file).and_then(|u| {
        let data = super::common::DataArgs {
            root: PathBuf::from("/"),
            ..Default::default()
        };
        libnodeagent::pipeline::gather_with_userdata(&data.options(), u)
    });
    let result = read
        .map_err(|e| vec![e])
        .and_then(|inputs| libnodeagent::pipeline::prepare_all(&inputs));
    match result {
        Ok(_) => {
            println!("Valid schema {name}");
            0
        }
        Err(errors) => {
            println!("Invalid user-data {name}");
            let lines: Vec<String> = errors
                .iter()
                .map(|e| libnodeagent::base::redact::redact_text(&e.to_string()))
                .collect();
            eprintln!("Error: {}\n", lines.join("\n"));
            eprintln!("Error: Invalid schema: user-data\n");
            1
        }
    }
}

/// The first argument that is not an option (or an option's value): the subcommand.
fn subcommand(args: &[std::ffi::OsString]) -> Option<String> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let a = a.to_string_lossy();
        if a == "-f" || a == "--file" {
            it.next();
        } else if !a.starts_with('-') {
            return Some(a.into_owned());
        }
    }
    None
}

/// The program as cloud-init names itself (`%(prog)s`: the path Python ran it by).
fn program(args: &[std::ffi::OsString]) -> String {
    let arg0 = args
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    if arg0.contains('/') {
        return arg0;
    }
    libnodeagent::base::process::find_executable(&arg0, std::env::var_os("PATH").as_deref())
        .map_or(arg0, |p| p.display().to_string())
}

fn not_provided(what: &str) -> i32 {
    eprintln!(
        "cloud-init: {what} is not provided on this node: nodeagent runs the boot (nodeagent-local.service, \
         nodeagent.service) and answers cloud-init's status, query, analyze show|blame, collect-logs, \
         single, clean, schema --config-file and --version (man nodeagent)"
    );
    USAGE
}

/// Hand the command line to cloud-init's own command.
fn exec(real: &Path, args: &[std::ffi::OsString]) -> i32 {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(real);
    if let Some(a0) = args.first() {
        cmd.arg0(a0);
    }
    let e = cmd.args(args.iter().skip(1)).exec();
    eprintln!("cloud-init: cannot run {}: {e}", real.display());
    1
}
