//! Structure-aware input generation for the fuzz targets (issue 13): documents shaped like
//! the typed cloud-config (`cloudconfig::types`), kubeadm (`kubeadm::api`) and metadata
//! models, built from libFuzzer's bytes through `arbitrary::Unstructured`. Byte-level
//! mutation almost never yields a structurally valid document (46 M executions of the old
//! targets never reached the planner with a `caCertHashes` entry); these do on most inputs.
//! Each optional field is present or not, each value is usually of the model's type and
//! sometimes of another one, and strings lean towards the ones that break things
//! (multi-byte characters, newlines, `:`, long runs, path tricks).
//!
//! Only the fuzz crate builds this: the agent's own build pays nothing for it.

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Value, json};

/// A field generator: a plain `fn`, so schemas are static tables.
pub type Gen = fn(&mut Unstructured) -> Result<Value>;

/// Strings that broke (or could break) a parser or a generated file before.
const NASTY: &[&str] = &[
    "",
    " ",
    "é",
    "日本語",
    "sha256:é",
    "sha256:日本語日本語日本語日本語日本語日本語日本語日本語日本語日本語日本語",
    "a\nb",
    "\n[Network]\nDNS=1.1.1.1",
    "x:y",
    "a,b",
    "..",
    "../../etc/shadow",
    "/",
    "//",
    "/etc/../etc/passwd",
    "-",
    "--",
    "0",
    "-1",
    "4294967296",
    "0x1f",
    "0o777",
    "999999999999999999999",
    "1e9",
    "~",
    "null",
    "yes",
    "\u{0}",
    "\t",
    "\r\n",
    "%",
    "{{ x }}",
    "${HOME}",
    "$(id)",
    "`id`",
    "PGPASSWORD=hunter2 psql",
    "Authorization: Bearer abc.def",
    "\u{202e}",
    "\u{feff}",
    "😀",
];

const WORDS: &[&str] = &[
    "root",
    "ubuntu",
    "capv",
    "kubeadm",
    "etc",
    "run",
    "var",
    "lib",
    "home",
    "dev",
    "sda",
    "sdb",
    "vda",
    "eth0",
    "ens192",
    "default",
    "auto",
    "any",
    "none",
    "ext4",
    "xfs",
    "swap",
    "gpt",
    "mbr",
    "chrony",
    "ntp",
    "systemd-timesyncd",
    "localhost",
    "template",
    "true",
    "false",
    "sudo",
    "wheel",
    "users",
    "docker",
    "ALL=(ALL) NOPASSWD:ALL",
    "/bin/bash",
    "abcdef.0123456789abcdef",
    "10.0.0.1",
    "10.0.0.0/24",
    "fe80::1",
    "6443",
    "1h",
    "24h0m0s",
    "kubernetes",
    "cluster.local",
    "node-1",
    "example.com",
];

/// Paths the agent treats specially or that sit at a boundary.
const PATHS: &[&str] = &[
    "/run/kubeadm/kubeadm.yaml",
    "/run/kubeadm/kubeadm-join-config.yaml",
    "/etc/kubernetes/pki/ca.crt",
    "/etc/kubernetes/pki/ca.key",
    "/etc/kubernetes/pki/etcd/ca.key",
    "/etc/kubernetes/admin.conf",
    "/run/cluster-api/placeholder",
    "/etc/hosts",
    "/etc/passwd",
    "/etc/sudoers.d/x",
    "/etc/fstab",
    "/var/lib/nodeagent/x",
    "/run/nodeagent/status.json",
    "/proc/self/mem",
    "/dev/null",
    "/tmp/a",
    "/tmp/a/b",
    "relative/path",
];

fn pick(u: &mut Unstructured, from: &[&str]) -> Result<String> {
    Ok((*u.choose(from)?).to_string())
}

