//! Render parity with cloud-init: every case is rendered by `template::render` and by
//! cloud-init's own user-data jinja path, live: `tests/template_data/cloudinit_templater.py`
//! runs in a Debian cloud-init root (`tests/cloud-init-root`), chrooted, and sends each case
//! through cloud-init's `JinjaTemplatePartHandler` (its `cloudinit.templater`, its variable
//! conversion, its sub-handlers). Outputs must be byte-identical, warnings and the decision to
//! pass a part on must agree, syntax errors must name the same user-data line.
//!
//! Two oracles: Debian 12's cloud-init 22.4 and Debian 13's 25.1. Where they disagree,
//! nodeagent follows 25.1 (what current images ship); the 22.4 test accepts exactly those
//! cases and counts them.
//!
//! Regression rows, not the oracle: `tests/template_data/golden.json` keeps 25.1's results
//! (each rendered text as its SHA-256, `sha256:HEX`: the shipped templates name distribution
//! mirrors, and the project keeps no copy of those), so the comparison also runs without root
//! or the roots (`render_matches_stored_rows`); the 25.1 test fails when they are stale.
//! Regenerate: `TMPL_PARITY_REGEN=1 cargo test -p nodeagent --test template_parity -- 25_1`.

mod prereq;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use libnodeagent::render::template::{Header, detect, render};
use serde_json::{Value as Json, json};

/// Templates minijinja cannot render like jinja2; `render` must fail on them with the
/// userdata line (tested), never produce different text.
const KNOWN_DIVERGENCES: &[(&str, &str)] = &[
    (
        "own:percent-format",
        "Python `%` string formatting: minijinja has no such operator; use `| format(...)`",
    ),
    (
        "own:compat-index-out-of-range",
        "compat: a list index past the end is an error, not a CI_MISSING_JINJA_VAR/5 placeholder",
    ),
    (
        "own:compat-attr-of-string",
        "compat: an attribute of a string is an error, not a CI_MISSING_JINJA_VAR/foo placeholder",
    ),
];

/// Templates where minijinja renders differently from jinja2 and we cannot intercept it:
/// (case, our exact output, why). The test pins both sides so any change is noticed.
const KNOWN_SILENT: &[(&str, &str, &str)] = &[
    (
        "own:range-print",
        "[0, 1, 2]\n",
        "printing range(): jinja prints `range(0, 3)`, minijinja has no range type",
    ),
    (
        "own:tuple-print",
        "[1, 2]\n",
        "printing a tuple literal: minijinja has no tuples (jinja: `(1, 2)`)",
    ),
    (
        "own:dictsort-value",
        "[['b', 1], ['a', 2]]\n",
        "printing dictsort pairs: tuples in jinja, lists in minijinja",
    ),
    (
        "own:concat-floats",
        "n10000000000000000.0 n2.0 n0.00000015 n[1, 'a'] n{'k': True}\n",
        "`~` uses minijinja's float formatting: no exponent form (jinja: 1e+16, 1.5e-07)",
    ),
    (
        "own:loop-break",
        "012\n",
        "`{% break %}`/`{% continue %}` work here; cloud-init has no loopcontrols extension and rejects them",
    ),
];

/// How our warning about a part cloud-init would not pass on starts.
const SKIP_WARNING: &str = "rendered user-data is";

const CORPUS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/corpus/cloud-init-examples"
);

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/template_data")
}

/// Instance data shaped like cloud-init's instance-data-sensitive.json on a CAPV VM.
fn vmware_data() -> Json {
    json!({
        "base64_encoded_keys": [],
        "ds": {
            "_doc": "EXPERIMENTAL: The structure and format of content scoped under the 'ds' key may change in subsequent releases of cloud-init.",
            "meta_data": {
                "instance-id": "4231d7ca-5a1e-3b9f-a4b2-5f0e2c1d9a77",
                "local-hostname": "cp-abc12",
                "hostname": "cp-abc12.example.com",
                "local_hostname": "cp-abc12.example.com",
                "local-ipv4": "10.0.0.5",
                "local-ipv6": "fd8e::5",
                "network": {"interfaces": {
                    "by-mac": {"00:50:56:aa:bb:cc": {"ipv4": [{"addr": "10.0.0.5", "netmask": "255.255.255.0"}]}},
                    "by-ipv4": {"10.0.0.5": {"mac": "00:50:56:aa:bb:cc", "netmask": "255.255.255.0"}},
                    "by-ipv6": {"fd8e::5": {"mac": "00:50:56:aa:bb:cc"}}
                }},
                "public-keys": ["ssh-ed25519 AAAAC3Nza test@example"],
                "wait-on-network": {"ipv4": true, "ipv6": false}
            }
        },
        "sys_info": {"dist": ["ubuntu", "22.04", "jammy"], "platform": "Linux", "python": "3.10.12",
                     "release": "5.15.0-91-generic", "system": "Linux", "variant": "ubuntu",
                     "uname": ["Linux", "cp-abc12", "5.15.0-91-generic", "#101-Ubuntu", "x86_64", "x86_64"]},
        "v1": {
            "_beta_keys": ["subplatform"],
            "availability-zone": null, "availability_zone": null,
            "cloud-name": "vmware", "cloud_name": "vmware", "cloud_id": "vmware",
            "distro": "ubuntu", "distro_release": "jammy", "distro_version": "22.04",
            "instance-id": "4231d7ca-5a1e-3b9f-a4b2-5f0e2c1d9a77", "instance_id": "4231d7ca-5a1e-3b9f-a4b2-5f0e2c1d9a77",
            "kernel_release": "5.15.0-91-generic",
            "local-hostname": "cp-abc12", "local_hostname": "cp-abc12",
            "machine": "x86_64", "platform": "vmware", "public_ssh_keys": ["ssh-ed25519 AAAAC3Nza test@example"],
            "python_version": "3.10.12", "region": null, "subplatform": "guestinfo",
            "system_platform": "Linux-5.15.0-91-generic-x86_64-with-glibc2.35", "variant": "ubuntu"
        },
        "weird": {"a//b": 1, "a-b": "dash", "a_b": "underscore", "x.y:z": 2.5, "v2": {"w": "two"}, "sp ace@$!": "kept",
                  "fd8e::1": "v6", "ratio": 0.1, "big": 1e16, "small": 0.00001, "neg": -0.0, "int": 7,
                  "flags": [true, false, null], "quote": "it's", "both": "it's \"x\"", "ctl": "tab\there\nnl\\bs"},
        "v2": {"instance_id": "from-v2"}
    })
}

