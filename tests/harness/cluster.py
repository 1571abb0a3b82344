"""Cluster tier: a Kubernetes cluster made only of nodeagent nodes, booted under QEMU (TCG)
from the Packer-built kube image (no cloud-init), with bootstrap data minted by `nodeagent
mint` in CABPK's shape:

  cp-0  the first control plane: `kubeadm init` (static pods from the images baked into the
        image by image-build/k8s-images; nothing is pulled)
  cp-1  a control-plane join with stacked etcd (the CAs and keys in its write_files)
  w-0   a worker join; a test pod (an image built locally) runs there

The control-plane endpoint is cp-0's address (10.10.0.10:6443): no VIP and no load balancer,
as a one-control-plane CAPI cluster without kube-vip would have it. The guests share a private
network: a bridge inside a network namespace this module makes (a tap per guest, QEMU started
inside the namespace), with no route out of it. The host reaches the API server (and etcd for
its member list) only through a forward from 127.0.0.1 into the namespace (socat, over a Unix
socket). Each node's CNI is Debian's bridge plugin (containernetworking-plugins, baked in the
image) with a conflist for its own pod subnet slice, written by the node's bootstrap data as a
KubeadmConfig `files:` entry. kube-proxy and CoreDNS are skipped (`skipPhases`): nothing here
carries Service traffic, and their images would be two more builds.
"""

import io
import json
import os
import socket
import ssl
import subprocess
import tarfile
import time
import urllib.request

from harness import free_port, kube_tier as kt, qemu as q, scenarios as sc, systemd_tier as st

SUBNET = "10.10.0"
GATEWAY = f"{SUBNET}.1"
API_PORT = 6443
ENDPOINT = f"{SUBNET}.10:{API_PORT}"  # cp-0's address
SKIP_PHASES = "addon/kube-proxy,addon/coredns"
# kubeadm's deadlines (v1beta4 `timeouts`, as a KubeadmConfig may set them), raised for guests
# under software emulation on a busy 2-core host: the control plane's static pods take minutes
# to answer there, not seconds.
# nodeagent widens its own deadline for one kubeadm run to these. A join's discovery waits for
# the token the host applies once cp-0 answers; cp-1's is short (3m) so that, when the token
# comes late, kubeadm itself gives up and nodeagent's retry path (reset, the PKI written
# again, a second join) runs (three-nodes-cp-join-retry).
TIMEOUTS = {
    "init": ["controlPlaneComponentHealthCheck=40m", "kubeletHealthCheck=10m", "kubernetesAPICall=5m"],
    "control-plane": ["discovery=3m", "tlsBootstrap=10m", "kubeletHealthCheck=10m",
                      "controlPlaneComponentHealthCheck=40m", "etcdAPICall=10m", "kubernetesAPICall=5m"],
    "worker": ["discovery=15m", "tlsBootstrap=10m", "kubeletHealthCheck=10m"],
}
# The joining nodes boot with cp-0 and wait for its endpoint (nodeagent's bounded wait): on a
# loaded 2-core host that can take longer than the image default of 600 s.
JOIN_NODE_CONFIG = "kubeadm:\n  endpoint_wait_secs: 3000\n  backoff_initial_secs: 1.0\n"
# kubeadm's probes give a static pod about 4 minutes to start (startupProbe 24 x 10 s) and kill
# it after 8 failed liveness checks: under TCG on a busy 2-core host kube-apiserver and etcd can
# need longer, and a restart starts them over. kubeadm's own answer for slow machines: patches
# (`patches.directory`, written by the bootstrap data's `files:`, as a CABPK user would), here
# widening only the probes each manifest already has.
PATCHES_DIR = "/etc/kubernetes/patches"
PROBES = {
    "etcd": ("livenessProbe", "readinessProbe", "startupProbe"),
    "kube-apiserver": ("livenessProbe", "readinessProbe", "startupProbe"),
    "kube-controller-manager": ("livenessProbe", "startupProbe"),
    "kube-scheduler": ("livenessProbe", "startupProbe"),
}
PROBE_WIDTH = {"livenessProbe": "{failureThreshold: 40, periodSeconds: 30, timeoutSeconds: 60}",
               "readinessProbe": "{failureThreshold: 40, periodSeconds: 30, timeoutSeconds: 60}",
               "startupProbe": "{failureThreshold: 120, periodSeconds: 15, timeoutSeconds: 60}"}


# etcd under TCG: its WAL fdatasync took 1-2 s in the guest (the CPU-starved jbd2 thread, not
# the disk: QEMU's cache=unsafe), raft then timed the API server's writes out ("etcdserver:
# request timed out") and the API server never turned live. The test cluster's etcd does not
# sync (its disk is a throwaway overlay) and its raft clock is 5x slower, so the stacked
# members do not call elections while a busy host leaves one without CPU. Set as environment
# (etcd reads ETCD_<FLAG>), which the strategic-merge patch merges by name into kubeadm's
# manifest: kubeadm's own flags stay as they are.
ETCD_ENV = {"ETCD_UNSAFE_NO_FSYNC": "true", "ETCD_HEARTBEAT_INTERVAL": "500", "ETCD_ELECTION_TIMEOUT": "5000"}