/// A string, mostly from the interesting sets, sometimes arbitrary or long.
pub fn text(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=9u8)? {
        0 | 1 => String::arbitrary_take(u)?,
        2 | 3 => pick(u, NASTY)?,
        4 | 5 => pick(u, WORDS)?,
        6 => path(u)?,
        7 => {
            let unit = pick(u, &["a", "é", "\n", ":", "/", " ", "{{", "x,"])?;
            let n = u.int_in_range(1..=5000usize)?;
            unit.repeat(n)
        }
        8 => format!("{}{}", pick(u, WORDS)?, pick(u, NASTY)?),
        _ => u.int_in_range(-5..=70000i64)?.to_string(),
    })
}

trait TakeStr {
    fn arbitrary_take(u: &mut Unstructured) -> Result<String>;
}
impl TakeStr for String {
    fn arbitrary_take(u: &mut Unstructured) -> Result<String> {
        let len = u.int_in_range(0..=64usize)?;
        let bytes = u.bytes(len.min(u.len()))?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

pub fn path(u: &mut Unstructured) -> Result<String> {
    if u.ratio(1, 2)? {
        return pick(u, PATHS);
    }
    let n = u.int_in_range(0..=6usize)?;
    let mut p = String::new();
    for _ in 0..n {
        p.push('/');
        p.push_str(&match u.int_in_range(0..=4u8)? {
            0 => pick(u, NASTY)?,
            1 => "x".repeat(u.int_in_range(1..=300usize)?),
            _ => pick(u, WORDS)?,
        });
    }
    Ok(p)
}

fn s(u: &mut Unstructured) -> Result<Value> {
    Ok(Value::String(text(u)?))
}
fn p(u: &mut Unstructured) -> Result<Value> {
    Ok(Value::String(path(u)?))
}
fn flag(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => json!(true),
        1 => json!(false),
        2 => json!(pick(
            u,
            &["yes", "no", "on", "off", "True", "1", "0", "maybe"]
        )?),
        3 => json!(u.int_in_range(-1..=2i64)?),
        4 => Value::Null,
        _ => any(u)?,
    })
}
fn int(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => json!(u.int_in_range(-2..=70000i64)?),
        1 => json!(i64::arbitrary(u)?),
        2 => json!(f64::from(u.int_in_range(-100..=100i32)?) / 3.0),
        _ => s(u)?,
    })
}
use arbitrary::Arbitrary;

/// Any JSON value, shallow: what a wrong-typed field holds.
pub fn any(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => Value::Null,
        1 => json!(bool::arbitrary(u)?),
        2 => json!(i64::arbitrary(u)?),
        3 => s(u)?,
        4 => Value::Array(vec![s(u)?, json!(u.int_in_range(0..=9i64)?)]),
        _ => json!({ text(u)?: s(u)? }),
    })
}

/// Usually the model's shape, one time in twelve any other value.
fn typed(u: &mut Unstructured, g: Gen) -> Result<Value> {
    if u.ratio(1, 12)? { any(u) } else { g(u) }
}

/// A mapping with each field present or not, sometimes an unknown one.
pub fn obj(u: &mut Unstructured, fields: &[(&str, Gen)]) -> Result<Value> {
    let mut m = Map::new();
    for (k, g) in fields {
        if u.ratio(1, 2)? {
            m.insert((*k).to_string(), typed(u, *g)?);
        }
    }
    if u.ratio(1, 20)? {
        m.insert(text(u)?, any(u)?);
    }
    Ok(Value::Object(m))
}

/// Like `obj`, but the listed required fields are always there.
fn obj_req(u: &mut Unstructured, req: &[(&str, Gen)], opt: &[(&str, Gen)]) -> Result<Value> {
    let mut v = obj(u, opt)?;
    if let Value::Object(m) = &mut v {
        for (k, g) in req {
            if !u.ratio(1, 20)? {
                m.insert((*k).to_string(), g(u)?);
            }
        }
    }
    Ok(v)
}

