use super::*;
use serde_json::json;

/// A rendered file read back by the agent's YAML reader.
fn read_yaml(text: &str) -> Value {
    let doc = crate::formats::yaml::Doc::new(crate::base::error::Stage::Apply, "rendered");
    crate::formats::yaml::read(doc, text).unwrap().to_json()
}

fn text(f: &FileWrite) -> &str {
    std::str::from_utf8(&f.content.0).unwrap()
}

fn capv() -> Value {
    json!({"version": 2, "ethernets": {"id0": {
        "match": {"macaddress": "00:50:56:AA:bb:01"}, "set-name": "eth0", "wakeonlan": true,
        "dhcp4": false, "dhcp6": false, "accept-ra": false,
        "addresses": ["10.20.30.21/24", "fd00::5/64"], "gateway4": "10.20.30.1", "mtu": 9000,
        "routes": [{"to": "192.168.5.0/24", "via": "10.20.30.254", "metric": 3}],
        "nameservers": {"addresses": ["10.20.0.53"], "search": ["corp.example"]}}}})
}

#[test]
fn a_newline_in_a_mac_is_refused_even_in_compat_mode() {
    let cfg = json!({"version": 2, "ethernets": {"id0": {
        "match": {"macaddress": "00:50:56:00:00:01\n[Network]\nDNS=6.6.6.6"},
        "dhcp4": true}}});
    for compat in [false, true] {
        let e = render_with(&cfg, "networkd", compat).unwrap_err();
        assert_eq!(e.place, "network.ethernets.id0.match.macaddress");
        assert!(e.message.contains("control character"), "{e}");
    }
}

#[test]
fn networkd_link_and_network() {
    let files = render(&capv(), "networkd").unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].path, "/etc/systemd/network/10-nodeagent-eth0.link");
    assert_eq!(
        text(&files[0]),
        "# Written by nodeagent from network.ethernets.id0\n[Match]\nMACAddress=00:50:56:aa:bb:01\n\n[Link]\nName=eth0\nMTUBytes=9000\n"
    );
    assert_eq!(
        files[1].path,
        "/etc/systemd/network/10-nodeagent-eth0.network"
    );
    assert_eq!(
        text(&files[1]),
        "# Written by nodeagent from network.ethernets.id0\n[Match]\nMACAddress=00:50:56:aa:bb:01\n\n[Link]\nMTUBytes=9000\n\n[Network]\nDHCP=no\nAddress=10.20.30.21/24\nAddress=fd00::5/64\nGateway=10.20.30.1\nDNS=10.20.0.53\nDomains=corp.example\n\n[Route]\nDestination=192.168.5.0/24\nGateway=10.20.30.254\nMetric=3\n"
    );
    assert_eq!(files[1].mode, Some(0o644));
}

#[test]
fn netplan_roundtrips_through_yaml() {
    let files = render(&capv(), "netplan").unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].path, NETPLAN_PATH);
    assert_eq!(files[0].mode, Some(0o600));
    // go-yaml's layout (goyaml.rs): sorted keys, quoting only where needed.
    assert_eq!(
        text(&files[0]),
        "# Written by nodeagent from the metadata's network config\nnetwork:\n  ethernets:\n    id0:\n      accept-ra: false\n      addresses:\n      - 10.20.30.21/24\n      - fd00::5/64\n      dhcp4: false\n      dhcp6: false\n      gateway4: 10.20.30.1\n      match:\n        macaddress: 00:50:56:aa:bb:01\n      mtu: 9000\n      nameservers:\n        addresses:\n        - 10.20.0.53\n        search:\n        - corp.example\n      routes:\n      - metric: 3\n        to: 192.168.5.0/24\n        via: 10.20.30.254\n      set-name: eth0\n      wakeonlan: true\n  renderer: networkd\n  version: 2\n"
    );
    let back: Value = read_yaml(text(&files[0]));
    let eth = &back["network"]["ethernets"]["id0"];
    assert_eq!(eth["match"]["macaddress"], "00:50:56:aa:bb:01");
    assert_eq!(eth["addresses"], json!(["10.20.30.21/24", "fd00::5/64"]));
    assert_eq!(eth["routes"][0]["metric"], 3);
    assert_eq!(eth["nameservers"]["search"], json!(["corp.example"]));
    // Rendering the rendered document again gives the same devices.
    let again = render(&back["network"], "netplan").unwrap();
    assert_eq!(text(&again[0]), text(&files[0]));
}

#[test]
fn netplan_values_cannot_change_type_or_add_keys() {
    let cfg = json!({"version": 2, "ethernets": {"yes": {
        "match": {"macaddress": "00:50:56:00:00:01"}, "set-name": "eth0",
        "dhcp4": true, "dhcp4-overrides": {"hostname": "hal", "route-metric": 100},
        "nameservers": {"search": ["no", "1.5"]}}}});
    let files = render_with(&cfg, "netplan", true).unwrap().files;
    let back: Value = read_yaml(text(&files[0]));
    let eth = &back["network"]["ethernets"]["yes"];
    assert_eq!(eth["match"]["macaddress"], "00:50:56:00:00:01");
    assert_eq!(eth["nameservers"]["search"], json!(["no", "1.5"]));
    assert_eq!(eth["dhcp4-overrides"]["route-metric"], 100);
    assert_eq!(eth["dhcp4-overrides"]["hostname"], "hal");
}

