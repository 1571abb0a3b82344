//! Property tests for the template layer: arbitrary input never panics, literal text
//! passes through byte-exact, and the variable tree keeps every key.

use libnodeagent::render::template::{Header, detect, jinja_variables, render};
use proptest::prelude::*;
use serde_json::{Map, Value as Json, json};

fn vars() -> Json {
    json!({"v1": {"local_hostname": "n1"}, "ds": {"meta_data": {"hostname": "n1.example"}}})
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any text: detection and rendering return, never panic; errors name a userdata place.
    #[test]
    fn never_panics(s in "\\PC{0,200}", header in prop::sample::select(vec!["## template: jinja\n", "## template:jinja\n", "", " ## template: jinja\n"])) {
        let userdata = format!("{header}{s}");
        let _ = detect(&userdata);
        for compat in [false, true] {
            if let Err(e) = render(&userdata, &vars(), compat) {
                prop_assert!(e.place.starts_with("userdata"), "{e}");
            }
        }
    }

    /// Jinja-like fragments glued together: still no panic.
    #[test]
    fn template_soup_never_panics(parts in prop::collection::vec(prop::sample::select(vec![
        "{{", "}}", "{%", "%}", "{#", "#}", "-", "+", " if ", " for x in ", " endif ", " endfor ", "v1", ".", "[", "]",
        "'", "\"", "(", ")", "|", " upper", " default(", "nope", "local-hostname", "\n", "\r\n", " ", "x", "1", ",", "raw", "endraw",
        // Multi-byte text where the error paths and the Python string methods cut strings.
        "é", "日本", "\u{2028}", "['é']", "[\"日\"]", "ds.meta_data", ".split()", ".find('本')", "int", "'-0x1é'", "1.5e300",
    ]), 0..40)) {
        let userdata = format!("## template: jinja\n{}", parts.concat());
        for compat in [false, true] {
            if let Err(e) = render(&userdata, &vars(), compat) {
                prop_assert!(e.place.starts_with("userdata"), "{e}");
            }
        }
    }

    /// Text with no jinja delimiters and no \r comes back unchanged (header removed),
    /// trailing newlines included: cloud-init's net effect.
    #[test]
    fn literal_text_is_identity(s in "[^{\r]{0,300}") {
        let r = render(&format!("## template: jinja\n{s}"), &vars(), false).unwrap();
        prop_assert_eq!(r.text, s);
    }

    /// Every key survives conversion with its value (non-object values are copied as-is).
    #[test]
    fn variables_keep_every_key(keys in prop::collection::btree_map("[a-z0-9:._-]{1,8}", any::<i64>(), 0..12)) {
        let mut m = Map::new();
        for (k, v) in &keys {
            m.insert(format!("k{k}"), json!(v));
        }
        let v = jinja_variables(&Json::Object(m.clone()));
        let out = v.as_object().unwrap();
        for (k, val) in &m {
            prop_assert_eq!(&out[k], val);
        }
        // Aliases only add keys made of the originals' characters with operators as `_`.
        for k in out.keys() {
            prop_assert!(!k.contains(['-', '.', ':']) || m.contains_key(k), "{}", k);
        }
    }
}

#[test]
fn header_detection_examples_stay_consistent() {
    // detect() and render() agree: render only accepts what detect calls Jinja.
    for h in [
        "## template: jinja\nx",
        "##template: jinja\nx",
        "#cloud-config\n",
        "## template: jinja2\n",
    ] {
        let ok = render(h, &vars(), false).is_ok();
        assert_eq!(ok, detect(h) == Header::Jinja, "{h:?}");
    }
}