pub fn list(u: &mut Unstructured, g: Gen, max: usize) -> Result<Value> {
    let n = u.int_in_range(0..=max)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(g(u)?);
    }
    Ok(Value::Array(out))
}

fn strs(u: &mut Unstructured) -> Result<Value> {
    list(u, s, 4)
}
fn str_or_list(u: &mut Unstructured) -> Result<Value> {
    if u.ratio(1, 2)? { s(u) } else { strs(u) }
}
fn str_map(u: &mut Unstructured) -> Result<Value> {
    let n = u.int_in_range(0..=3usize)?;
    let mut m = Map::new();
    for _ in 0..n {
        m.insert(text(u)?, s(u)?);
    }
    Ok(Value::Object(m))
}

// ---- cloud-config (cloudconfig::types) ----------------------------------------------

const KUBEADM_INIT: &str = "kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete";
const KUBEADM_JOIN: &str = "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete";

fn cmd(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => json!(KUBEADM_INIT),
        1 => json!(KUBEADM_JOIN),
        2 => Value::Null,
        3 => list(u, |u| if u.ratio(1, 4)? { int(u) } else { s(u) }, 4)?,
        _ => s(u)?,
    })
}

fn content(u: &mut Unstructured) -> Result<Value> {
    Ok(json!(match u.int_in_range(0..=4u8)? {
        0 => kubeadm_yaml(u)?,
        1 => "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_string(),
        _ => text(u)?,
    }))
}

fn write_file(u: &mut Unstructured) -> Result<Value> {
    let mut v = obj(
        u,
        &[
            ("path", p),
            ("content", content),
            ("owner", |u| Ok(json!(format!("{}:{}", text(u)?, text(u)?)))),
            ("permissions", |u| {
                Ok(match u.int_in_range(0..=3u8)? {
                    0 => json!(pick(
                        u,
                        &["0644", "0600", "0o755", "755", "0x1ff", "rwx", "0888"]
                    )?),
                    1 => json!(u.int_in_range(0..=0o10000i64)?),
                    _ => int(u)?,
                })
            }),
            ("encoding", |u| {
                Ok(json!(pick(
                    u,
                    &[
                        "b64",
                        "base64",
                        "gzip",
                        "gz",
                        "gz+base64",
                        "gzip+base64",
                        "gz+b64",
                        "text/plain",
                        "bogus"
                    ]
                )?))
            }),
            ("append", flag),
            ("defer", flag),
            ("source", |u| obj(u, &[("uri", s), ("headers", str_map)])),
        ],
    )?;
    // Encoded content that decodes: base64 of a text (gzip stays for the byte fuzzers).
    if let Value::Object(m) = &mut v
        && matches!(
            m.get("encoding").and_then(Value::as_str),
            Some("b64" | "base64")
        )
    {
        use base64::Engine;
        let raw = text(u)?;
        m.insert(
            "content".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(raw)),
        );
    }
    Ok(v)
}

fn user(u: &mut Unstructured) -> Result<Value> {
    if u.ratio(1, 6)? {
        return Ok(json!("default"));
    }
    obj_req(
        u,
        &[("name", s)],
        &[
            ("gecos", s),
            ("homedir", p),
            ("primary_group", s),
            ("groups", str_or_list),
            ("lock_passwd", flag),
            ("passwd", s),
            ("hashed_passwd", s),
            ("plain_text_passwd", s),
            ("shell", p),
            ("sudo", |u| {
                Ok(match u.int_in_range(0..=3u8)? {
                    0 => json!(false),
                    1 => strs(u)?,
                    _ => s(u)?,
                })
            }),
            ("ssh_authorized_keys", str_or_list),
            ("system", flag),
            ("no_create_home", flag),
            ("no_user_group", flag),
            ("no_log_init", flag),
            ("uid", int),
            ("inactive", int),
            ("expiredate", s),
        ],
    )
}

