use super::variables::{alias, is_version_key};
use super::*;

#[test]
fn python_float_repr() {
    // Values checked against CPython 3.11 `repr(float)`.
    for (f, want) in [
        (1.0, "1.0"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e16, "1e+16"),
        (1e15, "1000000000000000.0"),
        (1.5e-5, "1.5e-05"),
        (0.0001, "0.0001"),
        (-0.0, "-0.0"),
        (123456.789, "123456.789"),
        (1.2345678901234568e17, "1.2345678901234568e+17"),
        (f64::INFINITY, "inf"),
        (2.5e-300, "2.5e-300"),
    ] {
        assert_eq!(py_float(f), want, "{f:e}");
    }
}

#[test]
fn python_splitlines() {
    assert_eq!(
        py_splitlines("a\nb\r\nc\rd\u{c}e\u{2028}f\n"),
        ["a", "b", "c", "d", "e", "f"]
    );
    assert_eq!(py_splitlines(""), Vec::<&str>::new());
    assert_eq!(py_splitlines("\n\nx"), ["", "", "x"]);
}

#[test]
fn python_repr_of_strings() {
    let r = |s: &str| {
        let mut o = String::new();
        py_repr_str(s, &mut o);
        o
    };
    assert_eq!(r("it's"), "\"it's\"");
    assert_eq!(r("it's \"x\""), "'it\\'s \"x\"'");
    assert_eq!(r("a\tb\n\\"), "'a\\tb\\n\\\\'");
    assert_eq!(r("\u{7f}\u{a0}é"), "'\\x7f\\xa0é'");
}

#[test]
fn user_data_types() {
    assert_eq!(content_type("#cloud-config\n"), Some("text/cloud-config"));
    assert_eq!(
        content_type("  #Cloud-Config-Archive\n"),
        Some("text/cloud-config-archive")
    );
    assert_eq!(content_type("#!/bin/sh"), Some("text/x-shellscript"));
    assert_eq!(
        content_type("#include-once\nx"),
        Some("text/x-include-once-url")
    );
    assert_eq!(content_type("hello"), None);
}

#[test]
fn operator_aliases() {
    assert_eq!(alias("local-hostname").as_deref(), Some("local_hostname"));
    assert_eq!(alias("a//b").as_deref(), Some("a_b"));
    assert_eq!(alias("a**b==c!=d>=e<=f").as_deref(), Some("a_b_c_d_e_f"));
    assert_eq!(alias("fd8e::1").as_deref(), Some("fd8e__1"));
    assert_eq!(alias("plain_key"), None);
    assert_eq!(alias("sp ace@$!"), None);
    assert!(is_version_key("v1") && is_version_key("v10") && is_version_key("v2\n"));
    assert!(!is_version_key("v") && !is_version_key("v1a") && !is_version_key("xv1"));
}

