//! The read side of one run, as two steps: `gather` does all the I/O (transport, host
//! facts, image config, the target's user database and tools, the clock); `prepare` turns
//! those inputs into instance data, rendered userdata, a typed cloud-config and the plan
//! (`planner`, a pure function of them). The only reads after `gather` are of the paths
//! the built plan's checks name, which cannot be known before: `probe::observe` for the
//! target check, [`preflight_reads`] for kubeadm pre-flight.
//! `render`, `plan`, `validate`, `query` and `run` all go through here, so what `plan`
//! prints is exactly what `run` executes.

use crate::base::error::{Error, Result, Stage};
use crate::plan::planner::preflight::{self, Disk};
use crate::plan::planner::{self, PlanInput, UserDb};
use crate::plan::{Action, Plan};
use crate::render::cloudconfig::{self, CloudConfig};
use crate::render::template::{self, Header};
use crate::source::config::ImageConfig;
use crate::source::facts::Facts;
use crate::source::metadata::{self, Metadata};
use crate::source::transport::{self, RawData, Transport};
use serde_json::Value;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// Where the data comes from and how strictly to treat it (the CLI's common flags).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `vmware`, `fwcfg`, `dir:PATH`, `nocloud:PATH`; `None` = detect in the image config's order.
    pub transport: Option<String>,
    /// `--facts FILE`: replaces detected host facts.
    pub facts: Option<PathBuf>,
    /// `--compat`; the image config's `compat: true` also turns it on.
    pub compat: bool,
    /// `--root DIR`: every path the agent reads or writes lives under it.
    pub root: PathBuf,
}

/// Everything read from outside the process. Nothing after `gather` does I/O.
pub struct Inputs {
    pub transport: Box<dyn Transport>,
    pub transport_log: Vec<String>,
    pub raw: RawData,
    pub facts: Facts,
    pub image: ImageConfig,
    pub users: UserDb,
    /// The target's tools and NTP clients, for the plan's checks (`planner::target`).
    pub target: planner::target::TargetView,
    /// What kubeadm pre-flight checks on disk, as far as read (see [`preflight_reads`]).
    pub disk: Disk,
    /// The clock (seconds since the epoch), for certificate validity.
    pub now: i64,
    pub compat: bool,
    pub root: PathBuf,
}

/// The root, the image config and the chosen transport with its detection log: the part of
/// `gather` that can still report a failure to the platform when reading the data fails.
pub struct Opened {
    pub root: PathBuf,
    pub image: ImageConfig,
    pub transport: Box<dyn Transport>,
    pub transport_log: Vec<String>,
}

pub fn open_transport(opts: &Options) -> Result<Opened> {
    let root = if opts.root.as_os_str().is_empty() {
        PathBuf::from("/")
    } else {
        opts.root.clone()
    };
    let image = ImageConfig::load(&root)?;
    let (transport, transport_log) = match &opts.transport {
        Some(spec) => (
            transport::from_spec_in(spec, &root)?,
            vec![format!("transport {spec} chosen with --transport")],
        ),
        None => transport::detect(&image.transports, &root)?,
    };
    Ok(Opened {
        root,
        image,
        transport,
        transport_log,
    })
}

/// The platform channel for reporting a failure of `open_transport` itself (an invalid
/// `/etc/nodeagent/config.yaml`): `--transport`, or detection in the default order.
pub fn fallback_transport(opts: &Options) -> Option<Box<dyn Transport>> {
    if let Ok(opened) = open_transport(opts) {
        return Some(opened.transport);
    }
    let root = if opts.root.as_os_str().is_empty() {
        PathBuf::from("/")
    } else {
        opts.root.clone()
    };
    match &opts.transport {
        Some(spec) => transport::from_spec_in(spec, &root).ok(),
        None => transport::detect(&ImageConfig::default().transports, &root)
            .ok()
            .map(|(t, _)| t),
    }
}

pub fn gather(opts: &Options) -> Result<Inputs> {
    gather_reading(opts, |t, _| Ok((transport::read_all(t)?, None)))
}

/// `gather` for the local stage: also keeps the platform's data, as read, for the main stage
/// (crate::source::handoff).
pub fn gather_local(opts: &Options) -> Result<Inputs> {
    gather_reading(opts, crate::source::handoff::read_and_keep)
}

