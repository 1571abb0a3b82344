//! `nodeagent plan [--json]`: exactly what `run` would do, without doing any of it.

use super::common::{DataArgs, fail, print_json};
use libnodeagent::plan::{Action, Plan, Run};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub data: DataArgs,
    /// Print the plan as JSON (file contents as length and SHA-256, secrets redacted).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> i32 {
    let prepared = libnodeagent::pipeline::gather(&args.data.options())
        .and_then(|i| libnodeagent::pipeline::prepare(&i));
    match prepared {
        Ok(p) => {
            // Every warning `run` would print (undecodable encodings, compat repairs…), not
            // only the plan's own.
            let mut plan = p.plan;
            plan.warnings = p.warnings;
            if args.json {
                print_json(&plan);
            } else {
                print!("{}", human(&plan));
            }
            libnodeagent::base::error::exit::OK
        }
        Err(e) => fail("plan", &e, args.json),
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
        let mut what = describe(&s.action);
        if let Action::Command(c) = &s.action
            && let Some(note) = cloud_init_per_note(&c.run, &plan.instance_id)
        {
            what.push_str(&note);
        }
        out.push_str(&format!("  {stage:<5} {freq:<12} {:<40} {what}\n", s.id));
    }
    for w in &plan.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// For a `cloud-init-per FREQ NAME CMD...` command: the semaphore the installed
/// `/usr/bin/cloud-init-per` (packaging/) keeps, so the plan says when it runs again.
pub fn cloud_init_per_note(run: &libnodeagent::plan::Run, instance_id: &str) -> Option<String> {
    let words: Vec<&str> = match run {
        Run::Shell(s) => s.split_whitespace().collect(),
        Run::Argv(a) => a.iter().map(String::as_str).collect(),
    };
    let [prog, freq, name, _cmd, ..] = words.as_slice() else {
        return None;
    };
    if *prog != "cloud-init-per" && !prog.ends_with("/cloud-init-per") {
        return None;
    }
    let name = name.replace('-', "_");
    let sem = match *freq {
        "once" | "always" => format!("/var/lib/cloud/sem/bootper.{name}.{freq}"),
        "instance" => format!(
            "/var/lib/cloud/instances/{}/sem/bootper.{name}.instance",
            instance_id.replace('/', "_")
        ),
        other => {
            return Some(format!(
                "  [cloud-init-per: invalid frequency {other:?}, exits 1]"
            ));
        }
    };
    let when = match *freq {
        "once" => "once per node",
        "instance" => "once per instance",
        _ => "every boot",
    };
    Some(format!("  [cloud-init-per: {when}, semaphore {sem}]"))
}

/// Items shown one way each, comma-separated.
fn list<T>(items: &[T], show: impl Fn(&T) -> String) -> String {
    items.iter().map(show).collect::<Vec<_>>().join(", ")
}

fn describe(a: &Action) -> String {
    let owner = |o: &libnodeagent::plan::Owner| {
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
        Action::SshKeys(k) => format!("authorized_keys of {}: {} keys", k.user, k.keys.len()),
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
        Action::Network(n) => format!("{}: {}", n.renderer, list(&n.files, |f| f.path.clone())),
        Action::Ntp(n) => format!(
            "ntp {} servers [{}] pools [{}]",
            n.client,
            n.servers.join(", "),
            n.pools.join(", ")
        ),
        Action::DiskSetup(d) => format!("partition {}", list(&d.disks, |d| d.device.clone())),
        Action::FsSetup(f) => format!(
            "mkfs {}",
            list(&f.filesystems, |f| format!(
                "{} on {}",
                f.filesystem, f.device
            ))
        ),
        Action::Mounts(m) => format!(
            "fstab {}",
            list(&m.entries, |e| format!(
                "{} on {}",
                e[0],
                e.get(1).map_or("", String::as_str)
            ))
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
                libnodeagent::base::redact::redact_text(s).replace('\n', "\\n")
            ),
            Run::Argv(a) => format!(
                "exec {}",
                libnodeagent::base::redact::redact_text(&a.join(" "))
            ),
        },
        Action::Kubeadm(k) => format!(
            "kubeadm {} --config {}{}{}",
            if k.mode == libnodeagent::plan::KubeadmMode::Init {
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
