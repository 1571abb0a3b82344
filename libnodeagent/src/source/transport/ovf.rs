//! Transport ovf: the OVF environment vSphere exposes as `guestinfo.ovfEnv` (VM Operator's
//! v1alpha1 `OvfEnv` / `vAppConfig` transports, vApp properties), read as cloud-init 22.4's
//! DataSourceOVF does (`cloudinit/sources/DataSourceOVF.py`):
//!
//! - `get_properties`: the document element must be `Environment` with children; the first
//!   `PropertySection` child of it; each of its `Property` children gives
//!   `oe:key` → `oe:value` (attributes in the namespace `http://schemas.dmtf.org/ovf/environment/1`;
//!   element names matched by local name, as minidom's `localName`);
//! - `read_ovf_environment`: `hostname` means `local-hostname`; `seedfrom`, `local-hostname`,
//!   `public-keys`, `instance-id` become metadata; `user-data` is base64-decoded (Python's
//!   lenient `b64decode`), kept as is when that fails; `network-config` is base64 YAML whose
//!   `network` becomes the metadata's `network`; `password` (the default user's password) is
//!   not supported and only logged;
//! - `seedfrom` starting with `/` or `file://` (`supported_seed_starts`): `meta-data`,
//!   `user-data`, `vendor-data` are read from there (`util.read_seeded`); the OVF properties
//!   win over the seed's metadata, the seed's user-data replaces the property's. Any other
//!   seed (http…) makes cloud-init drop the datasource: here it is an error;
//! - `instance-id` defaults to `iid-dsovf`.
//!
//! The XML is parsed with roxmltree (no DTD, a node limit) from a value the inner transport
//! already capped at `MAX_RAW_VALUE_BYTES`. `set` goes to the inner transport (guestinfo).
//! The ISO transport (`ovf-env.xml` on a CD-ROM) is not read.

use super::{SeedDir, Transport};
use crate::base::error::{Error, Result, Stage};
use crate::formats::yaml;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const OVF_ENV_KEY: &str = "ovfEnv";
const OVF_ENV_NS: &str = "http://schemas.dmtf.org/ovf/environment/1";
/// Most XML nodes parsed (an OVF environment has tens).
const MAX_NODES: u32 = 10_000;
const PLACE: &str = "guestinfo.ovfEnv";

/// The OVF properties in document order (`oe:key`, `oe:value`).
pub fn properties(xml: &[u8]) -> Result<Vec<(String, String)>> {
    let text = std::str::from_utf8(xml)
        .map_err(|e| Error::invalid(Stage::Transport, PLACE, format!("not UTF-8: {e}")))?;
    let opts = roxmltree::ParsingOptions {
        allow_dtd: false,
        nodes_limit: MAX_NODES,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(text, opts).map_err(|e| {
        Error::invalid(Stage::Transport, PLACE, format!("not an XML document: {e}"))
    })?;
    let env = doc.root_element();
    if env.tag_name().name() != "Environment" {
        return Err(Error::invalid(
            Stage::Transport,
            PLACE,
            "no Environment node",
        ));
    }
    let Some(section) = env
        .children()
        .find(|n| n.is_element() && n.tag_name().name() == "PropertySection")
    else {
        return Err(Error::invalid(
            Stage::Transport,
            PLACE,
            "no PropertySection",
        ));
    };
    let mut props = Vec::new();
    for (i, p) in section
        .children()
        .filter(|n| n.is_element() && n.tag_name().name() == "Property")
        .enumerate()
    {
        let attr = |name: &str| {
            p.attribute((OVF_ENV_NS, name)).ok_or_else(|| {
                Error::invalid(
                    Stage::Transport,
                    format!("{PLACE}: Property {}", i + 1),
                    format!("no oe:{name} attribute"),
                )
            })
        };
        props.push((attr("key")?.to_string(), attr("value")?.to_string()));
    }
    Ok(props)
}

/// What the OVF environment provides, in the form the other transports deliver it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OvfData {
    /// A YAML metadata document (instance-id, local-hostname, public-keys, seedfrom, network).
    pub metadata: Vec<u8>,
    pub userdata: Option<Vec<u8>>,
    pub vendordata: Option<Vec<u8>>,
}

