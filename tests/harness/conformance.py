"""Differential conformance test: Debian's cloud-init and nodeagent on the same NoCloud seed.

Started by tests/conformance/run (root, inside a private mount namespace) with one or more
oracles: a cloud-init root each, `NAME=ROOTFS` (22.4: Debian 12's cloud-init, driven as its
four units run it; 25.1: Debian 13's, one `cloud-init --all-stages` process that each stage
unit starts in turn, as cloud-init-main.service does). For every case directory under
tests/conformance/cases/ and every oracle it boots fresh overlays of that oracle's root:
cloud-init in one, nodeagent `--stage local` + `--stage main` in another, nodeagent
`--stage all` in a third (on every oracle but the first, `--stage all` only: the two modes
differ in nodeagent's own code, not in the image, so one image shows them); each chrooted in
private UTS and network namespaces. Then it compares each nodeagent end state with that
cloud-init's, independently of nodeagent's code:

* every file, directory and symlink under etc, run, home, root, var/lib, var/spool,
  usr/lib/modules-load.d, usr/lib/sysctl.d: type,
  mode, owner, group, sha256 (files) or target (symlinks), minus IGNORED below;
* the records of passwd, group, shadow, gshadow, field by field (the shadow last-change day is
  normalised when the two runs straddle midnight, nothing else);
* the sudo rules in effect (/etc/sudoers and /etc/sudoers.d, as sudo reads them);
* the kernel hostname at the end of the boot;
* the actions log: marker commands (`mark NAME`) and the stubbed host tools (systemctl,
  service, sysctl, swapoff, hostnamectl, mount, kubeadm), in the order they ran;
* cloud-init-per's semaphores (`bootper.NAME.FREQ`: where, and the command's exit status);
* the network configuration systemd-networkd takes from /etc/systemd/network, per interface
  (network_model: name, MTU, DHCP, addresses, routes, DNS, search domains, RA, DHCP options).

Case directory: `meta-data`, and `user-data` or `corpus` (a document of ../shared/corpus,
see corpus_userdata), optionally `vendor-data`, `network-config` (NoCloud's; network
configuration stays off for cloud-init without it), `nics` (`NAME MAC` lines: the node's
NICs), `disks`, `root/` (files present in the image before the boot), `gzip-user-data` (the
seed's user-data is gzip-compressed) and `expect`: a first
line `identical` (default), `refused: <substring of nodeagent's error>` or
`known-difference: <issue-11 item>` (also as a second line after `refused:`), then any
number of per-oracle lines `on VERSION: differs in WHAT[, WHAT...] (WHY)`: against that
oracle, every difference must be about one of the WHATs (a path such as `/etc/fstab`, or
`actions`, `hostname`, `network eth0`, `outcome`...), and there must be one; the case then
counts as `follows 25.1` for that oracle (nodeagent follows the newer cloud-init where the two
disagree, docs/parity-25.md).
"""

import concurrent.futures
import difflib
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time

from harness import REPO, TESTS

HERE = os.path.join(TESTS, "conformance")  # cases/, stub, drive
SHARED = os.path.join(REPO, "..", "shared")

# The trees compared, relative to the root.
TREES = ["etc", "run", "home", "root", "var/lib", "var/spool",
         # Reached through the image's /lib -> usr/lib link (wf-image-symlinked-dirs).
         "usr/lib/modules-load.d", "usr/lib/sysctl.d"]

# Each agent's own bookkeeping, not the node's end state. Patterns match a path relative to
# the root and everything below it.
IGNORED = [
    # cloud-init's state (instances, semaphores, handlers, scripts, the seed it read) and its
    # per-boot run directory: what nodeagent keeps in its own places below. cloud-init-per's
    # semaphores in there are compared on their own (bootper_sems).
    (r"var/lib/cloud(/.*)?", "cloud-init's own state and the seed (input)"),
    (r"run/cloud-init(/.*)?", "cloud-init's per-boot state (instance data, status, result)"),
    # nodeagent's state and status, the same role.
    (r"var/lib/nodeagent(/.*)?", "nodeagent's own state (journal, instance data)"),
    (r"run/nodeagent(/.*)?", "nodeagent's status.json and locks"),
    # Made by the harness for both, so that both agents see a systemd-booted node.
    (r"run/systemd(/system)?", "made by the harness (a systemd-booted node)"),
    # Compared as the rules sudo reads (sudo_rules): each agent names its own file
    # (90-cloud-init-users vs 90-nodeagent-<user>); their mode and owner are checked there.
    (r"etc/sudoers\.d/.+", "compared as effective sudo rules"),
    # The network configuration files: each agent names its own (10-cloud-init-eth0.network vs
    # 10-nodeagent-eth0.link + .network; cloud-init makes them systemd-network's, networkd
    # reads them as root either way); compared as the configuration networkd takes from them
    # (network_model).
    (r"etc/systemd/network/.+\.(network|link)", "compared as the effective network config"),
    # The shadow tools' lock file: both agents call useradd/groupadd; its presence depends on
    # whether one ran at all, not on the end state.
    (r"etc/\.pwd\.lock", "shadow tools' lock file"),
    # The shadow tools' backups of the previous user database: which tool ran last (useradd,
    # usermod, passwd) decides their content; the databases themselves are compared record
    # by record.
    (r"etc/(passwd|group|shadow|gshadow|subuid|subgid)-", "shadow tools' backup of the previous state"),
]
IGNORED_RE = [(re.compile(p + r"\Z"), why) for p, why in IGNORED]

# Text that names the agent itself, taken as equal (in files, before hashing), per oracle:
# cloud-init 25.1's default mount options order a mount after its network-stage unit
# (`x-systemd.after=cloud-init-network.service`, cc_mounts.py); nodeagent orders it after its
# own local-stage unit, the one that writes the network configuration (a unit a nodeagent
# image has, where cloud-init's is absent). 22.4's `x-systemd.requires=cloud-init.service` is
# a requirement, not an ordering: nodeagent follows 25.1 there (the mounts cases say so).
EQUIVALENT_TEXT = {
    "25.1": {"etc/fstab": [(b"x-systemd.after=nodeagent-local.service",
                            b"x-systemd.after=cloud-init-network.service")]},
}

# Lines equal up to what names the agent and the time it wrote them: the header of an
# /etc/hosts made by `manage_etc_hosts: localhost` (cloud-init's util.make_header).
EQUIVALENT_RE = {
    "etc/hosts": [(re.compile(rb"^# Added by (cloud-init|nodeagent) v\. \S+ on .*$", re.M), b"# Added by AGENT")],
}

# What cloud-init's ssh module leaves on every boot of this root with no ssh input (no sshd
# here, no keys given): an empty /etc/ssh and an empty /root/.ssh/authorized_keys
# (`disable_root` with no keys). Ignored only while empty: any key written is compared.
IGNORED_IF_EMPTY = ["etc/ssh", "root/.ssh/authorized_keys", "root/.ssh"]

