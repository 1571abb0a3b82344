//! Structure-aware: cloud-config and kubeadm documents shaped like the typed models
//! (`nodeagent_fuzz::cloud_config`, `kubeadm_yaml`), so the planner and the kubeadm
//! validator see well-formed documents with hostile values, not mostly YAML syntax errors.
//! First byte: bit 0 = compat, bit 1 = kubeadm file alone, bit 2 = JSON instead of block YAML.
#![no_main]
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use libnodeagent::{render::cloudconfig, source::config, source::facts, kubeadm, source::metadata, plan::planner};
use nodeagent_fuzz::{cloud_config, kubeadm_yaml, target_view, yaml};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut u = Unstructured::new(rest);
    let compat = flags & 1 == 1;
    if flags & 2 == 2 {
        let Ok(text) = kubeadm_yaml(&mut u) else {
            return;
        };
        if let Ok(cfg) = kubeadm::config::parse(&text, "/run/kubeadm/kubeadm.yaml") {
            let _ = format!("{cfg:?}");
        }
        return;
    }
    let Ok(doc) = cloud_config(&mut u) else {
        return;
    };
    let body = if flags & 4 == 4 {
        doc.to_string()
    } else {
        yaml(&doc)
    };
    let text = format!("#cloud-config\n{body}");
    let Ok(parsed) = cloudconfig::parse(&text, "userdata", compat) else {
        return;
    };
    let md = metadata::Metadata::default();
    let facts = facts::Facts::default();
    let image = config::ImageConfig::default();
    let users = planner::UserDb::default();
    // Nothing on disk: pre-flight finds no certificates there.
    let disk = libnodeagent::plan::planner::preflight::Disk::default();
    if let Ok(p) = planner::build(&planner::PlanInput {
        instance_id: "i-fuzz",
        metadata: &md,
        facts: &facts,
        config: &parsed.config,
        users: &users,
        image: &image,
        compat,
        disk: &disk,
        now: libnodeagent::pki::now(),
    }) {
        // The pure target checks (tools, path limits, layout arithmetic) on a made-up target.
        if let Ok(view) = target_view(&mut u) {
            let _ = planner::target::check(&p, &view, &Default::default());
        }
    }
});
