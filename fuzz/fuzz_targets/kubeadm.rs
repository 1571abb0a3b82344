//! The kubeadm configuration parser (multi-document, v1beta3/v1beta4, strict), and the
//! runcmd recogniser that leads to it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cfg) = libnodeagent::kubeadm::config::parse(text, "/run/kubeadm/kubeadm.yaml") {
        let _ = format!("{cfg:?}");
    }
    let _ = libnodeagent::kubeadm::recognise(text);
});
