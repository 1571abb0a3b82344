//! Metadata parsing (JSON, then YAML 1.1; network, encodings, typed keys).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(md) = libnodeagent::source::metadata::parse(text, "guestinfo.metadata") {
        // What a run does next with metadata: instance-id, instance data, local plan.
        let facts = libnodeagent::source::facts::Facts::default();
        if let Ok(iid) = libnodeagent::render::instance::instance_id(&md, &facts) {
            let _ = libnodeagent::render::instance::build(&md, &facts, "dir (guestinfo.metadata)");
            let _ = libnodeagent::plan::planner::build_local(&iid, &md, &facts, false);
        }
    }
});
