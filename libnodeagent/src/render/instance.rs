//! Instance data: the cloud-init-compatible variable tree that templates and `query` see
//! (docs/formats.md B.4, B.6): `v1.*`, `ds.meta_data.*` (metadata with host facts
//! merged in, metadata winning), `sys_info`, `sensitive_keys`. Written by apply as
//! sensitive (0600) and redacted (0644) JSON in cloud-init's exact JSON style.

use crate::base::error::{Error, Result, Stage};
use crate::source::facts::Facts;
use crate::source::metadata::Metadata;
use serde_json::{Map, Value, json};

/// Keys cloud-init treats as sensitive at any depth (B.6).
pub const SENSITIVE_KEYS: &[&str] = &[
    "combined_cloud_config",
    "merged_cfg",
    "merged_system_cfg",
    "security-credentials",
    "userdata",
    "user-data",
    "user_data",
    "vendordata",
    "vendor-data",
    "ds/vendor_data",
];

const REDACTED: &str = "redacted for non-root user";

/// Which cloud-init datasource the instance data imitates: they differ in what fills
/// `ds.meta_data` and `v1` (formats/cloud-init.md A.8, A.9; DataSourceNoCloud.py).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datasource {
    /// DataSourceVMware (guestinfo, also our fw_cfg and `dir:` transports): host info is
    /// merged into the metadata, the instance-id falls back to the DMI product UUID.
    VMware { subplatform: String },
    /// DataSourceNoCloud: the seed's meta-data plus `instance-id: nocloud` and `dsmode: net`
    /// defaults, no host info, cloud name `unknown`.
    NoCloud { seed: String },
}

impl Datasource {
    pub fn instance_id(&self, md: &Metadata, facts: &Facts) -> Result<String> {
        match self {
            Datasource::VMware { .. } => instance_id(md, facts),
            Datasource::NoCloud { .. } => {
                Ok(md.instance_id.clone().unwrap_or_else(|| "nocloud".into()))
            }
        }
    }
}

/// The instance-id: metadata's, else the DMI product UUID (A.8).
pub fn instance_id(md: &Metadata, facts: &Facts) -> Result<String> {
    md.instance_id
        .clone()
        .or_else(|| facts.product_uuid.clone())
        .ok_or_else(|| {
            Error::invalid(
                Stage::Metadata,
                "guestinfo.metadata: instance-id",
                "no instance-id in metadata and no DMI product UUID to fall back on",
            )
        })
}

/// Host info as cloud-init's VMware datasource merges it into `ds.meta_data` (A.9).
fn host_info(facts: &Facts) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(fqdn) = facts.fqdn.clone().or_else(|| facts.hostname.clone()) {
        for k in ["hostname", "local-hostname", "local_hostname"] {
            m.insert(k.into(), Value::String(fqdn.clone()));
        }
    }
    if let Some(v4) = &facts.local_ipv4 {
        m.insert("local-ipv4".into(), json!(v4));
    }
    if let Some(v6) = &facts.local_ipv6 {
        m.insert("local-ipv6".into(), json!(v6));
    }
    let (mut by_mac, mut by_v4, mut by_v6) = (Map::new(), Map::new(), Map::new());
    for i in &facts.interfaces {
        let Some(mac) = &i.mac else { continue };
        let v4: Vec<Value> = i
            .ipv4
            .iter()
            .map(|a| json!({"addr": a.addr, "netmask": a.netmask, "broadcast": a.broadcast}))
            .collect();
        let v6: Vec<Value> = i
            .ipv6
            .iter()
            .map(|a| json!({"addr": a.addr, "netmask": a.netmask}))
            .collect();
        let mut entry = Map::new();
        if !v4.is_empty() {
            entry.insert("ipv4".into(), Value::Array(v4));
        }
        if !v6.is_empty() {
            entry.insert("ipv6".into(), Value::Array(v6));
        }
        by_mac.insert(mac.clone(), Value::Object(entry));
        for a in &i.ipv4 {
            by_v4.insert(
                a.addr.clone(),
                json!({"netmask": a.netmask, "broadcast": a.broadcast, "mac": mac}),
            );
        }
        for a in &i.ipv6 {
            by_v6.insert(a.addr.clone(), json!({"netmask": a.netmask, "mac": mac}));
        }
    }
    m.insert(
        "network".into(),
        json!({"interfaces": {"by-mac": by_mac, "by-ipv4": by_v4, "by-ipv6": by_v6}}),
    );
    m
}

