//! Behaviour of the jinja layer beyond plain parity: header detection, strict vs compat
//! undefined handling, error places and messages, bounds, and the variable tree.

mod prereq;
use std::time::{Duration, Instant};

use libnodeagent::base::error::Stage;
use libnodeagent::render::template::{Header, detect, jinja_variables, render};
use serde_json::{Value as Json, json};

const CABPK_INIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/corpus/capi/cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml"
);

fn data() -> Json {
    json!({
        "ds": {"meta_data": {"hostname": "cp-abc12.example.com", "local-hostname": "cp-abc12", "network": {"a": 1}}},
        "v1": {"local-hostname": "cp-abc12", "local_hostname": "cp-abc12", "instance-id": "i-1", "instance_id": "i-1"}
    })
}

fn jinja(body: &str) -> String {
    format!("## template: jinja\n{body}")
}

// ---- header detection (cloud-init B.1 rules 1 and 2) ----

#[test]
fn header_accepted_forms() {
    for h in [
        "## template: jinja\n#cloud-config\n",
        "## Template: JINJA\n",
        "## template: jinja   \t \nx",
        "## template: jinja\r\nx",
        "## template: jinja",
    ] {
        assert_eq!(detect(h), Header::Jinja, "{h:?}");
    }
}

#[test]
fn header_not_a_template() {
    for h in [
        "#cloud-config\nhostname: x\n",
        "#!/bin/sh\necho hi\n",
        "",
        "# template notes\n",
        "## templates are fun\n",
    ] {
        assert_eq!(detect(h), Header::NotTemplate, "{h:?}");
    }
}

#[test]
fn header_typos_are_reported_not_ignored() {
    let cases = [
        ("##template: jinja\n", "not exactly"),   // fails rule 1 only
        ("## template:jinja\n", "not exactly"),   // fails rule 1 only
        ("##  template: jinja\n", "not exactly"), // fails rule 1 only
        ("## template: jinja2\n", "\"jinja2\""),  // fails rule 2 only
        ("## template: jinja extra\n", "\"jinja extra\""),
        ("\n## template: jinja\n", "very first line"), // rule 1 strips, rule 2 does not
        ("  ## template: jinja\n", "very first line"),
        ("\u{feff}## template: jinja\n", "byte-order mark"),
        ("#template: jinja\n", "not exactly"),
        ("## template : jinja\n", "not exactly"),
    ];
    for (h, why) in cases {
        match detect(h) {
            Header::LikelyTypo(msg) => assert!(msg.contains(why), "{h:?}: {msg}"),
            other => panic!("{h:?}: expected LikelyTypo, got {other:?}"),
        }
        let e = render(h, &data(), false).unwrap_err();
        assert_eq!(e.stage, Stage::Template);
        assert_eq!(e.place, "userdata line 1", "{h:?}");
    }
    let e = render("#cloud-config\n", &data(), false).unwrap_err();
    assert!(e.message.contains("not a jinja template"), "{e}");
}

// ---- the real CAPI inputs ----

#[test]
fn cabpk_init_userdata_renders_to_its_body() {
    if !prereq::corpus_present() {
        return;
    }
    let userdata = std::fs::read_to_string(CABPK_INIT).unwrap();
    assert_eq!(detect(&userdata), Header::Jinja);
    let r = render(&userdata, &data(), false).unwrap();
    let body = userdata.split_once('\n').unwrap().1;
    assert!(body.len() > 1000);
    assert_eq!(
        r.text, body,
        "no variables: output must be the body, byte for byte"
    );
    assert!(r.warnings.is_empty());
}

#[test]
fn capv_style_template_gets_instance_values() {
    // The KubeadmConfig shape CAPV's cluster-template.yaml renders into userdata.
    let body = "#cloud-config\nwrite_files: []\nruncmd:\n- hostnamectl set-hostname \"{{ ds.meta_data.hostname }}\"\n- echo \"127.0.0.1   {{ ds.meta_data.hostname }} {{ local_hostname }} localhost\" >>/etc/hosts\nkubeadm:\n  nodeRegistration:\n    name: '{{ local_hostname }}'\n";
    let r = render(&jinja(body), &data(), false).unwrap();
    assert_eq!(
        r.text,
        "#cloud-config\nwrite_files: []\nruncmd:\n- hostnamectl set-hostname \"cp-abc12.example.com\"\n- echo \"127.0.0.1   cp-abc12.example.com cp-abc12 localhost\" >>/etc/hosts\nkubeadm:\n  nodeRegistration:\n    name: 'cp-abc12'\n"
    );
}

