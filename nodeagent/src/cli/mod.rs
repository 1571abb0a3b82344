//! Command line: argument parsing and dispatch only; every command's work lives in the library.
//! One file per subcommand.

use clap::{Parser, Subcommand};

pub mod analyze;
pub mod certs;
pub mod clean;
pub mod cloud_init;
pub mod collect_logs;
pub mod common;
pub mod generate;
pub mod mint;
pub mod plan;
pub mod query;
pub mod render;
pub mod run;
pub mod single;
pub mod status;
pub mod validate;

/// `nodeagent --version` (the library root holds it: the log bundle names it too).
pub use libnodeagent::VERSION;

#[derive(Parser, Debug)]
#[command(
    name = "nodeagent",
    version = VERSION,
    // No `help` subcommand (`--help` everywhere): the man pages would link a
    // nodeagent-help(1) that is never written.
    disable_help_subcommand = true,
    about = "Kubernetes node bootstrap agent (cloud-init replacement for Cluster API nodes)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Each subcommand's arguments are built only when it is the one invoked (`defer`): a process
/// does not construct the other subcommands' arguments, a sixth of `plan`'s code under an
/// emulated CPU (BENCHMARKS.md "Where the emulated time goes"). Help, completions and man
/// pages build the whole tree first (`Command::build`).
#[derive(Subcommand, Debug)]
#[command(defer = true)]
pub enum Command {
    /// Print the rendered userdata (template header removed, variables bound).
    Render(render::Args),
    /// Print what `run` would do, step by step.
    Plan(plan::Args),
    /// Validate a userdata file; exit 1 with the errors.
    Validate(validate::Args),
    /// Print an instance-data value by dotted path (as `cloud-init query`).
    Query(query::Args),
    /// Bootstrap the node: apply the plan (stage local, main or all).
    Run(run::Args),
    /// Run one module's steps (as `cloud-init single --name MODULE`).
    Single(single::Args),
    /// Reset nodeagent's state so the next boot runs as a new instance.
    Clean(clean::Args),
    /// Show the bootstrap status; --wait follows it until done or failed.
    Status(status::Args),
    /// List certificates like `kubeadm certs check-expiration`.
    Certs(certs::Args),
    /// Where the time went: blame (default), show (per boot), boot (systemd timestamps).
    Analyze(analyze::Args),
    /// Write a tar.gz of logs, status and redacted data (no secrets).
    CollectLogs(collect_logs::Args),
    /// Make cluster PKI, CAPI Secrets, tokens and per-node bootstrap data.
    Mint(mint::Args),
    /// Generate shell completions or the man page.
    #[command(hide = true)]
    Generate(generate::Args),
}

pub fn main() -> i32 {
    // The command supervisor is entered before clap: it runs once per command, so it pays
    // for no parsing or logging set-up (supervise.rs).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == libnodeagent::base::supervise::ARG)
    {
        return libnodeagent::base::supervise::main(&args[2..]);
    }
    if args
        .get(1)
        .is_some_and(|a| a == libnodeagent::base::supervise::ARG_PIPED)
    {
        return libnodeagent::base::supervise::main_piped(&args[2..]);
    }
    // The package's /usr/bin/cloud-init links here: cloud-init's command line (cli/cloud_init.rs).
    if args.first().is_some_and(|a| cloud_init::invoked_as(a)) {
        libnodeagent::report::install_panic_hook();
        let under_systemd = std::env::var_os("JOURNAL_STREAM").is_some();
        init_logging(if under_systemd { "info" } else { "warn" }, under_systemd);
        return cloud_init::main(&args);
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e, &args),
    };
    // A panic (a bug: input must never cause one) is reported as `failed`, never silent.
    libnodeagent::report::install_panic_hook();
    let under_systemd =
        std::env::var_os("JOURNAL_STREAM").is_some() || std::env::var_os("INVOCATION_ID").is_some();
    match &cli.command {
        // The bootstrap itself logs its steps at info, to the journal on a real node.
        Command::Run(a) => init_logging("info", under_systemd || run::logs_to_journal(&a.data)),
        Command::Single(a) => init_logging("info", under_systemd || run::logs_to_journal(&a.data)),
        _ => init_logging(if under_systemd { "info" } else { "warn" }, under_systemd),
    }
    match cli.command {
        Command::Render(a) => render::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Validate(a) => validate::run(a),
        Command::Query(a) => query::run(a),
        Command::Run(a) => run::run(a),
        Command::Single(a) => single::run(a),
        Command::Clean(a) => clean::run(a),
        Command::Status(a) => status::run(a),
        Command::Certs(a) => certs::run(a),
        Command::Analyze(a) => analyze::run(a),
        Command::CollectLogs(a) => collect_logs::run(a),
        Command::Mint(a) => mint::run(a),
        Command::Generate(a) => generate::run(a),
    }
}

