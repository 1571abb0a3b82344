//! Metadata parsing (JSON, then YAML 1.1; network, encodings, typed keys).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(md) = nodeagent::metadata::parse(text, "guestinfo.metadata") {
        // What a run does next with metadata: instance-id, instance data, local plan.
        let facts = nodeagent::facts::Facts::default();
        if let Ok(iid) = nodeagent::instance::instance_id(&md, &facts) {
            let _ = nodeagent::instance::build(&md, &facts, "dir (guestinfo.metadata)");
            let _ = nodeagent::planner::build_local(&iid, &md, &facts, false);
        }
    }
});