// ---- undefined variables ----

#[test]
fn undefined_is_an_error_naming_variable_and_line() {
    for (body, var, line) in [
        ("a\nb: {{ ds.meta_data.foo }}\n", "ds.meta_data.foo", 3),
        ("{{ nope }}", "nope", 2),
        ("x\ny\nz\n{{ v1['nope'] }}", "v1['nope']", 5),
        ("{{ ds.meta_data.missing.key }}", "ds.meta_data.missing", 2), // intermediate
        ("\n{{ nope.y }}", "nope", 3),
        // Multi-byte keys: the path is cut at character boundaries, not bytes.
        ("{{ ds.meta_data['näme'] }}", "ds.meta_data['näme']", 2),
        ("é\n{{ v1['日本'].x }}", "v1['日本']", 3),
        (
            "{% for u in [{'name': 'a'}] %}\n{{ u.nme }}{% endfor %}",
            "u.nme",
            3,
        ), // a local
    ] {
        let e = render(&jinja(body), &data(), false).unwrap_err();
        assert_eq!(e.stage, Stage::Template);
        assert_eq!(e.place, format!("userdata line {line}"), "{body:?}");
        assert!(
            e.message.contains(&format!("undefined variable `{var}`")),
            "{body:?}: {e}"
        );
    }
}

#[test]
fn undefined_in_if_and_default_is_fine_in_strict_mode() {
    let r = render(&jinja("{% if nope %}x{% else %}y{% endif %}|{{ nope | default('d') }}|{{ v1.nope is defined }}"), &data(), false)
        .unwrap();
    assert_eq!(r.text, "y|d|False");
}

#[test]
fn compat_renders_placeholders_with_cloud_init_warning() {
    let r = render(
        &jinja("#cloud-config\na: {{ nope }}\nb: {{ v1.gone | upper }}\nc: {{ nope | default('ok') }}\n"),
        &data(),
        true,
    )
    .unwrap();
    assert_eq!(
        r.text,
        "#cloud-config\na: CI_MISSING_JINJA_VAR/nope\nb: CI_MISSING_JINJA_VAR/GONE\nc: ok\n"
    );
    assert_eq!(
        r.warnings,
        vec![
            "Could not render jinja template variables in file 'userdata': 'nope', 'GONE'"
                .to_string()
        ]
    );
}

#[test]
fn compat_still_fails_on_missing_intermediate() {
    let e = render(&jinja("x\n{{ ds.meta_data.missing.key }}"), &data(), true).unwrap_err();
    assert_eq!(e.place, "userdata line 3");
    assert!(
        e.message
            .contains("undefined variable `ds.meta_data.missing`"),
        "{e}"
    );
    let e = render(&jinja("{{ nope['k'] }}"), &data(), true).unwrap_err();
    assert!(e.message.contains("undefined variable `nope['k']`"), "{e}");
}

#[test]
fn hyphenated_name_gets_cloud_init_hint() {
    for compat in [false, true] {
        let e = render(
            &jinja("#cloud-config\nhostname: {{ local-hostname }}\n"),
            &data(),
            compat,
        )
        .unwrap_err();
        assert_eq!(e.place, "userdata line 3");
        assert_eq!(
            e.message,
            "Undefined jinja variable: \"local-hostname\". Jinja tried subtraction. Perhaps you meant \"local_hostname\"?"
        );
    }
}

// ---- syntax errors ----

#[test]
fn syntax_errors_use_cloud_init_format_and_line() {
    let e = render(
        &jinja("#cloud-config\nruncmd:\n- {{ v1.local_hostname \n"),
        &data(),
        false,
    )
    .unwrap_err();
    assert_eq!(e.stage, Stage::Template);
    assert_eq!(e.place, "userdata line 4");
    assert!(
        e.message
            .starts_with("Unable to parse Jinja template due to syntax error: "),
        "{e}"
    );
    // The line is named, never quoted (cloud-init quotes it; userdata lines hold secrets).
    assert!(e.message.ends_with(" on line 4"), "{e}");
    assert!(!e.message.contains("local_hostname"), "{e}");

    let e = render(&jinja("{% if true %}\nx\n"), &data(), false).unwrap_err();
    let n: usize = e
        .place
        .trim_start_matches("userdata line ")
        .parse()
        .unwrap();
    assert!(e.message.ends_with(&format!("on line {n}")), "{e}");
}

