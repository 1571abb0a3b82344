//! The whole read side of a run, as `nodeagent run` does it after `gather`: metadata +
//! userdata (structure-aware, sometimes a jinja template) → instance data → render →
//! cloud-config → plan → target checks (`pipeline::prepare`, and `prepare_local`).
//! Fails (panics, so libFuzzer keeps the input) when one input costs more than the bounds
//! the README's threat model documents for the main process: PEAK_HEAP_BYTES of live heap,
//! counted by a wrapping allocator, and PIPELINE_CPU_SECS of this thread's CPU time (the
//! forked template renderer has its own limits, TEMPLATE_CPU_SECS/TEMPLATE_MEMORY_BYTES).
//! First byte: bit 0 = compat, bit 1 = jinja header, bit 2 = metadata as JSON.
#![no_main]
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use libnodeagent::source::decode::Decoded;
use libnodeagent::pipeline::{self, Inputs, Offline};
use libnodeagent::source::transport::RawData;
use nodeagent_fuzz::{cloud_config, metadata, target_view, user_db, yaml};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The documented peak-memory bound of any agent process (README, "Threat model").
const PEAK_HEAP_BYTES: usize = 256 * 1024 * 1024;
/// CPU time of one whole-pipeline input of at most libFuzzer's -max_len bytes.
const PIPELINE_CPU_SECS: f64 = 2.0;

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = LIVE.fetch_add(new - l.size(), Relaxed) + new - l.size();
                PEAK.fetch_max(now, Relaxed);
            } else {
                LIVE.fetch_sub(l.size() - new, Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut u = Unstructured::new(rest);
    let (Ok(md), Ok(cc), Ok(target), Ok(users)) = (
        metadata(&mut u),
        cloud_config(&mut u),
        target_view(&mut u),
        user_db(&mut u),
    ) else {
        return;
    };
    let md_text = if flags & 4 == 4 {
        md.to_string()
    } else {
        yaml(&md)
    };
    let mut ud_text = yaml(&cc);
    if flags & 2 == 2 {
        // A template that uses instance data the way CAPV templates do.
        ud_text = format!(
            "## template: jinja\n#cloud-config\nhostname: '{{{{ ds.meta_data.local_hostname }}}}'\n{}",
            ud_text.replace("hostname:", "x_hostname:")
        );
    } else {
        ud_text = format!("#cloud-config\n{ud_text}");
    }
    let decoded = |text: String| {
        Some(Decoded {
            text,
            warnings: Vec::new(),
        })
    };
    let inputs = Inputs {
        transport: Box::new(Offline),
        transport_log: Vec::new(),
        raw: RawData {
            metadata: decoded(md_text),
            userdata: decoded(ud_text),
            vendordata: None,
        },
        facts: Default::default(),
        image: Default::default(),
        users,
        target,
        disk: Default::default(),
        now: libnodeagent::pki::now(),
        compat: flags & 1 == 1,
        // Absent: the path probes find nothing, as on an empty root.
        root: "/nonexistent-nodeagent-fuzz-root".into(),
    };
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let t0 = thread_cpu_secs();
    let _ = pipeline::prepare_local(&inputs);
    let _ = pipeline::prepare(&inputs);
    let cpu = thread_cpu_secs() - t0;
    let peak = PEAK.load(Relaxed).saturating_sub(base);
    assert!(
        peak <= PEAK_HEAP_BYTES,
        "peak heap {peak} bytes over PEAK_HEAP_BYTES"
    );
    assert!(
        cpu <= PIPELINE_CPU_SECS,
        "{cpu:.2} s of CPU over PIPELINE_CPU_SECS"
    );
});