/// `gather` for the main stage: the userdata and vendordata the local stage of this boot
/// read, when the metadata is unchanged (crate::source::handoff).
pub fn gather_main(opts: &Options) -> Result<Inputs> {
    gather_reading(opts, crate::source::handoff::read)
}

type ReadFn = fn(&dyn Transport, &Path) -> Result<(RawData, Option<String>)>;

fn gather_reading(opts: &Options, read: ReadFn) -> Result<Inputs> {
    let Opened {
        root,
        image,
        transport,
        mut transport_log,
    } = open_transport(opts)?;
    for line in &transport_log {
        tracing::info!(transport = transport.name(), "{line}");
    }
    let (mut raw, how) = read(transport.as_ref(), &root)?;
    if let Some(line) = how {
        tracing::info!(transport = transport.name(), "{line}");
        transport_log.push(line);
    }
    let facts = match &opts.facts {
        Some(path) => Facts::from_file(path)?,
        None => Facts::detect(&root),
    };
    for line in restore_saved(&mut raw, &facts, &root)? {
        tracing::info!("{line}");
        transport_log.push(line);
    }
    let users = read_users(&root);
    let target = crate::plan::probe::view(&root);
    let compat = opts.compat || image.compat;
    Ok(Inputs {
        transport,
        transport_log,
        raw,
        facts,
        image,
        users,
        target,
        disk: Disk::default(),
        now: crate::pki::now(),
        compat,
        root,
    })
}
/// Read `<root>/etc/passwd` and `<root>/etc/group` (names and ids).
fn read_users(root: &Path) -> UserDb {
    type Entries = Vec<(String, Option<u32>)>;
    let entries = |rel: &str| -> Option<Entries> {
        let text = String::from_utf8(crate::base::confine::read(root, rel).ok()?).ok()?;
        Some(
            text.lines()
                .filter_map(|l| {
                    let mut f = l.split(':');
                    let name = f.next().filter(|n| !n.is_empty())?;
                    Some((name.to_string(), f.nth(1).and_then(|id| id.parse().ok())))
                })
                .collect(),
        )
    };
    let split = |e: Entries| {
        let ids = e
            .iter()
            .filter_map(|(n, id)| Some((n.clone(), (*id)?)))
            .collect();
        (e.into_iter().map(|(n, _)| n).collect(), ids)
    };
    match (entries("etc/passwd"), entries("etc/group")) {
        (Some(users), Some(groups)) => {
            let ((users, uids), (groups, gids)) = (split(users), split(groups));
            UserDb {
                users,
                groups,
                uids,
                gids,
                known: true,
            }
        }
        _ => UserDb::default(),
    }
}

/// Saved copies of the platform's data, per instance (0600, root-only directory): what later
/// boots read once the platform's copy was blanked (`---`, as the agent does after success).
pub const SAVED_METADATA: &str = "metadata.txt";
pub const SAVED_USERDATA: &str = "userdata-raw.txt";

/// Later boots of an instance: a blanked (or absent) platform copy is replaced by the
/// instance's saved one, so per-boot steps (bootcmd) keep running, as cloud-init keeps the
/// datasource's data in /var/lib/cloud/instance. Metadata comes from the current instance;
/// userdata from the instance the metadata names (a clone with a new instance-id and blanked
/// userdata has no saved copy: nothing to restore). Returns log lines.
pub fn restore_saved(raw: &mut RawData, facts: &Facts, root: &Path) -> Result<Vec<String>> {
    let mut log = Vec::new();
    let dir = crate::base::state::state_dir(root)?;
    if !dir.is_dir() {
        return Ok(log);
    }
    // The instance's saved copy of `name`, logged as standing in for the blank `what`.
    let saved = |iid: &str, name: &str, what: &str, log: &mut Vec<String>| -> Result<_> {
        let path = dir
            .join("instances")
            .join(crate::base::state::instance_dir_name(iid))
            .join(name);
        if !path.is_file() {
            return Ok(None);
        }
        let text = read_userdata_file(&path)?;
        log.push(format!(
            "{what} is blank: using instance {iid}'s saved copy ({})",
            path.display()
        ));
        Ok(Some(crate::source::decode::Decoded {
            text,
            warnings: Vec::new(),
        }))
    };
    if raw.metadata.is_none()
        && let Some(iid) =
            crate::base::confine::read(root, &format!("{}/instance-id", crate::base::state::DIR))
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .map(|s| s.trim_end_matches('\n').to_string())
                .filter(|s| !s.is_empty())
    {
        raw.metadata = saved(&iid, SAVED_METADATA, "guestinfo.metadata", &mut log)?;
    }
    if raw.userdata.is_none() {
        let md = match &raw.metadata {
            Some(d) => match metadata::parse(&d.text, "guestinfo.metadata") {
                Ok(md) => md,
                // Reported by `prepare` with its line; nothing to restore from.
                Err(_) => return Ok(log),
            },
            None => Metadata::default(),
        };
        if let Ok(iid) = crate::render::instance::instance_id(&md, facts) {
            raw.userdata = saved(&iid, SAVED_USERDATA, "guestinfo.userdata", &mut log)?;
        }
    }
    Ok(log)
}

