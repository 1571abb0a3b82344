"""Kube tier: a node image with nodeagent, the real kubeadm and kubelet (tests/k8s/build),
Debian's containerd and runc, and no cloud-init, boots from a `nodeagent mint bootstrap`
worker bundle and joins a real control plane (tests/harness/controlplane.py) running on the
host's 127.0.0.1. The guest reaches it at 10.0.2.100:6443 through an explicit `guestfwd`
on a `-netdev user,restrict=on` NIC: each guest connection starts `socat` to
127.0.0.1:PORT, so no guest packet can reach another address.

Also the time-to-Node benchmark (`tests/harness/run kube_tier bench [--rounds N] [VARIANT ...]`):
power-on to the Node object in the API server for the floor (the same image with no bootstrap
agent: the join config written into it, one oneshot unit running `kubeadm join`), nodeagent,
nodeagent without real kubeadm in pre-flight, and Debian's cloud-init (NoCloud seed of the same
bundle), interleaved, with the guests' journals split into where the time went.
"""

import base64
import json
import re
import os
import shutil
import subprocess
import sys
import time

from harness import controlplane as cpl, qemu as q, scenarios as sc, systemd_tier as st

GUEST_ENDPOINT = "10.0.2.100:6443"
UNINITIALIZED_TAINT = "node.cluster.x-k8s.io/uninitialized"
MEM_MB = 2048
DISK_MB = 2560

# What the kubeadm and kubelet packages install (kubernetes/release, packages/deb): the
# kubelet unit and kubeadm's drop-in, which reads the flags `kubeadm join` writes.
KUBELET_UNIT = """[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

KUBEADM_DROPIN = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""

# As image-builder's containerd and kubernetes roles leave a CAPI node: the systemd cgroup
# driver (kubeadm's default for the kubelet), the pod sandbox image the node has (the local
# pause image of image-build/k8s-images, under the name `kubeadm config images list` gives:
# a wrong one makes an air-gapped node try to pull it), Debian's CNI plugins (in /usr/lib/cni,
# not /opt/cni/bin), the bridge netfilter and forwarding sysctls kubeadm's pre-flight checks.
CONTAINERD_CONFIG = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


# The time-to-Node floor: what a node image does with no bootstrap agent at all. Its join
# config (the bundle's, rendered), hostname and network file are written into the disk
# (floor_files); this unit runs `kubeadm join` once the network is up and writes the sentinel
# as CABPK's runcmd line does. No CA certificate or kubelet kubeconfig is written: a
# bootstrap-token join fetches the CA (pinned by caCertHashes) and writes the kubelet's
# bootstrap kubeconfig itself, and its pre-flight refuses an existing /etc/kubernetes/pki/ca.crt.
FLOOR_CONFIG = "/etc/kubeadm-floor/kubeadm-join-config.yaml"
FLOOR_UNIT = f"""[Unit]
Description=time-to-Node floor: kubeadm join with a config written into the image
Wants=network-online.target containerd.service
After=network-online.target containerd.service
ConditionPathExists=!/run/cluster-api/bootstrap-success.complete

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStartPre=-/lib/systemd/systemd-networkd-wait-online --ipv4 --timeout=300
ExecStart=/bin/sh -c 'kubeadm join --config {FLOOR_CONFIG} && mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete'
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
"""
FLOOR_NETWORK = """[Match]
MACAddress={mac}

