//! Data that cannot even be decoded still gets a `failed` report to the platform.

use std::process::Command;

#[test]
fn undecodable_userdata_is_reported_failed_through_the_transport() {
    let t = tempfile::tempdir().unwrap();
    let (d, r) = (t.path().join("d"), t.path().join("r"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::create_dir_all(&r).unwrap();
    std::fs::write(
        d.join("guestinfo.metadata"),
        "instance-id: i-1\nlocal-hostname: n1\n",
    )
    .unwrap();
    // One data character past a multiple of four: no base64 decoder accepts it.
    std::fs::write(d.join("guestinfo.userdata"), "I2Nsb3VkLWNvbmZpZwo").unwrap();
    std::fs::write(d.join("guestinfo.userdata.encoding"), "base64").unwrap();
    let facts = t.path().join("facts.yaml");
    std::fs::write(
        &facts,
        "hostname: n1\nlocal-ipv4: 10.0.0.5\nnetwork-renderer: networkd\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args([
            "run",
            "--transport",
            &format!("dir:{}", d.display()),
            "--root",
        ])
        .arg(&r)
        .arg("--facts")
        .arg(&facts)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r.join("run/nodeagent/status.json")).unwrap())
            .unwrap();
    assert_eq!(status["phase"], "failed", "{status}");
    assert!(
        status.to_string().contains("guestinfo.userdata"),
        "the reason names the key: {status}"
    );
    let published = std::fs::read_to_string(d.join("guestinfo.nodeagent.status")).unwrap();
    assert!(published.contains("\"phase\":\"failed\""), "{published}");
    assert!(!r.join("var/lib/nodeagent").exists(), "nothing applied");
}