#[test]
fn syntax_error_line_is_not_quoted() {
    let e = render(
        &jinja("join: kubeadm join --token abcdef.0123456789abcdef {{ oops\n"),
        &data(),
        false,
    )
    .unwrap_err();
    assert!(
        !e.message.contains("0123456789abcdef") && !e.message.contains("kubeadm join"),
        "input line quoted: {e}"
    );
    // A password in a line the redactor has no rule for stays out too.
    let e = render(
        &jinja("chpasswd: {list: 'root:Hunter2Hunter2'} {{ oops\n"),
        &data(),
        false,
    )
    .unwrap_err();
    assert!(!e.message.contains("Hunter2"), "input line quoted: {e}");
}

#[test]
fn unknown_filter_reported_like_jinja() {
    let e = render(&jinja("a\n{{ 'x' | nosuch }}"), &data(), false).unwrap_err();
    assert_eq!(e.place, "userdata line 3");
    assert_eq!(
        e.message,
        "Unable to parse Jinja template due to syntax error: No filter named 'nosuch'. on line 3"
    );
}

// ---- bounds ----

/// CPU time of the calling thread: the machine running the tests is shared and often
/// oversubscribed, so wall time says little about how much work a render did.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn assert_fast_failure(body: &str, want: impl AsRef<str>) {
    let want = want.as_ref();
    let (wall, cpu) = (Instant::now(), thread_cpu());
    let e = render(&jinja(body), &data(), false).unwrap_err();
    let (wall, cpu) = (wall.elapsed(), thread_cpu() - cpu);
    assert!(e.message.contains(want), "{body:?}: {e}");
    assert_eq!(e.place, "userdata line 2", "{e}");
    assert!(cpu < Duration::from_secs(3), "{body:?} used {cpu:?} of CPU");
    eprintln!("{body:?}: failed after {cpu:?} CPU ({wall:?} wall): {e}");
}

#[test]
fn endless_loop_runs_out_of_fuel() {
    assert_fast_failure(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        format!(
            "work budget of {} fuel",
            libnodeagent::base::limits::TEMPLATE_FUEL
        ),
    );
}

/// One value printed again and again: the output cap (64 MiB, ~1M fuel of printing) comes
/// before fuel's 2M. Making a new 100 KB string each time would cost as much again in fuel.
#[test]
fn gigantic_output_is_capped() {
    assert_fast_failure(
        "{% set s = 'x' * 100000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
        "exceeds the 64 MiB limit",
    );
}

#[test]
fn runaway_recursion_is_stopped() {
    assert_fast_failure(
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "recursion",
    );
}

// ---- newlines ----

#[test]
fn trailing_newlines_preserved_exactly() {
    for tail in ["", "\n", "\n\n", "\n\n\n"] {
        let r = render(&jinja(&format!("x{tail}")), &data(), false).unwrap();
        assert_eq!(r.text, format!("x{tail}"));
    }
    let r = render("## template: jinja", &data(), false).unwrap();
    assert_eq!(r.text, "");
}

// ---- the variable tree (B.4) ----

