//! Template rendering with a fuzzer-chosen template and instance data.
//! Input: flags byte (bit 0 = compat), template body, NUL, instance-data JSON.
#![no_main]
use libfuzzer_sys::fuzz_target;
use libnodeagent::base::limits::MAX_RENDERED_BYTES;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (body, json) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &b""[..]),
    };
    let Ok(body) = std::str::from_utf8(body) else {
        return;
    };
    let vars: serde_json::Value = serde_json::from_slice(json)
        .unwrap_or_else(|_| serde_json::json!({"v1": {"local_hostname": "node1"}, "ds": {}}));
    let compat = flags & 1 == 1;
    let userdata = format!("## template: jinja\n{body}");
    let _ = libnodeagent::render::template::detect(body);
    if let Ok(r) = libnodeagent::render::template::render(&userdata, &vars, compat) {
        assert!(r.text.len() <= MAX_RENDERED_BYTES + 1);
    }
});