/// The result of the pure half of a run.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub metadata: Metadata,
    pub instance_id: String,
    /// The full (sensitive) instance-data tree.
    pub instance_data: Value,
    /// Userdata as received (decoded), if any.
    pub userdata: Option<String>,
    /// Userdata after template rendering (equal to `userdata` when it is not a template).
    pub rendered: Option<String>,
    pub config: CloudConfig,
    pub plan: Plan,
    pub warnings: Vec<String>,
}

/// `v1.subplatform`, as cloud-init names the VMware transports.
fn subplatform(transport: &str) -> String {
    match transport {
        "vmware" => "guestinfo (guestinfo.metadata)".into(),
        other => format!("{other} (guestinfo.metadata)"),
    }
}

/// The cloud-init datasource whose instance data this transport's run imitates.
fn datasource(transport: &dyn Transport) -> crate::render::instance::Datasource {
    match transport.nocloud_seed() {
        Some(seed) => crate::render::instance::Datasource::NoCloud {
            seed: seed.path().display().to_string(),
        },
        None => crate::render::instance::Datasource::VMware {
            subplatform: subplatform(transport.name()),
        },
    }
}

/// The results of the pure steps of planning, each kept with its whole input: plans made
/// in one process (`run --stage all` plans again once the local stage changed the facts)
/// parse, render and check what did not change once. A different input is computed afresh.
#[derive(Default)]
pub struct Memo {
    metadata: Kept<String, Metadata>,
    instance: Kept<InstanceInputs, (String, Value)>,
    render: Kept<RenderInputs, Rendered>,
    parse: Kept<ParseInputs, cloudconfig::Parsed>,
    preflight: preflight::Memo,
}

