//! Micro-benchmarks of the pure pipeline stages on the real CABPK init userdata and CAPV
//! metadata (shared/corpus), plus a scale curve of plan cost against userdata size.
//! Run: `cargo bench -p libnodeagent --bench pipeline`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use libnodeagent::pipeline::{self, Inputs};
use libnodeagent::source::transport::RawData;
use std::hint::black_box;
use std::path::{Path, PathBuf};

fn corpus(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/corpus")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn facts() -> libnodeagent::source::facts::Facts {
    libnodeagent::source::facts::Facts {
        hostname: Some("cp-0".into()),
        fqdn: Some("cp-0".into()),
        local_ipv4: Some("10.0.0.10".into()),
        network_renderer: Some("networkd".into()),
        ..Default::default()
    }
}

fn inputs(userdata: String, metadata: String) -> Inputs {
    let d = |t: String| {
        Some(libnodeagent::source::decode::Decoded {
            text: t,
            warnings: Vec::new(),
        })
    };
    Inputs {
        transport: Box::new(pipeline::Offline),
        transport_log: Vec::new(),
        raw: RawData {
            metadata: d(metadata),
            userdata: d(userdata),
            vendordata: None,
        },
        facts: facts(),
        image: Default::default(),
        users: Default::default(),
        target: Default::default(),
        disk: Default::default(),
        now: libnodeagent::pki::now(),
        compat: false,
        root: PathBuf::from("/nonexistent"),
    }
}

const METADATA: &str = "instance-id: \"cp-0\"\nlocal-hostname: \"cp-0\"\nwait-on-network:\n  ipv4: true\n  ipv6: false\nnetwork:\n  version: 2\n  ethernets:\n    id0:\n      match:\n        macaddress: \"00:50:56:a0:00:01\"\n      set-name: \"eth0\"\n      wakeonlan: true\n      dhcp4: true\n      dhcp6: false\n";

fn stages(c: &mut Criterion) {
    use base64::Engine;
    let userdata =
        corpus("capi/cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&userdata);
    c.bench_function("decode base64 userdata (13 KiB)", |b| {
        b.iter(|| {
            libnodeagent::source::decode::decode_value(
                "userdata",
                black_box(b64.as_bytes()),
                Some(b"base64"),
            )
            .unwrap()
        })
    });
    let i = inputs(userdata.clone(), METADATA.into());
    let tree = pipeline::instance_data(&i).unwrap();
    c.bench_function("render CABPK init userdata", |b| {
        b.iter(|| {
            libnodeagent::render::template::render(black_box(&userdata), &tree, false).unwrap()
        })
    });
    let rendered = libnodeagent::render::template::render(&userdata, &tree, false)
        .unwrap()
        .text;
    c.bench_function("parse cloud-config", |b| {
        b.iter(|| {
            libnodeagent::render::cloudconfig::parse(black_box(&rendered), "userdata", false)
                .unwrap()
        })
    });
    c.bench_function("metadata to plan: full prepare", |b| {
        b.iter(|| pipeline::prepare(black_box(&i)).unwrap())
    });
}

/// Userdata of `files` write_files entries of `size` bytes each: plan cost should grow linearly.
fn synthetic(files: usize, size: usize) -> String {
    let line = "A".repeat(76);
    let lines = (size / 77).max(1);
    let mut s = String::from("## template: jinja\n#cloud-config\nwrite_files:\n");
    for i in 0..files {
        s.push_str(&format!("-   path: /etc/scale/f{i}\n    owner: root:root\n    permissions: '0640'\n    content: |\n"));
        for _ in 0..lines {
            s.push_str("      ");
            s.push_str(&line);
            s.push('\n');
        }
    }
    s.push_str("runcmd:\n  - echo {{ v1.local_hostname }}\n");
    s
}

fn scale(c: &mut Criterion) {
    let mut g = c.benchmark_group("prepare scale");
    g.sample_size(10);
    for kib in [1usize, 16, 256, 4096, 16 * 1024 - 64] {
        let files = (kib / 4).clamp(1, 512);
        let text = synthetic(files, kib * 1024 / files);
        let i = inputs(text.clone(), METADATA.into());
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("{kib} KiB")),
            &i,
            |b, i| b.iter(|| pipeline::prepare(i).unwrap()),
        );
    }
    g.finish();
}

criterion_group!(benches, stages, scale);
criterion_main!(benches);