/// Instance data for the cloud-init docs' examples (EC2-ish keys they reference).
fn docs_data() -> Json {
    json!({
        "ds": {"meta_data": {"public_hostname": "ec2-3-1-2-3.us-east-2.compute.amazonaws.com"}},
        "v1": {"availability-zone": "us-east-2b", "availability_zone": "us-east-2b", "cloud-name": "aws",
               "cloud_name": "aws", "instance-id": "i-0123456789abcdef0", "instance_id": "i-0123456789abcdef0",
               "region": "us-east-2", "local-hostname": "ip-10-1-2-3", "local_hostname": "ip-10-1-2-3"}
    })
}

/// Variables the shipped cloud-init templates use (they are rendered with the same engine).
fn shipped_data() -> Json {
    json!({
        "hostname": "node1", "fqdn": "node1.example.com", "variant": "ubuntu", "codename": "jammy",
        "mirror": "http://mirror.example/ubuntu", "security": "http://security-mirror.example/ubuntu",
        "servers": ["0.pool.ntp.org", "1.pool.ntp.org"], "pools": ["pool.example.net"], "peers": ["10.0.0.2"],
        "allow": ["10.0.0.0/8"], "nameservers": ["10.0.0.53", "1.1.1.1"], "searchdomains": ["example.com", "corp"],
        "domain": "example.com", "sortlist": ["10.0.0.0/255.0.0.0"], "options": {"rotate": true, "timeout": 2},
        "flags": ["rotate"], "is_rhel": false, "is_bsd": false, "primary_key": "ABCDEF",
        "server_url": "https://chef.example.com", "node_name": "node1", "validation_name": "validator",
        "log_level": ":info", "log_location": "/var/log/chef.log", "ssl_verify_mode": ":verify_peer",
        "json_attribs": "/etc/chef/firstboot.json", "file_cache_path": "/var/cache/chef",
        "file_backup_path": "/var/backups/chef", "pid_file": "/var/run/chef.pid", "environment": "_default",
        "encrypted_data_bag_secret": "/etc/chef/encrypted_data_bag_secret",
        "show_time": true, "usernames": {"ubuntu": "ubuntu"}
    })
}