# The controller manager and the scheduler exit and start over (minutes under TCG) when a
# lease renewal misses its 10 s deadline, which a busy emulated API server does now and then;
# cluster-info waits for the controller manager to sign the joins' token. A json patch appends
# a wider lease to kubeadm's command line (strategic merge would replace the list). The
# controller manager still restarted 3 times with 60 s / 45 s in CI's rehearsal of 2026-11-29,
# and with 120 s / 100 s 3 times in a three-node run and once in the next rehearsal
# (BENCHMARKS.md): the lease is not its only reason to start over.
LEADER_ELECTION = ("--leader-elect-lease-duration=120s", "--leader-elect-renew-deadline=100s",
                   "--leader-elect-retry-period=10s")
LEASE_HOLDERS = ("kube-controller-manager", "kube-scheduler")


def lease_patch():
    """kubeadm's json patch (RFC 6902) adding LEADER_ELECTION to a component's command."""
    return "".join(f"- {{op: add, path: /spec/containers/0/command/-, value: \"{a}\"}}\n" for a in LEADER_ELECTION)


# Go's garbage collector, every 100 % of heap growth by default, marks through emulated memory
# accesses (TCG's slowest path) while the control plane starts: collect at 300 %, under a soft
# limit per component so the 3 GiB guest keeps its headroom. Set as environment (the Go
# runtime reads GOGC and GOMEMLIMIT; kube-apiserver logs them as "Golang settings"). Not
# measured apart from the other changes of its run (BENCHMARKS.md).
GO_GC_PERCENT = "300"
GO_MEMORY_LIMIT = {"etcd": "512MiB", "kube-apiserver": "1200MiB", "kube-controller-manager": "512MiB",
                   "kube-scheduler": "256MiB"}


def probe_patch(component):
    """kubeadm's strategic-merge patch for one static pod: its probes widened (PROBES), the
    Go collector's settings, and etcd's ETCD_ENV."""
    lines = ["spec:", "  containers:", f"  - name: {component}"]
    lines += [f"    {p}: {PROBE_WIDTH[p]}" for p in PROBES[component]]
    env = {"GOGC": GO_GC_PERCENT, "GOMEMLIMIT": GO_MEMORY_LIMIT[component]}
    if component == "etcd":
        env.update(ETCD_ENV)
    lines += ["    env:"] + [f"    - {{name: {k}, value: \"{v}\"}}" for k, v in env.items()]
    return "\n".join(lines) + "\n"


POD_SUBNET = "192.168.0.0/16"  # mint's (CAPV's) ClusterConfiguration podSubnet; each node a /24 of it
TEST_IMAGE = "nodeagent.test/busybox:1"
STATIC_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

# name: (role, last octet of its address, pod subnet, MAC, memory MiB)
NODES = {
    "cp-0": ("init", 10, "192.168.0.0/24", "52:54:00:0a:0a:10", 3072),
    "cp-1": ("control-plane", 11, "192.168.1.0/24", "52:54:00:0a:0a:11", 3072),
    "w-0": ("worker", 20, "192.168.2.0/24", "52:54:00:0a:0a:20", 1536),
}


def cni_conflist(subnet):
    """The node's CNI: Debian's bridge + host-local + portmap (loopback is the runtime's)."""
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": "nodeagent-test",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2) + "\n"


