"""cloud-init's surface on a nodeagent node, judged by the real thing (issue 44).

Started by tests/cloud-init-surface/run (root, in a private mount namespace). For each oracle
root (Debian 12's cloud-init 22.4, Debian 13's 25.1) and each outcome (done, running, error,
degraded, disabled) it boots two fresh overlays of that root on the same NoCloud seed, chrooted
in private UTS and network namespaces as tests/conformance does: one with real cloud-init's
stages, one with nodeagent's two units' commands and nodeagent's `cloud-init` command in place
of cloud-init's. In each, tests/cloud-init-surface/probe asks the root's `cloud-init` what
people and tools ask it (status in every format, --wait across the end of a boot, query,
schema, analyze, single, collect-logs, --version, an unknown subcommand) and keeps the files
they read (/run/cloud-init, /var/lib/cloud, /var/log/cloud-init*.log). Then it compares, per
outcome: exit codes, the JSON keys and value types of `status --format json` and of the status
and result files, the key lines of `status --long`, file modes and owners, and runs real
cloud-init's own `status` reader on nodeagent's files (it must reach the same status, exit
code and errors). Prints one line per comparison and exits 1 on a difference that is not
listed in EXPECTED below with its reason.
"""

import json
import os
import re
import shutil
import sys
import time

from harness import TESTS, conformance as cf

HERE = os.path.join(TESTS, "cloud-init-surface")  # probe, systemctl

META = "instance-id: iid-surface-1\nlocal-hostname: surface\n"
OK_RUNCMD = "runcmd:\n  - echo surface-runcmd-output\n"
USERDATA = {
    "done": "#cloud-config\n" + OK_RUNCMD,
    "running": "#cloud-config\n" + OK_RUNCMD,
    "disabled": "#cloud-config\n" + OK_RUNCMD,
    # The last runcmd item fails: cloud-init's scripts_user fails (error), nodeagent fails.
    "error": "#cloud-config\nruncmd:\n  - echo before-the-failure\n  - exit 3\n",
    # A key no module knows: cloud-init's schema check warns (25.1: degraded), nodeagent warns
    # with `compat: true` (its strict default refuses the document).
    "degraded": "#cloud-config\nno_such_module_key: 1\n" + OK_RUNCMD,
}
OUTCOMES = ["done", "running", "error", "degraded", "disabled"]
ORACLES = {"bookworm": "22.4", "trixie": "25.1"}


def case_layer(work, name, agent, outcome):
    layer = os.path.join(work, "layer-" + name)
    seed = os.path.join(layer, "var/lib/cloud/seed/nocloud")
    os.makedirs(seed)
    with open(os.path.join(seed, "meta-data"), "w") as f:
        f.write(META)
    with open(os.path.join(seed, "user-data"), "w") as f:
        f.write(USERDATA[outcome])
    os.makedirs(os.path.join(layer, "conformance"))
    shutil.copy(os.path.join(HERE, "probe"), os.path.join(layer, "conformance/drive"))
    # usr/bin only: /bin is the root's link to it (merged /usr); a directory here would hide it.
    os.makedirs(os.path.join(layer, "usr/bin"), exist_ok=True)
    shutil.copy(os.path.join(HERE, "systemctl"), os.path.join(layer, "usr/bin/systemctl"))
    if agent == "cloud-init":
        # Modules that only warn about this chroot (no disk to grow, no ssh-keygen's entropy
        # here): off, so that `done` is done. The outcomes come from the user-data alone.
        os.makedirs(os.path.join(layer, "etc/cloud/cloud.cfg.d"), exist_ok=True)
        with open(os.path.join(layer, "etc/cloud/cloud.cfg.d/98-surface.cfg"), "w") as f:
            f.write("growpart: {mode: 'off'}\nresize_rootfs: false\nssh_genkeytypes: []\n")
    if agent == "cloud-init" and outcome == "disabled":
        os.makedirs(os.path.join(layer, "etc/cloud"), exist_ok=True)
        open(os.path.join(layer, "etc/cloud/cloud-init.disabled"), "w").close()
    if agent == "nodeagent":
        os.makedirs(os.path.join(layer, "etc/nodeagent"))
        if outcome == "disabled":
            open(os.path.join(layer, "etc/nodeagent/disabled"), "w").close()
        # The same modules off as for cloud-init (they only warn about this chroot).
        with open(os.path.join(layer, "etc/nodeagent/config.yaml"), "w") as f:
            f.write("growpart: {mode: 'off'}\nresize_rootfs: false\n")
            if outcome == "degraded":
                f.write("compat: true\n")
    return layer