fn group(u: &mut Unstructured) -> Result<Value> {
    Ok(if u.ratio(1, 2)? {
        s(u)?
    } else {
        json!({ text(u)?: str_or_list(u)? })
    })
}

fn layout(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => json!(true),
        1 => json!(false),
        _ => list(
            u,
            |u| {
                Ok(if u.ratio(1, 2)? {
                    int(u)?
                } else {
                    json!([
                        int(u)?,
                        pick(u, &["82", "83", "8300", "0x83", "ef00", "L", "S", "zz"])?
                    ])
                })
            },
            5,
        )?,
    })
}

fn disk_setup(u: &mut Unstructured) -> Result<Value> {
    let n = u.int_in_range(0..=2usize)?;
    let mut m = Map::new();
    for _ in 0..n {
        let dev = if u.ratio(1, 2)? {
            pick(u, &["/dev/sdb", "/dev/vdb", "ephemeral0", "swap_disk"])?
        } else {
            text(u)?
        };
        m.insert(
            dev,
            obj(
                u,
                &[
                    ("table_type", |u| {
                        Ok(json!(pick(u, &["gpt", "mbr", "dos", "x"])?))
                    }),
                    ("layout", layout),
                    ("overwrite", flag),
                ],
            )?,
        );
    }
    Ok(Value::Object(m))
}

fn fs_entry(u: &mut Unstructured) -> Result<Value> {
    obj(
        u,
        &[
            ("label", s),
            ("filesystem", |u| {
                Ok(json!(pick(
                    u,
                    &["ext4", "ext3", "xfs", "swap", "btrfs", "vfat", "zfs"]
                )?))
            }),
            ("device", |u| {
                Ok(json!(pick(
                    u,
                    &[
                        "/dev/sdb",
                        "/dev/sdb1",
                        "/dev/vdb",
                        "ephemeral0.1",
                        "swap_disk",
                        "/dev/../etc/passwd"
                    ]
                )?))
            }),
            ("partition", |u| {
                Ok(match u.int_in_range(0..=2u8)? {
                    0 => json!(pick(u, &["auto", "any", "none", "1"])?),
                    1 => int(u)?,
                    _ => s(u)?,
                })
            }),
            ("overwrite", flag),
            ("replace_fs", s),
            ("extra_opts", str_or_list),
        ],
    )
}

fn mount_field(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => Value::Null,
        1 => int(u)?,
        _ => s(u)?,
    })
}

/// One cloud-config document as a JSON value (YAML's data model).
pub fn cloud_config(u: &mut Unstructured) -> Result<Value> {
    obj(
        u,
        &[
            ("write_files", |u| list(u, write_file, 5)),
            ("runcmd", |u| list(u, cmd, 6)),
            ("bootcmd", |u| list(u, cmd, 3)),
            ("users", |u| list(u, user, 4)),
            ("groups", |u| {
                Ok(if u.ratio(1, 2)? {
                    list(u, group, 3)?
                } else {
                    str_or_list(u)?
                })
            }),
            ("ssh_authorized_keys", strs),
            ("ntp", |u| {
                obj(
                    u,
                    &[
                        ("enabled", flag),
                        ("ntp_client", |u| {
                            Ok(json!(pick(
                                u,
                                &[
                                    "auto",
                                    "chrony",
                                    "ntp",
                                    "ntpdate",
                                    "systemd-timesyncd",
                                    "openntpd"
                                ]
                            )?))
                        }),
                        ("servers", strs),
                        ("pools", strs),
                    ],
                )
            }),
            ("disk_setup", disk_setup),
            ("fs_setup", |u| list(u, fs_entry, 3)),
            ("device_aliases", str_map),
            ("mounts", |u| list(u, |u| list(u, mount_field, 7), 3)),
            ("mount_default_fields", |u| list(u, mount_field, 7)),
            ("hostname", s),
            ("fqdn", s),
            ("preserve_hostname", flag),
            ("prefer_fqdn_over_hostname", flag),
            ("create_hostname_file", flag),
            ("manage_etc_hosts", |u| {
                Ok(match u.int_in_range(0..=2u8)? {
                    0 => flag(u)?,
                    _ => json!(pick(u, &["localhost", "template", "x"])?),
                })
            }),
            ("final_message", s),
            ("growpart", |u| {
                obj(
                    u,
                    &[
                        ("mode", |u| {
                            Ok(json!(pick(u, &["auto", "growpart", "off", "gpart"])?))
                        }),
                        ("devices", strs),
                        ("ignore_growroot_disabled", flag),
                    ],
                )
            }),
            ("resize_rootfs", |u| {
                Ok(if u.ratio(1, 3)? {
                    json!("noblock")
                } else {
                    flag(u)?
                })
            }),
            ("vendor_data", |u| {
                obj(u, &[("enabled", flag), ("prefix", any)])
            }),
        ],
    )
}

