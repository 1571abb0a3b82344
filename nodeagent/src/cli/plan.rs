//! `nodeagent plan [--json]`: exactly what `run` would do, without doing any of it.

use super::common::{DataArgs, fail};
use crate::plan::{Action, Plan, Run};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub data: DataArgs,
    /// Print the plan as JSON (file contents as length and SHA-256, secrets redacted).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> i32 {
    let prepared =
        crate::pipeline::gather(&args.data.options()).and_then(|i| crate::pipeline::prepare(&i));
    match prepared {
        Ok(p) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&p.plan).expect("plan serializes")
                );
            } else {
                print!("{}", human(&p.plan));
            }
            crate::error::exit::OK
        }
        Err(e) => fail("plan", &e),
    }
}

/// One line per step: stage, frequency, id, and what it does.
pub fn human(plan: &Plan) -> String {
    let mut out = format!(
        "plan for instance {} ({} steps)\n",
        plan.instance_id,
        plan.steps.len()
    );
    for s in &plan.steps {
        let stage = serde_json::to_value(s.stage)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let freq = serde_json::to_value(s.frequency)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {stage:<5} {freq:<12} {:<40} {}\n",
            s.id,
            describe(&s.action)
        ));
    }
    for w in &plan.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

fn describe(a: &Action) -> String {
    let owner = |o: &crate::plan::Owner| {
        format!(
            "{}:{}",
            o.user.as_deref().unwrap_or("-"),
            o.group.as_deref().unwrap_or("-")
        )
    };
    match a {
        Action::WriteFile(f) => format!(
            "{} {} {} {} bytes{}{}",
            if f.append { "append" } else { "write" },
            f.path,
            owner(&f.owner),
            f.content.0.len(),
            f.mode.map(|m| format!(" mode {m:04o}")).unwrap_or_default(),
            if f.secret { " (secret)" } else { "" }
        ),
        Action::Group(g) => format!("group {} members [{}]", g.name, g.members.join(", ")),
        Action::User(u) => format!(
            "user {} groups [{}] {} keys",
            u.name,
            u.groups.join(", "),
            u.ssh_authorized_keys.len()
        ),
        Action::Hostname(h) => format!(
            "hostname {} (fqdn {}){}",
            h.hostname,
            h.fqdn,
            if h.etc_hosts.is_some() {
                " + /etc/hosts"
            } else {
                ""
            }
        ),
        Action::Network(n) => format!(
            "{}: {}",
            n.renderer,
            n.files
                .iter()
                .map(|f| f.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Action::Ntp(n) => format!(
            "ntp {} servers [{}] pools [{}]",
            n.client,
            n.servers.join(", "),
            n.pools.join(", ")
        ),
        Action::DiskSetup(d) => format!(
            "partition {}",
            d.disks
                .iter()
                .map(|d| d.device.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Action::FsSetup(f) => format!(
            "mkfs {}",
            f.filesystems
                .iter()
                .map(|f| format!("{} on {}", f.filesystem, f.device))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Action::Mounts(m) => format!(
            "fstab {}",
            m.entries
                .iter()
                .map(|e| format!("{} on {}", e[0], e.get(1).map_or("", String::as_str)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Action::Growpart(g) => format!(
            "growpart: grow the partition of {} to its disk's end ({} s per tool)",
            g.devices.join(", "),
            g.timeout_secs
        ),
        Action::ResizeFs(r) => format!(
            "resizefs: grow the filesystem of / to its partition ({} s)",
            r.timeout_secs
        ),
        Action::Command(c) => match &c.run {
            Run::Shell(s) => format!(
                "sh -c {}",
                crate::redact::redact_text(s).replace('\n', "\\n")
            ),
            Run::Argv(a) => format!("exec {}", crate::redact::redact_text(&a.join(" "))),
        },
        Action::Kubeadm(k) => format!(
            "kubeadm {} --config {}{}{}",
            if k.mode == crate::plan::KubeadmMode::Init {
                "init"
            } else {
                "join"
            },
            k.config_path,
            if k.extra_args.is_empty() {
                String::new()
            } else {
                format!(" {}", k.extra_args.join(" "))
            },
            if k.sentinel { " + sentinel" } else { "" }
        ),
    }
}