class PrivateNet:
    """A network namespace holding a bridge (GATEWAY/24) and one tap per guest. No route leads
    out of it; a host port on 127.0.0.1 reaches an address inside only through forward()."""

    def __init__(self, workdir):
        self.ns = f"nodeagent-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
        self.dir = os.path.join(workdir, "net")
        os.makedirs(self.dir, exist_ok=True)
        self.procs = []
        self.taps = 0
        q.run(["ip", "netns", "add", self.ns])
        try:
            for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "link", "add", "br0", "type", "bridge"],
                        ["ip", "addr", "add", f"{GATEWAY}/24", "dev", "br0"], ["ip", "link", "set", "br0", "up"]):
                q.run(self.wrap(cmd))
        except Exception:
            self.close()
            raise

    def wrap(self, cmd):
        return ["ip", "netns", "exec", self.ns, *cmd]

    def tap(self):
        """A new tap on the bridge: the QEMU -netdev for one guest NIC."""
        self.taps += 1
        name = f"tap{self.taps}"
        for cmd in (["ip", "tuntap", "add", "dev", name, "mode", "tap"], ["ip", "link", "set", name, "master", "br0"],
                    ["ip", "link", "set", name, "up"]):
            q.run(self.wrap(cmd))
        return f"tap,ifname={name},script=no,downscript=no"

    def forward(self, addr, port):
        """127.0.0.1:PORT on the host -> addr:port inside the namespace; returns PORT."""
        sock = os.path.join(self.dir, f"{addr}-{port}.sock")
        if os.path.exists(sock):
            os.unlink(sock)
        inner = subprocess.Popen(self.wrap(["socat", f"UNIX-LISTEN:{sock},fork", f"TCP:{addr}:{port},connect-timeout=5"]),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(inner)
        deadline = time.monotonic() + 10
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.05)
        host_port = free_port()
        outer = subprocess.Popen(["socat", f"TCP-LISTEN:{host_port},bind=127.0.0.1,reuseaddr,fork", f"UNIX-CONNECT:{sock}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(outer)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not kt_port_open(host_port):
            time.sleep(0.05)
        return host_port

    def close(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, 9)
            except OSError:
                pass
            p.wait()
        self.procs = []
        subprocess.run(["ip", "netns", "del", self.ns], stderr=subprocess.DEVNULL)


def kt_port_open(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Cluster:
    """Mint, boot and inspect one cluster. Use as a context manager: every VM, forward and the
    namespace are gone after it, whatever happened."""

    def __init__(self, s, name, nodes, workdir=None, node_config=None, pre_commands=None, token_late=False):
        self.s = s
        self.name = name
        self.nodes = list(nodes)
        self.work = workdir or os.path.join(s.workdir, name)
        os.makedirs(self.work, exist_ok=True)
        # node -> /etc/nodeagent/config.yaml text (the image's config, on that node's disk)
        self.node_config = {n: JOIN_NODE_CONFIG for n in self.nodes if NODES[n][0] != "init"}
        self.node_config.update(node_config or {})
        self.pre_commands = pre_commands or {}  # node -> [preKubeadmCommands]
        self.k = kt.kube(s)
        self.bindir = self.k.bindir
        _, _, self.nodeagent = s.fast()
        self.vms = {}
        self.bundles = {}
        self.net = None
        self.api_port = None
        self.etcd_port = None
        self.token = None
        self.token_applied = False
        self.kubeconfig = os.path.join(self.work, "admin.conf")
        self.events = []  # (seconds since the first power-on, text)
        self.t0 = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self):
        self.net = PrivateNet(self.work)
        return self

    def __exit__(self, *exc):
        for vm in self.vms.values():
            vm.kill()
        if self.net:
            self.net.close()

    def note(self, text):
        t = time.monotonic() - (self.t0 or time.monotonic())
        self.events.append((t, text))
        q.log(f"    [{t:6.1f}s] {text}")

    def mint(self):
        """The cluster PKI, one token for every join, one CABPK-shaped bundle per node."""
        self.pki = sc.mint_pki(self.nodeagent, self.work, self.name)
        self.token = kt.new_token(self.s)
        for node in self.nodes:
            role, octet, subnet, mac, _ = NODES[node]
            cni = os.path.join(self.work, f"{node}.conflist")
            with open(cni, "w") as f:
                f.write(cni_conflist(subnet))
            extra = ["--mac", mac, "--network", f"static:{SUBNET}.{octet}/24,gw={GATEWAY},dns={GATEWAY}",
                     "--cloud-provider", "none", "--file", f"/etc/cni/net.d/10-nodeagent.conflist={cni}"]
            if role == "init":
                extra += ["--skip-phases", SKIP_PHASES]
            if role != "worker":
                extra += ["--kubeadm-patches", PATCHES_DIR]
                for comp in PROBES:
                    local = os.path.join(self.work, f"{node}-{comp}+strategic.yaml")
                    with open(local, "w") as f:
                        f.write(probe_patch(comp))
                    extra += ["--file", f"{PATCHES_DIR}/{comp}+strategic.yaml={local}"]
                for comp in LEASE_HOLDERS:
                    local = os.path.join(self.work, f"{node}-{comp}-lease+json.yaml")
                    with open(local, "w") as f:
                        f.write(lease_patch())
                    # kubeadm applies a target's patches in file-name order: "1+json" after "+strategic".
                    extra += ["--file", f"{PATCHES_DIR}/{comp}1+json.yaml={local}"]
            for t in TIMEOUTS[role]:
                extra += ["--kubeadm-timeout", t]
            for c in self.pre_commands.get(node, []):
                extra += ["--pre-command", c]
            self.bundles[node] = sc.mint_bundle(self.nodeagent, self.work, role, self.name, node, ENDPOINT, self.pki,
                                                token=None if role == "init" else self.token, extra=extra,
                                                version=kt.cpl.K8S_VERSION)
        # The host's view: kubernetes-admin (system:masters) against the forward on 127.0.0.1;
        # the API server's certificate names `kubernetes`, not 127.0.0.1 (kubectl --tls-server-name).
        q.run([self.nodeagent, "mint", "kubeconfig", "--pki", self.pki, "--cluster", self.name, "--endpoint",
               "127.0.0.1:1", "--user", "kubernetes-admin", "--group", "system:masters", "--out", self.kubeconfig],
              stdout=subprocess.DEVNULL)

    def boot(self, node, wait_note=True):
        role, octet, subnet, mac, mem = NODES[node]
        files = {"/etc/nodeagent/config.yaml": self.node_config[node]} if node in self.node_config else None
        disk = self.k.disk(node, files=files)
        fw = dict(self.bundles[node], **{"test.hold": "1", "test.timeout": "3600", "test.collect": "1",
                                         "test.podlog": "kube-apiserver etcd"})
        vm = st.sysd(self.s).vm(node, disk, fw, nets=[(self.net.tap(), mac)],
                                append="systemd.journald.forward_to_console=1")
        q.require_artifact(disk, self.k.artifact)
        vm.mem = mem
        vm.smp = 2 if role != "worker" else 1
        vm.cpu = os.environ.get("NODEAGENT_CLUSTER_CPU", "max")
        # TCG's translated code: QEMU's default 1 GiB (16 regions of 63 MiB with two vCPUs) was
        # 15 regions full on cp-0 when its kubeadm started (44 s, /proc/PID/smaps); from then
        # on every full buffer is thrown away and the control plane's code translated again.
        vm.tb_size = 4096 if role != "worker" else 2048
        # cp-0 first: the host's two cores are the whole cluster's, and until cp-0's API server
        # answers the other nodes only wait for it (nice matters only when the host is short).
        vm.prefix = self.net.wrap([] if role == "init" else ["nice", "-n", "10"])
        self.vms[node] = vm
        if self.t0 is None:
            self.t0 = time.monotonic()

        def show(v, t, o):
            if o.get("phase") in ("done", "failed") or "kubeadm" in (o.get("step") or ""):
                err = o.get("error")
                self.note(f"{v.name}: {o.get('phase')} {o.get('step') or ''}{'  error: ' + str(err) if err else ''}")

        vm.on_status(show)
        vm.start()
        self.note(f"{node}: powered on ({role}, {SUBNET}.{octet}, {mem} MiB, {vm.smp} vCPU)")
        return vm

    def renice(self, node, value=0):
        """Set the nice value of every thread of `node`'s QEMU (its vCPUs are threads)."""
        vm = self.vms[node]
        for tid in os.listdir(f"/proc/{vm.proc.pid}/task"):
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), value)
            except (ProcessLookupError, PermissionError):
                pass
        self.note(f"{node}: QEMU at nice {value}")

    # ------------------------------------------------------------ the API, from the host

    # What a slow API server (TCG on a busy 2-core host) answers now and then, not a verdict.
    TRANSIENT = ("TLS handshake timeout", "connection refused", "i/o timeout", "EOF",
                 "context deadline exceeded", "Client.Timeout", "the server is currently unable")

    def kubectl(self, *args, check=True, timeout=60, input=None, attempts=8):
        """kubectl against cp-0 through the forward; with check, a transient failure is retried
        (up to `attempts`, 5 s apart) before it raises."""
        if self.api_port is None:
            self.api_port = self.net.forward(f"{SUBNET}.10", API_PORT)
        cmd = [os.path.join(self.bindir, "kubectl"), "--kubeconfig", self.kubeconfig,
               "--server", f"https://127.0.0.1:{self.api_port}", "--tls-server-name", "kubernetes",
               "--request-timeout", "20s", *args]
        for attempt in range(attempts if check else 1):
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
            except subprocess.TimeoutExpired as e:
                out = subprocess.CompletedProcess(cmd, 124, "", f"timed out after {e.timeout}s (Client.Timeout)")
            if out.returncode == 0 or not check or not any(t in out.stderr for t in self.TRANSIENT):
                break
            time.sleep(5)
        if check and out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
        return out

    def wait_api(self, timeout):
        """Until cp-0's API server answers /readyz through the forward (or cp-0 stops)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.kubectl("get", "--raw", "/readyz", check=False, timeout=30).returncode == 0:
                self.note("API server ready (/readyz through 127.0.0.1)")
                return True
            vm = self.vms.get("cp-0")
            if vm and (vm.proc.poll() is not None or any(o.get("phase") == "failed" for _, o in vm.status)):
                return False
            time.sleep(3)
        return False

    def apply_token(self, timeout=900):
        """The joins' bootstrap token, as Cluster API creates it in the workload cluster
        (`nodeagent mint token --secret`), once cluster-info is signed for it."""
        secret = subprocess.run([self.nodeagent, "mint", "token", "--secret", "--ttl", "2h", "--token", self.token],
                                check=True, capture_output=True, text=True).stdout
        token_id = self.token.split(".")[0]
        deadline = time.monotonic() + timeout
        # A slow API server (TCG, a busy host) times out TLS handshakes now and then: the apply
        # is retried until the deadline; `--validate=false` spares it the OpenAPI download.
        while True:
            out = self.kubectl("apply", "--validate=false", "-f", "-", input=secret, check=False)
            if out.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"kubectl apply of the token Secret kept failing: {out.stderr.strip()}")
            time.sleep(5)
        while time.monotonic() < deadline:
            out = self.kubectl("-n", "kube-public", "get", "configmap", "cluster-info", "-o", "json", check=False)
            if out.returncode == 0 and f"jws-kubeconfig-{token_id}" in json.loads(out.stdout).get("data", {}):
                self.token_applied = True
                self.note(f"bootstrap token {token_id}.<secret> applied; cluster-info signed for it")
                return True
            time.sleep(2)
        return False

    def nodes_json(self):
        out = self.kubectl("get", "nodes", "-o", "json", check=False)
        return json.loads(out.stdout)["items"] if out.returncode == 0 else []

    def wait_ready(self, names, timeout):
        deadline = time.monotonic() + timeout
        seen = set()
        while time.monotonic() < deadline:
            ready = {n["metadata"]["name"] for n in self.nodes_json()
                     if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))}
            for n in sorted(ready - seen):
                self.note(f"Node {n} Ready")
            seen |= ready
            if set(names) <= ready:
                return True
            time.sleep(3)
        return False

    def create_test_pod(self, node):
        """A pod of the locally built test image for `node` (scheduled there by the real
        scheduler; tolerating the taints a node without a cloud controller or CAPI keeps).
        Created as soon as the joins' token is in: it waits in Pending while the node joins,
        so its start overlaps the wait for Ready."""
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"hello-{node}", "namespace": "default"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "hello", "image": TEST_IMAGE, "imagePullPolicy": "IfNotPresent",
                                "command": ["/bin/sh", "-c", "echo hello from $(hostname); ip -4 addr show eth0; "
                                            "sleep 3600"]}],
            },
        }
        self.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(pod))

    def wait_test_pod(self, node, timeout=600):
        """Until create_test_pod's pod runs: (pod json, its log), or (last pod json, None)."""
        deadline = time.monotonic() + timeout
        got = None
        while time.monotonic() < deadline:
            out = self.kubectl("get", "pod", f"hello-{node}", "-o", "json", check=False)
            if out.returncode == 0:
                got = json.loads(out.stdout)
                if got["status"].get("phase") == "Running":
                    logs = ""
                    for _ in range(20):
                        logs = self.kubectl("logs", f"hello-{node}", check=False).stdout
                        if logs.strip():
                            break
                        time.sleep(2)
                    self.note(f"pod hello-{node} Running on {got['spec'].get('nodeName')} ({got['status'].get('podIP')})")
                    return got, logs
            time.sleep(3)
        return got, None

    def etcd_members(self):
        """etcd's member list, asked of cp-0's etcd (its v3 JSON gateway, /v3/cluster/member/list)
        with a client certificate of the minted etcd CA, through a forward to 10.10.0.10:2379."""
        if self.etcd_port is None:
            self.etcd_port = self.net.forward(f"{SUBNET}.10", 2379)
        cert, key = etcd_client_cert(self.pki, self.work)
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "etcd", "ca.crt"))
        ctx.load_cert_chain(cert, key)
        req = urllib.request.Request(f"https://127.0.0.1:{self.etcd_port}/v3/cluster/member/list", data=b"{}",
                                     method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=20) as r:
            return json.load(r).get("members", [])

    # ------------------------------------------------------------ what the guests say

    def report(self, node):
        return self.vms[node].report_tar()

    def condition(self, node):
        """The VM Operator bootstrap condition the agent last set (guestinfo key)."""
        vals = [o.get("value") for _, o in self.vms[node].sets if str(o.get("key", "")).endswith("vmservice.bootstrap.condition")]
        return vals[-1] if vals else None


