"""The conformance comparison through CAPV's transport: guestinfo, read by cloud-init's own
VMware datasource (DataSourceVMware) and by nodeagent's `vmware` transport.

    tests/harness/run vmware ROOTFS NODEAGENT WORK [CASE-SUBSTRING...]
    tests/conformance/run --vmware [CASE-SUBSTRING...]        (root; runs this for each oracle)

Each case of `vmware.list` is a case directory of tests/conformance/cases/ given to both
agents as guestinfo keys instead of a NoCloud seed: `guestinfo.metadata` is the case's
`meta-data` with its `network-config` under `network:` (as CAPV writes the network into the
metadata; as a mapping, or encoded with `network.encoding`), `guestinfo.userdata` its user-data,
`guestinfo.vendordata` its vendor-data, each with the `.encoding` the list gives (`plain`,
`base64`, `b64`, `gzip+base64`, `gz+b64`). A fake `vmware-rpctool` in the root serves them
(`info-get`, "No value found" for a key that is not set) and records every `info-set`; a fake
`dmidecode` says "VMware Virtual Platform" (this machine has no DMI), which cloud-init's
datasource requires; cloud-init's datasource list is `[VMware]`, nodeagent runs with
`--transport vmware`, as the two units (`--stage local`, `--stage main`).

Compared, besides everything conformance.py compares (conformance.compare): the instance-id
each agent settled on (cloud-init's /var/lib/cloud/data/instance-id, nodeagent's
/var/lib/nodeagent/instance-id); the instance data templates see (`v1.instance_id`,
`v1.local_hostname`, `v1.platform`, `v1.cloud_name`, and `ds.meta_data` without the host's
interface list); and what each published to the platform that CAPV reads:
`guestinfo.local-ipv4` and `guestinfo.local-ipv6` (with `addr=` a case's first NIC gets that
address and a default route, so both agents have one to publish). Not compared: nodeagent's
own keys (`guestinfo.nodeagent.*`, VM Operator's condition) and its blanking of
`guestinfo.userdata` after success (README, "Differences from cloud-init").

List line: `CASE [ud=ENC] [md=ENC] [net=ENC] [wait=ipv4] [addr=IP/PREFIX@GATEWAY]
[refused=TEXT] [expect=identical]`; `refused=` replaces the case's expected error text where the
transport names another place (`guestinfo.vendordata` for NoCloud's `vendor-data`);
`expect=identical` compares a case NoCloud refuses whose input this datasource completes (it
adds the host's `hostname` to the metadata).
"""

import base64
import concurrent.futures
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

from harness import conformance as C  # the comparison, roots and reports are conformance.py's

HERE = C.HERE  # tests/conformance: vmware.list, cases/

LIST = os.path.join(HERE, "vmware.list")
GUESTINFO = "conformance/guestinfo"  # the fake tool's store, relative to the root

FAKE_RPCTOOL = """#!/bin/sh
# Fake vmware-rpctool (tests/harness/vmware.py): guestinfo from /conformance/guestinfo,
# one file per key, printed as the real tool prints it; every info-set recorded in
# /conformance/out/guestinfo-sets (outside the compared trees) and stored.
case $1 in
  "info-get guestinfo."*)
    f=/conformance/guestinfo/${1#info-get }
    [ -f "$f" ] || { printf 'No value found' >&2; exit 1; }
    cat "$f"; echo ;;
  "info-set guestinfo."*)
    rest=${1#info-set }
    key=${rest%% *}
    mkdir -p /conformance/out
    printf '%s\\n' "$rest" >>/conformance/out/guestinfo-sets
    printf '%s' "${rest#"$key" }" >"/conformance/guestinfo/$key" ;;
  *) echo "fake vmware-rpctool: unsupported: $*" >&2; exit 1 ;;
esac
"""

FAKE_DMIDECODE = """#!/bin/sh
# Fake dmidecode (tests/harness/vmware.py): this machine has no DMI; a VMware VM says this.
case "$*" in
  *system-product-name*) echo "VMware Virtual Platform" ;;
  *system-manufacturer*) echo "VMware, Inc." ;;
  *) exit 1 ;;
esac
"""