/// `mergemanydict([metadata, host_info])`: keys already present win, dicts merge recursively.
fn merge_missing(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => merge_missing(a, b),
            (Some(_), _) => {}
            (None, v) => {
                into.insert(k, v);
            }
        }
    }
}

/// Build the full (sensitive) instance-data tree as the VMware datasource has it.
/// `subplatform` names the transport.
pub fn build(md: &Metadata, facts: &Facts, subplatform: &str) -> Result<Value> {
    build_for(
        md,
        facts,
        &Datasource::VMware {
            subplatform: subplatform.to_string(),
        },
    )
}

/// Build the full (sensitive) instance-data tree as datasource `ds` has it.
pub fn build_for(md: &Metadata, facts: &Facts, ds: &Datasource) -> Result<Value> {
    let iid = ds.instance_id(md, facts)?;
    let mut meta = md.tree.clone();
    meta.entry("instance-id".to_string())
        .or_insert_with(|| Value::String(iid.clone()));
    let (platform, subplatform, default_cloud) = match ds {
        Datasource::VMware { subplatform } => {
            merge_missing(&mut meta, host_info(facts));
            ("vmware", subplatform.clone(), "vmware")
        }
        Datasource::NoCloud { seed } => {
            meta.entry("dsmode".to_string())
                .or_insert_with(|| Value::String("net".into()));
            ("nocloud", format!("seed-dir ({seed})"), "unknown")
        }
    };

    // v1.local_hostname is the short name; an IPv4 address becomes ip-a-b-c-d (A.8).
    let fqdn = md
        .local_hostname
        .clone()
        .or_else(|| facts.fqdn.clone())
        .or_else(|| facts.hostname.clone())
        .unwrap_or_else(|| "localhost".into());
    let short = if fqdn.parse::<std::net::Ipv4Addr>().is_ok() {
        format!("ip-{}", fqdn.replace('.', "-"))
    } else {
        fqdn.split('.').next().unwrap_or(&fqdn).to_string()
    };
    let cloud_name = md
        .tree
        .get("cloud-name")
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase)
        .unwrap_or_else(|| default_cloud.into());
    let region = md.tree.get("region").cloned().unwrap_or(Value::Null);
    let az = md
        .tree
        .get("availability-zone")
        .or_else(|| md.tree.get("availability_zone"))
        .cloned()
        .unwrap_or(Value::Null);
    let system_platform = format!(
        "Linux-{}-{}",
        facts.kernel_release.clone().unwrap_or_default(),
        facts.machine.clone().unwrap_or_default()
    );
    let v1 = json!({
        "_beta_keys": ["subplatform"],
        "availability-zone": az, "availability_zone": az,
        "cloud-name": cloud_name, "cloud_name": cloud_name,
        // canonical_cloud_id: the platform when the cloud name is unknown (no region here).
        "cloud_id": if cloud_name == "unknown" { platform.to_string() } else { cloud_name.clone() },
        "distro": facts.distro, "distro_release": facts.distro_release, "distro_version": facts.distro_version,
        "instance-id": iid, "instance_id": iid,
        "kernel_release": facts.kernel_release,
        "local-hostname": short, "local_hostname": short,
        "machine": facts.machine,
        "platform": platform,
        "public_ssh_keys": md.public_keys,
        "python_version": Value::Null,
        "region": region,
        "subplatform": subplatform,
        "system_platform": system_platform,
        "variant": facts.distro,
    });
    Ok(json!({
        "base64_encoded_keys": [],
        "ds": {
            "_doc": "EXPERIMENTAL: The structure and format of content scoped under the 'ds' key may change in subsequent releases of cloud-init.",
            "meta_data": Value::Object(meta),
        },
        "sensitive_keys": SENSITIVE_KEYS,
        "sys_info": {
            "platform": system_platform,
            "system": "Linux",
            "release": facts.kernel_release,
            "variant": facts.distro,
            "dist": [facts.distro, facts.distro_version, facts.distro_release],
        },
        "v1": v1,
    }))
}