/// The latest result of one step, with its inputs.
type Kept<I, T> = RefCell<Option<(I, Result<T>)>>;
/// Metadata, host facts, datasource.
type InstanceInputs = (Metadata, Facts, crate::render::instance::Datasource);
/// Userdata text, instance data, compat.
type RenderInputs = (String, Value, bool);
/// [`render_userdata`]'s result: the text to parse, its name in error places, warnings.
type Rendered = (Option<String>, &'static str, Vec<String>);
/// Rendered text, its name, compat.
type ParseInputs = (String, &'static str, bool);

/// The value kept in `cell` for `same` inputs, else `compute`'s, kept with `key()`.
fn remembered<K, V: Clone>(
    cell: &RefCell<Option<(K, V)>>,
    same: impl Fn(&K) -> bool,
    key: impl FnOnce() -> K,
    compute: impl FnOnce() -> V,
) -> V {
    if let Some((k, v)) = &*cell.borrow()
        && same(k)
    {
        return v.clone();
    }
    let v = compute();
    *cell.borrow_mut() = Some((key(), v.clone()));
    v
}

impl Memo {
    /// The platform's metadata, parsed.
    pub fn metadata(&self, text: &str) -> Result<Metadata> {
        remembered(
            &self.metadata,
            |k| k == text,
            || text.to_string(),
            || metadata::parse(text, "guestinfo.metadata"),
        )
    }

    /// The instance-id and instance data.
    fn instance(
        &self,
        md: &Metadata,
        facts: &Facts,
        ds: &crate::render::instance::Datasource,
    ) -> Result<(String, Value)> {
        remembered(
            &self.instance,
            |(m, f, d)| m == md && f == facts && d == ds,
            || (md.clone(), facts.clone(), ds.clone()),
            || {
                let iid = ds.instance_id(md, facts)?;
                Ok((iid, crate::render::instance::build_for(md, facts, ds)?))
            },
        )
    }

    fn render(&self, text: &str, tree: &Value, compat: bool) -> Result<Rendered> {
        remembered(
            &self.render,
            |(t, v, c)| t == text && v == tree && *c == compat,
            || (text.to_string(), tree.clone(), compat),
            || render_userdata(text, tree, compat),
        )
    }

    fn parse(&self, text: &str, source: &'static str, compat: bool) -> Result<cloudconfig::Parsed> {
        remembered(
            &self.parse,
            |(t, s, c)| t == text && *s == source && *c == compat,
            || (text.to_string(), source, compat),
            || cloudconfig::parse(text, source, compat),
        )
    }
}

/// Metadata and instance data, shared by the local and main stages.
fn instance(inputs: &Inputs, memo: &Memo) -> Result<(Metadata, String, Value)> {
    let mut md = match &inputs.raw.metadata {
        Some(d) => memo.metadata(&d.text)?,
        None => Metadata::default(),
    };
    if let Some(seed) = inputs.transport.nocloud_seed() {
        md.network = nocloud_network(seed, &md)?;
    }
    let ds = datasource(inputs.transport.as_ref());
    let (iid, tree) = memo.instance(&md, &inputs.facts, &ds)?;
    Ok((md, iid, tree))
}

/// The network configuration a NoCloud seed gives, as cloud-init 22.4's NoCloud datasource
/// takes it: the `network-config` file, never the meta-data's `network` key; the meta-data's
/// `network-interfaces` (ifupdown text cloud-init converts) is refused, nodeagent does not read
/// that format.
fn nocloud_network(seed: &transport::SeedDir, md: &Metadata) -> Result<Option<Value>> {
    if md.tree.contains_key("network-interfaces") {
        return Err(Error::unsupported(
            Stage::Metadata,
            "meta-data: network-interfaces",
            "ifupdown-format network configuration is not supported: give the seed a \
             `network-config` file (netplan version 2)",
        ));
    }
    let place = "nocloud network-config";
    match seed.read("network-config", place)? {
        Some(bytes) => metadata::nocloud_network(&String::from_utf8_lossy(&bytes), place),
        None => Ok(None),
    }
}

/// The instance-id alone: failure reports name it even when the userdata is bad.
pub fn instance_id(inputs: &Inputs) -> Result<String> {
    instance_id_with(inputs, &Memo::default())
}

/// [`instance_id`], sharing `memo` with the run's plans.
pub fn instance_id_with(inputs: &Inputs, memo: &Memo) -> Result<String> {
    instance(inputs, memo).map(|(_, iid, _)| iid)
}

/// Instance data alone (for `render` and `query`): no plan, so nothing else can fail.
pub fn instance_data(inputs: &Inputs) -> Result<Value> {
    instance(inputs, &Memo::default()).map(|(_, _, tree)| tree)
}

/// The local stage only needs metadata: hostname and network, before the network is up.
pub fn prepare_local(inputs: &Inputs) -> Result<Prepared> {
    prepare_local_with(inputs, &Memo::default())
}

/// [`prepare_local`], sharing `memo` with the run's other plans.
pub fn prepare_local_with(inputs: &Inputs, memo: &Memo) -> Result<Prepared> {
    let prepared = local_part(inputs, memo)?;
    check_target(&prepared.plan, inputs)?;
    Ok(prepared)
}

/// The local plan of `run --stage all`, whose steps open the whole plan `prepare_with`
/// checked against the target already (`planner::steps` starts with `build_local`'s): not
/// looked up again.
pub fn prepare_local_of_all(inputs: &Inputs, memo: &Memo) -> Result<Prepared> {
    local_part(inputs, memo)
}

fn local_part(inputs: &Inputs, memo: &Memo) -> Result<Prepared> {
    let (md, iid, tree) = instance(inputs, memo)?;
    let plan = planner::build_local(&iid, &md, &inputs.facts, inputs.compat)?;
    let warnings = [inputs.raw.warnings(), plan.warnings.clone()].concat();
    Ok(Prepared {
        metadata: md,
        instance_id: iid,
        instance_data: tree,
        userdata: None,
        rendered: None,
        config: CloudConfig::default(),
        plan,
        warnings,
    })
}

/// Metadata → instance data → rendered userdata → cloud-config → plan. Pure.
pub fn prepare(inputs: &Inputs) -> Result<Prepared> {
    prepare_with(inputs, &Memo::default())
}

/// [`prepare`], sharing `memo` with the run's other plans: `run --stage all` plans again
/// after the local stage changed the facts, and redoes only what the change reaches.
pub fn prepare_with(inputs: &Inputs, memo: &Memo) -> Result<Prepared> {
    prepare_after(inputs, memo, None)
}

/// [`prepare_with`] for the main half of `run --stage all`, once the local half changed the
/// facts: a plan equal to `checked`, which kubeadm pre-flight and the target check passed
/// before the local half wrote that same plan's own files, is not checked again.
pub fn prepare_after(inputs: &Inputs, memo: &Memo, checked: Option<&Plan>) -> Result<Prepared> {
    let (md, iid, tree) = instance(inputs, memo)?;
    let mut warnings = inputs.raw.warnings();
    let userdata = inputs.raw.userdata.as_ref().map(|d| d.text.clone());
    let mut source = "userdata";
    let (rendered, config) = match &userdata {
        None => (None, CloudConfig::default()),
        Some(text) => {
            let (rendered, src, mut w) = memo.render(text, &tree, inputs.compat)?;
            source = src;
            warnings.append(&mut w);
            match rendered {
                None => (None, CloudConfig::default()),
                Some(r) => {
                    let parsed = memo.parse(&r, source, inputs.compat)?;
                    warnings.extend(parsed.warnings);
                    (Some(r), parsed.config)
                }
            }
        }
    };
    check_vendordata(inputs, &config)?;
    let placed = |e: Error| {
        // The YAML is loaded again only to name the failing entry's line.
        let doc = rendered.as_deref().and_then(|r| {
            let doc =
                crate::formats::yaml::Doc::new(Stage::CloudConfig, source).duplicate_keys(true);
            crate::formats::yaml::read(doc, r).ok()
        });
        planner::target::with_line(e, doc.as_ref().map(|d| (d, source)))
    };
    let plan = planner::steps(&PlanInput {
        instance_id: &iid,
        metadata: &md,
        facts: &inputs.facts,
        config: &config,
        users: &inputs.users,
        image: &inputs.image,
        compat: inputs.compat,
        disk: &inputs.disk,
        now: inputs.now,
    })
    .and_then(|plan| {
        if checked != Some(&plan) {
            preflight_reads(&plan, inputs, memo)?;
            check_target(&plan, inputs)?;
        }
        Ok(plan)
    })
    .map_err(placed)?;
    warnings.extend(plan.warnings.iter().cloned());
    Ok(Prepared {
        metadata: md,
        instance_id: iid,
        instance_data: tree,
        userdata,
        rendered,
        config,
        plan,
        warnings,
    })
}

/// [`prepare`], or every error it can find at once (`nodeagent validate`): after a
/// cloud-config error, the whole document is checked, so all its bad keys and fields are
/// reported together instead of one per try.
pub fn prepare_all(inputs: &Inputs) -> std::result::Result<Prepared, Vec<Error>> {
    let first = match prepare(inputs) {
        Ok(p) => return Ok(p),
        Err(e) => e,
    };
    let mut all = vec![first.clone()];
    if first.stage == Stage::CloudConfig
        && let Ok(tree) = instance_data(inputs)
        && let Some(text) = inputs.raw.userdata.as_ref().map(|d| &d.text)
        && let Ok((Some(rendered), source, _)) = render_userdata(text, &tree, inputs.compat)
    {
        for e in cloudconfig::errors(&rendered, source, inputs.compat) {
            if !all.contains(&e) {
                all.push(e);
            }
        }
    }
    Err(all)
}

/// The plan against the target root: the paths and devices it names are looked up (the only
/// reads after `gather`, through apply's resolver), then checked (pure, `planner::target`).
fn check_target(plan: &Plan, inputs: &Inputs) -> Result<()> {
    let wanted = planner::target::wanted(plan, &inputs.target);
    let seen = crate::plan::probe::observe(&inputs.root, &wanted);
    planner::target::check(plan, &inputs.target, &seen)
}

/// Most rounds of reads for kubeadm pre-flight: its config file, then the files the config
/// names (`certificatesDir`, `caCertPath`, the discovery kubeconfig), with one to spare.
const PREFLIGHT_ROUNDS: usize = 4;

/// kubeadm pre-flight (`planner::preflight`, pure) over what the target holds.
fn preflight_reads(plan: &Plan, inputs: &Inputs, memo: &Memo) -> Result<()> {
    kubeadm_preflight_with(
        plan,
        &inputs.disk,
        &inputs.root,
        inputs.now,
        &memo.preflight,
    )
}

/// kubeadm pre-flight of `plan` on `disk` completed from `root`: the journal (a finished
/// kubeadm step is not checked again) and the files pre-flight looks up that `disk` does not
/// hold yet, read under the root through the confined resolver.
pub fn kubeadm_preflight(plan: &Plan, disk: &Disk, root: &Path, now: i64) -> Result<()> {
    kubeadm_preflight_with(plan, disk, root, now, &preflight::Memo::default())
}

fn kubeadm_preflight_with(
    plan: &Plan,
    disk: &Disk,
    root: &Path,
    now: i64,
    memo: &preflight::Memo,
) -> Result<()> {
    let mut disk = std::borrow::Cow::Borrowed(disk);
    if disk.finished.is_none()
        && plan
            .steps
            .iter()
            .any(|s| matches!(s.action, Action::Kubeadm(_)))
    {
        disk.to_mut().finished = Some(finished_steps(root, &plan.instance_id));
    }
    for _ in 0..PREFLIGHT_ROUNDS {
        let (result, unread) = preflight::check_and_unread(plan, &disk, now, memo);
        if unread.is_empty() {
            return result;
        }
        let files = &mut disk.to_mut().files;
        for path in unread {
            // A kubeadm config or certificate: a regular file, never a FIFO or an endless
            // device, and no larger than any YAML document may be.
            let bytes = crate::base::confine::read_bounded(
                root,
                &path,
                crate::formats::yaml::MAX_YAML_BYTES,
            )
            .ok();
            files.insert(path, bytes);
        }
    }
    preflight::check(plan, &disk, now)
}

/// The steps this instance's journal (read only) records as finished.
pub fn finished_steps(root: &Path, instance_id: &str) -> std::collections::BTreeSet<String> {
    let Ok(dir) = crate::base::state::state_dir(root) else {
        return Default::default();
    };
    let path = dir
        .join("instances")
        .join(crate::base::state::instance_dir_name(instance_id))
        .join("journal.jsonl");
    let records = crate::base::state::read_journal(&path).unwrap_or_default();
    records
        .iter()
        .filter(|r| r.event.finishes_step())
        .filter_map(|r| r.event.step().map(str::to_string))
        .collect()
}

/// Vendordata is refused, before any write, unless the user-data turns it off
/// (`vendor_data: {enabled: false}`, which cloud-init honours too) or it is blank.
/// cloud-init would merge its cloud-config under the user's (user-data wins key by key,
/// mappings merged) and run its scripts; no Cluster API platform sends vendordata, and a
/// second, merged input path is a second way for a node to end up not as its userdata says.
/// Refusing makes that visible instead of dropping it silently (the old behaviour).
fn check_vendordata(inputs: &Inputs, config: &CloudConfig) -> Result<()> {
    let Some(vd) = &inputs.raw.vendordata else {
        return Ok(());
    };
    if vd.text.trim().is_empty() {
        return Ok(());
    }
    let enabled = config
        .vendor_data
        .as_ref()
        .and_then(|v| v.enabled)
        .is_none_or(|f| f.0);
    if !enabled {
        tracing::info!("vendordata present and disabled by user-data vendor_data.enabled: false");
        return Ok(());
    }
    let place = if inputs.transport.nocloud_seed().is_some() {
        "vendor-data"
    } else {
        "guestinfo.vendordata"
    };
    Err(Error::unsupported(
        Stage::Plan,
        place,
        "vendordata is not applied by nodeagent (cloud-init would merge it under the userdata); put its settings in the userdata, or set vendor_data: {enabled: false} in the userdata to ignore it as cloud-init would",
    ))
}

/// Apply the template layer: `## template: jinja` renders, anything else passes through.
/// Returns the text to parse (`None` when compat mode drops the part as cloud-init would),
/// the name to use in error places, and warnings.
pub fn render_userdata(
    text: &str,
    instance_data: &Value,
    compat: bool,
) -> Result<(Option<String>, &'static str, Vec<String>)> {
    match template::detect(text) {
        Header::Jinja => {
            let r = template::render_bounded(text, instance_data, compat)?;
            Ok((Some(r.text), "rendered userdata", r.warnings))
        }
        Header::LikelyTypo(why) if compat => Ok((
            None,
            "userdata",
            vec![format!(
                "userdata line 1: {why}; userdata ignored as cloud-init would (--compat)"
            )],
        )),
        Header::LikelyTypo(why) => Err(Error::invalid(Stage::Template, "userdata line 1", why)),
        Header::NotTemplate => Ok((Some(text.to_string()), "userdata", Vec::new())),
    }
}

/// Read a userdata file given on the command line (`validate FILE`).
pub fn read_userdata_file(path: &Path) -> Result<String> {
    let place = path.display().to_string();
    let bytes = crate::base::fsio::read_capped(path, crate::base::limits::MAX_DECODED_BYTES)
        .map_err(|e| Error::io(Stage::Transport, &place, "cannot read", e))?;
    if bytes.len() > crate::base::limits::MAX_DECODED_BYTES {
        return Err(Error::too_large(
            Stage::Decode,
            &place,
            format!(
                "{} bytes; the limit is {}",
                bytes.len(),
                crate::base::limits::MAX_DECODED_BYTES
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::invalid(
            Stage::Decode,
            &place,
            format!(
                "not UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// The transport of commands that read userdata from a file and have no platform to ask.
pub struct Offline;

impl Transport for Offline {
    fn name(&self) -> &'static str {
        "none"
    }
    fn get(&self, _key: &str) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }
    fn set(&self, key: &str, _value: &[u8]) -> Result<()> {
        Err(Error::unavailable(
            Stage::Transport,
            key,
            "no platform transport to publish to",
        ))
    }
}

/// `gather` for a userdata file: metadata still comes from `--transport` when one is given.
pub fn gather_with_userdata(opts: &Options, userdata: String) -> Result<Inputs> {
    let mut inputs = if opts.transport.is_some() {
        gather(opts)?
    } else {
        let root = if opts.root.as_os_str().is_empty() {
            PathBuf::from("/")
        } else {
            opts.root.clone()
        };
        let image = ImageConfig::load(&root)?;
        let mut facts = match &opts.facts {
            Some(path) => Facts::from_file(path)?,
            None => Facts::detect(&root),
        };
        // No platform metadata: an instance-id is still needed to build a plan.
        facts
            .product_uuid
            .get_or_insert_with(|| "nodeagent-validate".into());
        Inputs {
            transport: Box::new(Offline),
            transport_log: Vec::new(),
            raw: RawData::default(),
            facts,
            compat: opts.compat || image.compat,
            image,
            users: read_users(&root),
            target: crate::plan::probe::view(&root),
            disk: Disk::default(),
            now: crate::pki::now(),
            root,
        }
    };
    inputs.raw.userdata = Some(crate::source::decode::Decoded {
        text: userdata,
        warnings: Vec::new(),
    });
    Ok(inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_remembered_value_is_computed_again_only_for_other_inputs() {
        let cell = RefCell::new(None);
        let computed = Cell::new(0);
        let get = |input: &str| {
            remembered(
                &cell,
                |k: &String| k == input,
                || input.to_string(),
                || {
                    computed.set(computed.get() + 1);
                    input.len()
                },
            )
        };
        assert_eq!(get("abc"), 3);
        assert_eq!(get("abc"), 3);
        assert_eq!(computed.get(), 1);
        assert_eq!(get("abcd"), 4);
        assert_eq!(computed.get(), 2);
        assert_eq!(get("abc"), 3);
        assert_eq!(computed.get(), 3, "only the latest input is kept");
    }

    #[test]
    fn a_rendering_is_kept_for_the_same_tree_only() {
        let memo = Memo::default();
        let text = "## template: jinja\n#cloud-config\nhostname: {{ v1.local_hostname }}\n";
        let tree = |h: &str| serde_json::json!({"v1": {"local_hostname": h}});
        let first = memo.render(text, &tree("a"), false).unwrap();
        assert_eq!(first.0.as_deref(), Some("#cloud-config\nhostname: a\n"));
        assert_eq!(memo.render(text, &tree("a"), false).unwrap(), first);
        let other = memo.render(text, &tree("b"), false).unwrap();
        assert_eq!(other.0.as_deref(), Some("#cloud-config\nhostname: b\n"));
    }
}