#[test]
fn variables_keep_keys_and_add_operator_aliases() {
    let v = jinja_variables(&json!({
        "ds": {"meta_data": {"local-hostname": "h", "network": {"interfaces": {"by-mac": {"64:4b:f0:18:9a:21": {"ip": "x"}},
              "by-ipv4": {"192.168.0.1": {}}, "by-ipv6": {"fd8e::1": {}}}}}},
        "a//b": 1, "v1.0": 2, "x**y==z": 3, "sp ace@$!": 4, "p+q%r~s[t](u){w}>a<b=c.d:e|f,g;h": 5
    }));
    let md = &v["ds"]["meta_data"];
    assert_eq!(md["local-hostname"], "h");
    assert_eq!(md["local_hostname"], "h");
    let ifs = &md["network"]["interfaces"];
    assert!(ifs["by-mac"]["64:4b:f0:18:9a:21"].is_object());
    assert_eq!(ifs["by_mac"]["64_4b_f0_18_9a_21"]["ip"], "x");
    assert!(ifs["by_ipv4"]["192_168_0_1"].is_object());
    assert!(ifs["by_ipv6"]["fd8e__1"].is_object());
    assert_eq!(v["a_b"], 1, "`//` is one operator");
    assert_eq!(v["v1_0"], 2);
    assert_eq!(v["x_y_z"], 3);
    assert_eq!(v["sp ace@$!"], 4);
    assert_eq!(
        v.as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("sp"))
            .count(),
        1,
        "no alias for space/@/$/!"
    );
    assert_eq!(v["p_q_r_s_t__u__w__a_b_c_d_e_f_g_h"], 5);
}

#[test]
fn version_keys_are_promoted_in_sorted_order() {
    let v = jinja_variables(&json!({
        "v2": {"instance_id": "two", "only2": 2},
        "v1": {"instance_id": "one", "local-hostname": "h"},
        "instance_id": "top",
        "zz": "z",
        "v10": "not a dict",
        "nested": {"v3": {"deep": true}}
    }));
    // Sorted: instance_id (top), nested, v1, v10, v2, zz: v1 overwrites the top-level key, v2 overwrites v1.
    assert_eq!(v["instance_id"], "two");
    assert_eq!(v["only2"], 2);
    assert_eq!(
        v["local_hostname"], "h",
        "children's aliases are promoted too"
    );
    assert_eq!(v["local-hostname"], "h");
    assert_eq!(v["v1"]["instance_id"], "one");
    assert_eq!(v["v10"], "not a dict");
    assert_eq!(
        v["nested"]["deep"], true,
        "promotion applies at every level"
    );
}

#[test]
fn real_underscore_key_beats_generated_alias() {
    // `-` sorts before `_`: the real `foo_bar` is written after the alias of `foo-bar`.
    let v = jinja_variables(&json!({"foo_bar": "real", "foo-bar": "dash"}));
    assert_eq!(v["foo_bar"], "real");
    assert_eq!(v["foo-bar"], "dash");
    // A promoted v1 child loses against a later-sorted top-level key, wins over an earlier one.
    let v = jinja_variables(&json!({"v1": {"a": "v1", "zz": "v1"}, "a": "top", "zz": "top"}));
    assert_eq!(v["a"], "v1");
    assert_eq!(v["zz"], "top");
    // Key order is cloud-init's: sorted, each alias right after its key.
    let v = jinja_variables(&json!({"b-c": 1, "a": 2}));
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["a", "b-c", "b_c"]);
}

// ---- what cloud-init would do with the rendered part (B.3) ----

#[test]
fn warns_when_cloud_init_would_not_pass_the_result_on() {
    let r = render(
        &jinja("{% if false %}#cloud-config{% endif %}"),
        &data(),
        false,
    )
    .unwrap();
    assert_eq!(r.text, "");
    assert_eq!(
        r.warnings,
        ["rendered user-data is empty: cloud-init skips this part"]
    );
    let r = render(&jinja("#cloud-config-archive\n- x\n"), &data(), false).unwrap();
    assert!(
        r.warnings[0].contains("text/cloud-config-archive"),
        "{:?}",
        r.warnings
    );
    for ok in [
        "#cloud-config\n",
        "  #!/bin/bash\necho\n",
        "#cloud-boothook\n",
    ] {
        let r = render(&jinja(ok), &data(), false).unwrap();
        assert!(r.warnings.is_empty(), "{ok:?}: {:?}", r.warnings);
    }
}

#[test]
fn do_statement_needs_a_call() {
    assert_eq!(
        render(&jinja("{% do v1.get('x') %}ok"), &data(), false)
            .unwrap()
            .text,
        "ok"
    );
    let e = render(&jinja("\n{% do 1 + 1 %}"), &data(), false).unwrap_err();
    assert_eq!(e.place, "userdata line 3");
    assert!(e.message.contains("only accepts a call"), "{e}");
}