// ---- kubeadm (kubeadm::api) -----------------------------------------------------------

fn api_version(u: &mut Unstructured) -> Result<Value> {
    Ok(json!(pick(
        u,
        &[
            "kubeadm.k8s.io/v1beta3",
            "kubeadm.k8s.io/v1beta4",
            "kubeadm.k8s.io/v1beta2",
            "v1",
            "kubeadm.k8s.io/é"
        ]
    )?))
}
fn duration(u: &mut Unstructured) -> Result<Value> {
    Ok(if u.ratio(2, 3)? {
        json!(pick(
            u,
            &["1h", "24h0m0s", "5m", "1.5h", "-1s", "0", "10x", "300ms"]
        )?)
    } else {
        s(u)?
    })
}
fn args(u: &mut Unstructured) -> Result<Value> {
    if u.ratio(1, 2)? {
        str_map(u)
    } else {
        list(u, |u| obj_req(u, &[("name", s), ("value", s)], &[]), 3)
    }
}
fn envs(u: &mut Unstructured) -> Result<Value> {
    list(
        u,
        |u| obj_req(u, &[("name", s)], &[("value", s), ("valueFrom", any)]),
        2,
    )
}
fn node_registration(u: &mut Unstructured) -> Result<Value> {
    obj(
        u,
        &[
            ("name", s),
            ("criSocket", |u| {
                Ok(json!(pick(
                    u,
                    &[
                        "unix:///var/run/containerd/containerd.sock",
                        "/run/x.sock",
                        "tcp://1.2.3.4"
                    ]
                )?))
            }),
            ("taints", |u| {
                list(
                    u,
                    |u| {
                        obj_req(
                            u,
                            &[
                                ("key", s),
                                ("effect", |u| {
                                    Ok(json!(pick(
                                        u,
                                        &["NoSchedule", "PreferNoSchedule", "NoExecute", "Bogus"]
                                    )?))
                                }),
                            ],
                            &[("value", s), ("timeAdded", s)],
                        )
                    },
                    2,
                )
            }),
            ("kubeletExtraArgs", args),
            ("ignorePreflightErrors", strs),
            ("imagePullPolicy", |u| {
                Ok(json!(pick(
                    u,
                    &["Always", "IfNotPresent", "Never", "Sometimes"]
                )?))
            }),
            ("imagePullSerial", flag),
        ],
    )
}
fn endpoint(u: &mut Unstructured) -> Result<Value> {
    obj(u, &[("advertiseAddress", s), ("bindPort", int)])
}
fn timeouts(u: &mut Unstructured) -> Result<Value> {
    obj(
        u,
        &[
            ("controlPlaneComponentHealthCheck", duration),
            ("kubeletHealthCheck", duration),
            ("kubernetesAPICall", duration),
            ("etcdAPICall", duration),
            ("tlsBootstrap", duration),
            ("discovery", duration),
            ("upgradeManifests", duration),
        ],
    )
}
fn volumes(u: &mut Unstructured) -> Result<Value> {
    list(
        u,
        |u| {
            obj_req(
                u,
                &[("name", s), ("hostPath", p), ("mountPath", p)],
                &[("readOnly", flag), ("pathType", s)],
            )
        },
        2,
    )
}
fn component(u: &mut Unstructured) -> Result<Value> {
    obj(
        u,
        &[
            ("extraArgs", args),
            ("extraVolumes", volumes),
            ("extraEnvs", envs),
        ],
    )
}
fn token(u: &mut Unstructured) -> Result<Value> {
    Ok(if u.ratio(2, 3)? {
        json!(pick(
            u,
            &[
                "abcdef.0123456789abcdef",
                "ABCDEF.0123456789abcdef",
                "abcdef0123456789abcdef",
                "é"
            ]
        )?)
    } else {
        s(u)?
    })
}
fn ca_hash(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => json!(format!("sha256:{}", "0123456789abcdef".repeat(4))),
        1 => json!(format!(
            "sha256:{}é",
            "a".repeat(u.int_in_range(0..=70usize)?)
        )),
        _ => s(u)?,
    })
}