# Queries an agent makes of systemd change nothing: not actions. Nor does nodeagent's wait
# for the container runtime before its runcmd (`systemctl start nodeagent-cri.target`,
# libnodeagent/src/apply/runtime.rs): it stands for the `After=containerd.service` that
# image-builder's drop-in gives cloud-final, which this harness does not run either.
QUERY_RE = re.compile(r"systemctl (status|show|is-active|is-enabled|is-failed|list-\S+)( |$)"
                      r"|systemctl start nodeagent-cri\.target$")

USERDB = {"etc/passwd": 0, "etc/group": 0, "etc/shadow": 0, "etc/gshadow": 0}

# Values for CAPV templates' envsubst variables (clusterctl generate fills them).
CAPV_VARS = {
    "CLUSTER_NAME": "conformance",
    "NAMESPACE": "default",
    "CONTROL_PLANE_ENDPOINT_IP": "10.0.0.10",
    "VIP_NETWORK_INTERFACE": "",
    "VSPHERE_SSH_AUTHORIZED_KEY": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGQ0TWbl6mOXg5JxcQwEKp4HXs9RF4gS5VOJeaOVvB6s capv@conformance",
    "KUBERNETES_VERSION": "v1.31.2",
}


def say(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(*argv, check=True, timeout=None, **kw):
    return subprocess.run(argv, check=check, timeout=timeout, **kw)


# --- inputs ------------------------------------------------------------------------------

def load_yaml_module(rootfs):
    """PyYAML, only to read the CAPV templates of the corpus (stdlib has no YAML parser):
    the host's, or the cloud-init root's own copy (same Debian Python)."""
    try:
        import yaml  # noqa: F401
    except ImportError:
        sys.path.append(os.path.join(rootfs, "usr/lib/python3/dist-packages"))
    import yaml
    return yaml


def kubeadm_to_marker(text):
    """CABPK's kubeadm line runs the marker instead (the conformance roots have no kubeadm: it
    compares what the two agents do, not kubeadm's effects): `mark kubeadm init
    --config ...`; the `&& echo success > ...` sentinel stays, so it is written as before."""
    out, n = re.subn(r"\bkubeadm (init|join) --config", r"mark kubeadm \1 --config", text)
    if n != 1:
        raise SystemExit(f"conformance: expected one kubeadm init|join line, found {n}")
    return out


def go_quote(s):
    """Go's %q as CABPK prints command strings (JSON escaping is the same for what CAPV's
    templates contain: quotes, backslashes, newlines; non-ASCII kept)."""
    return json.dumps(s, ensure_ascii=False)


def indent6(s):
    return "\n".join("      " + line for line in s.split("\n"))


def cabpk_userdata(spec, role, yaml):
    """A KubeadmConfigSpec rendered as CABPK's cloud-config templates do
    (../shared/formats/cluster-api.md a.1-a.6): header, write_files (user files, the kubeadm
    config, the placeholder), bootcmd, runcmd (pre, kubeadm, post), ntp, users, disk_setup,
    fs_setup, mounts. Not reproduced: the PKI files of an init (the same writes as any other
    0600/0640 file) and kubeadm's byte-exact serialisation of the config file (its content is
    opaque to both agents)."""
    out = ["## template: jinja", "#cloud-config", "", "write_files:"]
    files = list(spec.get("files") or [])
    if role == "init":
        cfg = {k: spec[k] for k in ("clusterConfiguration", "initConfiguration") if k in spec}
        kpath = "/run/kubeadm/kubeadm.yaml"
    else:
        cfg = {k: spec[k] for k in ("joinConfiguration",) if k in spec}
        kpath = "/run/kubeadm/kubeadm-join-config.yaml"
    files.append({"path": kpath, "owner": "root:root", "permissions": "0640",
                  "content": "---\n" + yaml.safe_dump(cfg, sort_keys=True)})
    for f in files:
        out.append(f"-   path: {f['path']}")
        if f.get("encoding"):
            out.append(f'    encoding: "{f["encoding"]}"')
        if f.get("owner"):
            out.append(f"    owner: {f['owner']}")
        if f.get("permissions"):
            out.append(f"    permissions: '{f['permissions']}'")
        if "append" in f:
            out.append(f"    append: {str(f['append']).lower()}")
        out.append("    content: |")
        out.append(indent6(f.get("content", "")))
    out.append("-   path: /run/cluster-api/placeholder")
    out.append("    owner: root:root")
    out.append("    permissions: '0640'")
    out.append('    content: "This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)"')
    if spec.get("bootCommands"):
        out.append("bootcmd:")
        out += ["  - " + go_quote(c) for c in spec["bootCommands"]]
    out.append("runcmd:")
    out += ["  - " + go_quote(c) for c in spec.get("preKubeadmCommands") or []]
    if role == "init":
        out.append(f"  - 'kubeadm init --config {kpath}  && echo success > /run/cluster-api/bootstrap-success.complete'")
    else:
        out.append(f"  - kubeadm join --config {kpath}  && echo success > /run/cluster-api/bootstrap-success.complete")
    out += ["  - " + go_quote(c) for c in spec.get("postKubeadmCommands") or []]
    if spec.get("ntp"):
        out.append("ntp:")
        if "enabled" in spec["ntp"]:
            out.append(f"  enabled: {str(spec['ntp']['enabled']).lower()}")
        out.append("  servers:")
        out += [f"    - {s}" for s in spec["ntp"].get("servers") or []]
    if spec.get("users"):
        out.append("users:")
        keys = [("passwd", "passwd"), ("gecos", "gecos"), ("groups", "groups"),
                ("homeDir", "homedir"), ("inactive", "inactive"),
                ("lockPassword", "lock_passwd"), ("shell", "shell"),
                ("primaryGroup", "primary_group"), ("sudo", "sudo")]
        for u in spec["users"]:
            out.append(f"  - name: {u['name']}")
            for k, ck in keys:
                if k in u:
                    v = u[k]
                    out.append(f"    {ck}: {str(v).lower() if isinstance(v, bool) else v}")
            if u.get("sshAuthorizedKeys"):
                out.append("    ssh_authorized_keys:")
                out += [f"      - {k}" for k in u["sshAuthorizedKeys"]]
    return "\n".join(out) + "\n"


def corpus_userdata(spec_line, yaml):
    """`corpus` file: `PATH` (a rendered CABPK document) or `PATH KIND ROLE` (the
    KubeadmConfigSpec of the first object of KIND in a CAPV template, rendered for ROLE
    init|join). PATH is relative to ../shared/corpus. kubeadm becomes the marker."""
    words = spec_line.split()
    path = os.path.join(SHARED, "corpus", words[0])
    text = open(path, encoding="utf-8").read()
    if len(words) == 1:
        if not text.endswith("\n"):
            text += "\n"  # the corpus copy lost CABPK's final newline (corpus README)
        return kubeadm_to_marker(text)
    kind, role = words[1], words[2]

    def envsubst(m):
        name, default = m.group(1), m.group(3)
        return CAPV_VARS.get(name, default if default is not None else "")
    text = re.sub(r"\$\{([A-Z0-9_]+)(:?=([^}]*))?\}", envsubst, text)
    for doc in yaml.safe_load_all(text):
        if doc and doc.get("kind") == kind:
            spec = doc["spec"]
            spec = spec["kubeadmConfigSpec"] if kind == "KubeadmControlPlane" else spec["template"]["spec"]
            return kubeadm_to_marker(cabpk_userdata(spec, role, yaml))
    raise SystemExit(f"conformance: no {kind} in {words[0]}")


class Case:
    def __init__(self, d, yaml):
        self.dir = d
        self.name = os.path.basename(d)
        expect = "identical"
        if os.path.exists(os.path.join(d, "expect")):
            expect = open(os.path.join(d, "expect")).read().strip()
        self.expect = expect.replace("\n", "; ")
        # `on VERSION: differs in WHAT[, WHAT...] (WHY)`: where that oracle's cloud-init and
        # the newer one disagree, and nodeagent follows the newer one.
        self.differs = {}
        lines = []
        for line in expect.splitlines():
            m = re.match(r"on (\S+): differs in (.+?) \((.+)\)\Z", line.strip())
            if m:
                self.differs[m.group(1)] = ([w.strip() for w in m.group(2).split(",")], m.group(3))
            elif line.startswith("on "):
                raise SystemExit(f"conformance: {d}/expect: `{line}`: write `on VERSION: differs in WHAT, ... (WHY)`")
            else:
                lines.append(line)
        lines = lines or ["identical"]
        self.refused = lines[0].startswith("refused:") and lines[0][len("refused:"):].strip()
        known = [l for l in lines if l.startswith("known-difference:")]
        self.known = known and known[0][len("known-difference:"):].strip()
        if not (lines == ["identical"] or self.refused or self.known) or len(lines) > 1 + bool(self.refused):
            raise SystemExit(f"conformance: {d}/expect: `identical`, `refused: TEXT` (and optionally a second line "
                             "`known-difference: ITEM`) or `known-difference: ITEM`, then `on VERSION: ...` lines")
        # `disks`: lines `NAME MIB`: a sparse file of that size behind a loop device, seen
        # in the root as /dev/NAME (see Root).
        self.disks = []
        if os.path.exists(os.path.join(d, "disks")):
            self.disks = [(l.split()[0], int(l.split()[1])) for l in open(os.path.join(d, "disks")) if l.strip()]
        # `nics`: lines `NAME MAC`: network interfaces of the node (see Root.drive).
        self.nics = []
        if os.path.exists(os.path.join(d, "nics")):
            self.nics = [tuple(l.split()[:2]) for l in open(os.path.join(d, "nics")) if l.strip()]
        cf = os.path.join(d, "corpus")
        if os.path.exists(cf):
            self.userdata = corpus_userdata(open(cf).read().strip(), yaml).encode()
        else:
            self.userdata = open(os.path.join(d, "user-data"), "rb").read()
        self.passwords = plain_passwords(self.userdata.decode("utf-8", "replace"), yaml)
        # `gzip-user-data`: the seed's user-data is the case's, gzip-compressed (as a
        # platform may deliver it, not base64-wrapped).
        if os.path.exists(os.path.join(d, "gzip-user-data")):
            self.userdata = gzip.compress(self.userdata, mtime=0)

    def make_layer(self, layer):
        """The case's layer of the root: the seed, and the case's own pre-boot files."""
        seed = os.path.join(layer, "var/lib/cloud/seed/nocloud")
        os.makedirs(seed)
        shutil.copy(os.path.join(self.dir, "meta-data"), seed)
        with open(os.path.join(seed, "user-data"), "wb") as f:
            f.write(self.userdata)
        os.chmod(os.path.join(seed, "user-data"), 0o600)
        if os.path.exists(os.path.join(self.dir, "vendor-data")):
            shutil.copy(os.path.join(self.dir, "vendor-data"), seed)
        if os.path.exists(os.path.join(self.dir, "network-config")):
            # NoCloud's network configuration: cloud-init renders it in init-local, nodeagent's
            # nocloud transport reads the same file. This case's cloud-init config (over the
            # common one) leaves network configuration on.
            shutil.copy(os.path.join(self.dir, "network-config"), seed)
            cfg = os.path.join(layer, "etc/cloud/cloud.cfg.d")
            os.makedirs(cfg, exist_ok=True)
            with open(os.path.join(cfg, "99-conformance.cfg"), "w") as f:
                f.write(CLOUD_CFG.replace(NETWORK_OFF, ""))
        pre = os.path.join(self.dir, "root")
        if os.path.isdir(pre):
            sh("cp", "-a", pre + "/.", layer)
            sh("chown", "-R", "root:root", layer)


# --- running an agent --------------------------------------------------------------------

STUBS = ["systemctl", "service", "sysctl", "swapoff", "hostnamectl", "mount", "kubeadm", "mark"]
# Where Debian has the real ones (merged /usr): shadowed too, for callers with a full path.
STUB_PATHS = {"systemctl": "usr/bin", "service": "usr/sbin", "sysctl": "usr/sbin",
              "swapoff": "usr/sbin", "hostnamectl": "usr/bin", "mount": "usr/bin",
              "kubeadm": "usr/bin", "mark": "usr/local/bin"}
# What a nodeagent image lacks: the cloud-init package's commands (its Python modules and
# /etc/cloud stay, unused; nothing of nodeagent reads them).
NODEAGENT_IMAGE_REMOVES = ["/usr/bin/cloud-init", "/usr/bin/cloud-init-per", "/usr/bin/cloud-id"]
ENV = ["env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "HOME=/root", "LANG=C.UTF-8", "TERM=dumb"]


# cloud-init's configuration in every root: NoCloud only, no network configuration unless the
# case gives a `network-config` (no network here; the nocloud transport of nodeagent reads the
# same seed). `users: []`: Debian's cloud.cfg adds a distro default user `debian` whenever
# user-data has no `users`; a node image made for nodeagent has no such notion.
NETWORK_OFF = "network: {config: disabled}\n"
CLOUD_CFG = "datasource_list: [ NoCloud ]\n" + NETWORK_OFF + "users: []\n"


def make_common_layer(layer, nodeagent):
    """What both agents' roots share on top of the pristine root: cloud-init's datasource
    config, the stubs, the driver, the nodeagent binary."""
    os.makedirs(os.path.join(layer, "etc/cloud/cloud.cfg.d"))
    with open(os.path.join(layer, "etc/cloud/cloud.cfg.d/99-conformance.cfg"), "w") as f:
        # NoCloud only, no network configuration (no network here; the nocloud transport of
        # nodeagent reads the same seed). `users: []`: Debian's cloud.cfg adds a distro
        # default user `debian` whenever user-data has no `users`; a node image made for
        # nodeagent has no such notion (FINDINGS.md, "not compared").
        f.write(CLOUD_CFG)
    for name in STUBS:
        d = os.path.join(layer, STUB_PATHS[name])
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(HERE, "stub"), os.path.join(d, name))
        os.chmod(os.path.join(d, name), 0o755)
    os.makedirs(os.path.join(layer, "conformance"))
    shutil.copy(os.path.join(HERE, "drive"), os.path.join(layer, "conformance/drive"))
    shutil.copy(nodeagent, os.path.join(layer, "usr/local/bin/nodeagent"))
    os.chmod(os.path.join(layer, "usr/local/bin/nodeagent"), 0o755)


class Root:
    """A fresh overlay of the pristine root with the given layers, /proc, a read-only /sys
    and a tmpfs /run (with /run/systemd/system, as on a systemd-booted node)."""

    def __init__(self, work, name, lowers, without_cloud_init=False, disks=(), nics=()):
        self.dir = os.path.join(work, name)
        self.nics = nics
        self.loops = []
        os.makedirs(self.dir + "/upper")
        os.makedirs(self.dir + "/work")
        os.makedirs(self.dir + "/m")
        self.m = self.dir + "/m"
        sh("mount", "-t", "overlay", "overlay", "-o",
           f"lowerdir={':'.join(lowers)},upperdir={self.dir}/upper,workdir={self.dir}/work", self.m)
        sh("mount", "-t", "proc", "proc", self.m + "/proc")
        sh("mount", "--bind", "/sys", self.m + "/sys")
        sh("mount", "-o", "remount,bind,ro", self.m + "/sys")
        sh("mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "tmpfs", self.m + "/run")
        os.makedirs(self.m + "/run/systemd/system")
        for disk, mib in disks:
            # A loop device over a sparse file of this run, as /dev/DISK in the root only (a
            # node, not the host's /dev): what an agent writes there lands in that file.
            img = f"{self.dir}/{disk}.img"
            with open(img, "wb") as f:
                f.truncate(mib << 20)
            dev = subprocess.run(["losetup", "--show", "-f", img], check=True, capture_output=True,
                                 text=True).stdout.strip()
            self.loops.append((disk, dev, img))
            os.mknod(f"{self.m}/dev/{disk}", stat.S_IFBLK | 0o660, os.stat(dev).st_rdev)
        if without_cloud_init:
            # A nodeagent image has the cloud-init package purged (README, migrating): its
            # commands are gone; nodeagent's own cloud-init-per takes that name if the
            # repository ships one (issue 11 item 4).
            for f in NODEAGENT_IMAGE_REMOVES:
                if os.path.lexists(self.m + f):
                    os.unlink(self.m + f)
            ours = os.path.join(REPO, "packaging", "cloud-init-per")
            if os.path.exists(ours):
                shutil.copy(ours, self.m + "/usr/bin/cloud-init-per")
                os.chmod(self.m + "/usr/bin/cloud-init-per", 0o755)

    def drive(self, agent, timeout=600):
        """Boots one agent: chrooted, in its own UTS and network namespaces (nothing reaches
        the host's hostname or network) and its own mount namespace, where /sys is a sysfs of
        that network namespace (so both agents see the node's NICs, not the host's); returns
        False when it hit the timeout."""
        # The case's NICs: one end of a veth pair each, with the given name and MAC (its peer
        # `zpN` stays down); they exist only in this network namespace.
        nics = "".join(
            f"ip link add {shlex.quote(name)} address {shlex.quote(mac)} type veth "
            f"peer name zp{i} address 02:00:00:00:ff:{i:02x}\n"
            for i, (name, mac) in enumerate(self.nics))
        m = shlex.quote(self.m)  # a checkout's path may hold a space
        script = (f"set -e\numount -l {m}/sys\nmount -t sysfs -o ro sysfs {m}/sys\n{nics}"
                  f"exec chroot {m} {' '.join(ENV)} /bin/sh /conformance/drive {agent}\n")
        try:
            sh("unshare", "--uts", "--net", "--mount", "--propagation", "private",
               "/bin/sh", "-c", script, timeout=timeout, check=False,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return True
        except subprocess.TimeoutExpired:
            return False

    def out(self, name):
        try:
            return open(os.path.join(self.m, "conformance/out", name), encoding="utf-8",
                        errors="replace").read()
        except FileNotFoundError:
            return ""

    def disks(self):
        """{disk: its partition table (sfdisk's dump without the random ids) and the
        signatures blkid finds on it (TYPE, LABEL, PTTYPE, USAGE; UUIDs are random)}."""
        out = {}
        for disk, _dev, img in self.loops:
            tbl = subprocess.run(["sfdisk", "--dump", img], capture_output=True, text=True).stdout
            tbl = [re.sub(r",? *uuid=[0-9A-Fa-f-]+", "", l) for l in tbl.splitlines()
                   if l.strip() and not l.startswith(("label-id:", "device:"))]
            tbl = [l.replace(img, "/dev/" + disk) for l in tbl]
            sig = subprocess.run(["blkid", "-p", "-o", "export", img], capture_output=True, text=True).stdout
            sig = [l for l in sig.splitlines() if l.split("=")[0] in ("TYPE", "LABEL", "PTTYPE", "USAGE")]
            out[disk] = {"table": tbl, "signature": sig}
        return out

    def drop(self):
        """Unmounts and removes the root, detaches its loop devices; again is a no-op."""
        if not os.path.isdir(self.dir):
            return
        for _disk, dev, _img in self.loops:
            sh("losetup", "-d", dev, check=False)
        sh("umount", "-R", self.m, check=False)
        shutil.rmtree(self.dir)


# --- end states --------------------------------------------------------------------------

def ignored(rel):
    return any(r.match(rel) for r, _ in IGNORED_RE)


# authorized_keys files: compared as sorted lines. cloud-init passes the keys through a
# Python set (distros.create_user: `setup_user_keys(set(keys), name)`), so their order is
# the set's, which changes from one process to the next (str hash randomisation); sshd reads
# the file as a set too.
UNORDERED_RE = re.compile(r"(root|home/[^/]+)/\.ssh/authorized_keys\Z")


def file_sha(p, rel="", equiv=None):
    with open(p, "rb") as f:
        data = f.read()
    for ours, theirs in (equiv or {}).get(rel, []):
        data = data.replace(ours, theirs)
    for pattern, same in EQUIVALENT_RE.get(rel, []):
        data = pattern.sub(same, data)
    if UNORDERED_RE.match(rel):
        data = b"".join(sorted(data.splitlines(True)))
    return hashlib.sha256(data).hexdigest()


def snapshot(root, equiv=None):
    """{relative path: (type, mode, uid, gid, sha256|target|'')} of the compared trees;
    `equiv`: an oracle's EQUIVALENT_TEXT."""
    out = {}
    for t in TREES:
        top = os.path.join(root, t)
        if not os.path.lexists(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            for n in dirnames + filenames + ([] if dirpath != top else [""]):
                p = os.path.join(dirpath, n) if n else dirpath
                rel = os.path.relpath(p, root)
                if ignored(rel):
                    continue
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    kind, data = "symlink", os.readlink(p)
                elif stat.S_ISREG(st.st_mode):
                    kind, data = "file", file_sha(p, rel, equiv)
                elif stat.S_ISDIR(st.st_mode):
                    kind, data = "dir", ""
                else:
                    kind, data = "special", ""
                out[rel] = (kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, data)
            dirnames[:] = [d for d in dirnames if not ignored(os.path.relpath(os.path.join(dirpath, d), root))]
    for rel in IGNORED_IF_EMPTY:
        e = out.get(rel)
        if e and (e[0] == "file" and os.path.getsize(os.path.join(root, rel)) == 0
                  or e[0] == "dir" and not any(k.startswith(rel + "/") for k in out)):
            del out[rel]
    return out


def read_text(root, rel):
    try:
        return open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
    except (FileNotFoundError, IsADirectoryError):
        return None


def userdb_records(root, rel):
    text = read_text(root, rel) or ""
    recs = {}
    for line in text.splitlines():
        if line.strip():
            f = line.split(":")
            recs[f[0]] = f
    return recs


def sudo_rules(root):
    """The rule lines sudo reads: /etc/sudoers, then /etc/sudoers.d/* in its includedir
    order (names with a `.` or ending in `~` are skipped, as sudo does), comments dropped;
    plus each sudoers.d file's mode and owner, which sudo insists on."""
    rules, files = [], []
    main = read_text(root, "etc/sudoers") or ""
    d = os.path.join(root, "etc/sudoers.d")
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    texts = [main] + [read_text(root, "etc/sudoers.d/" + n) or "" for n in names
                      if "." not in n and not n.endswith("~")]
    for n in names:
        st = os.lstat(os.path.join(d, n))
        if n != "README":
            files.append(f"{stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}")
    for t in texts:
        for line in t.splitlines():
            s = line.strip()
            if s and (not s.startswith("#") or s.startswith(("#include", "#includedir"))):
                rules.append(s)
    return rules, sorted(files)


def bootper_sems(root):
    """cloud-init-per's semaphores: {`sem/bootper.NAME.FREQ` (once, always) or
    `instances/IID/sem/bootper.NAME.instance`: the exit status recorded}. cloud-init reaches
    the instance directory through its /var/lib/cloud/instance link; a real directory there
    is listed as `instance/...`."""
    out = {}
    base = os.path.join(root, "var/lib/cloud")
    dirs = [("sem", "sem")]
    if os.path.isdir(os.path.join(base, "instances")):
        dirs += [(f"instances/{i}/sem", f"instances/{i}/sem")
                 for i in sorted(os.listdir(os.path.join(base, "instances")))]
    if os.path.isdir(os.path.join(base, "instance")) and not os.path.islink(os.path.join(base, "instance")):
        dirs.append(("instance/sem", "instance/sem"))
    for d, label in dirs:
        p = os.path.join(base, d)
        if os.path.isdir(p) and not os.path.islink(p):
            for n in sorted(os.listdir(p)):
                if n.startswith("bootper."):
                    out[f"{label}/{n}"] = (read_text(p, n) or "").split("\t")[0]
    return out


def unit_sections(text):
    """[(section, [(key, value)])] of a systemd unit-style file (sections may repeat)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            out.append((line[1:-1], []))
        elif "=" in line and out:
            k, v = line.split("=", 1)
            out[-1][1].append((k.strip(), v.strip()))
    return out


def yes_no(v):
    return {"true": "yes", "1": "yes", "on": "yes", "false": "no", "0": "no", "off": "no"}.get(v.lower(), v.lower())


def network_model(root):
    """The configuration systemd-networkd (and udev's .link handling) takes from
    /etc/systemd/network, per interface (its MAC, or its name when matched by name): the name
    it ends up with, MTU, DHCP, addresses, routes (a `Gateway=` is a default route), DNS
    servers and search domains in order, IPv6 RA and link-local settings, DHCP options,
    wake-on-LAN. Unset settings are networkd's defaults (`default`). Which file holds a
    setting, and the files' names, do not matter."""
    d = os.path.join(root, "etc/systemd/network")
    ifaces = {}
    if not os.path.isdir(d):
        return ifaces

    def entry(key):
        return ifaces.setdefault(key, {"name": None, "mtu": "default", "dhcp": "no", "addresses": [],
                                       "routes": [], "dns": [], "domains": [], "accept_ra": "default",
                                       "link_local": "default", "dhcp_options": [], "wake_on_lan": "default"})
    for n in sorted(os.listdir(d)):
        if not n.endswith((".network", ".link")):
            continue
        secs = unit_sections(read_text(d, n) or "")
        match = dict(kv for name, kvs in secs if name == "Match" for kv in kvs)
        key = (match.get("MACAddress") or match.get("OriginalName") or match.get("Name") or n).lower()
        e = entry(key)
        if n.endswith(".network") and match.get("Name"):
            e["name"] = e["name"] or match["Name"]
        for sec, kvs in secs:
            for k, v in kvs:
                if sec == "Link" and k == "Name":
                    e["name"] = v
                elif sec == "Link" and k in ("MTUBytes", "MTU"):
                    e["mtu"] = v
                elif sec == "Link" and k == "WakeOnLan":
                    e["wake_on_lan"] = v
                elif sec == "Network" and k == "DHCP":
                    e["dhcp"] = {"true": "yes", "false": "no", "both": "yes"}.get(v.lower(), v.lower())
                elif sec in ("Network", "Address") and k == "Address":
                    e["addresses"].append(v)
                elif sec == "Network" and k == "Gateway":
                    e["routes"].append(("::/0" if ":" in v else "0.0.0.0/0", v, "default"))
                elif sec == "Network" and k == "DNS":
                    e["dns"] += v.split()
                elif sec == "Network" and k == "Domains":
                    e["domains"] += v.split()
                elif sec == "Network" and k == "IPv6AcceptRA":
                    e["accept_ra"] = yes_no(v)
                elif sec == "Network" and k == "LinkLocalAddressing":
                    e["link_local"] = v
                elif sec in ("DHCPv4", "DHCPv6"):
                    e["dhcp_options"].append(f"{sec}.{k}={yes_no(v)}")
        for sec, kvs in secs:
            if sec == "Route":
                r = dict(kvs)
                gw = r.get("Gateway", "")
                dest = r.get("Destination") or ("::/0" if ":" in gw else "0.0.0.0/0")
                e["routes"].append((dest, gw, r.get("Metric", "default")))
    for e in ifaces.values():
        e["addresses"].sort()
        e["routes"].sort()
        e["dhcp_options"].sort()
        if e["link_local"] == "default":
            e["link_local"] = "ipv6"  # networkd's default
    return ifaces


def fmt_attr(e):
    kind, mode, uid, gid, data = e
    return f"{kind} {mode:04o} {uid}:{gid}"


def compare(ci, na, label, detail):
    """The differences of nodeagent's end state `na` from cloud-init's `ci`, one line each,
    naming the path and the attribute. Full text diffs go to `detail`."""
    diffs = []
    a, b = ci["tree"], na["tree"]
    for rel in sorted(set(a) | set(b)):
        x, y = a.get(rel), b.get(rel)
        if x == y:
            continue
        if y is None:
            diffs.append(f"/{rel}: only with cloud-init ({fmt_attr(x)})")
            continue
        if x is None:
            diffs.append(f"/{rel}: only with nodeagent ({fmt_attr(y)})")
            continue
        what = []
        if x[0] != y[0]:
            what.append(f"type {x[0]} vs {y[0]}")
        else:
            if x[1] != y[1]:
                what.append(f"mode {x[1]:04o} vs {y[1]:04o}")
            if x[2] != y[2]:
                what.append(f"owner {x[2]} vs {y[2]}")
            if x[3] != y[3]:
                what.append(f"group {x[3]} vs {y[3]}")
            if x[4] != y[4] and rel not in USERDB:
                what.append("content" if x[0] == "file" else f"target {x[4]} vs {y[4]}")
                if x[0] == "file":
                    ta, tb = read_text(ci["root"], rel), read_text(na["root"], rel)
                    if ta is not None and tb is not None and len(ta) + len(tb) < 200000:
                        detail.append(f"--- {label} /{rel}\n" + "".join(difflib.unified_diff(
                            ta.splitlines(True), tb.splitlines(True), "cloud-init", "nodeagent", n=2)))
        if what:
            diffs.append(f"/{rel}: " + ", ".join(what))
    for rel in USERDB:
        ra, rb = userdb_records(ci["root"], rel), userdb_records(na["root"], rel)
        for name in sorted(set(ra) | set(rb)):
            x, y = ra.get(name), rb.get(name)
            if x == y:
                continue
            if x is None or y is None:
                diffs.append(f"/{rel} {name}: only with {'nodeagent' if x is None else 'cloud-init'}: {':'.join(x or y)}"
                             if rel.endswith(("passwd", "group")) else
                             f"/{rel} {name}: only with {'nodeagent' if x is None else 'cloud-init'}")
                continue
            for i in range(max(len(x), len(y))):
                fx, fy = (x + [""] * 9)[i], (y + [""] * 9)[i]
                if fx == fy:
                    continue
                if rel == "etc/shadow" and i == 2 and fx.isdigit() and fy.isdigit() and abs(int(fx) - int(fy)) <= 1:
                    continue  # last-change day: the two runs straddled midnight
                if rel == "etc/shadow" and i == 1 and same_secret(fx, fy, ci.get("passwords", [])):
                    continue  # two salted hashes of one plain_text_passwd (see same_secret)
                if rel in ("etc/shadow", "etc/gshadow") and i == 1:
                    diffs.append(f"/{rel} {name}: password field differs (cloud-init {fx[:1] or 'empty'}..., nodeagent {fy[:1] or 'empty'}...)")
                else:
                    diffs.append(f"/{rel} {name}: field {i + 1} {fx!r} vs {fy!r}")
    if ci["sudo"] != na["sudo"]:
        diffs.append(f"sudo rules: cloud-init {ci['sudo'][0]} {ci['sudo'][1]} vs nodeagent {na['sudo'][0]} {na['sudo'][1]}")
    if ci["hostname"] != na["hostname"]:
        diffs.append(f"hostname: {ci['hostname']!r} vs {na['hostname']!r}")
    if ci["actions"] != na["actions"]:
        sm = difflib.SequenceMatcher(a=ci["actions"], b=na["actions"], autojunk=False)
        for op, i1, i2, j1, j2 in sm.get_opcodes():
            if op != "equal":
                diffs.append(f"actions: cloud-init {ci['actions'][i1:i2]} vs nodeagent {na['actions'][j1:j2]}")
    for disk in sorted(set(ci["disks"]) | set(na["disks"])):
        x, y = ci["disks"].get(disk), na["disks"].get(disk)
        for k in ("table", "signature"):
            if x[k] != y[k]:
                diffs.append(f"disk /dev/{disk} {k}: cloud-init {x[k]} vs nodeagent {y[k]}")
    for nic in sorted(set(ci["network"]) | set(na["network"])):
        x, y = ci["network"].get(nic), na["network"].get(nic)
        if x is None or y is None:
            diffs.append(f"network {nic}: configured only by {'nodeagent' if x is None else 'cloud-init'}: {x or y}")
            continue
        for k in x:
            if x[k] != y[k]:
                diffs.append(f"network {nic} {k}: cloud-init {x[k]} vs nodeagent {y[k]}")
    if ci["sems"] != na["sems"]:
        diffs.append(f"cloud-init-per semaphores: {ci['sems']} vs {na['sems']}")
    return diffs


def crypt(password, setting):
    """libcrypt's crypt(3) of the host (libxcrypt: yescrypt, SHA-crypt); None if absent."""
    import ctypes
    try:
        lib = ctypes.CDLL("libcrypt.so.1")
    except OSError:
        return None
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    out = lib.crypt(password.encode(), setting.encode())
    return out.decode() if out else None


def same_secret(a, b, passwords):
    """Two shadow password fields equal up to the salt: the same lock prefix and scheme
    (`$y$j9T$`), and both hashes of one of the case's `plain_text_passwd` values (each agent
    salts its own hash at random, cloud-init through chpasswd)."""
    lock = lambda f: len(f) - len(f.lstrip("!"))
    scheme = lambda f: f.lstrip("!").rsplit("$", 2)[0]
    if lock(a) != lock(b) or scheme(a) != scheme(b) or not a.lstrip("!").startswith("$"):
        return False
    return any(crypt(p, a.lstrip("!")) == a.lstrip("!") and crypt(p, b.lstrip("!")) == b.lstrip("!")
               for p in passwords)


def plain_passwords(text, yaml):
    """Every `plain_text_passwd` value of a cloud-config (for same_secret)."""
    out = []

    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if str(k).replace("-", "_") == "plain_text_passwd" and isinstance(x, str):
                    out.append(x)
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    try:
        walk(yaml.safe_load(text))
    except Exception:
        pass
    return out


def end_state(r, equiv=None):
    return {
        "root": r.m,
        "tree": snapshot(r.m, equiv),
        "sudo": sudo_rules(r.m),
        "hostname": r.out("hostname").strip(),
        "actions": [a for a in r.out("actions").splitlines() if not QUERY_RE.match(a)],
        "sems": bootper_sems(r.m),
        "network": network_model(r.m),
        "disks": r.disks(),
        "stages": r.out("stages").split("\n"),
        "log": r.out("log"),
    }


# --- cases -------------------------------------------------------------------------------

class Oracle:
    """One cloud-init root: its version (`22.4`, from the package), how its units run it
    (`cloud-init-main.service` with `--all-stages` where the root has it, else the four stage
    commands), what is taken as equal against it, and which nodeagent modes boot on it."""

    def __init__(self, name, rootfs, primary):
        self.name, self.rootfs, self.primary = name, rootfs, primary
        q = subprocess.run(["chroot", rootfs, "dpkg-query", "-W", "-f", "${Version}", "cloud-init"],
                           capture_output=True, text=True, check=True)
        self.version = q.stdout
        got = ".".join(self.version.split(".")[:2])
        if got != name:
            raise SystemExit(f"conformance: oracle {name} at {rootfs} has cloud-init {self.version}")
        rel = read_text(rootfs, "etc/os-release") or ""
        m = re.search(r"^VERSION_CODENAME=(\S+)", rel, re.M)
        self.suite = m.group(1) if m else "?"
        main_unit = any(os.path.exists(os.path.join(rootfs, d, "cloud-init-main.service"))
                        for d in ("usr/lib/systemd/system", "lib/systemd/system"))
        self.driver = "cloud-init-main" if main_unit else "cloud-init"
        self.equiv = EQUIVALENT_TEXT.get(name, {})
        # Both of nodeagent's modes on the oracle it follows; `--stage all` alone elsewhere.
        self.modes = ["nodeagent-split", "nodeagent-all"] if primary else ["nodeagent-all"]


def run_case(case, oracle, work, lowers, report_dir, detail):
    """-> (verdict, [summary lines]); verdict: identical | different | failed."""
    roots = []
    tag = f"{case.name}-{oracle.name}"
    try:
        ci = Root(work, tag + "-ci", lowers, disks=case.disks, nics=case.nics)
        roots.append(ci)
        if not ci.drive(oracle.driver):
            return "failed", ["cloud-init did not finish within its timeout"]
        ci_state = end_state(ci, oracle.equiv)
        ci_state["passwords"] = case.passwords
        detail.append("cloud-init stages: " + " ".join(ci_state["stages"]).strip())
        if ci_state["disks"]:
            detail.append(f"cloud-init disks: {ci_state['disks']}")
        detail.append("cloud-init warnings:\n" + "\n".join(
            l for l in (read_text(ci.m, "var/log/cloud-init.log") or "").splitlines()
            if "WARNING" in l or "Traceback" in l))
        # cloud-init's whole log, next to the case's report (for the tracebacks).
        with open(os.path.join(report_dir, f"{case.name}.{oracle.name}.cloud-init.log"), "w") as f:
            f.write(read_text(ci.m, "var/log/cloud-init.log") or "")
        ci_errors = json.loads(read_text(ci.m, "run/cloud-init/result.json") or "{}").get("v1", {}).get("errors")
        results = {}
        for agent in oracle.modes:
            na = Root(work, f"{tag}-{agent}", lowers, without_cloud_init=True, disks=case.disks,
                      nics=case.nics)
            roots.append(na)
            ok = na.drive(agent)
            st = end_state(na, oracle.equiv)
            detail.append(f"{agent} stages: " + " ".join(st["stages"]).strip())
            if st["disks"]:
                detail.append(f"{agent} disks: {st['disks']}")
            detail.append(f"{agent} output:\n{st['log']}")
            diffs = compare(ci_state, st, agent, detail)
            if not ok:
                diffs.insert(0, "nodeagent did not finish within its timeout")
            failed = [s for s in st["stages"] if s and not s.endswith((" 0", " 2"))]
            # Both failing (cloud-init's result lists errors, nodeagent exit 1) is the same
            # outcome: what each left behind is compared as always.
            if failed and not ci_errors:
                last = [l for l in st["log"].splitlines() if l.startswith("nodeagent run:")][-1:]
                diffs.insert(0, f"outcome: nodeagent {', '.join(failed)} (exit 1 = failed; cloud-init: {ci_errors or []}) {' '.join(last)}")
            results[agent] = diffs
            na.drop()
    finally:
        for r in roots:  # also after a timeout or an error: no mount or loop device is left
            r.drop()
    lines = []
    if len(results) == 2:
        sp, al = results["nodeagent-split"], results["nodeagent-all"]
        for d in sp:
            lines.append(("[split+all] " if d in al else "[split] ") + d)
        lines += ["[all] " + d for d in al if d not in sp]
    else:
        lines = [f"[{a.split('-')[1]}] {d}" for a, ds in results.items() for d in ds]
    return ("identical" if not lines else "different"), lines


def _driven(work, case, lowers, agent, label, detail):
    """A root without cloud-init driven by `agent`, and its end state; the stages' exit codes
    and the output go to `detail` under `label`."""
    root = Root(work, f"{case.name}-{agent}", lowers, without_cloud_init=True)
    root.drive(agent)
    st = end_state(root)
    detail.append(f"{label} stages: " + " ".join(st["stages"]).strip())
    detail.append(f"{label} output:\n{st['log']}")
    return root, st


def refused_case(case, work, lowers, detail):
    """nodeagent must refuse in `plan` and in `run --stage all`, name the place, and leave the
    root as it was; booted as the two units (`--stage local`, then `--stage main`), the root
    must be left as it was too (a change there is a difference, not a failed refusal).
    cloud-init is not run: the verdict holds for every oracle."""
    pristine = Root(work, case.name + "-pristine", lowers, without_cloud_init=True)
    before = snapshot(pristine.m)
    pristine.drop()
    na, st = _driven(work, case, lowers, "nodeagent-plan", "nodeagent", detail)
    problems = []
    codes = dict(s.split(" ") for s in st["stages"] if s)
    if codes.get("plan") != "1":
        problems.append(f"`nodeagent plan` exit {codes.get('plan')}, expected 1 (refused)")
    if codes.get("all") != "1":
        problems.append(f"`nodeagent run` exit {codes.get('all')}, expected 1 (refused)")
    if case.refused not in st["log"]:
        problems.append(f"the error does not say {case.refused!r}: {st['log'].strip()[:300]!r}")
    changed = [p for p in sorted(set(before) | set(st["tree"])) if before.get(p) != st["tree"].get(p)]
    if changed:
        problems.append(f"refusal changed the root: {', '.join('/' + p for p in changed[:8])}")
    na.drop()
    if problems:
        return "failed", problems
    split, sst = _driven(work, case, lowers, "nodeagent-split", "nodeagent-split", detail)
    diffs = []
    for p in sorted(set(before) | set(sst["tree"])):
        x, y = before.get(p), sst["tree"].get(p)
        if x != y:
            what = "" if x and y and x[:4] == y[:4] else f"{fmt_attr(x) if x else 'absent'} -> {fmt_attr(y) if y else 'absent'}"
            if x and y and x[4] != y[4]:
                what += (", " if what else "") + "content"
            diffs.append(f"[split] /{p} changed by the refused boot: {what}")
    if sst["hostname"] not in ("", "localhost"):
        diffs.append(f"[split] hostname set to {sst['hostname']!r} by the refused boot")
    if diffs:
        diffs.insert(0, f"[split] `nodeagent run --stage local` exit {dict(s.split(' ') for s in sst['stages'] if s).get('local')}; "
                        f"--stage main refused, but the root was changed")
    split.drop()
    if diffs:
        return "different", diffs
    err = [l for l in st["log"].splitlines() if l.startswith("nodeagent")][:1]
    return "refused", err


def judge(case, oracle, verdict, lines):
    """A difference the case expects against this oracle (`on VERSION: differs in ...`):
    -> ("follows", lines) when every difference is about one of its WHATs."""
    if verdict != "different" or oracle.name not in case.differs:
        return verdict, lines
    whats, _why = case.differs[oracle.name]
    about = lambda l: l.split("] ", 1)[-1]
    if all(any(about(l).startswith(w) for w in whats) for l in lines):
        return "follows", lines
    return verdict, lines


def report(case, oracle, verdict, lines, detail, secs, counts, report_dir):
    """One line (and its differences) per case and oracle; counts it; writes the details."""
    name, label = case.name, f"[{oracle.name}] {case.name}"
    expected = case.differs.get(oracle.name)
    if verdict == "identical":
        counts["identical"] += 1
        note = f"  (expect says known-difference: {case.known}; update it)" if case.known else ""
        if expected:
            note += f"  (expect says `on {oracle.name}: differs in ...`; update it)"
        print(f"{label}: identical{note}  [{secs:.1f}s]", flush=True)
    elif verdict == "refused":
        counts["refused"] += 1
        print(f"{label}: refused  [{secs:.1f}s] {' '.join(lines)}", flush=True)
    elif verdict == "follows":
        counts["follows"] += 1
        print(f"{label}: follows 25.1 ({expected[1]}): {len(lines)} difference(s)  [{secs:.1f}s]", flush=True)
        for l in lines:
            print(f"    {l}", flush=True)
    else:
        counts["different"] += 1
        tag = "DIFFERENT" if verdict == "different" else "FAILED"
        if case.known and verdict == "different":
            counts["known"].append(name)
            tag += f" (known: {case.known})"
        else:
            counts["unexpected"].append(name)
        print(f"{label}: {tag}: {len(lines)} difference(s)  [{secs:.1f}s]", flush=True)
        for l in lines:
            print(f"    {l}", flush=True)
    with open(os.path.join(report_dir, f"{name}.{oracle.name}.txt"), "w") as f:
        f.write("\n".join(detail + ["", "summary:"] + lines) + "\n")


def main():
    nodeagent, work = sys.argv[1:3]
    oracles, filters = [], []
    for a in sys.argv[3:]:
        if "=" in a and not filters:
            name, rootfs = a.split("=", 1)
            oracles.append((name, rootfs))
        else:
            filters.append(a)
    if not oracles:
        raise SystemExit("usage: tests/harness/run conformance NODEAGENT WORK VERSION=ROOTFS... [CASE-SUBSTRING...]")
    # The newest is the one nodeagent follows where two disagree: both of its modes boot there.
    newest = max(oracles, key=lambda o: tuple(int(x) for x in o[0].split(".")))[0]
    oracles = [Oracle(n, r, n == newest) for n, r in oracles]
    primary = next(o for o in oracles if o.primary)
    yaml = load_yaml_module(primary.rootfs)
    cases_dir = os.path.join(HERE, "cases")
    names = sorted(n for n in os.listdir(cases_dir) if os.path.isdir(os.path.join(cases_dir, n)))
    if filters:
        names = [n for n in names if any(f in n for f in filters)]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    report_dir = os.path.join(os.path.dirname(work), "report")
    shutil.rmtree(report_dir, ignore_errors=True)
    os.makedirs(report_dir)
    common = os.path.join(work, "common")
    make_common_layer(common, nodeagent)
    na_version = subprocess.run([nodeagent, '--version'], capture_output=True, text=True).stdout.strip()
    for o in oracles:
        print(f"cloud-init {o.version} (Debian {o.suite}, {o.driver}) vs {na_version}", flush=True)
    print(f"details: {report_dir}/", flush=True)
    counts = {o.name: {"identical": 0, "refused": 0, "follows": 0, "different": 0, "known": [], "unexpected": []}
              for o in oracles}
    t0 = time.monotonic()
    cases = [Case(os.path.join(cases_dir, name), yaml) for name in names]
    for c in cases:
        bad = set(c.differs) - {o.name for o in oracles}
        if bad and len(oracles) > 1:
            raise SystemExit(f"conformance: {c.dir}/expect names an oracle this run does not have: {bad}")
    # The case's layer (seed and pre-boot files) is made once and shared by every oracle's
    # roots; a refused case is booted once (nodeagent only, on the newest oracle's image).
    layers = {}
    for c in cases:
        layers[c.name] = os.path.join(work, "layer-" + c.name)
        c.make_layer(layers[c.name])
    tasks = [(c, o) for c in cases for o in ([primary] if c.refused else oracles)]

    def one(task):
        case, oracle = task
        detail = [f"case {case.name}, oracle cloud-init {oracle.version}, expect: {case.expect}"]
        t = time.monotonic()
        lowers = [layers[case.name], common, oracle.rootfs]
        if case.refused:
            verdict, lines = refused_case(case, work, lowers, detail)
        else:
            verdict, lines = run_case(case, oracle, work, lowers, report_dir, detail)
        verdict, lines = judge(case, oracle, verdict, lines)
        return verdict, lines, detail, time.monotonic() - t
    # CONFORMANCE_JOBS boots at a time (default: 1 per 2 CPUs; every case and oracle is
    # independent).
    jobs = int(os.environ.get("CONFORMANCE_JOBS", max(1, (os.cpu_count() or 2) // 2)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for (case, oracle), (verdict, lines, detail, secs) in zip(tasks, pool.map(one, tasks)):
            for o in ([oracle] if not case.refused else oracles):
                report(case, o, verdict, lines, detail, secs, counts[o.name], report_dir)
    for layer in layers.values():
        shutil.rmtree(layer, ignore_errors=True)
    failed = False
    for o in oracles:
        c = counts[o.name]
        follows = f", {c['follows']} follow 25.1" if not o.primary else ""
        print(f"cloud-init {o.name} (Debian {o.suite}): {len(names)} cases, {c['identical']} identical, "
              f"{c['refused']} refused on purpose{follows}, {c['different']} different")
        if c["known"]:
            print(f"  known differences ({o.name}, tests/conformance/FINDINGS.md): {', '.join(c['known'])}")
        if c["unexpected"]:
            print(f"  unexpected ({o.name}): {', '.join(c['unexpected'])}")
            failed = True
    say(f"conformance: {time.monotonic() - t0:.0f} s")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