/// Hand-written tricky templates (body only; the header is added).
fn own_templates() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "vars-basic",
            "#cloud-config\nhostname: {{ v1.local_hostname }}\nfqdn: {{ ds.meta_data.hostname }}\n",
        ),
        (
            "vars-top-level-promotion",
            "{{ local_hostname }} {{ instance_id }} {{ cloud_name }} {{ platform }}\n",
        ),
        (
            "vars-v2-wins",
            "{{ instance_id }}|{{ v1.instance_id }}|{{ v2.instance_id }}\n",
        ),
        (
            "vars-subscript",
            "{{ v1['local-hostname'] }} {{ ds['meta_data']['local-ipv4'] }}\n",
        ),
        (
            "vars-aliases",
            "{{ ds.meta_data.local_ipv4 }} {{ ds.meta_data.local_ipv6 }} {{ ds.meta_data.network.interfaces.by_mac['00_50_56_aa_bb_cc'].ipv4[0].addr }}\n",
        ),
        (
            "vars-ip-alias",
            "{{ ds.meta_data.network.interfaces.by_ipv4['10_0_0_5'].mac }} {{ ds.meta_data.network.interfaces.by_ipv6.fd8e__5.mac }}\n",
        ),
        (
            "vars-collision",
            "{{ weird.a_b }} {{ weird['a-b'] }} {{ weird.a_b_c is defined }} {{ weird['a//b'] }}\n",
        ),
        (
            "vars-nested-version-promotion",
            "{{ weird.w }} {{ weird.v2.w }}\n",
        ),
        (
            "vars-operator-aliases",
            "{{ weird.x_y_z }} {{ weird.fd8e__1 }} {{ weird['sp ace@$!'] }}\n",
        ),
        (
            "print-python-repr",
            "{{ v1.public_ssh_keys }}\n{{ sys_info.dist }}\n{{ weird.flags }}\n{{ ds.meta_data['wait-on-network'] }}\n",
        ),
        (
            "print-python-floats",
            "{{ weird.ratio }} {{ weird.big }} {{ weird.small }} {{ weird.neg }} {{ weird.int }} {{ weird['x.y:z'] }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 10 // 3 }} {{ 2 ** 10 }}\n",
        ),
        (
            "print-python-str-repr",
            "{{ [weird.quote, weird.both, weird.ctl] }}\n",
        ),
        (
            "print-none-bool",
            "{{ v1.region }} {{ v1.availability_zone }} {{ true }} {{ false }} {{ none }}\n",
        ),
        ("trim-blocks", "a\n{% if true %}\nb\n{% endif %}\nc\n"),
        (
            "no-lstrip",
            "a\n    {% if true %}\n    b\n    {% endif %}\nc\n",
        ),
        (
            "whitespace-control",
            "a  \n  {%- if true -%}  \n  b  \n  {%- endif %}\n\n  c  {{- ' d ' -}}  e\n",
        ),
        ("plus-modifiers", "x\n{%+ if true +%}\ny\n{% endif +%}\nz\n"),
        ("comments", "a\n{# comment #}\nb\n{#- c2 -#}\n c\n"),
        ("trailing-none", "no newline at end"),
        ("trailing-one", "one\n"),
        ("trailing-two", "two\n\n"),
        ("trailing-three", "three\n\n\n"),
        ("trailing-block", "x\n{% if true %}\ny\n{% endif %}\n"),
        ("trailing-block-no-nl", "x\n{% if true %}\ny\n{% endif %}"),
        ("empty-body", ""),
        ("only-newline", "\n"),
        (
            "crlf",
            "#cloud-config\r\nhostname: {{ v1.local_hostname }}\r\n{% if true %}\r\nx: 1\r\n{% endif %}\r\n",
        ),
        ("lone-cr", "a\rb {{ v1.local_hostname }}\r"),
        (
            "loops",
            "{% for k in v1.public_ssh_keys %}\n- {{ loop.index }}: {{ k }}\n{% endfor %}\n{% for x in range(3) %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}\n",
        ),
        (
            "loop-else-filters",
            "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}\n{{ [3, 1, 2] | sort | join(',') }} {{ 'abc' | upper }} {{ ['a', 'b'] | length }} {{ 'a-b' | replace('-', '_') }}\n",
        ),
        (
            "filters-more",
            "{{ 'x' | default('y') }} {{ '' | default('y', true) }} {{ ' pad ' | trim }} {{ 'hello world' | title }} {{ 3.14159 | round(2) }} {{ -3 | abs }} {{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ '42' | int + 1 }}\n",
        ),
        ("indent", "key: |\n  {{ 'a\\nb\\nc' | indent(2) }}\n"),
        (
            "dictsort",
            "{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}={{ v }};{% endfor %}\n",
        ),
        (
            "items-method",
            "{% for k, v in ds.meta_data['wait-on-network'].items() %}{{ k }}={{ v }};{% endfor %}\n",
        ),
        (
            "str-methods",
            "{{ ds.meta_data.hostname.split('.')[0] }} {{ v1.local_hostname.upper() }} {{ '  x '.strip() }} {{ 'a,b,,c'.split(',') }} {{ 'a b  c'.split() }} {{ 'abc'.startswith('ab') }} {{ '-'.join(['x', 'y']) }} {{ 'aXbX'.replace('X', '.') }}\n",
        ),
        (
            "dict-get",
            "{{ v1.get('cloud_name') }} {{ v1.get('nope', 'dflt') }} {{ v1.get('nope') }}\n",
        ),
        (
            "set-and-namespace",
            "{% set h = v1.local_hostname ~ '-x' %}{{ h }}\n{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}\n",
        ),
        (
            "macro",
            "{% macro user(name, shell='/bin/bash') %}\n- name: {{ name }}\n  shell: {{ shell }}\n{% endmacro %}\nusers:\n{{ user('a') }}{{ user('b', '/bin/sh') }}",
        ),
        (
            "raw",
            "{% raw %}{{ not_a_var }} {% if %}{% endraw %}\n{{ '{{' }}x{{ '}}' }}\n",
        ),
        (
            "do-ext",
            "{% do v1.get('cloud_name') %}done\n{% set ns = namespace(l=[]) %}{% do range(2) %}ok\n",
        ),
        (
            "conditionals",
            "{% if v1.cloud_name == 'vmware' and v1.distro in ['ubuntu', 'debian'] %}\nyes\n{% elif v1.region %}\nmaybe\n{% else %}\nno\n{% endif %}\n",
        ),
        (
            "ternary-and-tests",
            "{{ 'a' if v1.region else 'b' }} {{ v1.region is none }} {{ 5 is odd }} {{ v1 is mapping }} {{ 'x' is string }}\n",
        ),
        (
            "undefined-if-default",
            "{% if nope %}x{% else %}y{% endif %} {{ nope | default('dflt') }} {{ v1.nope | default('d2') }} {{ nope is defined }}\n",
        ),
        (
            "compat-undefined-leaf",
            "a: {{ nope }}\nb: {{ v1.nope }}\nc: {{ v1['nope2'] }}\n",
        ),
        (
            "compat-undefined-filters",
            "{{ nope | upper }} {{ nope | length }} {{ nope ~ '-suffix' }}\n",
        ),
        ("compat-undefined-in-quotes", "echo '{{ nope }}'\n"),
        (
            "compat-undefined-intermediate",
            "{{ ds.meta_data.missing.key }}\n",
        ),
        ("compat-undefined-root-intermediate", "x\n{{ nope.y }}\n"),
        ("compat-hyphen", "{{ local-hostname }}\n"),
        (
            "syntax-unclosed-var",
            "line2\n{{ v1.local_hostname\nline4\n",
        ),
        ("syntax-unclosed-block", "#cloud-config\n{% if true %}\nx\n"),
        ("syntax-bad-endtag", "a\nb\n{% endfor %}\n"),
        ("syntax-bad-expr", "a\n{{ 1 + }}\n"),
        ("syntax-unknown-tag", "a\n{% frobnicate %}\n"),
        ("syntax-unknown-filter", "a\n\n{{ 'x' | nosuchfilter }}\n"),
        (
            "syntax-secret-line",
            "token: abcdef.0123456789abcdef {{ oops\n",
        ),
        (
            "unicode",
            "héllo {{ 'wörld' | upper }} ✓ {{ ['é', 'ü'] }}\n",
        ),
        (
            "long-loop-output",
            "{% for i in range(200) %}{{ i }} {% endfor %}\n",
        ),
        (
            "arith",
            "{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 % 3 }} {{ 10 / 4 }} {{ 2 ** 0.5 }} {{ 0.1 + 0.2 }} {{ 1e3 }} {{ 2 ** 100 }} {{ 1 == 1.0 }} {{ 3 | float }} {{ '3.5' | float | int }} {{ 1.0 | int }}\n",
        ),
        (
            "truthiness",
            "{% if [] %}a{% endif %}{% if {} %}b{% endif %}{% if 0.0 %}c{% endif %}{% if '0' %}d{% endif %}{% if none %}e{% endif %}{% if ' ' %}f{% endif %}\n",
        ),
        (
            "join-str",
            "{{ [1, 'a', none, true, 1.5] | join('-') }} {{ none | string }} {{ true | string }} {{ [1, 2] | string }}\n",
        ),
        ("concat-types", "{{ 'x' ~ 1 ~ 'y' }} {{ 'n' ~ 2.5 }}\n"),
        (
            "tojson",
            "{{ v1.public_ssh_keys | tojson }}\n{{ {'b': 1, 'a': [true, none, 1.5, \"<&'>\"]} | tojson }}\n{{ 'é' | tojson }}\n",
        ),
        (
            "format-filter",
            "{{ '%s-%s' | format('a', 1) }} {{ '%05d' | format(42) }}\n",
        ),
        ("percent-format", "{{ '%s is %d' % ('x', 3) }}\n"),
        (
            "slicing",
            "{{ 'abcdef'[1:3] }} {{ [1, 2, 3, 4][::-1] }} {{ [1, 2, 3][-1] }} {{ 'abc'[-2:] }}\n",
        ),
        (
            "loop-vars",
            "{% for x in ['a', 'b', 'c'] %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.length }}{{ loop.cycle('o', 'e') }};{% endfor %}\n",
        ),
        (
            "filter-block",
            "{% filter upper %}\nabc {{ v1.local_hostname }}\n{% endfilter %}\nafter\n",
        ),
        (
            "set-block",
            "{% set blk %}\nline {{ 1 + 1 }}\n{% endset %}\n[{{ blk }}]\n",
        ),
        (
            "with-block",
            "{% with a = 1, b = v1.local_hostname %}\n{{ a }} {{ b }}\n{% endwith %}\n",
        ),
        (
            "call-block",
            "{% macro wrap() %}<{{ caller() }}>{% endmacro %}\n{% call wrap() %}\ninner\n{% endcall %}\n",
        ),
        (
            "string-escapes",
            "{{ 'a\\tb' }}|{{ \"q\\\"q\" }}|{{ 'x\\ny' }}\n",
        ),
        (
            "map-select",
            "{{ ['a', 'b'] | map('upper') | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 1, 2] | unique | list }} {{ ['x', 'y'] | reverse | list }} {{ [3, 1] | max }} {{ [1, 2] | sum }}\n",
        ),
        (
            "selectattr",
            "{% for u in [{'n': 'a', 'x': true}, {'n': 'b', 'x': false}] | selectattr('x') %}{{ u.n }}{% endfor %}\n",
        ),
        (
            "title-capitalize",
            "{{ 'hello world-foo bAR' | title }} {{ 'hELLO wORLD' | capitalize }} {{ 'ß' | upper }}\n",
        ),
        (
            "dict-literal-print",
            "{{ {'b': 1, 'a': 'x'} }} {{ [{'k': none}] }} {{ [] }} {{ {} }}\n",
        ),
        (
            "nested-loops-ws",
            "{%- for a in [1, 2] %}\n  {%- for b in [3, 4] %}\n{{ a }}{{ b }}\n  {%- endfor %}\n{%- endfor %}\n",
        ),
        (
            "if-inline-ws",
            "a {% if true %}b{% endif %} c\n  {% if false %}x{% endif %}\nd\n",
        ),
        (
            "compare-chains",
            "{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 'z' not in ['a'] }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }}\n",
        ),
        (
            "int-base",
            "{{ '0x1F' | int(0, 16) }} {{ '12' | int }} {{ 'x' | int }} {{ 'x' | int(7) }}\n",
        ),
        (
            "round-modes",
            "{{ 2.5 | round }} {{ 3.14159 | round(3, 'floor') }} {{ 3.1 | round(0, 'ceil') }}\n",
        ),
        (
            "length-kinds",
            "{{ 'abc' | length }} {{ v1 | length > 3 }} {{ [] | count }}\n",
        ),
        (
            "batch-slice",
            "{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | first }}\n",
        ),
        (
            "items-filter",
            "{% for k, v in {'x': 1} | items %}{{ k }}{{ v }}{% endfor %}\n",
        ),
        ("center", "[{{ 'ab' | center(6) }}]\n"),
        (
            "comment-trim",
            "a\n{# c #}\nb\n{% if true %}{# x #}\nc\n{% endif %}\n",
        ),
        (
            "deep-index",
            "{{ ds.meta_data.network.interfaces['by-mac']['00:50:56:aa:bb:cc'].ipv4[0].netmask }}\n",
        ),
        (
            "loop-over-dict",
            "{% for k in ds.meta_data['wait-on-network'] %}{{ k }},{% endfor %}\n",
        ),
        (
            "none-default",
            "{{ none | default('x') }} {{ v1.region | default('r') }} {{ v1.region | default('r', true) }}\n",
        ),
        ("minijinja-only-filter", "a\n{{ 'a b' | split }}\n"),
        ("minijinja-only-test", "a\n{{ 'x' is safe }}\n"),
        (
            "divisibleby",
            "{{ 9 is divisibleby 3 }} {{ 10 is divisibleby(3) }} {{ -9 is divisibleby 3 }}\n",
        ),
        (
            "default-kwargs",
            "{{ '' | default('e', boolean=true) }}|{{ '' | default('e', boolean=false) }}|{{ nope | default(default_value='k') }}|{{ 0 | d('z', true) }}\n",
        ),
        (
            "compat-index-out-of-range",
            "#cloud-config\nk: {{ v1.public_ssh_keys[5] }}\n",
        ),
        (
            "compat-attr-of-string",
            "#cloud-config\nk: {{ v1.local_hostname.foo }}\n",
        ),
        (
            "concat-floats",
            "{{ 'n' ~ 1e16 }} {{ 'n' ~ 2.0 }} {{ 'n' ~ 1.5e-7 }} {{ 'n' ~ [1, 'a'] }} {{ 'n' ~ {'k': true} }}\n",
        ),
        (
            "join-floats",
            "{{ [1e16, 2.0, 1.5e-7] | join(' ') }} {{ [[1, 'a'], {'k': none}] | join(';') }}\n",
        ),
        (
            "string-filter-floats",
            "{{ 1e16 | string }} {{ 2.0 | string }} {{ [2.0] | string }} {{ 3 | string }}\n",
        ),
        (
            "compat-undefined-filters2",
            "{{ nope | int }} {{ nope | float }} {{ nope | replace('n', 'N') }} [{{ nope | center(30) }}] {{ nope | wordcount }}\n",
        ),
        (
            "compat-undefined-set",
            "{% set x = nope %}{{ x is defined }} {{ x }} {% if x %}t{% else %}f{% endif %}\n",
        ),
        (
            "compat-undefined-in-macro",
            "{% macro m() %}{{ v1.gone }}{% endmacro %}{{ m() }}\n",
        ),
        (
            "int-float-edge",
            "{{ ' 42 ' | int }} {{ '1_000' | int }} {{ '0b101' | int(0, 0) }} {{ '010' | int(0, 0) }} {{ '1e3' | int }} {{ ' 2.5 ' | float }} {{ 'inf' | float }} {{ true | int }} {{ none | int }}\n",
        ),
        (
            "tojson-indent",
            "{{ {'z': [1, {'a': none}], 'b': {}} | tojson(indent=2) }}\n{{ [] | tojson }} {{ 'emoji 😀' | tojson }}\n",
        ),
        ("concat-bool-none", "{{ 'x' ~ true ~ none }}\n"),
        ("join-bools", "{{ [true, none] | join(',') }}\n"),
        ("string-filter-list", "{{ ['a', true] | string }}\n"),
        ("range-print", "{{ range(3) }}\n"),
        ("tuple-print", "{{ (1, 2) }}\n"),
        ("replace-count", "{{ 'aaa' | replace('a', 'b', 2) }}\n"),
        ("trim-chars", "{{ 'xxhixx' | trim('x') }}\n"),
        (
            "indent-first",
            "{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}\n",
        ),
        (
            "sort-attr",
            "{{ [{'n': 'b'}, {'n': 'a'}] | sort(attribute='n') | map(attribute='n') | join }}\n",
        ),
        (
            "dictsort-value",
            "{{ {'a': 2, 'b': 1} | dictsort(by='value') }}\n",
        ),
        (
            "groupby",
            "{% for g in [{'k': 1, 'v': 'a'}, {'k': 1, 'v': 'b'}, {'k': 2, 'v': 'c'}] | groupby('k') %}{{ g.grouper }}:{{ g.list | map(attribute='v') | join }};{% endfor %}\n",
        ),
        ("list-of-string", "{{ 'abc' | list }}\n"),
        (
            "min-max-strings",
            "{{ ['b', 'A', 'c'] | min }} {{ ['b', 'A', 'c'] | max }}\n",
        ),
        (
            "float-print",
            "{{ 1.5e300 * 10 }} {{ 100000000000000000.0 }} {{ 1.0e-7 }} {{ 123456.789 }}\n",
        ),
        ("int-overflow", "{{ 9223372036854775807 + 1 }}\n"),
        ("bool-arith", "{{ true + 1 }}\n"),
        ("unicode-escape-repr", "{{ ['\\u00a0', '\\x7f', 'é'] }}\n"),
        (
            "lower-filter-nonascii",
            "{{ 'ÀÉÎ' | lower }} {{ 'straße' | upper }}\n",
        ),
        ("safe-filter", "{{ '<b>' | safe }} {{ '<b>' | e }}\n"),
        ("attr-filter", "{{ v1 | attr('cloud_name') }}\n"),
        (
            "loop-changed",
            "{% for x in [1, 1, 2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}\n",
        ),
        (
            "loop-break",
            "{% for x in range(10) %}{% if x > 2 %}{% break %}{% endif %}{{ x }}{% endfor %}\n",
        ),
        ("whitespace-var-dash", "a\n  {{- 'b' }}\n{{ 'c' -}}\n  d\n"),
        (
            "block-at-eof-crlf",
            "x\r\n{% if true %}\r\ny\r\n{% endif %}\r\n",
        ),
        (
            "compat-in-undefined",
            "{{ 'a' in nope }} {{ nope == nope }}\n",
        ),
        (
            "compat-undefined-iterate",
            "{% for x in nope %}{{ x }}{% else %}none{% endfor %}\n",
        ),
        (
            "abs-round-neg",
            "{{ -2.5 | round }} {{ 0.5 | round }} {{ 1.5 | round }}\n",
        ),
    ]
}

