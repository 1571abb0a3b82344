//! `nodeagent generate`: the man pages and shell completions, built from the
//! clap definitions in `crate::cli::Cli` so they can never drift from the real options.
//! Hidden: it is a packaging tool (packaging/build-deb calls it), not something operators need.

use clap::{CommandFactory, Subcommand, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Subcommand, Debug)]
pub enum What {
    /// Man pages: nodeagent(1) on stdout, or with --dir one page per visible subcommand too.
    Man {
        /// Write nodeagent.1 and nodeagent-<subcommand>.1 into this existing directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Shell completion script on stdout.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// The shells the package ships completions for, plus the other shells clap_complete knows.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

impl From<Shell> for clap_complete::Shell {
    fn from(s: Shell) -> Self {
        match s {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
            Shell::Elvish => clap_complete::Shell::Elvish,
            Shell::Powershell => clap_complete::Shell::PowerShell,
        }
    }
}

/// What clap does not know: exit codes (docs/formats.md N.6), files, units. Plain roff.
const MAN_EXTRA: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success.
.TP
\fB1\fR
Failure; the error names the place (guestinfo key, file, line, field, step).
.TP
\fB2\fR
Degraded: done, with warnings.
.TP
\fB3\fR
Still running when \fBstatus \-\-wait \-\-timeout\fR ran out.
.TP
\fB64\fR
Usage error: an unknown command or flag, a bad flag value, \fB\-\-timeout\fR without \fB\-\-wait\fR (sysexits' EX_USAGE). With \fB\-\-json\fR every error is \fB{"error": {"kind", "place", "message"}}\fR on stdout.
.SH FILES
.TP
\fI/etc/nodeagent/config.yaml\fR
Image configuration (compat mode, transports, timeouts, kubeadm retries); every field is documented in the packaged file.
.TP
\fI/etc/nodeagent/disabled\fR
If it exists, the units do not run. \fBnodeagent=disabled\fR on the kernel command line does the same for one boot.
.TP
\fI/var/lib/nodeagent/\fR
Per\-instance state: the journal of finished steps; \fBnodeagent clean\fR resets it.
.TP
\fI/run/nodeagent/status.json\fR
Current bootstrap status, redacted; read by \fBnodeagent status\fR.
.TP
\fInodeagent\-local.service\fR, \fInodeagent.service\fR
Run \fBnodeagent run \-\-stage local\fR before the network and \fBnodeagent run \-\-stage main\fR after network\-online.target.
.TP
\fInodeagent\-cri.target\fR
Reached once the container runtime serves (after containerd.service or crio.service): the main stage starts it and waits for it before its first runcmd item or kubeadm.
.SH "SEE ALSO"
\fBnodeagent\-run\fR(1), \fBnodeagent\-status\fR(1), \fBnodeagent\-mint\fR(1), \fBkubeadm\fR(1), \fBsystemd.service\fR(5)
"#;

/// The top-level page, nodeagent(1), in roff.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    clap_mangen::Man::new(crate::cli::Cli::command()).render(&mut out)?;
    out.extend_from_slice(MAN_EXTRA.as_bytes());
    Ok(out)
}

/// nodeagent.1 plus nodeagent-<sub>.1 for every visible subcommand (hidden ones are skipped).
pub fn write_man_pages(dir: &Path) -> std::io::Result<()> {
    clap_mangen::generate_to(crate::cli::Cli::command(), dir)?;
    // Replace the plain top-level page with the one that has the extra sections.
    std::fs::write(dir.join("nodeagent.1"), man_page()?)
}

/// The completion script for `shell`.
pub fn completion(shell: Shell) -> Vec<u8> {
    let mut cmd = crate::cli::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(
        clap_complete::Shell::from(shell),
        &mut cmd,
        "nodeagent",
        &mut out,
    );
    out
}

pub fn run(args: Args) -> i32 {
    let result = match args.what {
        What::Man { dir: Some(dir) } => {
            write_man_pages(&dir).map_err(|e| format!("{}: {e}", dir.display()))
        }
        What::Man { dir: None } => man_page().and_then(write_stdout).map_err(|e| e.to_string()),
        What::Completions { shell } => write_stdout(completion(shell)).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => libnodeagent::base::error::exit::OK,
        Err(e) => {
            eprintln!("nodeagent generate: {e}");
            libnodeagent::base::error::exit::FAILED
        }
    }
}

fn write_stdout(bytes: Vec<u8>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)?;
    out.flush()
}