fn init_doc(u: &mut Unstructured) -> Result<Value> {
    obj_req(
        u,
        &[
            ("apiVersion", api_version),
            ("kind", |_| Ok(json!("InitConfiguration"))),
        ],
        &[
            ("bootstrapTokens", |u| {
                list(
                    u,
                    |u| {
                        obj_req(
                            u,
                            &[("token", token)],
                            &[
                                ("description", s),
                                ("ttl", duration),
                                ("expires", s),
                                ("usages", strs),
                                ("groups", strs),
                            ],
                        )
                    },
                    2,
                )
            }),
            ("dryRun", flag),
            ("nodeRegistration", node_registration),
            ("localAPIEndpoint", endpoint),
            ("certificateKey", s),
            ("skipPhases", strs),
            ("patches", |u| obj(u, &[("directory", p)])),
            ("timeouts", timeouts),
        ],
    )
}

fn cluster_doc(u: &mut Unstructured) -> Result<Value> {
    obj_req(
        u,
        &[
            ("apiVersion", api_version),
            ("kind", |_| Ok(json!("ClusterConfiguration"))),
        ],
        &[
            ("etcd", |u| {
                obj(
                    u,
                    &[
                        ("local", |u| {
                            obj(
                                u,
                                &[
                                    ("imageRepository", s),
                                    ("imageTag", s),
                                    ("dataDir", p),
                                    ("extraArgs", args),
                                    ("extraEnvs", envs),
                                    ("serverCertSANs", strs),
                                    ("peerCertSANs", strs),
                                ],
                            )
                        }),
                        ("external", |u| {
                            obj_req(
                                u,
                                &[("endpoints", strs)],
                                &[("caFile", p), ("certFile", p), ("keyFile", p)],
                            )
                        }),
                    ],
                )
            }),
            ("networking", |u| {
                obj(
                    u,
                    &[("serviceSubnet", s), ("podSubnet", s), ("dnsDomain", s)],
                )
            }),
            ("kubernetesVersion", |u| {
                Ok(if u.ratio(1, 2)? {
                    json!(pick(u, &["v1.31.0", "v1.29.3", "1.30", "latest"])?)
                } else {
                    s(u)?
                })
            }),
            ("controlPlaneEndpoint", |u| {
                Ok(if u.ratio(1, 2)? {
                    json!(pick(
                        u,
                        &[
                            "10.0.0.1:6443",
                            "[fe80::1]:6443",
                            "lb.example.com",
                            "host:é",
                            ":"
                        ]
                    )?)
                } else {
                    s(u)?
                })
            }),
            ("apiServer", |u| {
                obj(
                    u,
                    &[
                        ("extraArgs", args),
                        ("extraVolumes", volumes),
                        ("extraEnvs", envs),
                        ("certSANs", strs),
                        ("timeoutForControlPlane", duration),
                    ],
                )
            }),
            ("controllerManager", component),
            ("scheduler", component),
            ("dns", |u| {
                obj(
                    u,
                    &[("imageRepository", s), ("imageTag", s), ("disabled", flag)],
                )
            }),
            ("proxy", |u| obj(u, &[("disabled", flag)])),
            ("certificatesDir", p),
            ("imageRepository", s),
            ("featureGates", |u| {
                Ok(json!({ text(u)?: bool::arbitrary(u)? }))
            }),
            ("clusterName", s),
            ("encryptionAlgorithm", |u| {
                Ok(json!(pick(
                    u,
                    &[
                        "RSA-2048",
                        "RSA-3072",
                        "RSA-4096",
                        "ECDSA-P256",
                        "ECDSA-P384",
                        "DSA"
                    ]
                )?))
            }),
            ("certificateValidityPeriod", duration),
            ("caCertificateValidityPeriod", duration),
        ],
    )
}

