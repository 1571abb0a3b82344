//! Minter benchmarks (in-process; bench/mint-vs-openssl.sh measures whole processes).
//! `cargo bench -p minter --bench mint`

use criterion::{Criterion, criterion_group, criterion_main};
use minter::bootstrap::{KubeadmApi, Role, Spec};
use minter::emit::{self, Encoding};
use minter::fleet::{self, Input, Network};
use minter::pki::{Algorithm, Pki};
use std::hint::black_box;
use time::Duration;

fn pki(c: &mut Criterion) {
    let ten_years = Duration::days(3650);
    let mut g = c.benchmark_group("pki");
    g.bench_function("ecdsa-p256", |b| {
        b.iter(|| black_box(Pki::generate(Algorithm::EcdsaP256, ten_years).unwrap()))
    });
    g.bench_function("ecdsa-p384", |b| {
        b.iter(|| black_box(Pki::generate(Algorithm::EcdsaP384, ten_years).unwrap()))
    });
    g.sample_size(10);
    g.bench_function("rsa-2048", |b| {
        b.iter(|| black_box(Pki::generate(Algorithm::Rsa2048, ten_years).unwrap()))
    });
    g.finish();
}

fn bundles(c: &mut Criterion) {
    let p = Pki::generate(Algorithm::EcdsaP256, Duration::days(3650)).unwrap();
    let hashes = libnodeagent::pki::hash::discovery_hashes(p.ca.cert_pem.as_bytes()).unwrap();
    let mut spec = Spec::capv(
        Role::Worker,
        "demo",
        "10.0.0.10:6443",
        "v1.31.2",
        31,
        KubeadmApi::V1beta4,
    );
    spec.ca_cert_hashes = hashes;
    let input = Input {
        spec,
        node: "md".into(),
        nodes: 1000,
        network: Network::Dhcp4,
        mac: Some("00:50:56:00:00:00".into()),
        token: None,
    };
    let mut g = c.benchmark_group("bundles");
    g.sample_size(10);
    g.bench_function("1000-workers-base64", |b| {
        b.iter(|| {
            let nodes = fleet::build(&input).unwrap();
            let encoded: usize = nodes
                .iter()
                .map(|n| {
                    emit::keys(&n.bundle, Encoding::Base64)
                        .iter()
                        .map(|(_, v)| v.len())
                        .sum::<usize>()
                })
                .sum();
            black_box(encoded)
        })
    });
    g.bench_function("1000-workers-gzip+base64", |b| {
        b.iter(|| {
            let nodes = fleet::build(&input).unwrap();
            let encoded: usize = nodes
                .iter()
                .map(|n| {
                    emit::keys(&n.bundle, Encoding::GzipBase64)
                        .iter()
                        .map(|(_, v)| v.len())
                        .sum::<usize>()
                })
                .sum();
            black_box(encoded)
        })
    });
    g.finish();
    c.bench_function("discovery-hash", |b| {
        b.iter(|| {
            black_box(libnodeagent::pki::hash::discovery_hashes(p.ca.cert_pem.as_bytes()).unwrap())
        })
    });
}

criterion_group!(benches, pki, bundles);
criterion_main!(benches);
