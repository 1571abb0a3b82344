//! Byte-for-byte reproduction of real Cluster API output: CABPK's init userdata (the Harvester
//! provider's test fixture) and CAPV's metadata golden files.

mod prereq;
use minter::bootstrap::{self, KubeadmApi, Role, Spec};
use minter::metadata::{Device, Metadata, Route};
use minter::pki::{CaPair, Pki};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus/capi");

fn golden_spec() -> (Spec, String) {
    let golden = std::fs::read_to_string(format!(
        "{CORPUS}/cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml"
    ))
    .unwrap();
    let doc: serde_norway::Value = serde_norway::from_str(&golden).unwrap();
    let f = |i: usize| {
        doc["write_files"][i]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let pki = Pki {
        ca: CaPair {
            cert_pem: f(0),
            key_pem: f(1),
        },
        etcd: CaPair {
            cert_pem: f(2),
            key_pem: f(3),
        },
        front_proxy: CaPair {
            cert_pem: f(4),
            key_pem: f(5),
        },
        sa_pub: f(6),
        sa_key: f(7),
    };
    // The fixture's KubeadmConfig: no node name, socket or extra args; CAPI ~v1.5 (no KCP gates).
    let mut spec = Spec::capv(
        Role::Init,
        "test",
        "127.0.0.1:6443",
        "v1.26.6",
        26,
        KubeadmApi::V1beta3,
    );
    spec.pki = Some(pki);
    spec.node_name = None;
    spec.cri_socket = None;
    spec.kubelet_extra_args.clear();
    spec.controller_manager_extra_args.clear();
    spec.kcp_feature_gates = false;
    (spec, golden)
}

#[test]
fn init_userdata_matches_real_cabpk_output_byte_for_byte() {
    if !prereq::corpus_present() {
        return;
    }
    let (spec, golden) = golden_spec();
    let ours = bootstrap::userdata(&spec).unwrap();
    // The fixture lost CABPK's final newline when it was pasted into a Go raw string.
    assert_eq!(ours, format!("{golden}\n"));
}

#[test]
fn golden_pki_is_readable_by_our_loader() {
    if !prereq::corpus_present() {
        return;
    }
    // CAPI's PKCS#1 keys load, and each matches its certificate.
    let (spec, _) = golden_spec();
    spec.pki.unwrap().check().unwrap();
}

fn dev(mac: &str) -> Device {
    Device {
        mac: mac.into(),
        ..Default::default()
    }
}

fn md(devices: Vec<Device>) -> String {
    Metadata {
        hostname: "test-vm".into(),
        instance_id: "test-vm".into(),
        devices,
    }
    .render()
}

fn golden_md(name: &str) -> String {
    std::fs::read_to_string(format!("{CORPUS}/capv/metadata-golden-head/{name}.yaml")).unwrap()
}

#[test]
fn metadata_matches_capv_golden_files_byte_for_byte() {
    if !prereq::corpus_present() {
        return;
    }
    let route = |to: &str, via: &str, m: u32| Route {
        to: to.into(),
        via: via.into(),
        metric: Some(m),
    };
    let cases: Vec<(&str, Vec<Device>)> = vec![
        (
            "dhcp4",
            vec![Device {
                dhcp4: true,
                ..dev("00:00:00:00:00")
            }],
        ),
        (
            "dhcp6",
            vec![Device {
                dhcp6: true,
                ..dev("00:00:00:00:00")
            }],
        ),
        (
            "dhcp4-dhcp6",
            vec![Device {
                dhcp4: true,
                dhcp6: true,
                ..dev("00:00:00:00:00")
            }],
        ),
        (
            "dhcp4-dhcp6-noDhcpOverrides",
            vec![Device {
                dhcp4: true,
                dhcp6: true,
                ..dev("00:00:00:00:00")
            }],
        ),
        (
            "dhcp4-deviceName",
            vec![Device {
                dhcp4: true,
                set_name: Some("ens192".into()),
                ..dev("00:00:00:00:00")
            }],
        ),
        (
            "static4-dhcp6",
            vec![Device {
                dhcp6: true,
                addresses: vec!["192.168.4.21".into()],
                gateway4: Some("192.168.4.1".into()),
                ..dev("00:00:00:00:00")
            }],
        ),
        (
            "static4-dhcp6-static-routes",
            vec![Device {
                dhcp6: true,
                addresses: vec!["192.168.4.21".into()],
                gateway4: Some("192.168.4.1".into()),
                routes: vec![route("192.168.5.1/24", "192.168.4.254", 3)],
                ..dev("00:00:00:00:00")
            }],
        ),
        (
            "2nets",
            vec![
                Device {
                    dhcp4: true,
                    routes: vec![route("192.168.5.1/24", "192.168.4.254", 3)],
                    ..dev("00:00:00:00:00")
                },
                Device {
                    dhcp6: true,
                    mtu: Some(100),
                    ..dev("00:00:00:00:01")
                },
            ],
        ),
        (
            "2nets-network-statuses",
            vec![
                Device {
                    dhcp4: true,
                    ..dev("00:00:00:00:ab")
                },
                Device {
                    dhcp6: true,
                    ..dev("00:00:00:00:cd")
                },
            ],
        ),
        (
            "2nets-static-dhcp",
            vec![
                Device {
                    addresses: vec!["192.168.4.21".into()],
                    gateway4: Some("192.168.4.1".into()),
                    nameservers: vec!["1.1.1.1".into()],
                    search: vec!["vmware.ci".into()],
                    ..dev("00:00:00:00:00")
                },
                Device {
                    dhcp6: true,
                    search: vec!["vmware6.ci".into()],
                    ..dev("00:00:00:00:01")
                },
            ],
        ),
        (
            "2nets-global-static-routes",
            vec![
                Device {
                    dhcp4: true,
                    routes: vec![
                        route("192.168.5.1/24", "192.168.4.254", 3),
                        route("0.0.0.0/0", "192.168.4.1", 222),
                    ],
                    ..dev("00:00:00:00:00")
                },
                Device {
                    dhcp6: true,
                    routes: vec![route("0.0.0.0/0", "192.168.4.1", 222)],
                    ..dev("00:00:00:00:01")
                },
            ],
        ),
    ];
    for (name, devices) in cases {
        assert_eq!(md(devices), golden_md(name), "golden {name}");
    }
}
