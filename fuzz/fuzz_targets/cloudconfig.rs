//! The cloud-config model (YAML 1.1 loader, typed modules) and the plan built from it.
//! First byte: bit 0 = compat. The rest: userdata text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nodeagent::{cloudconfig, config, facts, metadata, planner};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let compat = flags & 1 == 1;
    let _ = cloudconfig::payload_kind(text);
    let Ok(parsed) = cloudconfig::parse(text, "userdata", compat) else {
        return;
    };
    let md = metadata::Metadata::default();
    let facts = facts::Facts::default();
    let image = config::ImageConfig::default();
    let users = planner::UserDb::default();
    // A root that does not exist: pre-flight finds no certificates on disk.
    let root = std::path::Path::new("/nonexistent-nodeagent-fuzz-root");
    let _ = planner::build(&planner::PlanInput {
        instance_id: "i-fuzz",
        metadata: &md,
        facts: &facts,
        config: &parsed.config,
        users: &users,
        image: &image,
        compat,
        root,
    });
});
