//! Delivery formats for a node's metadata + userdata: a directory for the agent's `dir:`
//! transport (one file per key named `guestinfo.K`), VMware ExtraConfig lines, QEMU fw_cfg
//! files with their `-fw_cfg` arguments, and `govc vm.change -e` arguments.

use super::files;
use base64::Engine;
use libnodeagent::base::error::{Error, Result, Stage};
use std::io::Write;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Dir,
    Guestinfo,
    Fwcfg,
    Govc,
}

impl Format {
    pub fn parse(v: &str) -> Result<Format> {
        match v {
            "dir" => Ok(Format::Dir),
            "guestinfo" => Ok(Format::Guestinfo),
            "fwcfg" => Ok(Format::Fwcfg),
            "govc" => Ok(Format::Govc),
            _ => Err(Error::invalid(
                Stage::Usage,
                "--format",
                format!("unknown format {v:?}: use dir, guestinfo, fwcfg or govc"),
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Base64,
    GzipBase64,
}

impl Encoding {
    pub fn parse(v: &str) -> Result<Encoding> {
        match v {
            "base64" => Ok(Encoding::Base64),
            "gzip+base64" => Ok(Encoding::GzipBase64),
            _ => Err(Error::invalid(
                Stage::Usage,
                "--encoding",
                format!("unknown encoding {v:?}: use base64 or gzip+base64"),
            )),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Base64 => "base64",
            Encoding::GzipBase64 => "gzip+base64",
        }
    }
    pub fn encode(self, data: &[u8]) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        match self {
            Encoding::Base64 => b64.encode(data),
            Encoding::GzipBase64 => {
                let mut gz =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                gz.write_all(data).expect("writing to a Vec cannot fail");
                b64.encode(gz.finish().expect("writing to a Vec cannot fail"))
            }
        }
    }
}

/// One node's bootstrap data.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub node: String,
    pub metadata: String,
    pub userdata: String,
}

/// One node's bundle with the MAC address and token `mint bootstrap` made it for.
pub struct NodeBundle {
    pub bundle: Bundle,
    pub mac: String,
    pub token: Option<String>,
}

/// The four guestinfo keys (without the `guestinfo.` prefix) and their values.
pub fn keys(b: &Bundle, enc: Encoding) -> [(&'static str, String); 4] {
    [
        ("metadata", enc.encode(b.metadata.as_bytes())),
        ("metadata.encoding", enc.name().to_string()),
        ("userdata", enc.encode(b.userdata.as_bytes())),
        ("userdata.encoding", enc.name().to_string()),
    ]
}

/// Write `DIR/guestinfo.K` files (userdata 0600: it carries keys and tokens).
pub fn write_dir(dir: &Path, b: &Bundle, enc: Encoding) -> Result<()> {
    for (k, v) in keys(b, enc) {
        let mode = if k.starts_with("userdata") {
            0o600
        } else {
            0o644
        };
        files::write_atomic(&dir.join(format!("guestinfo.{k}")), v.as_bytes(), mode)?;
    }
    Ok(())
}

/// `guestinfo.K=value` ExtraConfig lines.
pub fn guestinfo_lines(b: &Bundle, enc: Encoding) -> String {
    keys(b, enc)
        .iter()
        .map(|(k, v)| format!("guestinfo.{k}={v}\n"))
        .collect()
}

/// QEMU arguments for files written by `write_dir` in `dir`.
pub fn fwcfg_args(dir: &Path) -> String {
    [
        "metadata",
        "metadata.encoding",
        "userdata",
        "userdata.encoding",
    ]
    .iter()
    .map(|k| {
        format!(
            "-fw_cfg name=opt/guestinfo.{k},file={}",
            dir.join(format!("guestinfo.{k}")).display()
        )
    })
    .collect::<Vec<_>>()
    .join(" ")
}

/// `govc vm.change` with one `-e guestinfo.K=value` per key.
pub fn govc_command(b: &Bundle, enc: Encoding) -> String {
    let mut cmd = format!("govc vm.change -vm '{}'", b.node);
    for (k, v) in keys(b, enc) {
        cmd.push_str(&format!(" -e 'guestinfo.{k}={v}'"));
    }
    cmd.push('\n');
    cmd
}

/// A file `mint bootstrap` writes: path, content, mode.
pub type OutFile = (std::path::PathBuf, Vec<u8>, u32);

/// What `mint bootstrap` writes under `out` and prints for `bundles` in `format`: per-node
/// `guestinfo.K` files (userdata 0600, the rest 0644) for `dir`/`fwcfg`, one file per node for
/// `guestinfo`/`govc` (0600), or the same text on stdout when there is no `out`.
pub fn outputs(
    bundles: &[NodeBundle],
    format: Format,
    encoding: Encoding,
    out: Option<&Path>,
) -> Result<(Vec<OutFile>, String)> {
    let mut files: Vec<OutFile> = Vec::new();
    let mut printed = String::new();
    for nb in bundles {
        let b = &nb.bundle;
        match (format, out) {
            (Format::Dir | Format::Fwcfg, Some(out)) => {
                let dir = out.join(&b.node);
                for (k, v) in keys(b, encoding) {
                    let mode = if k.starts_with("userdata") {
                        0o600
                    } else {
                        0o644
                    };
                    files.push((dir.join(format!("guestinfo.{k}")), v.into_bytes(), mode));
                }
                if format == Format::Fwcfg {
                    printed.push_str(&fwcfg_args(&dir));
                    printed.push('\n');
                } else {
                    printed.push_str(&format!(
                        "{} mac={} dir={}\n",
                        b.node,
                        nb.mac,
                        dir.display()
                    ));
                }
            }
            (Format::Guestinfo, Some(out)) => files.push((
                out.join(format!("{}.guestinfo", b.node)),
                guestinfo_lines(b, encoding).into_bytes(),
                0o600,
            )),
            (Format::Govc, Some(out)) => files.push((
                out.join(format!("{}.govc", b.node)),
                govc_command(b, encoding).into_bytes(),
                0o600,
            )),
            (Format::Guestinfo, None) => printed.push_str(&guestinfo_lines(b, encoding)),
            (Format::Govc, None) => printed.push_str(&govc_command(b, encoding)),
            (Format::Dir | Format::Fwcfg, None) => {
                return Err(Error::invalid(
                    Stage::Usage,
                    "--out",
                    "this format writes files: pass --out DIR",
                ));
            }
        }
    }
    Ok((files, printed))
}