#[test]
fn deep_nesting_fails_cleanly_on_a_small_stack() {
    // Runs on a 2 MiB stack (a tokio worker's size): parser and engine depth limits must
    // turn absurd nesting into errors, never a stack overflow.
    let t = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let n = 5000;
            let cases = [
                format!("{{{{ {}1{} }}}}", "(".repeat(n), ")".repeat(n)),
                format!("{{{{ {}1{} }}}}", "[".repeat(n), "]".repeat(n)),
                format!("{}x{}", "{% if true %}".repeat(n), "{% endif %}".repeat(n)),
                format!(
                    "{}x{}",
                    "{% for i in [1] %}".repeat(n),
                    "{% endfor %}".repeat(n)
                ),
                "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}".to_string(),
            ];
            cases
                .iter()
                .map(|body| render(&jinja(body), &data(), false).map(|r| r.text.len()))
                .collect::<Vec<_>>()
        })
        .unwrap();
    for (i, r) in t
        .join()
        .expect("render overflowed its stack")
        .into_iter()
        .enumerate()
    {
        let e = r.expect_err("absurd nesting must be refused");
        assert_eq!(e.stage, Stage::Template, "case {i}");
        assert!(e.place.starts_with("userdata line"), "case {i}: {e}");
    }
}

/// Benchmark, not a timed test: `cargo test -p nodeagent --test template_render -- --ignored --nocapture bench_render`.
#[test]
#[ignore]
fn bench_render() {
    if !prereq::corpus_present() {
        return;
    }
    let cabpk = std::fs::read_to_string(CABPK_INIT).unwrap();
    let capv = jinja(
        "#cloud-config\nruncmd:\n- hostnamectl set-hostname \"{{ ds.meta_data.hostname }}\"\n- echo \"127.0.0.1 {{ ds.meta_data.hostname }} {{ local_hostname }}\" >>/etc/hosts\nname: '{{ local_hostname }}'\n",
    );
    for (name, userdata) in [
        ("cabpk-init", cabpk.as_str()),
        ("capv-style", capv.as_str()),
    ] {
        for compat in [false, true] {
            let (n, data) = (200, data());
            let (wall, cpu) = (Instant::now(), thread_cpu());
            for _ in 0..n {
                std::hint::black_box(render(userdata, &data, compat).unwrap());
            }
            let (wall, cpu) = (wall.elapsed() / n, (thread_cpu() - cpu) / n);
            println!(
                "{name} ({} bytes) compat={compat}: {cpu:?} CPU, {wall:?} wall per render",
                userdata.len()
            );
        }
    }
}

#[test]
fn sandbox_exposes_only_the_variables() {
    // No file access (include/import/extends), no Python internals, no context dump.
    for body in [
        "{% include '/etc/shadow' %}",
        "{% import '/etc/passwd' as p %}",
        "{% extends '/etc/hostname' %}",
        "{{ ''.__class__.__mro__ }}",
        "{{ v1.__class__ }}",
        "{{ debug() }}",
    ] {
        for compat in [false, true] {
            match render(&jinja(body), &data(), compat) {
                Err(e) => assert_eq!(e.place, "userdata line 2", "{body:?}: {e}"),
                Ok(r) => assert!(
                    r.text.starts_with("CI_MISSING_JINJA_VAR/") && compat,
                    "{body:?} rendered {:?}",
                    r.text
                ),
            }
        }
    }
}

#[test]
fn default_filter_keywords_like_jinja() {
    let r = render(
        &jinja("{{ '' | default('e', boolean=true) }}|{{ '' | default('e', boolean=false) }}|{{ nope | default(default_value='k') }}"),
        &data(),
        false,
    )
    .unwrap();
    assert_eq!(r.text, "e||k");
}

/// The Python string methods and `int` on multi-byte text: positions count characters (as
/// Python's do), and no byte offset falls inside a character.
#[test]
fn python_string_methods_count_characters() {
    let body = "{{ 'ä b  日本'.split() | join('|') }} {{ 'aé日本x'.find('本') }} {{ 'é'.find('x') }} {{ ' -0x1f '|int(base=16) }} {{ '+12'|int }}";
    let r = render(&jinja(body), &data(), false).unwrap();
    assert_eq!(r.text.trim_end(), "ä|b|日本 3 -1 -31 12", "{r:?}");
}