def etcd_client_cert(pki, work):
    """An etcd client certificate (CN nodeagent-test, clientAuth) signed by the minted etcd CA,
    with openssl: what `etcdctl --cert` would use on a control-plane node."""
    cert, key = os.path.join(work, "etcd-client.crt"), os.path.join(work, "etcd-client.key")
    if os.path.exists(cert):
        return cert, key
    ext = os.path.join(work, "etcd-client.ext")
    with open(ext, "w") as f:
        f.write("extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n")
    csr = os.path.join(work, "etcd-client.csr")
    q.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
           "-subj", "/CN=nodeagent-test", "-out", csr], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    q.run(["openssl", "x509", "-req", "-in", csr, "-CA", os.path.join(pki, "etcd", "ca.crt"), "-CAkey",
           os.path.join(pki, "etcd", "ca.key"), "-CAcreateserial", "-days", "1", "-extfile", ext, "-out", cert],
          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


# ---------------------------------------------------------------- checks


def token_secrets(cl):
    """Every bootstrap token the cluster knows (the joins' minted one and the one `kubeadm
    init` made and printed), and the minted token: the strings no sink may hold."""
    out = {cl.token, cl.token.split(".")[1]}
    got = cl.kubectl("-n", "kube-system", "get", "secrets", "--field-selector", "type=bootstrap.kubernetes.io/token",
                     "-o", "json", check=False)
    if got.returncode == 0:
        import base64

        for item in json.loads(got.stdout)["items"]:
            secret = base64.b64decode(item["data"]["token-secret"]).decode()
            out.add(secret)
    return out


def key_body_lines(pki):
    """One line from the middle of each private key body of the minted PKI."""
    out = []
    for dirpath, _, names in os.walk(pki):
        for n in names:
            if n.endswith(".key"):
                body = [l for l in open(os.path.join(dirpath, n)).read().splitlines() if l and not l.startswith("-----")]
                if body:
                    out.append(body[len(body) // 2])
    return out


def sinks(cl, node):
    """{sink name: text} of everything a node said: its console (the whole journal, forwarded),
    its status lines and the other guestinfo keys it set (the VM Operator condition), and from
    its report: status.json, the agent's logs and kubeadm.log, the journal, the collect-logs
    archive's members."""
    vm = cl.vms[node]
    out = {"console": vm.console(), "status lines and guestinfo keys": "\n".join(json.dumps(o) for _, o in vm.status + vm.sets)}
    for path, (info, data) in cl.report(node).items():
        if data is None:
            continue
        if path.endswith("collect-logs.tar.gz"):
            try:
                with tarfile.open(fileobj=io.BytesIO(data)) as tf:
                    for m in tf.getmembers():
                        if m.isfile():
                            out[f"collect-logs:{m.name}"] = tf.extractfile(m).read().decode(errors="replace")
            except tarfile.TarError as e:
                out["collect-logs"] = f"<unreadable archive: {e}>"
        elif path.startswith(("/run/nodeagent", "/var/log/nodeagent", "/run/test/journal")):
            out[path] = data.decode(errors="replace")
    return out


def check_no_secrets(c, cl, secrets):
    for node in cl.vms:
        found = sinks(cl, node)
        c.ok(any(k.startswith("collect-logs:") for k in found), f"{node}: no collect-logs archive in the report")
        c.ok(any("kubeadm.log" in k for k in found), f"{node}: no kubeadm.log in the report")
        for name, text in found.items():
            for secret in secrets:
                c.ok(secret not in text, f"{node}: a secret ({secret[:6]}…) appears in {name}")
        q.log(f"    {node}: {len(secrets)} secrets looked for in {len(found)} sinks "
              f"({sum(len(t) for t in found.values())} bytes): none found" if not c.failures else "")


def check_no_pull(c, cl):
    """Nothing tried to pull: no CRI PullImage in any node's containerd journal (it logs
    every pull at info level), no `Pulling` event in the cluster, and the kubelet's
    `Pulled` events all say the image was already present."""
    for node, vm in cl.vms.items():
        console = vm.console()
        pulls = [l for l in console.splitlines() if "PullImage" in l]
        c.ok(not pulls, f"{node}: containerd was asked to pull: {pulls[:3]}")
    ev = cl.kubectl("get", "events", "-A", "-o", "json", check=False)
    if ev.returncode == 0:
        items = json.loads(ev.stdout)["items"]
        pulling = [e.get("message") for e in items if e.get("reason") in ("Pulling", "Failed", "ErrImagePull", "BackOff")
                   and "image" in (e.get("message") or "").lower()]
        pulled = [e.get("message") for e in items if e.get("reason") == "Pulled"]
        c.ok(not pulling, f"pull events: {pulling[:3]}")
        c.ok(all("already present on machine" in m for m in pulled), f"Pulled events: {pulled[:3]}")
        q.log(f"    no pull: 0 PullImage calls in {len(cl.vms)} journals; events: {len(pulled)} `Pulled` "
              f"(all 'already present on machine'), 0 `Pulling`")


def check_node_end_state(c, cl, node):
    vm = cl.vms[node]
    final = next((o for _, o in reversed(vm.status) if o.get("phase") in ("done", "failed")), None)
    c.ok(final is not None and final.get("phase") == "done", f"{node}: final status {final}")
    # The agent sets the condition just after its last status line, and the guest sends its
    # report once the agent has ended: wait for the whole report, not only the status line.
    c.ok(vm.wait_report(300), f"{node}: no whole report from the guest within 300 s")
    files = cl.report(node)
    c.eq((sc.report_file(files, sc.SENTINEL) or b"").decode().strip(), "success", f"{node}: {sc.SENTINEL}")
    cond = cl.condition(node)
    c.ok(cond is not None and cond.startswith("true,"), f"{node}: VM Operator condition {cond!r}")
    q.log(f"    {node}: status {final and final.get('phase')}, {sc.SENTINEL} = success, condition {cond!r}")


def check_pki_intact(c, cl, node):
    """The PKI the bootstrap data shipped is on the node byte for byte (after any reset)."""
    files = cl.report(node)
    for rel in ("ca.crt", "ca.key", "sa.key", "sa.pub", "front-proxy-ca.crt", "front-proxy-ca.key", "etcd/ca.crt", "etcd/ca.key"):
        got = sc.report_file(files, f"/etc/kubernetes/pki/{rel}")
        want = open(os.path.join(cl.pki, rel), "rb").read()
        c.ok(got == want, f"{node}: /etc/kubernetes/pki/{rel} is not the minted file")


def show(cl, *args):
    out = cl.kubectl(*args, check=False)
    text = (out.stdout + out.stderr).rstrip()
    q.log(f"    $ kubectl {' '.join(args)}\n" + "\n".join("      " + l for l in text.splitlines()))
    return text


def run_cluster(s, c, name, nodes, node_config=None, retry=None, workdir=None):
    """Boot `nodes` (cp-0 first, the others at once after it), apply the joins' token once
    cp-0's API answers (with retry = a joining node: only after that node's first join has
    failed for want of it, so its retry path runs with real kubeadm), then check the whole
    cluster from the real API server."""
    with Cluster(s, name, nodes, workdir=workdir, node_config=node_config) as cl:
        cl.mint()
        joining_cps = [n for n in nodes if NODES[n][0] == "control-plane"]
        workers = [n for n in nodes if NODES[n][0] == "worker"]
        # Beside a stacked-etcd join, a worker is powered on only once that join is done: two
        # emulated control planes already fill the 2-core host, and kubeadm's etcd client
        # gives each call 2 s (hard-coded). Without one, it waits for cp-0's endpoint at once.
        for node in nodes:
            if not (joining_cps and node in workers):
                cl.boot(node)
        if not cl.wait_api(3600):
            # cp-0 failed or never served: nothing else can happen; its status says why.
            c.ok(False, f"cp-0's API server never answered; cp-0's last status: {cl.vms['cp-0'].status[-1:]}")
            return cl, ""
        if retry:
            vm = cl.vms[retry]
            again = vm.wait_for(lambda o: "attempt 2 of" in json.dumps(o) or o.get("phase") in ("done", "failed"), 900)
            c.ok(again is not None and "attempt 2 of" in json.dumps(again), f"{retry} never retried its join: {again}")
            cl.note(f"{retry}'s first join failed (no token yet); its retry has begun")
        c.ok(cl.apply_token(), "cluster-info was never signed for the joins' token")
        if workers:
            cl.create_test_pod(workers[0])
        # The joins begin now: the joining nodes, niced while they only waited, run at cp-0's
        # priority, the control planes first (kubeadm's etcd client gives each dial and call
        # of a stacked-etcd join 2 s, hard-coded: a guest niced behind cp-0 on a busy host
        # missed them), the workers (whose kubeadm waits are minutes) once those are done.
        for node in joining_cps:
            cl.renice(node, 0)
        for node in joining_cps:
            cl.vms[node].wait_for(lambda o: o.get("phase") in ("done", "failed"), 3600)
        for node in workers:
            if node not in cl.vms:
                cl.boot(node)
            cl.renice(node, 0)
        for node in nodes:
            final = cl.vms[node].wait_for(lambda o: o.get("phase") in ("done", "failed"), 3600)
            c.ok(final is not None, f"{node}: no final status")
        for node in nodes:
            check_node_end_state(c, cl, node)
        c.ok(cl.wait_ready(nodes, 900), f"not every Node became Ready: {[(n['metadata']['name'], [x['status'] for x in n['status'].get('conditions', []) if x['type'] == 'Ready']) for n in cl.nodes_json()]}")
        wide = show(cl, "get", "nodes", "-o", "wide")
        for n in cl.nodes_json():
            addrs = {a["type"]: a["address"] for a in n["status"].get("addresses", [])}
            want = f"{SUBNET}.{NODES[n['metadata']['name']][1]}"
            c.eq(addrs.get("InternalIP"), want, f"{n['metadata']['name']}: InternalIP")
        if workers:
            pod, logs = cl.wait_test_pod(workers[0])
            c.ok(logs is not None and "hello from" in logs, f"test pod on {workers[0]}: {pod and pod.get('status')}")
            if logs:
                q.log("    $ kubectl logs hello-" + workers[0] + "\n" + "\n".join("      " + l for l in logs.splitlines()))
        pods = json.loads(cl.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
        for node in nodes:
            if NODES[node][0] == "worker":
                continue
            for comp in STATIC_PODS:
                p = next((p for p in pods if p["metadata"]["name"] == f"{comp}-{node}"), None)
                c.ok(p is not None and p["status"].get("phase") == "Running",
                     f"static pod {comp}-{node}: {p and p['status'].get('phase')}")
        show(cl, "get", "pods", "-A", "-o", "wide")
        if "cp-1" in nodes:
            members = cl.etcd_members()
            q.log("    etcd member list (cp-0's etcd, /v3/cluster/member/list):\n" + "\n".join(
                f"      {int(m['ID']):x}, started, {m.get('name')}, {','.join(m.get('peerURLs', []))}, "
                f"{','.join(m.get('clientURLs', []))}" for m in members))
            c.eq(sorted(m.get("name") for m in members), ["cp-0", "cp-1"], "etcd members")
            check_pki_intact(c, cl, "cp-1")
        check_no_pull(c, cl)
        check_no_secrets(c, cl, token_secrets(cl) | set(key_body_lines(cl.pki)))
        for node, vm in cl.vms.items():
            s.record(vm, "ok, killed after the cluster checks")
        return cl, wide


def cluster_scenario(s, name, nodes, retry=None):
    """run_cluster as a scenario: its failures."""
    c = sc.Checks()
    run_cluster(s, c, name, nodes, retry=retry)
    return c.failures


INIT_WORKER = """cluster tier: cp-0 runs the real `kubeadm init` from a minted CABPK init bundle (static
    pods from the image's local container images), w-0 waits for cp-0's endpoint (bounded)
    and joins; both Nodes Ready, the static pods Running, a test pod Running on w-0; no pull
    attempted, no secret in any sink. (A forced first failure of w-0's join, as cp-1's in
    three-nodes-cp-join-retry, cost CI 3-5 min under TCG: kubeadm alone took 115 s to start.)"""

THREE_NODES = """cluster tier: cp-0 (init), cp-1 (control-plane join, stacked etcd) and w-0 (worker),
    booted together: cp-1 waits for cp-0's API (bounded), its first join fails (kubeadm's
    discovery gives up: the token is not there yet), nodeagent resets and joins again with
    the shipped PKI intact; etcd lists
    two members; every Node Ready; a test pod Running on w-0."""


def sc_init_refused(s):
    """cluster tier, fault: port 6443 is taken on cp-0 before kubeadm runs (a preKubeadmCommand
    starts a listener): the real `kubeadm init` refuses in pre-flight; nodeagent reports
    `failed` with kubeadm's error, the VM Operator condition `false,...`, and does not loop
    (one init, no `kubeadm reset` that would wipe etcd data)."""
    c = sc.Checks()
    squat = "systemd-run --unit=squat-6443 socat TCP-LISTEN:6443,reuseaddr,fork SYSTEM:true"
    with Cluster(s, "init-refused", ["cp-0"]) as cl:
        cl.pre_commands = {"cp-0": [squat]}
        cl.mint()
        vm = cl.boot("cp-0")
        final = vm.wait_for(lambda o: o.get("phase") in ("done", "failed"), 1200)
        c.ok(final is not None and final.get("phase") == "failed", f"final status {final}")
        err = json.dumps(final or {})
        c.ok("6443" in err and "in use" in err, f"the status does not carry kubeadm's pre-flight error: {err[:400]}")
        cond = cl.condition("cp-0")
        c.ok(cond is not None and cond.startswith("false,"), f"VM Operator condition {cond!r}")
        time.sleep(20)  # would a loop start another attempt?
        c.ok(vm.wait_report(300), "no whole report from cp-0 within 300 s")
        console = vm.console()
        inits = console.count("[init] Using Kubernetes version")
        c.eq(inits, 1, "kubeadm init runs")
        c.ok("[reset]" not in console, "a kubeadm reset ran after the refused init")
        files = cl.report("cp-0")
        c.ok(sc.report_file(files, sc.SENTINEL) is None, "the sentinel exists after a failed init")
        q.log(f"    final status: {json.dumps(final)[:300]}\n    condition: {cond}")
        check_no_secrets(c, cl, {cl.token.split(".")[1]} | set(key_body_lines(cl.pki)))
        s.record(vm, "ok, killed after the checks")
    return c.failures


SCENARIOS = [
    ("init-and-worker", sc.variant(cluster_scenario, INIT_WORKER, "init-worker", ["cp-0", "w-0"])),
    ("init-refused-port-taken", sc_init_refused),
    ("three-nodes-cp-join-retry", sc.variant(cluster_scenario, THREE_NODES, "three-nodes", ["cp-0", "cp-1", "w-0"],
                                             retry="cp-1")),
]