ENCODINGS = {"plain", "base64", "b64", "gzip+base64", "gz+b64"}


def encode(data, enc):
    if enc == "plain":
        return data
    if enc in ("gzip+base64", "gz+b64"):
        data = gzip.compress(data, mtime=0)
    return base64.b64encode(data)


def parse_list():
    """[(case name, {option: value})] of vmware.list."""
    out = []
    for line in open(LIST, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, *opts = shlex.split(line)
        o = dict(x.split("=", 1) for x in opts)
        for k in ("ud", "md", "net"):
            if k in o and o[k] not in ENCODINGS:
                raise SystemExit(f"vmware.list: {name}: {k}={o[k]} is not one of {sorted(ENCODINGS)}")
        unknown = set(o) - {"ud", "md", "net", "wait", "addr", "refused", "expect"}
        if o.get("expect", "identical") != "identical":
            raise SystemExit(f"vmware.list: {name}: expect= takes `identical` only")
        if unknown:
            raise SystemExit(f"vmware.list: {name}: unknown option(s) {sorted(unknown)}")
        out.append((name, o))
    return out


def indent(text, by="  "):
    return "".join(by + l if l.strip() else l for l in text.splitlines(True))


def guestinfo_keys(case, opts):
    """{guestinfo key: bytes} for the case, as CAPV's VSphereVM extraConfig would carry them."""
    md = open(os.path.join(case.dir, "meta-data"), "rb").read().decode()
    if not md.endswith("\n"):
        md += "\n"
    if opts.get("wait"):
        md += f"wait-on-network:\n  {opts['wait']}: true\n"
    net = os.path.join(case.dir, "network-config")
    if os.path.exists(net):
        text = open(net, encoding="utf-8").read()
        if "net" in opts and opts["net"] != "plain":
            md += f"network: {encode(text.encode(), opts['net']).decode()}\nnetwork.encoding: {opts['net']}\n"
        else:
            md += "network:\n" + indent(text if text.endswith("\n") else text + "\n")
    keys = {"metadata": md.encode(), "userdata": case.userdata}
    vd = os.path.join(case.dir, "vendor-data")
    if os.path.exists(vd):
        keys["vendordata"] = open(vd, "rb").read()
    out = {}
    for key, value in keys.items():
        enc = opts.get({"metadata": "md", "userdata": "ud", "vendordata": "ud"}[key], "plain")
        out[f"guestinfo.{key}"] = encode(value, enc)
        if enc != "plain":
            out[f"guestinfo.{key}.encoding"] = enc.encode()
    return out


def make_vmware_layer(case, opts, layer):
    """The case's layer: guestinfo in the fake tool's store, the fake tools, cloud-init's
    datasource list, the transport nodeagent's drive uses, the case's pre-boot files."""
    store = os.path.join(layer, GUESTINFO)
    os.makedirs(store)
    for key, value in guestinfo_keys(case, opts).items():
        with open(os.path.join(store, key), "wb") as f:
            f.write(value)
    for rel, text in (("usr/bin/vmware-rpctool", FAKE_RPCTOOL), ("usr/sbin/dmidecode", FAKE_DMIDECODE)):
        p = os.path.join(layer, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o755)
    with open(os.path.join(layer, "conformance/transport"), "w") as f:
        f.write("vmware\n")
    cfg = os.path.join(layer, "etc/cloud/cloud.cfg.d")
    os.makedirs(cfg)
    network = "" if os.path.exists(os.path.join(case.dir, "network-config")) else C.NETWORK_OFF
    with open(os.path.join(cfg, "99-conformance.cfg"), "w") as f:
        f.write("datasource_list: [ VMware ]\n" + network + "users: []\n")
    pre = os.path.join(case.dir, "root")
    if os.path.isdir(pre):
        C.sh("cp", "-a", pre + "/.", layer)
        C.sh("chown", "-R", "root:root", layer)


class VmwareRoot(C.Root):
    """conformance.Root, with an address and a default route on the node's first NIC when
    the case asks (`addr=IP/PREFIX@GATEWAY`): what the VMware datasource and nodeagent
    publish as `guestinfo.local-ipv4` comes from the default route's device."""

    def __init__(self, *args, addr=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.addr = addr

    def drive(self, agent, timeout=600):
        if not self.addr:
            return super().drive(agent, timeout)
        ip, gw = self.addr.split("@")
        nics = list(self.nics) or [("eth0", "00:50:56:00:00:01")]
        setup = "".join(
            f"ip link add {shlex.quote(name)} address {shlex.quote(mac)} type veth "
            f"peer name zp{i} address 02:00:00:00:ff:{i:02x}\n"
            for i, (name, mac) in enumerate(nics))
        first = shlex.quote(nics[0][0])
        setup += (f"ip link set zp0 up\nip link set {first} up\nip addr add {shlex.quote(ip)} dev {first}\n"
                  f"ip route add default via {shlex.quote(gw)} dev {first} onlink\n")
        m = shlex.quote(self.m)
        script = (f"set -e\numount -l {m}/sys\nmount -t sysfs -o ro sysfs {m}/sys\n{setup}"
                  f"exec chroot {m} {' '.join(C.ENV)} /bin/sh /conformance/drive {agent}\n")
        try:
            C.sh("unshare", "--uts", "--net", "--mount", "--propagation", "private",
                 "/bin/sh", "-c", script, timeout=timeout, check=False,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return True
        except subprocess.TimeoutExpired:
            return False


def published(root):
    """{key: last value} of the guestinfo sets CAPV reads (local-ipv4, local-ipv6), and the
    other keys set (for the report)."""
    sets = C.read_text(root, "conformance/out/guestinfo-sets") or ""
    last = {}
    for line in sets.splitlines():
        key, _, value = line.partition(" ")
        last[key] = value
    capv = {k: v for k, v in last.items() if k in ("guestinfo.local-ipv4", "guestinfo.local-ipv6")}
    return capv, sorted(set(last) - set(capv))


def instance_view(root, agent):
    """The instance-id and the instance data templates see, as each agent saved them."""
    if agent == "cloud-init":
        iid = (C.read_text(root, "var/lib/cloud/data/instance-id") or "").strip()
        data = C.read_text(root, "run/cloud-init/instance-data-sensitive.json")
    else:
        iid = (C.read_text(root, "var/lib/nodeagent/instance-id") or "").strip()
        data = C.read_text(root, f"var/lib/nodeagent/instances/{iid}/instance-data-sensitive.json")
    try:
        data = json.loads(data or "{}")
    except ValueError:
        data = {}
    v1 = data.get("v1", {})
    md = dict(data.get("ds", {}).get("meta_data", {}) or {})
    # The host's interface list: each agent's own reading of the namespace's NICs (cloud-init
    # through netifaces); the addresses CAPV reads are compared as published.
    md.get("network", {}).pop("interfaces", None) if isinstance(md.get("network"), dict) else None
    return {
        "instance-id": iid,
        "v1": {k: v1.get(k) for k in ("instance_id", "local_hostname", "platform", "cloud_name")},
        "ds.meta_data": md,
    }


def compare_vmware(ci_root, na_root):
    diffs = []
    a, b = instance_view(ci_root, "cloud-init"), instance_view(na_root, "nodeagent")
    for k in a:
        if a[k] != b[k]:
            if isinstance(a[k], dict):
                for kk in sorted(set(a[k]) | set(b[k])):
                    if a[k].get(kk) != b[k].get(kk):
                        diffs.append(f"{k}.{kk}: cloud-init {a[k].get(kk)!r} vs nodeagent {b[k].get(kk)!r}")
            else:
                diffs.append(f"{k}: cloud-init {a[k]!r} vs nodeagent {b[k]!r}")
    (pa, _), (pb, others) = published(ci_root), published(na_root)
    for key in sorted(set(pa) | set(pb)):
        if pa.get(key) != pb.get(key):
            diffs.append(f"published {key}: cloud-init {pa.get(key)!r} vs nodeagent {pb.get(key)!r}")
    return diffs, others


# Differences found through this transport and kept on purpose: (pattern of a difference
# line, its short name in the summary, why). A case whose every difference is one of these is
# reported as a known difference (tests/conformance/FINDINGS.md, "Through the VMware datasource").
KNOWN = [
    (re.compile(r"(ds\.meta_data\.local-ipv6|published guestinfo\.local-ipv6): cloud-init 'fe80:[^']*' vs nodeagent None"),
     "link-local local-ipv6",
     "cloud-init's VMware datasource publishes the default-route device's only IPv6 address "
     "even when it is link-local (fe80::…%dev, of no use off the link); nodeagent publishes no "
     "link-local address"),
    (re.compile(r"ds\.meta_data\.network: cloud-init \{'config': .*\} vs nodeagent \{\}"),
     "fallback network in ds.meta_data",
     "with no network in the metadata, cloud-init's datasource stores its fallback "
     "configuration in it (a side effect of reading network_config); nodeagent's metadata stays "
     "as the platform gave it (CAPV always sends a network)"),
]


def known_reasons(diffs):
    """The short names of KNOWN when every difference is one of them, else None."""
    names = []
    for d in diffs:
        name = next((short for pattern, short, _ in KNOWN if pattern.fullmatch(d)), None)
        if name is None:
            return None
        if name not in names:
            names.append(name)
    return names


def run_vmware_case(case, opts, work, common, rootfs, detail):
    """-> (verdict, [summary lines]) as conformance.run_case, through guestinfo."""
    layer = os.path.join(work, "layer-" + case.name)
    make_vmware_layer(case, opts, layer)
    lowers = [layer, common, rootfs]
    roots = []
    try:
        if opts.get("expect") == "identical":
            case.refused = False
        if case.refused:
            if "refused" in opts:
                case.refused = opts["refused"]
            return C.refused_case(case, work, lowers, detail)
        ci = VmwareRoot(work, case.name + "-ci", lowers, disks=case.disks, nics=case.nics,
                        addr=opts.get("addr"))
        roots.append(ci)
        if not ci.drive("cloud-init"):
            return "failed", ["cloud-init did not finish within its timeout"]
        ci_state = C.end_state(ci)
        detail.append("cloud-init stages: " + " ".join(ci_state["stages"]).strip())
        log = C.read_text(ci.m, "var/log/cloud-init.log") or ""
        detail.append("cloud-init warnings:\n" + "\n".join(
            l for l in log.splitlines() if "WARNING" in l or "Traceback" in l))
        platform = json.loads(C.read_text(ci.m, "run/cloud-init/instance-data.json") or "{}").get("v1", {}).get("platform")
        if platform != "vmware":
            return "failed", ["cloud-init did not take its data from the VMware datasource "
                              f"(see {case.name}.txt: {[l for l in log.splitlines() if 'datasource' in l.lower()][-2:]})"]
        ci_result = json.loads(C.read_text(ci.m, "run/cloud-init/result.json") or "{}")
        na = VmwareRoot(work, case.name + "-nodeagent-split", lowers, without_cloud_init=True,
                        disks=case.disks, nics=case.nics, addr=opts.get("addr"))
        roots.append(na)
        ok = na.drive("nodeagent-split")
        st = C.end_state(na)
        detail.append("nodeagent-split stages: " + " ".join(st["stages"]).strip())
        detail.append(f"nodeagent-split output:\n{st['log']}")
        diffs = C.compare(ci_state, st, "nodeagent-split", detail)
        more, others = compare_vmware(ci.m, na.m)
        diffs += more
        detail.append(f"nodeagent's other guestinfo keys (not compared): {others}")
        if not ok:
            diffs.insert(0, "nodeagent did not finish within its timeout")
        failed = [s for s in st["stages"] if s and not s.endswith((" 0", " 2"))]
        if failed and not ci_result.get("v1", {}).get("errors"):
            diffs.insert(0, f"outcome: nodeagent {', '.join(failed)}; cloud-init: no errors")
    finally:
        for r in roots:
            r.drop()
        shutil.rmtree(layer, ignore_errors=True)
    if diffs and not case.known:
        reasons = known_reasons(diffs)
        if reasons:
            case.known = "; ".join(reasons)
    return ("identical" if not diffs else "different"), diffs


def follows_newer(case, oracle, lines):
    """A case's per-oracle expectation (`on VERSION: differs in WHAT[, WHAT...] (WHY)` in its
    `expect`, read by conformance.Case where it supports them): every difference is about one
    of the WHATs, nodeagent following the newer cloud-init."""
    expected = getattr(case, "differs", {}).get(oracle)
    if not expected:
        return False
    whats = expected[0]
    return all(any(w in line for w in whats) for line in lines)


def report(case, oracle, verdict, lines, detail, secs, counts, report_dir):
    """One line (and its differences) per case; counts it; writes the details."""
    name = case.name
    if verdict == "different" and follows_newer(case, oracle, lines):
        verdict = "follows"
    if verdict == "different" and case.known:
        verdict = "known"
    counts[verdict] = counts.get(verdict, 0) + 1
    if verdict in ("identical", "refused"):
        print(f"{name}: {verdict}  [{secs:.1f}s] {' '.join(lines) if verdict == 'refused' else ''}".rstrip(), flush=True)
    else:
        tag = {"follows": "follows 25.1", "known": f"DIFFERENT (known: {case.known})"}.get(verdict, verdict.upper())
        print(f"{name}: {tag}: {len(lines)} difference(s)  [{secs:.1f}s]", flush=True)
        for line in lines:
            print(f"    {line}", flush=True)
    with open(os.path.join(report_dir, name + ".txt"), "w") as f:
        f.write("\n".join(detail + ["", "summary:"] + lines) + "\n")


def main():
    rootfs, nodeagent, work = sys.argv[1:4]
    filters = sys.argv[4:]
    yaml = C.load_yaml_module(rootfs)
    cases_dir = os.path.join(HERE, "cases")
    listed = [(n, o) for n, o in parse_list() if not filters or any(f in n for f in filters)]
    for n, _ in listed:
        if not os.path.isdir(os.path.join(cases_dir, n)):
            raise SystemExit(f"vmware.list: no case {n} in {cases_dir}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    report_dir = os.path.join(os.path.dirname(work), "report-" + os.path.basename(work))
    shutil.rmtree(report_dir, ignore_errors=True)
    os.makedirs(report_dir)
    common = os.path.join(work, "common")
    C.make_common_layer(common, nodeagent)
    version = subprocess.run(["chroot", rootfs, "dpkg-query", "-W", "-f", "${Version}", "cloud-init"],
                             capture_output=True, text=True, check=True).stdout
    oracle = ".".join(version.split(".")[:2])  # 22.4, 25.1: the names the cases' expect uses
    na_version = subprocess.run([nodeagent, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"through the VMware datasource: cloud-init {version} vs {na_version}; details: {report_dir}/", flush=True)
    counts = {}
    t0 = time.monotonic()
    cases = [(C.Case(os.path.join(cases_dir, n), yaml), o) for n, o in listed]

    def one(item):
        case, opts = item
        detail = [f"case {case.name} through guestinfo {opts}, expect: {case.expect}"]
        t = time.monotonic()
        verdict, lines = run_vmware_case(case, opts, work, common, rootfs, detail)
        return verdict, lines, detail, time.monotonic() - t
    jobs = int(os.environ.get("CONFORMANCE_JOBS", max(1, (os.cpu_count() or 2) // 2)))
    unexpected = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for (case, _), (verdict, lines, detail, secs) in zip(cases, pool.map(one, cases)):
            before = dict(counts)
            report(case, oracle, verdict, lines, detail, secs, counts, report_dir)
            if any(counts.get(k, 0) != before.get(k, 0) for k in ("different", "failed")):
                unexpected.append(case.name)
    print(f"vmware, cloud-init {oracle}: {len(cases)} cases, {counts.get('identical', 0)} identical, "
          f"{counts.get('refused', 0)} refused on purpose, {counts.get('follows', 0)} follow 25.1, "
          f"{counts.get('known', 0)} known differences, "
          f"{counts.get('different', 0) + counts.get('failed', 0)} different")
    if unexpected:
        print(f"unexpected: {', '.join(unexpected)}")
    C.say(f"conformance (vmware, {oracle}): {time.monotonic() - t0:.0f} s")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