/// jinja2's lexer rule as first written here: at each position, every operator longest
/// first, else the character itself. The scan in `alias` must give the same names.
fn alias_by_trying_every_operator(key: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = key;
    let mut changed = false;
    'outer: while let Some(c) = rest.chars().next() {
        for op in super::variables::OPERATORS {
            if let Some(r) = rest.strip_prefix(op) {
                out.push('_');
                rest = r;
                changed = true;
                continue 'outer;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    changed.then_some(out)
}

/// cloud-init's `convert_jinja_instance_data` written as plainly as it reads (map inserts,
/// copies): the model the one-pass conversion is held to.
fn convert_model(m: &serde_json::Map<String, Json>) -> serde_json::Map<String, Json> {
    let mut out = serde_json::Map::new();
    let mut keys: Vec<&String> = m.keys().collect();
    // Python sorts str keys by code point; Rust's str order (UTF-8 bytes) is the same.
    keys.sort();
    for key in keys {
        let value = &m[key];
        if let Json::Object(child) = value {
            let converted = convert_model(child);
            if is_version_key(key) {
                out.insert(key.clone(), Json::Object(converted.clone()));
                for (k, v) in converted {
                    out.insert(k, v);
                }
            } else {
                out.insert(key.clone(), Json::Object(converted));
            }
        } else {
            out.insert(key.clone(), value.clone());
        }
        if let Some(alias) = alias(key) {
            let v = out[key.as_str()].clone();
            out.insert(alias, v);
        }
    }
    out
}

/// JSON trees whose keys collide the ways cloud-init's conversion meets: operator characters
/// (aliases), `v<digits>` keys (promoted children), and names that are both.
fn arb_tree() -> impl proptest::strategy::Strategy<Value = Json> {
    use proptest::prelude::*;
    let key = proptest::sample::select(vec![
        "a",
        "a-b",
        "a_b",
        "a.b",
        "v1",
        "v2",
        "v1\n",
        "x",
        "local-hostname",
        "local_hostname",
        "00:50",
        "00_50",
        "ds",
    ])
    .prop_map(String::from);
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        "[a-z]{0,4}".prop_map(Json::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Json::Array),
            proptest::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Json::Object(kv.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    /// The one-pass values (strict mode's, and as JSON compat mode's) are the model's converted
    /// tree, order included.
    #[test]
    fn plain_variables_are_the_converted_tree(tree in arb_tree()) {
        let one_pass = serde_json::to_string(&super::variables::plain_variables(&tree)).unwrap();
        let model = match &tree {
            Json::Object(m) => Json::Object(convert_model(m)),
            _ => Json::Object(serde_json::Map::new()),
        };
        let two_pass = serde_json::to_string(&plain_value(&model)).unwrap();
        proptest::prop_assert_eq!(one_pass, two_pass);
        // The JSON tree, order included (serde_json's map keeps it).
        let as_json = serde_json::to_string(&jinja_variables(&tree)).unwrap();
        proptest::prop_assert_eq!(as_json, serde_json::to_string(&model).unwrap());
    }

    #[test]
    fn aliases_match_trying_every_operator(key in "[-/*=!><+%~()\\[\\]{}.:|,;a1é ]{0,12}") {
        proptest::prop_assert_eq!(alias(&key), alias_by_trying_every_operator(&key));
    }
}

#[test]
fn path_walk_names_first_missing_hop() {
    let vars = serde_json::json!({"ds": {"meta_data": {"a": [{"b": 1}]}}});
    assert_eq!(
        first_missing(&vars, "ds.meta_data.x.y").as_deref(),
        Some("ds.meta_data.x")
    );
    assert_eq!(
        first_missing(&vars, "ds['meta_data'].a[0].c").as_deref(),
        Some("ds['meta_data'].a[0].c")
    );
    assert_eq!(
        first_missing(&vars, "ds.meta_data.a[3]").as_deref(),
        Some("ds.meta_data.a[3]")
    );
    assert_eq!(first_missing(&vars, "ds.meta_data.a[0].b"), None);
    assert_eq!(first_missing(&vars, "f(x).y"), None);
    assert_eq!(
        first_missing(&vars, "loopvar.x"),
        None,
        "root may be a local"
    );
}

#[test]
fn only_plain_substitutions_render_outside_the_sandbox() {
    for plain in [
        "## template: jinja\n#cloud-config\nhostname: {{ ds.meta_data.hostname }}\n",
        "## template: jinja\nx: {{-v1.instance_id-}} {{local_hostname}}\n",
        "## template: jinja\nno substitutions at all\n",
    ] {
        assert!(only_substitutes(plain), "{plain}");
    }
    for computes in [
        "## template: jinja\n{% for i in range(9) %}x{% endfor %}\n",
        "## template: jinja\n{{ a ~ a }}\n",
        "## template: jinja\n{{ a | upper }}\n",
        "## template: jinja\n{{ a[0] }}\n",
        "## template: jinja\n{{ f() }}\n",
        "## template: jinja\n{# comment #}\n",
        "## template: jinja\n{{ a.1 }}\n",
        "## template: jinja\n{{ }}\n",
        "## template: jinja\nunclosed {{ a\n",
    ] {
        assert!(!only_substitutes(computes), "{computes}");
    }
}

#[test]
fn the_in_process_path_renders_as_the_sandbox_does() {
    let data = serde_json::json!({"ds": {"meta_data": {"hostname": "n1", "local_ipv4": "10.0.0.5"}},
        "v1": {"instance_id": "i-1", "local_hostname": "n1"}});
    let text = "## template: jinja\n#cloud-config\nhostname: {{ ds.meta_data.hostname }}\n\
                ip: {{ ds.meta_data.local_ipv4 }}\nid: {{ v1.instance_id }}\n";
    assert!(only_substitutes(text));
    let bounded = render_bounded(text, &data, false).unwrap();
    assert_eq!(bounded, render_forked(text, &data, false).unwrap());
    assert!(bounded.text.contains("ip: 10.0.0.5\n"), "{}", bounded.text);
    // An undefined variable is the same error on both paths.
    let missing = "## template: jinja\nx: {{ ds.meta_data.nothere }}\n";
    assert!(only_substitutes(missing));
    assert_eq!(
        render_bounded(missing, &data, false)
            .unwrap_err()
            .to_string(),
        render_forked(missing, &data, false)
            .unwrap_err()
            .to_string()
    );
}
