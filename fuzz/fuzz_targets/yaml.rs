//! The one YAML entry point (`yaml::read_all`, `yaml::read_json`) and the typed readers behind
//! it (`yaml::deserialize` into untyped JSON, the image config and a kubeadm document): any
//! bytes end in a value or an error, within the bounds, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use libnodeagent::base::error::Stage;
use libnodeagent::formats::yaml;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The first byte picks the duplicate-key rule, as the readers differ in it.
    let dup = data.first().is_some_and(|b| b & 1 == 1);
    let doc = yaml::Doc::new(Stage::Usage, "fuzz").duplicate_keys(dup);
    if let Ok(nodes) = yaml::read_all(doc, text) {
        for node in &nodes {
            let _ = node.to_json();
            let _ = yaml::deserialize::<serde_json::Value>(node);
            let _ = yaml::deserialize::<libnodeagent::source::config::ImageConfig>(node);
            let _ = yaml::deserialize::<libnodeagent::kubeadm::config::JoinConfiguration>(node);
        }
    }
    let _ = yaml::read_json(doc, text);
});