/// `read_ovf_environment` + the seed + the defaults. `root` is where a `seedfrom` path is
/// looked up (`/` on a node).
pub fn read_environment(xml: &[u8], root: &Path) -> Result<OvfData> {
    let mut md = Map::new();
    let mut ud = None;
    for (key, value) in properties(xml)? {
        let key = if key == "hostname" {
            "local-hostname".to_string()
        } else {
            key
        };
        match key.as_str() {
            "seedfrom" | "local-hostname" | "public-keys" | "instance-id" => {
                md.insert(key, Value::from(value));
            }
            "user-data" => {
                ud = Some(
                    crate::source::decode::py_b64decode(
                        value.as_bytes(),
                        crate::base::limits::MAX_DECODED_BYTES,
                    )
                    .unwrap_or_else(|_| value.into_bytes()),
                );
            }
            "network-config" => match network_config(&value)? {
                Some(n) => {
                    md.insert("network".into(), n);
                }
                None => tracing::info!(
                    "{PLACE}: network-config ignored: not base64 YAML with `network`"
                ),
            },
            "password" => tracing::warn!(
                "{PLACE}: the `password` property (default user's password) is not supported; ignored"
            ),
            _ => {}
        }
    }
    let mut vd = None;
    if let Some(seed) = md
        .get("seedfrom")
        .and_then(Value::as_str)
        .map(str::to_string)
    {
        let dir = seed
            .strip_prefix("file://")
            .or_else(|| seed.starts_with('/').then_some(seed.as_str()))
            .ok_or_else(|| {
                Error::unsupported(
                    Stage::Transport,
                    format!("{PLACE}: seedfrom"),
                    format!(
                        "{seed:?} is not supported by the OVF datasource (only / and file:// seeds)"
                    ),
                )
            })?;
        // cloud-init's read_seeded: the seed and the file name concatenated.
        let seed_dir = SeedDir::new(root, "/");
        let read = |name: &str| -> Result<Option<Vec<u8>>> {
            seed_dir.read(
                &format!("{dir}{name}"),
                &format!("{PLACE}: seedfrom {seed}{name}"),
            )
        };
        if let Some(seed_md) = read("meta-data")? {
            let place = format!("{PLACE}: seedfrom {seed}meta-data");
            let seed_md = yaml::read_bytes(yaml::Doc::new(Stage::Transport, &place), &seed_md)?;
            if let Value::Object(m) = seed_md.to_json() {
                for (k, v) in m {
                    md.entry(k).or_insert(v);
                }
            }
        }
        ud = read("user-data")?;
        vd = read("vendor-data")?;
    }
    md.entry("instance-id")
        .or_insert_with(|| Value::from("iid-dsovf"));
    let metadata = crate::formats::goyaml::dump(&Value::Object(md))
        .map_err(|e| Error::internal(Stage::Transport, PLACE, e.to_string()))?
        .into_bytes();
    Ok(OvfData {
        metadata,
        userdata: ud,
        vendordata: vd,
    })
}

/// The `network` of the `network-config` property (base64 YAML), `None` when the property is
/// not base64 YAML with a `network` mapping (cloud-init ignores it then). A document over the
/// YAML bounds is an error, not ignored: it is hostile, not a mistake.
fn network_config(value: &str) -> Result<Option<Value>> {
    let Ok(bytes) = crate::source::decode::py_b64decode(
        value.as_bytes(),
        crate::base::limits::MAX_DECODED_BYTES,
    ) else {
        return Ok(None);
    };
    let place = format!("{PLACE}: network-config");
    match yaml::read_bytes(yaml::Doc::new(Stage::Transport, &place), &bytes) {
        Ok(node) => Ok(node.to_json().get("network").cloned()),
        Err(e) if e.kind() == crate::base::error::ErrorKind::TooLarge => Err(e),
        Err(_) => Ok(None),
    }
}

/// The OVF environment through an inner transport (vmware on a node, dir in tests).
pub struct OvfTransport {
    inner: Box<dyn Transport>,
    root: PathBuf,
    /// The environment, read once: `None` until the first `get`.
    data: Mutex<Option<std::result::Result<Option<OvfData>, Error>>>,
}

impl OvfTransport {
    pub fn new(inner: Box<dyn Transport>, root: &Path) -> Self {
        OvfTransport {
            inner,
            root: root.to_path_buf(),
            data: Mutex::new(None),
        }
    }

    fn data(&self) -> Result<Option<OvfData>> {
        let mut slot = self.data.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            let read = match self.inner.get(OVF_ENV_KEY) {
                Ok(Some(xml)) if crate::source::decode::is_present(&xml) => {
                    read_environment(&xml, &self.root).map(Some)
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            };
            *slot = Some(read);
        }
        slot.clone().expect("just filled")
    }
}

impl Transport for OvfTransport {
    fn name(&self) -> &'static str {
        "ovf"
    }

    /// `metadata`, `userdata`, `vendordata` from the environment, already decoded (so
    /// their `.encoding` keys are absent).
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        super::check_key(key)?;
        let Some(d) = self.data()? else {
            return Ok(None);
        };
        Ok(match key {
            "metadata" => Some(d.metadata),
            "userdata" => d.userdata,
            "vendordata" => d.vendordata,
            _ => None,
        })
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(key, value)
    }
}