struct Case {
    name: String,
    userdata: String,
    data: Json,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let doc = Path::new(CORPUS).join("jinja/doc-snippets");
    let mut docs: Vec<_> = std::fs::read_dir(&doc)
        .expect("doc-snippets")
        .map(|e| e.unwrap().path())
        .collect();
    docs.sort();
    for p in docs {
        let userdata = std::fs::read_to_string(&p).unwrap();
        assert_eq!(detect(&userdata), Header::Jinja, "{}", p.display());
        out.push(Case {
            name: format!("doc:{}", p.file_name().unwrap().to_string_lossy()),
            userdata,
            data: docs_data(),
        });
    }
    for f in ["expected9.yaml", "source9-1.yaml"] {
        let userdata =
            std::fs::read_to_string(Path::new(CORPUS).join("tests-data/merge_sources").join(f))
                .unwrap();
        out.push(Case {
            name: format!("merge:{f}"),
            userdata,
            data: docs_data(),
        });
    }
    // cloud-init's own templates use `## template:jinja`, which user-data rejects (rule 1):
    // the header is normalised so the body exercises the same engine settings.
    let mut shipped: Vec<_> = std::fs::read_dir(Path::new(CORPUS).join("jinja/shipped-templates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    shipped.push(Path::new(CORPUS).join("jinja/base-config/cloud.cfg.tmpl"));
    shipped.sort();
    for p in shipped {
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            matches!(detect(&text), Header::LikelyTypo(_)),
            "{} should be a user-data typo",
            p.display()
        );
        let body = text.split_once('\n').map_or("", |(_, b)| b);
        out.push(Case {
            name: format!("shipped:{}", p.file_name().unwrap().to_string_lossy()),
            userdata: format!("## template: jinja\n{body}"),
            data: shipped_data(),
        });
    }
    for (name, body) in own_templates() {
        out.push(Case {
            name: format!("own:{name}"),
            userdata: format!("## template: jinja\n{body}"),
            data: vmware_data(),
        });
    }
    out
}

fn cases_json(cases: &[Case]) -> String {
    let v: Vec<Json> = cases
        .iter()
        .map(|c| json!({"name": c.name, "userdata": c.userdata, "data": c.data}))
        .collect();
    serde_json::to_string(&v).unwrap()
}

/// cloud-init's own results for `cases`: `cloudinit_templater.py` run by the python3 of the
/// cloud-init root `root`, chrooted into it, with a private tmpfs on its /tmp (the run writes
/// its instance data there; the cached root is never changed). Bounded: 300 s.
fn run_cloud_init(root: &Path, cases: &[Case]) -> Json {
    let script = std::fs::read_to_string(data_dir().join("cloudinit_templater.py")).unwrap();
    let mut child = Command::new("timeout")
        .args(["300", "unshare", "--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs tmpfs \"$1/tmp\" && exec chroot \"$1\" env -i \
             PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 python3 -c \"$2\"",
        )
        .arg("sh")
        .arg(root)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(cases_json(cases).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "cloud-init's templater in {} failed ({})",
        root.display(),
        out.status
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `sha256:HEX` of a rendered text, as golden.json stores it.
fn text_digest(text: &str) -> String {
    use sha2::Digest;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    )
}

/// The oracle's results with every rendered text replaced by its digest.
fn digest_texts(mut live: Json) -> Json {
    for r in live["results"].as_array_mut().into_iter().flatten() {
        if let Some(text) = r["text"].as_str() {
            r["text"] = Json::String(text_digest(text));
        }
    }
    live
}

/// What a result says of cloud-init's behaviour (not its wording: 22.4 and 25.1 word a
/// syntax error differently).
fn behaviour(r: &Json) -> [Json; 5] {
    ["name", "text", "warnings", "line", "skipped"].map(|f| match f {
        "skipped" => Json::Bool(r[f].is_string()),
        _ => r[f].clone(),
    })
}

/// Compare `template::render` with one oracle's results (texts as digests); the failures,
/// and a one-line count.
fn compare(cases: &[Case], results: &[Json], oracle: &str) -> (Vec<String>, String) {
    assert_eq!(
        results.len(),
        cases.len(),
        "{oracle}: results do not match the case list"
    );
    let mut failures = Vec::new();
    let (mut same_text, mut same_error, mut strict_same, mut known) = (0, 0, 0, 0);
    for (case, want) in cases.iter().zip(results) {
        assert_eq!(want["name"], case.name.as_str());
        let got = render(&case.userdata, &case.data, true);
        match (&want["text"], &got) {
            (want_text, Ok(r)) if KNOWN_SILENT.iter().any(|(n, _, _)| *n == case.name) => {
                let (_, ours, why) = KNOWN_SILENT
                    .iter()
                    .find(|(n, _, _)| *n == case.name)
                    .unwrap();
                assert_eq!(
                    r.text, *ours,
                    "{}: known divergence changed ({why})",
                    case.name
                );
                assert_ne!(
                    want_text.as_str(),
                    Some(text_digest(ours).as_str()),
                    "{}: no longer diverges from {oracle}",
                    case.name
                );
                known += 1;
            }
            (Json::String(text), Ok(r)) => {
                let warns: Vec<String> = serde_json::from_value(want["warnings"].clone()).unwrap();
                let (skip_warns, ours): (Vec<String>, Vec<String>) = r
                    .warnings
                    .iter()
                    .cloned()
                    .partition(|w| w.starts_with(SKIP_WARNING));
                if text_digest(&r.text) != *text || ours != warns {
                    failures.push(format!(
                        "{}: text differs\n  {oracle}: {text} {warns:?}\n  ours:   {:?} {:?}",
                        case.name, r.text, r.warnings
                    ));
                    continue;
                }
                // cloud-init drops an empty or non cloud-config/script result: we must warn.
                let cloud_init_skips = want["skipped"].is_string();
                if cloud_init_skips == skip_warns.is_empty() {
                    failures.push(format!(
                        "{}: {oracle} skipped={} but our warnings are {skip_warns:?}",
                        case.name, want["skipped"]
                    ));
                    continue;
                }
                same_text += 1;
                // Without placeholders or undefined names, strict mode must give the same bytes.
                if warns.is_empty() && !case.name.starts_with("own:compat-") {
                    match render(&case.userdata, &case.data, false) {
                        Ok(s) if text_digest(&s.text) == *text && s.warnings == r.warnings => {
                            strict_same += 1
                        }
                        other => {
                            failures.push(format!("{}: strict mode differs: {other:?}", case.name))
                        }
                    }
                } else if render(&case.userdata, &case.data, false).is_ok() {
                    failures.push(format!(
                        "{}: strict mode accepted an undefined variable",
                        case.name
                    ));
                }
            }
            (Json::String(_), Err(e)) if KNOWN_DIVERGENCES.iter().any(|(n, _)| *n == case.name) => {
                // Known engine gap: we must fail loudly with the line, never render differently.
                assert!(e.place.starts_with("userdata line "), "{}: {e}", case.name);
                known += 1;
            }
            (Json::String(text), Err(e)) => {
                failures.push(format!(
                    "{}: {oracle} renders {text:?} but we fail: {e}",
                    case.name
                ));
            }
            (Json::Null, Ok(r)) => failures.push(format!(
                "{}: {oracle} fails ({}) but we render {:?}",
                case.name, want["error"], r.text
            )),
            (Json::Null, Err(e)) => {
                // Syntax errors: the user-data line cloud-init reports, in 25.1's wording.
                if let Some(line) = want["line"].as_u64() {
                    let place = format!("userdata line {line}");
                    let msg = e.to_string();
                    if e.place != place
                        || !msg.contains("Unable to parse Jinja template due to syntax error")
                    {
                        failures.push(format!(
                            "{}: {oracle}: {}\n  ours: {msg}",
                            case.name, want["error"]
                        ));
                        continue;
                    }
                }
                same_error += 1;
            }
            _ => unreachable!(),
        }
    }
    let counts = format!(
        "{oracle}: {} cases, {same_text} byte-identical renders ({strict_same} also in strict mode), \
         {same_error} errors where cloud-init errors, {known} pinned known divergences",
        cases.len()
    );
    (failures, counts)
}

fn stored_rows() -> Json {
    let text = std::fs::read_to_string(data_dir().join("golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Regression rows: nodeagent against the stored results of cloud-init 25.1 (golden.json,
/// checked against the live oracle by `render_matches_cloud_init_25_1_templater`). Fast, and
/// runs where the cloud-init roots do not; never the oracle.
#[test]
fn render_matches_stored_rows() {
    if !prereq::corpus_present() {
        return;
    }
    let cases = cases();
    let golden = stored_rows();
    let (failures, counts) = compare(
        &cases,
        golden["results"].as_array().unwrap(),
        "stored 25.1 rows",
    );
    eprintln!("{counts}");
    assert!(
        failures.is_empty(),
        "{} parity failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The oracle nodeagent follows: Debian 13's cloud-init 25.1, live. Also keeps golden.json
/// honest (and rewrites it under `TMPL_PARITY_REGEN=1`).
#[test]
fn render_matches_cloud_init_25_1_templater() {
    if !prereq::corpus_present() {
        return;
    }
    let Some(root) = prereq::cloud_init_root("trixie") else {
        return;
    };
    let cases = cases();
    let live = digest_texts(run_cloud_init(&root, &cases));
    let golden_path = data_dir().join("golden.json");
    if std::env::var_os("TMPL_PARITY_REGEN").is_some() {
        std::fs::write(
            &golden_path,
            serde_json::to_string_pretty(&live).unwrap() + "\n",
        )
        .unwrap();
    }
    let oracle = format!("cloud-init {}", live["cloud_init"].as_str().unwrap_or("?"));
    let (failures, counts) = compare(&cases, live["results"].as_array().unwrap(), &oracle);
    eprintln!("{counts}");
    assert!(
        failures.is_empty(),
        "{} parity failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let rows = stored_rows();
    let (l, g) = (
        live["results"].as_array().unwrap(),
        rows["results"].as_array().unwrap(),
    );
    assert_eq!(
        l.len(),
        g.len(),
        "golden.json is stale: regenerate it (see file header)"
    );
    for (a, b) in l.iter().zip(g) {
        assert_eq!(
            behaviour(a),
            behaviour(b),
            "golden.json is stale against {oracle}: regenerate it (see file header)"
        );
    }
}

/// Debian 12's cloud-init 22.4, live. Where it and 25.1 (the stored rows, themselves checked
/// live) disagree, nodeagent must do what 25.1 does; every other case must match 22.4.
#[test]
fn render_matches_cloud_init_22_4_templater() {
    if !prereq::corpus_present() {
        return;
    }
    let Some(root) = prereq::cloud_init_root("bookworm") else {
        return;
    };
    let cases = cases();
    let live = digest_texts(run_cloud_init(&root, &cases));
    let oracle = format!("cloud-init {}", live["cloud_init"].as_str().unwrap_or("?"));
    let rows = stored_rows();
    let (l, g) = (
        live["results"].as_array().unwrap(),
        rows["results"].as_array().unwrap(),
    );
    assert_eq!(l.len(), g.len(), "golden.json does not match the case list");
    // Where 22.4 and 25.1 behave differently, 25.1's row is the expectation.
    let mut follows_25 = Vec::new();
    let expected: Vec<Json> = l
        .iter()
        .zip(g)
        .map(|(old, new)| {
            if behaviour(old) == behaviour(new) {
                old.clone()
            } else {
                follows_25.push(old["name"].as_str().unwrap_or("?").to_string());
                new.clone()
            }
        })
        .collect();
    let (failures, counts) = compare(&cases, &expected, &oracle);
    eprintln!(
        "{counts}; {} cases where {oracle} and 25.1 differ, nodeagent following 25.1: {}",
        follows_25.len(),
        follows_25.join(", ")
    );
    assert!(
        failures.is_empty(),
        "{} parity failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