fn join_doc(u: &mut Unstructured) -> Result<Value> {
    obj_req(
        u,
        &[
            ("apiVersion", api_version),
            ("kind", |_| Ok(json!("JoinConfiguration"))),
            ("discovery", |u| {
                obj(
                    u,
                    &[
                        ("bootstrapToken", |u| {
                            obj_req(
                                u,
                                &[("token", token)],
                                &[
                                    ("apiServerEndpoint", s),
                                    ("caCertHashes", |u| list(u, ca_hash, 3)),
                                    ("unsafeSkipCAVerification", flag),
                                ],
                            )
                        }),
                        ("file", |u| obj_req(u, &[("kubeConfigPath", p)], &[])),
                        ("tlsBootstrapToken", token),
                        ("timeout", duration),
                    ],
                )
            }),
        ],
        &[
            ("dryRun", flag),
            ("nodeRegistration", node_registration),
            ("caCertPath", p),
            ("controlPlane", |u| {
                obj(u, &[("localAPIEndpoint", endpoint), ("certificateKey", s)])
            }),
            ("skipPhases", strs),
            ("patches", |u| obj(u, &[("directory", p)])),
            ("timeouts", timeouts),
        ],
    )
}

/// A kubeadm configuration file: one to three documents, as YAML.
pub fn kubeadm_yaml(u: &mut Unstructured) -> Result<String> {
    let n = u.int_in_range(1..=3usize)?;
    let mut docs = Vec::new();
    for _ in 0..n {
        let doc = match u.int_in_range(0..=6u8)? {
            0 | 1 => init_doc(u)?,
            2 | 3 => cluster_doc(u)?,
            4 | 5 => join_doc(u)?,
            _ => {
                json!({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": pick(u, &["KubeletConfiguration", "KubeProxyConfiguration", "Other"])?})
            }
        };
        docs.push(yaml(&doc));
    }
    Ok(docs.join("---\n"))
}

// ---- metadata (metadata.rs, network.rs) ----------------------------------------------

fn netplan_eth(u: &mut Unstructured) -> Result<Value> {
    obj(
        u,
        &[
            ("match", |u| {
                obj(
                    u,
                    &[
                        ("macaddress", |u| {
                            Ok(if u.ratio(1, 2)? {
                                json!("00:50:56:aa:bb:cc")
                            } else {
                                s(u)?
                            })
                        }),
                        ("name", s),
                    ],
                )
            }),
            ("set-name", s),
            ("wakeonlan", flag),
            ("dhcp4", flag),
            ("dhcp6", flag),
            ("dhcp4-overrides", |u| {
                obj(
                    u,
                    &[
                        ("use-dns", flag),
                        ("use-ntp", flag),
                        ("use-routes", flag),
                        ("route-metric", int),
                        ("use-mtu", flag),
                        ("use-hostname", flag),
                        ("send-hostname", flag),
                        ("hostname", s),
                        ("use-domains", flag),
                    ],
                )
            }),
            ("accept-ra", flag),
            ("addresses", |u| {
                list(
                    u,
                    |u| {
                        Ok(if u.ratio(1, 2)? {
                            json!(pick(
                                u,
                                &["10.0.0.5/24", "fe80::5/64", "10.0.0.5", "300.1.1.1/8"]
                            )?)
                        } else {
                            s(u)?
                        })
                    },
                    3,
                )
            }),
            ("gateway4", s),
            ("gateway6", s),
            ("mtu", int),
            ("routes", |u| {
                list(u, |u| obj(u, &[("to", s), ("via", s), ("metric", int)]), 3)
            }),
            ("nameservers", |u| {
                obj(u, &[("addresses", strs), ("search", strs)])
            }),
        ],
    )
}

/// CAPV-shaped metadata: instance-id, hostname, network v2, keys.
pub fn metadata(u: &mut Unstructured) -> Result<Value> {
    obj(
        u,
        &[
            ("instance-id", s),
            ("local-hostname", s),
            ("hostname", s),
            ("wait-on-network", |u| {
                obj(u, &[("ipv4", flag), ("ipv6", flag)])
            }),
            ("network", |u| {
                obj_req(
                    u,
                    &[("version", |u| {
                        Ok(if u.ratio(4, 5)? { json!(2) } else { int(u)? })
                    })],
                    &[
                        ("ethernets", |u| {
                            let n = u.int_in_range(0..=2usize)?;
                            let mut m = Map::new();
                            for _ in 0..n {
                                m.insert(
                                    if u.ratio(1, 2)? {
                                        "id0".into()
                                    } else {
                                        text(u)?
                                    },
                                    netplan_eth(u)?,
                                );
                            }
                            Ok(Value::Object(m))
                        }),
                        ("renderer", |u| {
                            Ok(json!(pick(u, &["networkd", "NetworkManager", "x"])?))
                        }),
                    ],
                )
            }),
            ("public-keys", str_or_list),
            ("public-keys-data", s),
            ("local-ipv4", s),
            ("cleanup-guestinfo", strs),
            ("redact", flag),
        ],
    )
}

/// YAML text of a value (block style), or its JSON when the value cannot be written as YAML.
pub fn yaml(v: &Value) -> String {
    serde_norway::to_string(v).unwrap_or_else(|_| v.to_string())
}

// ---- the target root as the plan's checks see it ----------------------------------------

/// A probed target with fuzzer-chosen NTP clients and `--root` prefix length.
pub fn target_view(u: &mut Unstructured) -> Result<libnodeagent::plan::planner::target::TargetView> {
    Ok(libnodeagent::plan::planner::target::TargetView {
        probed: true,
        chrony: bool::arbitrary(u)?,
        timesyncd: bool::arbitrary(u)?,
        root_len: u.int_in_range(0..=4000usize)?,
    })
}

/// A target's user database: a few names with numeric ids, sometimes none known.
pub fn user_db(u: &mut Unstructured) -> Result<libnodeagent::plan::planner::UserDb> {
    let mut db = libnodeagent::plan::planner::UserDb {
        known: u.ratio(3, 4)?,
        ..Default::default()
    };
    for (i, name) in ["root", "ubuntu", "capv", "docker", "sudo"]
        .iter()
        .enumerate()
    {
        if u.ratio(1, 2)? {
            db.users.push((*name).to_string());
            db.uids
                .insert((*name).to_string(), u.int_in_range(0..=1001u32)?);
        }
        if u.ratio(1, 2)? {
            db.groups.push((*name).to_string());
            db.gids.insert((*name).to_string(), i as u32 * 500);
        }
    }
    Ok(db)
}