#[test]
fn dhcp_overrides_and_routes_and_no_global_routes() {
    let cfg = json!({"version": 2,
        "ethernets": {"id0": {"match": {"macaddress": "00:50:56:00:00:01"}, "set-name": "eth0",
        "routes": [{"to": "0.0.0.0/0", "via": "192.168.4.1", "metric": 222}],
        "dhcp4": true, "dhcp6": true, "dhcp4-overrides": {"use-dns": false, "route-metric": 100, "hostname": "hal"}}}});
    let mut global = cfg.clone();
    global["routes"] = global["ethernets"]["id0"]
        .as_object_mut()
        .unwrap()
        .remove("routes")
        .unwrap();
    let e = render(&global, "networkd").unwrap_err();
    assert_eq!(e.place, "network.routes");
    let r = render_with(&global, "networkd", true).unwrap();
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert_eq!(
        text(&r.files[1]),
        text(&render(&cfg, "networkd").unwrap()[1])
    );
    let files = render(&cfg, "networkd").unwrap();
    let net = text(&files[1]);
    // cloud-init's networkd renderer: IPv6AcceptRA only when `accept-ra` is given, no
    // wake-on-LAN; a route's metric as `Metric=` (25.1; 22.4 lost it).
    assert!(
        net.contains("DHCP=yes\n") && !net.contains("IPv6AcceptRA"),
        "{net}"
    );
    assert!(
        net.contains("[DHCPv4]\nUseDNS=no\nRouteMetric=100\nHostname=hal\n"),
        "{net}"
    );
    assert!(
        net.contains("[Route]\nDestination=0.0.0.0/0\nGateway=192.168.4.1\nMetric=222\n"),
        "{net}"
    );
}

#[test]
fn strict_errors_name_the_field() {
    let mut cfg = capv();
    cfg["ethernets"]["id0"]["match"]["macaddress"] = json!("00:00:00:00:00");
    let e = render(&cfg, "networkd").unwrap_err();
    assert_eq!(e.place, "network.ethernets.id0.match.macaddress");
    let mut cfg = capv();
    cfg["ethernets"]["id0"]["addresses"] = json!(["192.168.4.21"]);
    let e = render(&cfg, "networkd").unwrap_err();
    assert_eq!(e.place, "network.ethernets.id0.addresses[0]");
    let mut cfg = capv();
    cfg["ethernets"]["id0"]["gateway4"] = json!("fe80::1");
    assert_eq!(
        render(&cfg, "networkd").unwrap_err().place,
        "network.ethernets.id0.gateway4"
    );
    let mut cfg = capv();
    cfg["ethernets"]["id0"]["set-name"] = json!("../x");
    assert_eq!(
        render(&cfg, "networkd").unwrap_err().place,
        "network.ethernets.id0.set-name"
    );
    let mut cfg = capv();
    cfg["ethernets"]["id0"]["bogus"] = json!(1);
    assert_eq!(
        render(&cfg, "networkd").unwrap_err().place,
        "network.ethernets.id0.bogus"
    );
    assert_eq!(
        render(&json!({"version": 1}), "networkd")
            .unwrap_err()
            .place,
        "network.version"
    );
}

#[test]
fn compat_repairs_with_warnings() {
    let mut cfg = capv();
    cfg["ethernets"]["id0"]["match"]["macaddress"] = json!("00:00:00:00:00");
    cfg["ethernets"]["id0"]["addresses"] = json!(["192.168.4.21"]);
    let r = render_with(&cfg, "networkd", true).unwrap();
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(text(&r.files[1]).contains("Address=192.168.4.21/32\n"));
    assert!(text(&r.files[1]).contains("MACAddress=00:00:00:00:00\n"));
}

#[test]
fn capv_goldens_strict_fail_compat_render() {
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus/capi/capv");
    if !std::path::Path::new(corpus).is_dir() {
        crate::test_skip(
            "NODEAGENT_REQUIRE_CORPUS",
            &format!("the shared corpus is absent (expected at {corpus})"),
        );
        return;
    }
    for dir in ["metadata-golden-head", "metadata-golden-v1.10.0"] {
        for e in std::fs::read_dir(format!("{corpus}/{dir}")).unwrap() {
            let p = e.unwrap().path();
            let md: Value = read_yaml(&std::fs::read_to_string(&p).unwrap());
            let net = &md["network"];
            // Every golden uses 5-octet test MACs: strict rejects, naming the MAC field.
            let e = render(net, "networkd").unwrap_err();
            assert!(e.place.contains("macaddress"), "{}: {e}", p.display());
            for renderer in ["networkd", "netplan"] {
                let r = render_with(net, renderer, true)
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                assert!(!r.files.is_empty());
            }
            let n = net["ethernets"].as_object().unwrap().len();
            let r = render_with(net, "networkd", true).unwrap();
            assert_eq!(
                r.files
                    .iter()
                    .filter(|f| f.path.ends_with(".network"))
                    .count(),
                n
            );
        }
    }
}

#[test]
fn empty_config_renders_nothing() {
    assert!(render(&Value::Null, "networkd").unwrap().is_empty());
    assert!(
        render(&json!({"version": 2}), "networkd")
            .unwrap()
            .is_empty()
    );
}
