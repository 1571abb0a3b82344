//! The cloud-config model (YAML 1.1 loader, typed modules) and the plan built from it.
//! First byte: bit 0 = compat. The rest: userdata text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use libnodeagent::{render::cloudconfig, source::config, source::facts, source::metadata, plan::planner};

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
    // Nothing on disk: pre-flight finds no certificates there.
    let disk = libnodeagent::plan::planner::preflight::Disk::default();
    let _ = planner::build(&planner::PlanInput {
        instance_id: "i-fuzz",
        metadata: &md,
        facts: &facts,
        config: &parsed.config,
        users: &users,
        image: &image,
        compat,
        disk: &disk,
        now: libnodeagent::pki::now(),
    });
});