/// A command line clap rejects: exit 64 (EX_USAGE), also as JSON on stdout with `--json`; help and
/// `--version` print and exit 0.
fn usage_error(e: &clap::Error, args: &[std::ffi::OsString]) -> i32 {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return libnodeagent::base::error::exit::OK;
    }
    let json = args
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json");
    if json {
        // clap's `error: ` line, unstyled; the usage hint stays out of the JSON.
        let text = e.render().to_string();
        let message = text
            .split("\n\n")
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let place = e
            .get(clap::error::ContextKind::InvalidArg)
            .map(|v| v.to_string())
            .unwrap_or_default();
        println!(
            "{}",
            libnodeagent::report::output::error_json(&libnodeagent::report::output::usage(
                &place, message
            ))
        );
    }
    let _ = e.print();
    libnodeagent::base::error::exit::USAGE
}

/// Structured logs to the journal, or readable text on stderr. `NODEAGENT_LOG` (an
/// env-filter directive) overrides the level.
fn init_logging(default: &str, journald: bool) {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_env("NODEAGENT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    if journald && let Ok(layer) = tracing_journald::layer() {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(layer.with_syslog_identifier("nodeagent".into()))
            .try_init();
        return;
    }
    let ansi = libnodeagent::report::output::colour_stderr();
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || EscapedStderr { ansi })
                .with_target(false)
                .without_time()
                .with_ansi(ansi),
        )
        .try_init();
}

/// stderr for the text log, one line per event: a control character inside an event (a
/// newline in a path or a key from userdata) is written escaped (`\n`, `\x1b`), so input
/// cannot forge log lines (the fmt layer hands over each event in one write). The journald
/// layer needs no escaping: there each event is one journal entry, fields apart.
struct EscapedStderr {
    /// The layer's own colour codes stay; without colours an ESC byte is input, escaped.
    ansi: bool,
}

impl std::io::Write for EscapedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().write_all(&escape_log_event(buf, self.ansi))?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// One formatted event with its control characters escaped, its final newline kept.
fn escape_log_event(buf: &[u8], ansi: bool) -> Vec<u8> {
    let body = buf.strip_suffix(b"\n").unwrap_or(buf);
    let mut out = Vec::with_capacity(buf.len() + 8);
    for &b in body {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.push(b),
            0x1b if ansi => out.push(b),
            c if c < 0x20 || c == 0x7f => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
            c => out.push(c),
        }
    }
    if body.len() < buf.len() {
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod log_escape_tests {
    use super::escape_log_event;

    #[test]
    fn a_newline_in_a_field_cannot_start_a_forged_line() {
        let event = b" INFO wrote /etc/x\n ERROR forged: node compromised\n";
        let out = escape_log_event(event, false);
        assert_eq!(
            out,
            b" INFO wrote /etc/x\\n ERROR forged: node compromised\n".to_vec()
        );
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        assert_eq!(
            escape_log_event(b"a\x1b[2Jb\r\n", false),
            b"a\\x1b[2Jb\\r\n".to_vec()
        );
        // The layer's own colours stay when it writes them.
        assert_eq!(
            escape_log_event(b"\x1b[32mINFO\x1b[0m x\n", true),
            b"\x1b[32mINFO\x1b[0m x\n".to_vec()
        );
    }
}