def boot(work, common, rootfs, agent, outcome, tag):
    name = f"{tag}-{agent}-{outcome}"
    layer = case_layer(work, name, agent, outcome)
    root = cf.Root(work, name, [layer, common, rootfs], without_cloud_init=(agent == "nodeagent"))
    if agent == "nodeagent":
        os.symlink("/usr/local/bin/nodeagent", root.m + "/usr/bin/cloud-init")
    ok = root.drive(f"{agent} {outcome}", timeout=300)
    return root, ok


def collect(root, dest):
    src = os.path.join(root.m, "conformance/out")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest, symlinks=True)


# --- what is compared ------------------------------------------------------------------------

class Facts:
    """One probe's answers (tests/cloud-init-surface/probe's /conformance/out)."""

    def __init__(self, d):
        self.d = d

    def text(self, name, ext="out"):
        try:
            return open(os.path.join(self.d, f"{name}.{ext}"), encoding="utf-8", errors="replace").read()
        except FileNotFoundError:
            return None

    def rc(self, name):
        t = self.text(name, "rc")
        return int(t) if t and t.strip().lstrip("-").isdigit() else None

    def json(self, name):
        try:
            return json.loads(self.text(name) or "")
        except ValueError:
            return None

    def file_json(self, path):
        try:
            return json.load(open(os.path.join(self.d, "files", path.replace("/", "_"))))
        except (OSError, ValueError):
            return None

    def stat(self):
        """{path: 'type mode owner group -> target'} of the files the probe looked at."""
        out = {}
        try:
            lines = open(os.path.join(self.d, "stat")).read().splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            path, _, rest = line.partition(" ")
            out[path] = rest.strip()
        return out


TIMES = {"start", "finished"}


def shape(v, key=None):
    """The JSON value's shape: keys and value types, recursively (times: number or null)."""
    if key in TIMES:
        return "time"
    # Which messages a stage logged as recoverable is content (the levels are compared as
    # values); its type is a mapping of level names to lists of strings.
    if key == "recoverable_errors" and isinstance(v, dict):
        return "levels"
    if isinstance(v, dict):
        return {k: shape(x, k) for k, x in v.items()}
    if isinstance(v, list):
        return ["list", sorted({json.dumps(shape(x)) for x in v})] if v else ["list"]
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return "string"