[Network]
DHCP=ipv4
LinkLocalAddressing=no
IPv6AcceptRA=no
"""
JOIN_RUNCMD = "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete"


def floor_files(fw, name, mac):
    """The floor's per-node files from the same minted worker bundle: the kubeadm join config
    of its write_files with `{{ local_hostname }}` rendered, the hostname, a DHCP network file
    for its MAC (the metadata's netplan). Refuses a bundle that is not that plain join."""
    import yaml  # the benchmark only (PyYAML); the tests need only the standard library

    data = yaml.safe_load(_decoded(fw, "guestinfo.userdata"))
    if data.get("runcmd") != [JOIN_RUNCMD]:
        raise RuntimeError(f"the floor runs only CABPK's plain join; runcmd is {data.get('runcmd')}")
    config = next(f["content"] for f in data["write_files"] if f["path"] == "/run/kubeadm/kubeadm-join-config.yaml")
    config = config.replace("{{ local_hostname }}", name)
    if "{{" in config or "{%" in config:
        raise RuntimeError(f"the floor renders only {{{{ local_hostname }}}}: {config}")
    return {FLOOR_CONFIG: config, "/etc/hostname": name + "\n",
            "/etc/systemd/network/10-floor.network": FLOOR_NETWORK.replace("{mac}", mac)}


def pause_image(bindir):
    """The pause image kubeadm names for its version (`kubeadm config images list`)."""
    kubeadm = os.path.join(bindir, "kubeadm")
    version = subprocess.run([kubeadm, "version", "-o", "short"], capture_output=True, text=True,
                             check=True).stdout.strip()
    out = subprocess.run([kubeadm, "config", "images", "list", "--kubernetes-version", version],
                         capture_output=True, text=True, check=True).stdout.split()
    return next(ref for ref in out if ref.rsplit("/", 1)[-1].startswith("pause:"))
MODULES_LOAD = "overlay\nbr_netfilter\n"
SYSCTL = "net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\nnet.ipv4.ip_forward = 1\n"


def add_kubernetes(root, kernel, bindir):
    """The Kubernetes node parts of the image: the real kubeadm and kubelet from the
    project's build, their units, containerd's config, every kernel module (a real image has
    them all: kube-proxy, containerd and kubelet load what they need) and the kernel config
    kubeadm's SystemVerification reads."""
    for name in ("kubeadm", "kubelet"):
        shutil.copy2(os.path.join(bindir, name), os.path.join(root, "usr/bin", name))
    st.write_file(root, "/lib/systemd/system/kubelet.service", KUBELET_UNIT)
    st.write_file(root, "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", KUBEADM_DROPIN)
    # Enabled, as the package's postinst leaves it: it restarts until `kubeadm join` writes its config.
    wants = os.path.join(root, "etc/systemd/system/multi-user.target.wants")
    os.makedirs(wants, exist_ok=True)
    if not os.path.lexists(os.path.join(wants, "kubelet.service")):
        os.symlink("/lib/systemd/system/kubelet.service", os.path.join(wants, "kubelet.service"))
    st.write_file(root, "/etc/containerd/config.toml", CONTAINERD_CONFIG.replace("{pause}", pause_image(bindir)))
    st.write_file(root, "/etc/modules-load.d/kubernetes.conf", MODULES_LOAD)
    st.write_file(root, "/etc/sysctl.d/99-kubernetes.conf", SYSCTL)
    moddir = os.path.join(root, "lib/modules", kernel.version)
    shutil.rmtree(moddir, ignore_errors=True)
    shutil.copytree(kernel.moddir, moddir, symlinks=True)
    q.run(["chroot", root, "depmod", "-a", kernel.version])  # the image's own kmod
    shutil.copy2(os.path.join(kernel.root, "boot", f"config-{kernel.version}"), os.path.join(root, "boot"))


class KubeSession:
    """Kube-tier images (staged once per variant) and the control plane, on a scenarios.Session."""

    def __init__(self, s):
        self.s = s
        self.trees = {}
        self.bindir = cpl.k8s_bin()
        # The scenarios and the demo boot the Packer-built Kubernetes node image
        # (image-build/build-qemu kube); the time-to-Node benchmark sets this to False to
        # compare two images staged from one root (nodeagent's and cloud-init's).
        self.use_artifact = True
        self.artifact = None

    def tree(self, variant, seed=None):
        kernel, _, nodeagent = self.s.fast()
        key = (variant, json.dumps(seed))
        if key not in self.trees:
            t = time.monotonic()
            base = "kube-cloudinit" if variant == "cloudinit" else "kube"
            # The floor: the kube image with no bootstrap agent installed, plus its join unit.
            root = st.stage(f"kube-{variant}", "none" if variant == "floor" else variant, kernel,
                            nodeagent=nodeagent, seed=seed, workdir=self.s.workdir, base=base)
            add_kubernetes(root, kernel, self.bindir)
            if variant == "floor":
                st.write_file(root, "/etc/systemd/system/floor-join.service", FLOOR_UNIT)
                st.enable_unit(root, "floor-join.service")
            self.trees[key] = root
            self.s.scratch.append(root)
            q.log(f"kube image ({variant}) staged in {time.monotonic() - t:.1f}s")
        return self.trees[key]

    def prepare(self):
        """Make (or find cached) the image the VMs boot: the Packer-built `kube` image, or the
        staged tree when use_artifact is off. Returns its path."""
        if self.use_artifact:
            self.artifact = q.packer_artifact("kube")
            return self.artifact
        return self.tree("nodeagent")

    def disk(self, name, variant="nodeagent", files=None):
        """A fresh disk of the staged image, with `files` ({path: text}, e.g. a node's
        /etc/nodeagent/config.yaml or NoCloud seed) on this disk only."""
        if self.use_artifact:
            if variant != "nodeagent":
                raise RuntimeError(f"the kube scenarios boot the Packer-built Kubernetes node image, not variant {variant}")
            t = time.monotonic()
            path, self.artifact = st.sysd(self.s).overlay(name, "kube", files=files)
            q.log(f"overlay of the Packer-built image {os.path.relpath(self.artifact, q.REPO)} ready in "
                  f"{time.monotonic() - t:.1f}s")
            return path
        root = self.tree(variant, ("", "", "") if variant == "cloudinit" else None)
        saved = {}
        for path, text in (files or {}).items():
            full = os.path.join(root, path.lstrip("/"))
            saved[path] = open(full).read() if os.path.exists(full) else None
            st.write_file(root, path, text)
        try:
            disk = st.make_partitioned_disk(root, os.path.join(self.s.workdir, f"{name}.img"), DISK_MB)
        finally:
            for path, text in saved.items():
                if text is None:
                    os.unlink(os.path.join(root, path.lstrip("/")))
                else:
                    st.write_file(root, path, text)
        self.s.scratch.append(disk)
        return disk

    def vm(self, name, disk, fwcfg, api_port, mac):
        if self.use_artifact:
            q.require_artifact(disk, self.artifact)
        nic = f"user,restrict=on,guestfwd=tcp:{GUEST_ENDPOINT}-cmd:socat STDIO TCP:127.0.0.1:{api_port}"
        # The guest's journal on its console (console.log in the run's directory): what
        # kubeadm and the kubelet said, also when the node never gets as far as its report.
        vm = st.sysd(self.s).vm(name, disk, fwcfg, nets=[(nic, mac)], append="systemd.journald.forward_to_console=1")
        vm.mem = MEM_MB
        return vm

    def control_plane(self, name, pki):
        return cpl.ControlPlane(pki, os.path.join(self.s.workdir, name), cluster="demo", endpoint=GUEST_ENDPOINT,
                                bindir=self.bindir)


def kube(s):
    if not hasattr(s, "kube"):
        s.kube = KubeSession(s)
    return s.kube


def worker_bundle(s, workdir, node, mac, pki, token):
    _, _, nodeagent = s.fast()
    return sc.mint_bundle(nodeagent, workdir, "worker", "demo", node, GUEST_ENDPOINT, pki, token=token,
                          extra=["--mac", mac], version=cpl.K8S_VERSION)


def new_token(s):
    """`nodeagent mint token`."""
    _, _, nodeagent = s.fast()
    return subprocess.run([nodeagent, "mint", "token"], check=True, capture_output=True, text=True).stdout.strip()


def apply_token(s, cp, token):
    """`nodeagent mint token --secret` for `token`, applied to the real API server."""
    _, _, nodeagent = s.fast()
    secret = subprocess.run([nodeagent, "mint", "token", "--secret", "--ttl", "2h", "--token", token],
                            check=True, capture_output=True, text=True).stdout
    cp.add_token_secret(secret)


def mint_token(s, cp):
    """A minted token whose Secret the real API server has."""
    token = new_token(s)
    apply_token(s, cp, token)
    return token


def wait_node(cp, name, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = cp.node(name)
        if node:
            return node
        time.sleep(2)
    return None


def check_node(c, cp, vm, name):
    """The Node object read back from the real API server: name, kubelet version, CAPI's taint."""
    node = wait_node(cp, name, 120)
    c.ok(node is not None, f"no Node {name} in the API server")
    if not node:
        return None
    taints = [t.get("key") for t in node.get("spec", {}).get("taints", [])]
    info = node.get("status", {}).get("nodeInfo", {})
    c.eq(node["metadata"]["name"], vm.name, "Node name = VM name")
    c.eq(info.get("kubeletVersion"), cpl.K8S_VERSION, "Node's kubeletVersion")
    c.ok(UNINITIALIZED_TAINT in taints, f"Node taints {taints} lack {UNINITIALIZED_TAINT}")
    wide = cp.kubectl("get", "node", name, "-o", "wide", check=False).stdout.rstrip()
    q.log("    Node read back from the real API server:\n" + "\n".join("      " + l for l in wide.splitlines()))
    q.log(f"    name={node['metadata']['name']} kubeletVersion={info.get('kubeletVersion')} taints={taints} "
          f"created={node['metadata'].get('creationTimestamp')}")
    return node


def _boot_join(s, c, name, mac, cp, token):
    k = kube(s)
    fw = worker_bundle(s, s.workdir, name, mac, cp.minted_pki, token)
    vm = k.vm(name, k.disk(name), dict(fw, **{"test.hold": "1", "test.timeout": "900"}), cp.api_port, mac)
    vm.start()
    final = vm.wait_for(lambda o: o.get("phase") in ("done", "failed"), 900)
    c.ok(final is not None and final.get("phase") == "done",
         f"{name}: nodeagent's final status {final}; phases {vm.phases()}")
    return vm, final


def sc_kube_join(s):
    """kube tier: a worker bundle minted by `nodeagent mint`, a real control plane on the
    host's loopback, a node image without cloud-init: nodeagent runs the real `kubeadm join`,
    the kubelet TLS-bootstraps, the Node named after the VM appears in the real API server."""
    c = sc.Checks()
    _, _, nodeagent = s.fast()
    pki = sc.mint_pki(nodeagent, s.workdir, "demo")
    with kube(s).control_plane("cp-join", pki) as cp:
        token = mint_token(s, cp)
        vm, final = _boot_join(s, c, "kube-md-0", "52:54:00:00:10:01", cp, token)
        if final and final.get("phase") == "done":
            check_node(c, cp, vm, "kube-md-0")
        vm.kill()
        s.record(vm, "ok, killed after the Node check" if final else "TIMEOUT")
    return c.failures


def sc_kube_join_late_cp(s):
    """kube tier: the API server starts late: nodeagent's first kubeadm join times out
    (kubeadm.timeout_secs 90 in this node's image config), it resets and retries, and the
    retry turns into a Node."""
    c = sc.Checks()
    _, _, nodeagent = s.fast()
    pki = sc.mint_pki(nodeagent, s.workdir, "demo")
    cp = kube(s).control_plane("cp-late", pki)
    config = "kubeadm:\n  timeout_secs: 90\n  backoff_initial_secs: 1.0\n"
    k = kube(s)
    name, mac = "kube-md-late", "52:54:00:00:10:02"
    # The token is known before the API server exists: minted, applied once it is up.
    token = new_token(s)
    fw = worker_bundle(s, s.workdir, name, mac, pki, token)
    vm = k.vm(name, k.disk(name, files={"/etc/nodeagent/config.yaml": config}), dict(fw, **{"test.hold": "1", "test.timeout": "1200"}), cp.api_port, mac)
    final = None
    try:
        vm.start()
        first = vm.wait_for(lambda o: "kubeadm" in (o.get("step") or "") or o.get("phase") in ("done", "failed"), 600)
        c.ok(first is not None, "the agent never reached its kubeadm step")
        # Let the first attempt run into its deadline with no API server behind the endpoint.
        time.sleep(100)
        cp.start()
        apply_token(s, cp, token)
        final = vm.wait_for(lambda o: o.get("phase") in ("done", "failed"), 900)
        c.ok(final is not None and final.get("phase") == "done", f"final status {final}; phases {vm.phases()}")
        seen = [json.dumps(o) for _, o in vm.status]
        q.log("    statuses:\n" + "\n".join(f"      {t:6.1f}s {o.get('phase')} {o.get('detail') or o.get('error') or ''}"
                                         for t, o in vm.status))
        c.ok(any("attempt 2 of" in o for o in seen), "no second kubeadm join attempt was reported")
        if final and final.get("phase") == "done":
            check_node(c, cp, vm, name)
    finally:
        vm.kill()
        cp.stop()
    s.record(vm, "ok, killed after the Node check" if final else "TIMEOUT")
    return c.failures


def _decoded(fw, key):
    """A guestinfo value of the bundle's fw_cfg entries, decoded by its .encoding."""
    raw = fw[key]
    enc = fw.get(key + ".encoding", b"").decode().strip()
    if enc in ("base64", "b64"):
        raw = base64.b64decode(raw)
    elif enc in ("gzip+base64", "gz+b64"):
        import gzip

        raw = gzip.decompress(base64.b64decode(raw))
    return raw.decode()


def nocloud_seed(fw, name):
    """The same bootstrap data as a NoCloud seed for cloud-init: the bundle's userdata as it
    is, its metadata's instance-id and hostname as meta-data, its netplan as network-config."""
    import yaml  # the benchmark only (PyYAML); the tests need only the standard library

    meta = yaml.safe_load(_decoded(fw, "guestinfo.metadata"))
    seed = "/var/lib/cloud/seed/nocloud/"
    return {seed + "meta-data": f'instance-id: "{meta["instance-id"]}"\nlocal-hostname: "{name}"\n',
            seed + "user-data": _decoded(fw, "guestinfo.userdata"),
            seed + "network-config": yaml.safe_dump(meta["network"])}


class NodeWatch:
    """`kubectl get nodes --watch`: the host's monotonic time each Node name was first seen.
    The API server ends a watch after 30-60 min (--min-request-timeout): a new one is started
    then (it lists the Nodes again, which are already seen)."""

    def __init__(self, cp):
        import threading

        self.seen = {}
        self.cmd = [cp.bin("kubectl"), "--kubeconfig", cp.kubeconfig(), "get", "nodes", "--watch", "-o", "name"]
        self.stopped = False
        self.proc = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while not self.stopped:
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            for line in self.proc.stdout:
                self.seen.setdefault(line.strip().removeprefix("node/"), time.monotonic())
            self.proc.wait()
            time.sleep(0.5)

    def stop(self):
        self.stopped = True
        if self.proc:
            self.proc.kill()
            self.proc.wait()


# The time-to-Node benchmark's images: (variant, label, staged tree, extra files on its disk).
BENCH_VARIANTS = [
    ("floor", "(a) floor: no agent, join config in the image, a oneshot `kubeadm join` unit", "floor", None),
    ("nodeagent", "(b) nodeagent (release .deb)", "nodeagent", None),
    ("nodeagent-nopf", "(b') nodeagent, `kubeadm.preflight_validate: false`", "nodeagent",
     {"/etc/nodeagent/config.yaml": "kubeadm:\n  preflight_validate: false\n"}),
    ("cloudinit", "(c) Debian cloud-init 22.4 (NoCloud seed)", "cloudinit", None),
]
# Seconds the guest's report waits after the sentinel, so that it does not compete with the
# kubelet's TLS bootstrap and registration, which the benchmark times.
REPORT_AFTER = 30


def release_deb():
    """The package that ships: packaging/build-deb's (release profile), unless NODEAGENT_DEB names one."""
    if not os.environ.get("NODEAGENT_DEB"):
        out = subprocess.run([os.path.join(q.REPO, "packaging", "build-deb")], cwd=q.REPO, check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        os.environ["NODEAGENT_DEB"] = out.strip().splitlines()[-1]
    return os.environ["NODEAGENT_DEB"]


def _journal(text):
    """`journalctl -o short-monotonic` lines as (seconds since boot, identifier, message)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\[\s*([0-9.]+)\] \S+ ([^:\[]+)(?:\[\d+\])?: (.*)$", line)
        if m:
            out.append((float(m.group(1)), m.group(2), m.group(3)))
    return out


def _first(lines, ident, pattern, after=0.0):
    rx = re.compile(pattern)
    return next((t for t, i, msg in lines if t >= after and (ident is None or i == ident) and rx.search(msg)), None)


def breakdown(files):
    """Where a boot's time went, from its journal (seconds since the guest's boot): the marks
    every variant has, and for nodeagent its two units split at its own log lines (the read
    is the transport line, the writes begin at the first `step start`, the kubeadm step's
    `step start` is followed by the endpoint wait and kubeadm's first output line)."""
    j = _journal((sc.report_file(files, "/run/test/journal.txt") or b"").decode(errors="replace"))
    if not j:
        return {}
    b = {}
    b["network-online"] = _first(j, "systemd", r"Reached target network-online\.target")
    b["containerd"] = _first(j, "systemd", r"Started containerd\.service")
    b["kubeadm first line"] = _first(j, None, r"\[preflight\] Running pre-flight checks")
    b["kubeadm joined"] = _first(j, None, r"This node has joined the cluster")
    b["kubelet registered"] = _first(j, None, r"Successfully registered node")
    na = []  # nodeagent's records: (seconds since boot, message, step, module)
    for line in (sc.report_file(files, "/run/test/journal-nodeagent.json") or b"").decode(errors="replace").splitlines():
        try:
            e = json.loads(line)
            na.append((int(e["__MONOTONIC_TIMESTAMP"]) / 1e6, str(e.get("MESSAGE", "")), str(e.get("F_STEP", "")),
                       str(e.get("TARGET", ""))))
        except (ValueError, KeyError):
            continue
    for unit, key in (("nodeagent-local.service", "local"), ("nodeagent.service", "main"),
                      ("floor-join.service", "floor"), ("cloud-init-local.service", "cloud-init-local"),
                      ("cloud-final.service", "cloud-final")):
        start = _first(j, "systemd", rf"Starting {re.escape(unit)}")
        if start is None:
            continue
        b[f"{key} start"] = start
        b[f"{key} end"] = _first(j, "systemd", rf"Finished {re.escape(unit)}", start)
        if key in ("local", "main"):
            end = b[f"{key} end"] or float("inf")
            mine = [x for x in na if start <= x[0] <= end]
            first_step = next((t for t, msg, _, _ in mine if msg == "step start"), None)
            # The transport's detection lines come first; its last line before the first
            # step ("selected", or the main unit's "... reused") ends the read. Nothing is
            # logged between that and the first step: the plan and pre-flight.
            reading = [t for t, _, _, mod in mine if mod == "libnodeagent::pipeline" and first_step and t < first_step]
            if reading:
                b[f"{key} transport"] = reading[0]
                b[f"{key} read"] = reading[-1]
            b[f"{key} first write"] = first_step
            if key == "main":
                b["kubeadm step start"] = next((t for t, msg, step, _ in mine
                                                if msg == "step start" and step.endswith(":kubeadm")), None)
                b["runtime ready"] = next((t for t, msg, _, _ in mine if msg.startswith("container runtime ready")), None)
                b["kubeadm exec"] = next((t for t, msg, _, mod in mine if mod == "kubeadm" and msg.startswith("$ kubeadm")), None)
                b["sentinel"] = next((t for t, msg, step, _ in mine if msg == "step done" and step.endswith(":kubeadm")), None)
    return {k: v for k, v in b.items() if v is not None}


def _stat(xs):
    ok = sorted(x for x in xs if x is not None)
    if not ok:
        return "—"
    failed = len(xs) - len(ok)
    return f"{st.median(ok):.1f} s ({ok[0]:.1f}–{ok[-1]:.1f}, n={len(ok)}{f', {failed} failed' if failed else ''})"


def bench(workdir, rounds=5, only=()):
    """Power-on to Node registered for the floor, nodeagent (with and without real kubeadm in
    pre-flight) and Debian's cloud-init, all staged from one root (same kernel, kubeadm,
    kubelet and containerd) and fed the same minted worker bundle, interleaved (the order
    rotates every round), one control plane for all boots, a fresh disk for every boot,
    nodeagent's image from the release .deb (what ships). Each guest's journal is kept and
    split (breakdown)."""
    os.environ.setdefault("QEMU_RELEASE", "1")  # the host's nodeagent only mints: QEMU_RELEASE=0 with NODEAGENT_DEB
    deb = release_deb()
    variants = [v for v in BENCH_VARIANTS if v[0] in (only or [v[0] for v in BENCH_VARIANTS])]
    s = sc.Session(workdir)
    k = kube(s)
    k.use_artifact = False  # images staged from one root: comparable
    _, _, nodeagent = s.fast()
    pki = sc.mint_pki(nodeagent, workdir, "demo")
    boots = []  # one dict per boot, also written to workdir/boots.json
    loads = [os.getloadavg()[0]]
    print(f"time to Node: {rounds} rounds of {', '.join(v[0] for v in variants)}; nodeagent package {deb}", flush=True)
    with k.control_plane("cp-bench", pki) as cp:
        token = mint_token(s, cp)
        watch = NodeWatch(cp)
        try:
            for r in range(rounds):
                for i, (variant, _, tree, extra) in enumerate(variants[r % len(variants):] + variants[:r % len(variants)]):
                    n = r * len(variants) + [v[0] for v in variants].index(variant) + 1
                    name, mac = f"ttn-{variant}-{r + 1}", f"52:54:00:00:31:{n:02x}"
                    fw = worker_bundle(s, workdir, name, mac, pki, token)
                    if variant == "cloudinit":
                        files, fwcfg = nocloud_seed(fw, name), {}
                    elif variant == "floor":
                        files, fwcfg = floor_files(fw, name, mac), {}
                    else:
                        files, fwcfg = extra, fw
                    test = {"test.hold": "1", "test.timeout": "900", "test.wait": "sentinel",
                            "test.report-after": str(REPORT_AFTER)}
                    disk = k.disk(name, tree, files)
                    vm = k.vm(name, disk, dict(fwcfg, **test), cp.api_port, mac)
                    load0 = os.getloadavg()[0]
                    vm.start()
                    deadline = time.monotonic() + 900
                    while name not in watch.seen and time.monotonic() < deadline and vm.proc.poll() is None:
                        time.sleep(0.5)
                    ttn = watch.seen[name] - vm.t0 if name in watch.seen else None
                    # The report comes REPORT_AFTER s after the sentinel; wait until it has stopped growing.
                    deadline, size, still = time.monotonic() + REPORT_AFTER + 150, -1, 0
                    while ttn and time.monotonic() < deadline and still < 6 and vm.proc.poll() is None:
                        time.sleep(0.5)
                        still = still + 1 if len(vm.report) == size and size > 0 else 0
                        size = len(vm.report)
                    vm.kill()
                    # A gigabyte or more each: gone after its boot, not at the end of the run.
                    os.unlink(disk)
                    s.scratch.remove(disk)
                    files_in = vm.report_tar()
                    b = breakdown(files_in)
                    boots.append({"round": r + 1, "variant": variant, "name": name, "ttn": ttn,
                                  "load": [load0, os.getloadavg()[0]], "breakdown": b,
                                  "status": [(round(t, 2), o.get("phase"), o.get("step") or o.get("detail"))
                                             for t, o in vm.status]})
                    with open(os.path.join(workdir, "boots.json"), "w") as f:
                        json.dump(boots, f, indent=1)
                    s.record(vm, f"Node after {ttn:.1f}s" if ttn else "no Node")
                    loads.append(os.getloadavg()[0])
                    print(f"round {r + 1} {variant}: power-on to Node {ttn if ttn is None else round(ttn, 1)} s, "
                          f"load {load0:.1f}–{loads[-1]:.1f}; guest: " +
                          ", ".join(f"{k} {v:.1f}" for k, v in sorted(b.items(), key=lambda kv: kv[1])), flush=True)
        finally:
            watch.stop()
    s.cleanup()
    report(boots, variants, rounds, loads)
    return boots


def report(boots, variants, rounds, loads):
    """The benchmark's tables: time to Node per image, each one's difference to the floor in
    the same round, and nodeagent's spans from its guests' journals."""
    by = {v[0]: [b for b in boots if b["variant"] == v[0]] for v in variants}
    print(f"\n## Time to Node: {rounds} interleaved rounds, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"host load average (1 min) during the run: {min(loads):.1f}–{max(loads):.1f}\n")
    print("| image | power-on → Node registered, median (min–max) | − the floor of the same round, median (min–max) |")
    print("|---|---|---|")
    floor = {b["round"]: b["ttn"] for b in by.get("floor", [])}
    for variant, label, _, _ in variants:
        diffs = [b["ttn"] - floor[b["round"]] for b in by[variant]
                 if variant != "floor" and b["ttn"] is not None and floor.get(b["round"]) is not None]
        print(f"| {label} | {_stat([b['ttn'] for b in by[variant]])} | {_stat(diffs) if diffs else '—'} |")
    spans = [
        ("boot → local unit start", None, "local start"),
        ("local unit: start → transport chosen", "local start", "local transport"),
        ("local unit: transport chosen → read", "local transport", "local read"),
        ("local unit: read → first write (plan, pre-flight)", "local read", "local first write"),
        ("local unit: first write → end", "local first write", "local end"),
        ("local unit end → main unit start (network-online)", "local end", "main start"),
        ("main unit: start → transport chosen", "main start", "main transport"),
        ("main unit: transport chosen → read", "main transport", "main read"),
        ("main unit: read → first write (plan, pre-flight)", "main read", "main first write"),
        ("main unit: first write → kubeadm step", "main first write", "kubeadm step start"),
        ("network-online → containerd serving", "network-online", "containerd"),
        ("main unit start → containerd serving", "main start", "containerd"),
        ("main unit: start → runtime ready (nodeagent-cri.target)", "main start", "runtime ready"),
        ("runtime ready → kubeadm started (endpoint wait)", "runtime ready", "kubeadm exec"),
        ("kubeadm step → kubeadm started", "kubeadm step start", "kubeadm exec"),
        ("kubeadm started → its first line", "kubeadm exec", "kubeadm first line"),
        ("kubeadm: first line → joined", "kubeadm first line", "kubeadm joined"),
        ("joined → sentinel", "kubeadm joined", "sentinel"),
        ("main unit: whole", "main start", "main end"),
        ("joined → kubelet registered", "kubeadm joined", "kubelet registered"),
        ("floor unit start → kubeadm's first line", "floor start", "kubeadm first line"),
        ("boot → network-online", None, "network-online"),
        ("boot → kubeadm's first line", None, "kubeadm first line"),
        ("boot → kubeadm joined", None, "kubeadm joined"),
    ]
    print("\nFrom the guests' journals (seconds, guest clock), median (min–max):\n")
    print("| span | " + " | ".join(v[0] for v in variants) + " |")
    print("|---|" + "---|" * len(variants))
    for label, a, z in spans:
        cells = []
        for v in variants:
            xs = [b["breakdown"][z] - (b["breakdown"][a] if a else 0.0) for b in by[v[0]]
                  if z in b["breakdown"] and (a is None or a in b["breakdown"])]
            cells.append(_stat(xs) if xs else "—")
        if any(c != "—" for c in cells):
            print(f"| {label} | " + " | ".join(cells) + " |")
    # The main unit is not ordered after containerd (units/nodeagent-cri.target): kubeadm
    # must still start only once containerd serves.
    for v in variants:
        marked = [b["breakdown"] for b in by[v[0]] if {"containerd", "kubeadm exec"} <= b["breakdown"].keys()]
        if marked:
            after = sum(1 for m in marked if m["kubeadm exec"] > m["containerd"])
            print(f"\n{v[0]}: kubeadm started after containerd served in {after} of {len(marked)} boots"
                  + ("" if after == len(marked) else "  <-- FAIL: kubeadm ran before the CRI was ready"))


SCENARIOS = [
    ("join-real-control-plane", sc_kube_join),
    ("join-retry-late-api-server", sc_kube_join_late_cp),
]


if __name__ == "__main__":
    if sys.argv[1:2] == ["bench-report"]:
        # bench-report DIR ...: the tables again from the runs' boots.json and the guests'
        # reports (also for a run stopped early); the rounds of several runs follow each other.
        boots = []
        for d in sys.argv[2:]:
            offset = max((b["round"] for b in boots), default=0)
            for b in json.load(open(os.path.join(d, "boots.json"))):
                vm = q.VM(b["name"], d, None, None, None)
                if os.path.exists(os.path.join(vm.dir, "report.tar")):  # none from a guest killed early
                    vm.report = bytearray(open(os.path.join(vm.dir, "report.tar"), "rb").read())
                    b["breakdown"] = breakdown(vm.report_tar())
                b["round"] += offset
                boots.append(b)
        seen = {b["variant"] for b in boots}
        loads = [x for b in boots for x in b["load"]]
        report(boots, [v for v in BENCH_VARIANTS if v[0] in seen], max(b["round"] for b in boots), loads)
    elif sys.argv[1:2] == ["bench"]:
        # bench [--rounds N] [floor|nodeagent|nodeagent-nopf|cloudinit ...]
        args = sys.argv[2:]
        n = 5
        if args[:1] == ["--rounds"]:
            n, args = int(args[1]), args[2:]
        unknown = set(args) - {v[0] for v in BENCH_VARIANTS}
        if unknown:
            raise SystemExit(f"bench: unknown variant(s) {sorted(unknown)}; known: {[v[0] for v in BENCH_VARIANTS]}")
        bench(os.path.join(q.REPO, "target", "qemu-runs", "time-to-node-" + time.strftime("%Y%m%d-%H%M%S")), n, args)
    else:
        sys.exit(sc.main(["--tier", "kube", *sys.argv[1:]]))