/// The world-readable copy: sensitive keys replaced by cloud-init's marker string.
pub fn redacted(tree: &Value) -> Value {
    fn walk(v: &Value, path: &str) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| {
                        let p = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}/{k}")
                        };
                        if SENSITIVE_KEYS
                            .iter()
                            .any(|s| s.eq_ignore_ascii_case(k) || s.eq_ignore_ascii_case(&p))
                        {
                            (k.clone(), Value::String(REDACTED.into()))
                        } else {
                            (k.clone(), walk(v, &p))
                        }
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|v| walk(v, path)).collect()),
            other => other.clone(),
        }
    }
    walk(tree, "")
}

/// instance-data files are written as Python's `json.dumps` writes them (pyjson.rs).
pub use crate::formats::pyjson::to_python_json;

/// `cloud-init query KEY`: a dotted path, aliases allowed (`ds.meta_data.local_hostname`).
pub fn query(tree: &Value, path: &str) -> Result<Value> {
    let vars = crate::render::template::jinja_variables(tree);
    let mut cur = &vars;
    let mut walked: Vec<&str> = Vec::new();
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => {
                let msg = if walked.is_empty() {
                    format!("Undefined instance-data key '{path}'")
                } else {
                    format!("instance-data '{}' has no '{seg}'", walked.join("."))
                };
                return Err(Error::not_found(Stage::Usage, path, msg));
            }
        }
        walked.push(seg);
    }
    Ok(cur.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(text: &str) -> Metadata {
        crate::source::metadata::parse(text, "guestinfo.metadata").unwrap()
    }

    #[test]
    fn metadata_wins_over_host_info_and_v1_has_short_name() {
        let facts = Facts {
            hostname: Some("n1".into()),
            fqdn: Some("n1.example.com".into()),
            local_ipv4: Some("10.0.0.9".into()),
            ..Default::default()
        };
        let tree = build(
            &md("instance-id: i-1\nlocal-hostname: node-a.corp\nhostname: from-md\n"),
            &facts,
            "guestinfo (guestinfo.metadata)",
        )
        .unwrap();
        assert_eq!(tree["ds"]["meta_data"]["hostname"], "from-md");
        assert_eq!(tree["ds"]["meta_data"]["local-hostname"], "node-a.corp");
        assert_eq!(
            tree["ds"]["meta_data"]["local_hostname"], "n1.example.com",
            "the alias key comes from host info (A.9)"
        );
        assert_eq!(tree["ds"]["meta_data"]["local-ipv4"], "10.0.0.9");
        assert_eq!(tree["v1"]["local_hostname"], "node-a");
        assert_eq!(tree["v1"]["instance_id"], "i-1");
    }

    #[test]
    fn instance_id_falls_back_to_product_uuid() {
        let facts = Facts {
            product_uuid: Some("4211abcd-0000".into()),
            ..Default::default()
        };
        let tree = build(&md("local-hostname: x\n"), &facts, "dir").unwrap();
        assert_eq!(tree["v1"]["instance_id"], "4211abcd-0000");
        assert_eq!(tree["ds"]["meta_data"]["instance-id"], "4211abcd-0000");
        assert!(build(&md("local-hostname: x\n"), &Facts::default(), "dir").is_err());
    }

    #[test]
    fn python_json_style() {
        let v = json!({"b": [1, {}], "a": "é\"", "c": []});
        assert_eq!(
            to_python_json(&v),
            "{\n \"a\": \"\\u00e9\\\"\",\n \"b\": [\n  1,\n  {}\n ],\n \"c\": []\n}\n"
        );
    }

    #[test]
    fn redaction_replaces_sensitive_keys_only() {
        let v = json!({"userdata": "secret", "ds": {"vendor_data": "x", "meta_data": {"a": 1}}, "merged_cfg": {"k": 1}});
        let r = redacted(&v);
        assert_eq!(r["userdata"], REDACTED);
        assert_eq!(r["ds"]["vendor_data"], REDACTED);
        assert_eq!(r["merged_cfg"], REDACTED);
        assert_eq!(r["ds"]["meta_data"]["a"], 1);
    }
}