def shape_diff(a, b, where=""):
    """Where the shapes of two JSON values differ (paths), empty when the same."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in b:
                out.append(f"{where}.{k}: only cloud-init's")
            elif k not in a:
                out.append(f"{where}.{k}: only nodeagent's")
            else:
                out += shape_diff(a[k], b[k], f"{where}.{k}")
        return out
    # A list's items are compared where both have some (an empty list holds no type).
    if isinstance(a, list) and isinstance(b, list) and (len(a) == 1 or len(b) == 1):
        return []
    return [] if a == b else [f"{where}: {json.dumps(a)} vs {json.dumps(b)}"]


def long_keys(text):
    """The keys `status --long` prints, in order (not the tab-indented items)."""
    return [l.split(":")[0] for l in (text or "").splitlines() if l and not l.startswith("\t") and ":" in l
            and not l.startswith(("WARNING:", "ERROR:", "DEPRECATED:"))]


# Differences from real cloud-init that are meant, each with its reason. Key: (oracle version,
# check); value: the reason. A check not listed must be the same.
EXPECTED = {
    ("22.4", "status --format json: shape"):
        "22.4's document (_schema_version, schemas, no extended_status, recoverable_errors or "
        "stage entries); nodeagent prints 25.1's",
    ("22.4", "status --long: keys"): "22.4 prints no extended_status, errors, recoverable_errors",
    ("22.4", "degraded: exit codes"):
        "22.4 has no degraded state (recoverable errors came in 23.4): exit 0 there, 2 in 25.1",
    ("22.4", "status.json: shape"): "22.4's stages have no recoverable_errors, times are epoch "
        "seconds, and it keeps a modules-init entry",
    ("22.4", "schema --config-file: output"): "22.4 says `Valid cloud-config: FILE`, 25.1 `Valid schema FILE`",
    ("22.4", "files: modes"): "22.4 makes cloud-init.log 0644, 25.1 0640",
    ("22.4", "status --format yaml: shape"): "as the JSON document",
    ("22.4", "done: collect-logs: files a collector looks for"):
        "22.4's tarball has the two logs at its top, 25.1's (and nodeagent's) under var/log/",
    ("22.4", "degraded: status --format json: values"):
        "22.4 has no recoverable_errors; nodeagent's warning is one (WARNING), as in 25.1",
    ("22.4", "degraded: cloud-init's own status reader on nodeagent's files"):
        "22.4's reader knows no degraded state: exit 0 where 25.1's (and nodeagent's) is 2",
    ("25.1", "error: status --format json: values"):
        "cloud-init logs a failed module again as two WARNINGs (recoverable_errors); nodeagent "
        "records the failure once, in errors",
    ("22.4", "instance-data.json: keys"):
        "merged_cfg is cloud-init's own system configuration (/etc/cloud/cloud.cfg), which a "
        "nodeagent node does not have",
    ("25.1", "instance-data.json: keys"):
        "merged_cfg and merged_system_cfg are cloud-init's own system configuration "
        "(/etc/cloud/cloud.cfg), which a nodeagent node does not have",
}


class Report:
    def __init__(self):
        self.rows = []   # (oracle, outcome, check, verdict, detail)
        self.unexpected = []

    def check(self, oracle, outcome, check, diffs):
        """`diffs` empty: the same. Else a difference: expected when EXPECTED lists it."""
        key = (oracle, check) if (oracle, check) in EXPECTED else (oracle, f"{outcome}: {check}")
        if not diffs:
            verdict = "same"
        elif key in EXPECTED:
            verdict = "expected difference: " + EXPECTED[key]
        else:
            verdict = "DIFFERENT"
            self.unexpected.append(f"{oracle} {outcome} {check}: {'; '.join(diffs)[:400]}")
        self.rows.append((oracle, outcome, check, verdict, "; ".join(diffs)[:300]))


def compare(rep, oracle, outcome, real, ours):
    """Every comparison of one outcome between cloud-init's root and nodeagent's."""
    ck = lambda name, diffs: rep.check(oracle, outcome, name, diffs)  # noqa: E731
    codes = [f"{n}: {real.rc(n)} vs {ours.rc(n)}" for n in ("status", "long", "json", "yaml", "tabular")
             if real.rc(n) != ours.rc(n)]
    ck("exit codes", codes)
    ck("status (tabular)", [] if real.text("status") == ours.text("status") else
       [f"{real.text('status')!r} vs {ours.text('status')!r}"])
    rj, oj = real.json("json"), ours.json("json")
    if rj is None or oj is None:
        ck("status --format json: parses", [f"cloud-init {rj is not None}, nodeagent {oj is not None}"])
        return
    ck("status --format json: shape", shape_diff(shape(rj), shape(oj)))
    same_values = [f"{k}: {rj.get(k)!r} vs {oj.get(k)!r}" for k in ("status", "extended_status", "stage")
                   if k in rj and rj.get(k) != oj.get(k)]
    same_values += [] if bool(rj.get("errors")) == bool(oj.get("errors")) else ["errors: one side has some"]
    same_values += [] if sorted(rj.get("recoverable_errors") or {}) == sorted(oj.get("recoverable_errors") or {}) \
        else [f"recoverable_errors levels: {sorted(rj.get('recoverable_errors') or {})} vs "
              f"{sorted(oj.get('recoverable_errors') or {})}"]
    ck("status --format json: values", same_values)
    try:
        import yaml  # PyYAML, the oracle root's copy (cf.load_yaml_module)
        ry, oy = yaml.safe_load(real.text("yaml")), yaml.safe_load(ours.text("yaml"))
        ck("status --format yaml: shape", shape_diff(shape(ry), shape(oy)))
    except Exception as e:  # noqa: BLE001 - an unreadable document is the finding
        ck("status --format yaml: shape", [f"does not parse: {e}"])
    rk, ok = long_keys(real.text("long")), long_keys(ours.text("long"))
    ck("status --long: keys", [] if rk == ok else [f"{rk} vs {ok}"])
    if outcome == "running":
        w = []
        for n in ("running-status", "wait", "wait-json"):
            if real.rc(n) != ours.rc(n):
                w.append(f"{n} exit {real.rc(n)} vs {ours.rc(n)}")
        if (real.json("running-status") or {}).get("status") != (ours.json("running-status") or {}).get("status"):
            w.append("status while running differs")
        if not (ours.text("wait") or "").rstrip("\n").endswith("status: done"):
            w.append(f"--wait printed {ours.text('wait')!r}")
        # Both were still waiting 2 s after they started, before the boot's last stage ran.
        if (real.text("wait", "before-end") is None) != (ours.text("wait", "before-end") is None):
            w.append("one --wait returned before the boot ended")
        ck("status --wait across the end of the boot", w)
    if outcome != "disabled":
        for f in ("/var/lib/cloud/data/status.json", "/var/lib/cloud/data/result.json"):
            r, o = real.file_json(f), ours.file_json(f)
            if r is not None or o is not None:
                ck(f"{os.path.basename(f)}: shape", ["missing"] if r is None or o is None else
                   shape_diff(shape(r), shape(o)))
        r, o = real.file_json("/run/cloud-init/instance-data.json"), ours.file_json("/run/cloud-init/instance-data.json")
        ck("instance-data.json: keys", ["missing"] if r is None or o is None else
           [f"top level: {sorted(set(r) ^ set(o))}"] * (set(r) != set(o)) +
           [f"v1: {sorted(set(r['v1']) ^ set(o['v1']))}"] * (set(r.get('v1', {})) != set(o.get('v1', {}))))
        rs, os_ = real.stat(), ours.stat()
        modes = [f"{p}: {rs.get(p)} vs {os_.get(p)}" for p in sorted(rs) if p not in NOT_PROVIDED
                 and rs.get(p) != os_.get(p) and not (p == "/var/lib/cloud/instance" and
                                                       rs.get(p, "").split()[0:2] == os_.get(p, "").split()[0:2])]
        ck("files: modes", modes)
        # cloud-init's own reader on nodeagent's files reaches nodeagent's answer (22.4's
        # reader puts the errors in `detail`, as it does for its own).
        rr = ours.json("real-reader")
        keys = ("status", "extended_status", "errors", "recoverable_errors") + (("detail",) if oracle != "22.4" else ())
        ck("cloud-init's own status reader on nodeagent's files",
           ["does not parse"] if rr is None else
           [f"{k}: {rr.get(k)!r} vs {oj.get(k)!r}" for k in keys if k in rr and rr.get(k) != oj.get(k)] +
           ([f"exit {ours.rc('real-reader')} vs {ours.rc('json')}"] if ours.rc("real-reader") != ours.rc("json") else []))
    if outcome == "done":
        misc = []
        for n, want in (("version", 0), ("unknown", 2), ("query-iid", 0), ("query-none", 1), ("query-missing", 1),
                        ("user-query", 0), ("schema-good", 0), ("schema-bad", 1), ("blame", 0), ("show", 0),
                        ("single-bogus", 1), ("collect", 0)):
            if real.rc(n) != want or ours.rc(n) != want:
                misc.append(f"{n}: exit {real.rc(n)} vs {ours.rc(n)} (want {want})")
        ck("other commands: exit codes", misc)
        ck("query v1.instance_id (root and non-root)",
           [f"{n}: {real.text(n)!r} vs {ours.text(n)!r}" for n in ("query-iid", "user-query")
            if real.text(n) != ours.text(n)])
        ck("schema --config-file: output",
           [f"{n}: {real.text(n)!r} vs {ours.text(n)!r}" for n in ("schema-good", "schema-bad")
            if (real.text(n) or "").splitlines()[:1] != (ours.text(n) or "").splitlines()[:1]])
        ck("--version: form", [] if re.fullmatch(r"/\S*cloud-init \d+\.\d+\S*( .*)?\n", ours.text("version") or "")
           else [f"{ours.text('version')!r}"])
        ck("analyze show|blame: layout",
           [f"{n}: {(ours.text(n) or '').splitlines()[:1]} ... {(ours.text(n) or '').splitlines()[-1:]}"
            for n in ("show", "blame") if (ours.text(n) or "").splitlines()[:1] != ["-- Boot Record 01 --"]
            or (ours.text(n) or "").splitlines()[-1:] != ["1 boot records analyzed"]])
        rl, ol = set(tar_names(real)), set(tar_names(ours))
        ck("collect-logs: files a collector looks for", [f"missing {sorted(COLLECTED - ol)}"] if COLLECTED - ol else
           [] if COLLECTED <= rl else [f"cloud-init's lacks {sorted(COLLECTED - rl)}"])


# What the probe looked at that nodeagent does not write (docs/cloud-init-surface.md).
NOT_PROVIDED = {"/run/cloud-init/combined-cloud-config.json", "/run/cloud-init/enabled", "/run/cloud-init/cloud-id"}
# What a log collector takes from cloud-init's tarball.
COLLECTED = {"var/log/cloud-init.log", "var/log/cloud-init-output.log", "run/cloud-init/status.json",
             "run/cloud-init/result.json", "run/cloud-init/instance-data.json", "version"}


def tar_names(f):
    return [n.split("/", 1)[1] for n in (f.text("collect", "list") or "").splitlines() if "/" in n]


def main():
    nodeagent, work, facts_dir = sys.argv[1:4]
    roots = dict(a.split("=", 1) for a in sys.argv[4:])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    common = os.path.join(work, "common")
    cf.make_common_layer(common, nodeagent)
    sys.path.append(os.path.join(next(iter(roots.values())), "usr/lib/python3/dist-packages"))
    t0 = time.monotonic()
    agents = os.environ.get("SURFACE_AGENTS", "cloud-init nodeagent").split()
    for suite, rootfs in roots.items():
        for agent in agents:
            for outcome in OUTCOMES:
                t = time.monotonic()
                root, ok = boot(work, common, rootfs, agent, outcome, suite)
                collect(root, os.path.join(facts_dir, f"{suite}-{agent}-{outcome}"))
                root.drop()
                cf.say(f"{suite} {agent} {outcome}: {'ok' if ok else 'TIMEOUT'} {time.monotonic() - t:.1f}s")
    rep = Report()
    for suite in roots:
        for outcome in OUTCOMES:
            real = Facts(os.path.join(facts_dir, f"{suite}-cloud-init-{outcome}"))
            ours = Facts(os.path.join(facts_dir, f"{suite}-nodeagent-{outcome}"))
            compare(rep, ORACLES[suite], outcome, real, ours)
    for oracle, outcome, check, verdict, detail in rep.rows:
        print(f"cloud-init {oracle:4} {outcome:8} {check}: {verdict}" + (f" ({detail})" if verdict == "DIFFERENT" else ""))
    n = len(rep.rows)
    same = sum(1 for r in rep.rows if r[3] == "same")
    print(f"{n} comparisons, {same} same, {n - same - len(rep.unexpected)} expected differences, "
          f"{len(rep.unexpected)} unexpected")
    cf.say(f"cloud-init surface: {time.monotonic() - t0:.0f} s")
    return 1 if rep.unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
