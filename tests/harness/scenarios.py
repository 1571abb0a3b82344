"""QEMU-booted scenarios: each boots one or more guests and checks from the outside what
nodeagent did (status lines on virtio-serial, the guest's report of its files).

    tests/harness/run scenarios [--tier fast|systemd|kube|cluster|all] [--jobs N] [NAME ...]

Prints every boot with its duration and ends with `N passed, N failed`.
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from harness import TESTS, free_port, qemu as q

LOCAL_CORPUS_INIT = os.path.join(q.HERE, "data", "controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml")
SENTINEL = "/run/cluster-api/bootstrap-success.complete"
STANDIN_LOG = "/var/log/kubeadm-standin.jsonl"


# ---------------------------------------------------------------- bootstrap data


def capv_metadata(instance_id, hostname, network=None):
    """guestinfo.metadata as CAPV writes it (see corpus capv/metadata-golden-head)."""
    text = f'\ninstance-id: "{instance_id}"\nlocal-hostname: "{hostname}"\n'
    if network:
        text += network
    return text


def corpus_init_userdata():
    """A real CABPK-rendered control-plane init userdata (corpus, see its README)."""
    return open(LOCAL_CORPUS_INIT).read() + "\n"


def cabpk_write_files(userdata):
    """{path: (mode, content)} from CABPK-shaped `write_files` (literal `|` blocks or a
    one-line quoted string), to know what the node must end up with."""
    files, cur, block = {}, None, None
    for line in userdata.splitlines():
        if block is not None:
            if line.strip() == "" or line.startswith("      "):
                block.append(line[6:])
                continue
            files[cur["path"]] = (cur["mode"], "\n".join(block).rstrip("\n") + "\n")
            block = None
        m = re.match(r"^-\s+path: (\S+)$", line)
        if m:
            cur = {"path": m.group(1), "mode": "0644"}
            continue
        if cur is None:
            continue
        m = re.match(r"^    permissions: '?(\d+)'?$", line)
        if m:
            cur["mode"] = m.group(1)
        elif line == "    content: |":
            block = []
        elif line.startswith("    content: "):
            files[cur["path"]] = (cur["mode"], json.loads(line[len("    content: "):]))
        elif not line.startswith(" "):
            cur = None
    if block is not None:
        files[cur["path"]] = (cur["mode"], "\n".join(block).rstrip("\n") + "\n")
    return files


def worker_join_userdata(endpoint, node):
    """Worker join userdata in CABPK's exact shape (docs/formats.md (a)), used when
    `nodeagent mint bootstrap` is not available."""
    return f"""## template: jinja
#cloud-config

write_files:
-   path: /run/kubeadm/kubeadm-join-config.yaml
    owner: root:root
    permissions: '0640'
    content: |
      ---
      apiVersion: kubeadm.k8s.io/v1beta3
      discovery:
        bootstrapToken:
          apiServerEndpoint: {endpoint}
          caCertHashes:
          - sha256:45b3e1e2a3b8fbd9d1d0a4a1c7e2f7c5b3d88e9e0f0a1b2c3d4e5f60718293a4
          token: abcdef.0123456789abcdef
      kind: JoinConfiguration
      nodeRegistration:
        imagePullPolicy: IfNotPresent
        kubeletExtraArgs:
          cloud-provider: external
        name: '{{{{ ds.meta_data.hostname }}}}'
        taints:
        - effect: NoSchedule
          key: node.cluster.x-k8s.io/uninitialized
-   path: /run/cluster-api/placeholder
    owner: root:root
    permissions: '0640'
    content: "This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)"
runcmd:
  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete
"""


def mint_available(nodeagent):
    out = subprocess.run([nodeagent, "mint", "bootstrap", "--help"], capture_output=True, text=True)
    return out.returncode == 0 and "--format" in out.stdout


def mint_bundle(nodeagent, workdir, role, cluster, node, endpoint, pki, token=None, extra=(), version="v1.31.2"):
    """`nodeagent mint bootstrap ... --format fwcfg` -> fw_cfg entries for one node."""
    out = os.path.join(workdir, f"bundle-{node}")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [nodeagent, "mint", "bootstrap", "--role", role, "--cluster", cluster, "--node", node,
           "--endpoint", endpoint, "--kubernetes-version", version, "--pki", pki,
           "--format", "fwcfg", "--out", out, *extra]
    if token:
        cmd += ["--token", token]
    q.run(cmd, stdout=subprocess.DEVNULL)
    per_node = os.path.join(out, node)
    return q.fwcfg_from_bundle(per_node if os.path.isdir(per_node) else out)


def mint_pki(nodeagent, workdir, cluster):
    pki = os.path.join(workdir, f"pki-{cluster}")
    if not os.path.exists(os.path.join(pki, "ca.crt")):
        q.run([nodeagent, "mint", "pki", "--cluster", cluster, "--out", pki], stdout=subprocess.DEVNULL)
    return pki


# ---------------------------------------------------------------- session: images built once, boots counted


class Session:
    def __init__(self, workdir):
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.boots = []  # (vm name, seconds, outcome)
        self._fast = None
        self._fast_image = None  # the Packer-built image the fast tier boots, and its plumbing disk
        self._fast_plumbing = None
        self.scratch = []  # disk images and staged trees: gigabytes, removed by cleanup()

    def cleanup(self):
        """Remove the disk images and staged trees of this session (logs stay), unless
        QEMU_KEEP_DISKS=1: a CI run would otherwise leave gigabytes behind."""
        if os.environ.get("QEMU_KEEP_DISKS") == "1":
            return
        for path in self.scratch:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.unlink(path)
        self.scratch = []

    def fast(self):
        """Kernel, initramfs and the nodeagent under test (built once per session)."""
        if self._fast is None:
            t = time.monotonic()
            q.ensure_host_tools()
            kernel = q.Kernel()
            initrd = q.build_initramfs(kernel)
            nodeagent = q.cargo_build("nodeagent")
            self._fast = (kernel, initrd, nodeagent)
            q.log(f"kernel, initramfs and nodeagent ready in {time.monotonic() - t:.1f}s (kernel {kernel.version})")
        return self._fast

    def fast_disk(self, name):
        """A copy-on-write overlay of the Packer-built node image (image-build/build-qemu
        plain), which the fast tier boots with its own init (no systemd) from its plumbing disk."""
        kernel, _, _ = self.fast()
        if self._fast_image is None:
            t = time.monotonic()
            self._fast_image = q.packer_artifact("plain")
            self._fast_plumbing = q.fast_plumbing_disk(kernel, q.standin_kubeadm(),
                                                       os.path.join(self.workdir, "fast-plumbing.img"))
            self.scratch.append(self._fast_plumbing)
            q.log(f"fast tier: Packer-built image {os.path.relpath(self._fast_image, q.REPO)} ready in "
                  f"{time.monotonic() - t:.1f}s")
        path = q.artifact_overlay(self._fast_image, os.path.join(self.workdir, f"{name}.qcow2"))
        self.scratch.append(path)
        return path

    def vm(self, name, disk, fwcfg, **kw):
        """A fast-tier VM: an overlay of the Packer-built image (refused otherwise), booted with
        guest/fast-init from the read-only plumbing disk."""
        kernel, initrd, _ = self.fast()
        q.require_artifact(disk, self._fast_image)
        kw["extra"] = list(kw.get("extra", ())) + ["-drive", f"file={self._fast_plumbing},if=virtio,format=raw,readonly=on"]
        kw["append"] = f"root=/dev/vda1 init={q.FAST_INIT} qemu_test.plumbing=/dev/vdb {kw.get('append', '')}".strip()
        return q.VM(name, self.workdir, kernel.vmlinuz, initrd, disk, fwcfg=fwcfg, **kw)

    def boot(self, vm, timeout=90):
        """Start, wait for power-off (or time out), record the boot."""
        vm.start()
        ok = vm.wait(timeout)
        self.record(vm, "ok" if ok else f"TIMEOUT after {timeout}s")
        return ok

    def record(self, vm, outcome):
        last = vm.last_status() or {}
        done = vm.first("done")
        extra = f", done at {done:.1f}s" if done is not None else ""
        self.boots.append((vm.name, vm.ended or 0.0, outcome))
        q.log(f"  boot {len(self.boots):2d} {vm.name:28s} {vm.ended or 0:6.1f}s  phases {'>'.join(p or '?' for p in vm.phases()) or '-'}"
              f"  last={last.get('phase', '-')}{extra}  [{outcome}]")


# ---------------------------------------------------------------- checks


class Checks:
    def __init__(self):
        self.failures = []

    def ok(self, cond, msg):
        if not cond:
            self.failures.append(msg)
        return cond

    def eq(self, got, want, msg):
        return self.ok(got == want, f"{msg}: got {got!r}, want {want!r}")


def report_file(files, path):
    entry = files.get(path)
    return entry[1] if entry and entry[1] is not None else None


def standin_calls(files):
    """The kubeadm stand-in's record (JSON lines, one per finished call):
    [(argv joined, "ok" or "exit N: reason")] in call order."""
    calls = []
    for line in (report_file(files, STANDIN_LOG) or b"").decode().splitlines():
        rec = json.loads(line)
        result = "ok" if rec.get("exit") == 0 else f"exit {rec.get('exit')}: {rec.get('reason')}"
        calls.append((" ".join(rec.get("argv", [])), result))
    return calls


def standin_created(files):
    """Paths the kubeadm stand-in's calls created (its record's `created` lists)."""
    made = set()
    for line in (report_file(files, STANDIN_LOG) or b"").decode().splitlines():
        made.update(json.loads(line).get("created") or [])
    return made


def no_secrets(c, vm, secrets):
    """No private key or token byte in the status lines or the agent's console output."""
    status_text = "\n".join(json.dumps(o) for _, o in vm.status + vm.sets)
    console = vm.console()
    for s in secrets:
        c.ok(s not in status_text, f"{vm.name}: a secret ({s[:12]}…) appears in a status line")
        c.ok(s not in console, f"{vm.name}: a secret ({s[:12]}…) appears on the console")
    c.ok("PRIVATE KEY-----\n" not in status_text, f"{vm.name}: a PEM private key appears in a status line")


def secrets_of(files):
    out = []
    for path, (mode, content) in files.items():
        if "PRIVATE KEY" in content:
            body = [l for l in content.splitlines() if l and not l.startswith("-----")]
            out.append(body[len(body) // 2])  # one line from the middle of the key body
    return out


def check_status_stream(c, vm, instance_id, final):
    lines = [o for _, o in vm.status]
    if not c.ok(lines, f"{vm.name}: no status line arrived on {q.STATUS_PORT}"):
        return
    for o in lines:
        c.ok(o.get("v") == 1, f"{vm.name}: status line without v=1: {o}")
        c.ok(len(json.dumps(o)) <= 4096, f"{vm.name}: status line over 4 KiB")
        c.ok(o.get("instance_id") == instance_id, f"{vm.name}: status instance_id {o.get('instance_id')!r} != {instance_id!r}")
        c.ok(o.get("phase") in ("reading", "applying", "waiting", "kubeadm", "done", "failed"), f"{vm.name}: bad phase in {o}")
    c.eq(lines[-1].get("phase"), final, f"{vm.name}: final phase")
    terminal = [o for o in lines if o.get("phase") in ("done", "failed")]
    c.eq(len(terminal), 1, f"{vm.name}: number of terminal status lines")


def check_node_files(c, vm, files, expected, role_cmd):
    """The node has every write_files entry with its mode and content, the sentinel, the
    status file, and the stand-in saw exactly the kubeadm command of the userdata."""
    for path, (mode, content) in expected.items():
        got = files.get(path)
        if not c.ok(got is not None and got[1] is not None, f"{vm.name}: {path} missing on the node"):
            continue
        info, data = got
        c.eq(oct(info.mode & 0o7777), oct(int(mode, 8)), f"{vm.name}: mode of {path}")
        c.eq((info.uid, info.gid), (0, 0), f"{vm.name}: owner of {path}")
        c.ok(data.decode() == content, f"{vm.name}: content of {path} differs from the userdata's")
    c.eq((report_file(files, SENTINEL) or b"").decode().strip(), "success", f"{vm.name}: sentinel {SENTINEL}")
    st = report_file(files, "/run/nodeagent/status.json")
    if c.ok(st is not None, f"{vm.name}: /run/nodeagent/status.json missing"):
        c.eq(json.loads(st).get("phase"), "done", f"{vm.name}: phase in /run/nodeagent/status.json")
    state = files.get("/var/lib/nodeagent")
    if c.ok(state is not None, f"{vm.name}: /var/lib/nodeagent missing"):
        c.eq(oct(state[0].mode & 0o777), oct(0o700), f"{vm.name}: mode of /var/lib/nodeagent")
    calls = standin_calls(files)
    if c.ok(calls, f"{vm.name}: kubeadm (stand-in) was never called"):
        c.eq(calls[-1], (role_cmd, "ok"), f"{vm.name}: last kubeadm call")


def file_digest(files, prefixes):
    """{path: (mode, uid, gid, sha256)} of the node's files under `prefixes`: the end state."""
    out = {}
    for path, (info, data) in files.items():
        if info is not None and data is not None and any(path.startswith(p) for p in prefixes):
            out[path] = (info.mode & 0o7777, info.uid, info.gid, hashlib.sha256(data).hexdigest())
    return out


END_STATE = ("/etc/kubernetes", "/run/kubeadm", "/run/cluster-api", "/etc/hostname")


def variant(fn, doc, *args, **kw):
    """A scenario that is `fn(s, *args, **kw)`, described by `doc` (the runner prints it):
    a row of a scenario table for scenarios that differ only in their data."""
    def scenario(s):
        return fn(s, *args, **kw)

    scenario.__doc__ = doc
    return scenario


# ---------------------------------------------------------------- fast-tier scenarios


def sc_artifact_guard(s):
    """The tiers boot the Packer-built image and nothing else: a raw disk, a qcow2 with no
    backing file, and an overlay of another qcow2 are each refused before QEMU starts (and an
    overlay of the image is accepted), in the fast, systemd and kube tiers alike."""
    from harness import kube_tier, systemd_tier  # both import this module: imported here, not at the top

    c = Checks()
    good = s.fast_disk("guard-good")
    raw = q.make_disk(q.GUEST, os.path.join(s.workdir, "guard-raw.img"), size_mb=16)
    plain_qcow = os.path.join(s.workdir, "guard-plain.qcow2")
    q.run(["qemu-img", "create", "-q", "-f", "qcow2", plain_qcow, "64M"])
    other = q.artifact_overlay(plain_qcow, os.path.join(s.workdir, "guard-other.qcow2"))
    s.scratch += [raw, plain_qcow, other]
    c.ok(s.vm("guard-good", good, {}) is not None, "an overlay of the Packer-built image was refused")
    sysd = systemd_tier.sysd(s)
    sysd.disk("systemd-guard-good", "nodeagent")  # the systemd tier's image: the same `plain` build
    kube = kube_tier.kube(s)
    with_kube = os.environ.get("NODEAGENT_REQUIRE_K8S") == "1" or kube_tier.cpl.built()
    kube.artifact = q.packer_artifact("kube") if with_kube else None
    tiers = [("fast", lambda d: s.vm("guard", d, {})), ("systemd", lambda d: sysd.vm("systemd-guard", d, {}))]
    if kube.artifact:
        tiers.append(("kube", lambda d: kube.vm("kube-guard", d, {}, 1, "52:54:00:00:00:09")))
    for tier, make in tiers:
        for what, disk in [("a raw disk", raw), ("a qcow2 without backing file", plain_qcow),
                           ("an overlay of another image", other)]:
            try:
                make(disk)
                c.ok(False, f"{tier} tier booted {what}")
            except RuntimeError as e:
                c.ok("not an overlay of the Packer-built image" in str(e), f"{tier} tier, {what}: {e}")
    q.log(f"  artifact guard: {len(tiers)} tiers x 3 wrong disks refused" if not c.failures else "  artifact guard failed")
    return c.failures


def sc_plumbing(s):
    """Boot plumbing alone: fw_cfg in, a JSON line out on virtio-serial, the report back."""
    c = Checks()
    line = {"v": 1, "phase": "done", "probe": os.urandom(4).hex()}
    vm = s.vm("plumbing", s.fast_disk("plumbing"), {"test.mode": "echo", "test.echo": json.dumps(line) + "\n"})
    c.ok(s.boot(vm, 60), "guest did not power off")
    c.eq([o for _, o in vm.status], [line], "status line read back")
    c.ok("/run/test/agent.rc" in vm.report_tar(), "guest report missing")
    return c.failures


def sc_net_plumbing(s):
    """Network plumbing alone: a guest on the private 127.0.0.1 dgram network reaches a TCP
    listener in a second guest that starts later."""
    c = Checks()
    net_a, net_b = pair_nets()
    a = s.vm("net-probe", s.fast_disk("net-probe"), {"test.mode": "probe", "test.probe": "10.0.0.2 6443", "test.addr": "10.0.0.3/24"},
             nets=[(net_a, "52:54:00:00:00:03")])
    b = s.vm("net-listener", s.fast_disk("net-listener"),
             {"test.mode": "echo", "test.echo": "{}\n", "test.addr": "10.0.0.2/24", "test.listen": "6443"},
             nets=[(net_b, "52:54:00:00:00:02")])
    a.start()
    time.sleep(3)
    b.start()
    c.ok(a.wait(90), "probing guest did not power off")
    s.record(a, "ok")
    b.kill()
    s.record(b, "killed")
    line = a.last_status() or {}
    c.eq(line.get("phase"), "probe", "probe result line")
    c.ok(0 < line.get("tries", 0) < 120, f"listener never answered or answered before it started: {line}")
    return c.failures


def cp_init_data(instance_id="cp-1", hostname="cp-1"):
    userdata = corpus_init_userdata()
    return userdata, q.fwcfg_guestinfo(metadata=capv_metadata(instance_id, hostname), userdata=userdata)


INIT_CMD = "init --config /run/kubeadm/kubeadm.yaml"


def sc_cp_init(s):
    """Control-plane init (real CABPK userdata) reaches done with PKI, kubeadm config,
    sentinel, status and state correct; no secret in status or on the console."""
    c = Checks()
    userdata, fw = cp_init_data()
    vm = s.vm("cp-init", s.fast_disk("cp-init"), fw)
    c.ok(s.boot(vm), "guest did not power off")
    files = vm.report_tar()
    check_status_stream(c, vm, "cp-1", "done")
    expected = cabpk_write_files(userdata)
    check_node_files(c, vm, files, expected, INIT_CMD)
    c.eq(len(standin_calls(files)), 1, "kubeadm calls")
    c.eq((report_file(files, "/run/test/agent.rc") or b"").strip(), b"0", "nodeagent exit status")
    c.eq((report_file(files, "/run/test/hostname.txt") or b"").decode().strip(), "cp-1", "hostname")
    no_secrets(c, vm, secrets_of(expected))
    sets = {o.get("key"): o.get("value") for _, o in vm.sets}
    c.eq(sets.get("userdata"), "---", "guestinfo.userdata redacted after success")
    s.reference_end_state = file_digest(files, END_STATE)
    return c.failures


def sc_malformed(s):
    """Malformed userdata (a real CABPK document with a broken runcmd) gives `failed` with
    the reason on the status port and writes nothing."""
    c = Checks()
    userdata = corpus_init_userdata().rstrip("\n") + "\n  - [unclosed, flow\n"
    fw = q.fwcfg_guestinfo(metadata=capv_metadata("bad-1", "bad-1"), userdata=userdata)
    vm = s.vm("malformed", s.fast_disk("malformed"), fw)
    c.ok(s.boot(vm), "guest did not power off")
    files = vm.report_tar()
    lines = [o for _, o in vm.status]
    last = lines[-1] if lines else {}
    c.eq(last.get("phase"), "failed", "final phase")
    c.eq(last.get("instance_id"), "bad-1", "instance_id in the failure status (the metadata itself is valid)")
    err = json.dumps(last.get("error") or "")
    c.ok(len(err) > 10 and re.search(r"userdata|line|yaml", err, re.I), f"failure reason does not name the place: {err}")
    c.ok("applying" not in [o.get("phase") for o in lines], "a malformed document reached the applying phase")
    for p in ["/etc/kubernetes/pki/ca.key", "/etc/kubernetes", "/run/kubeadm/kubeadm.yaml", SENTINEL]:
        c.ok(p not in files, f"{p} was written although the userdata is malformed")
    c.eq(standin_calls(files), [], "kubeadm calls")
    c.eq((report_file(files, "/run/test/agent.rc") or b"").strip(), b"1", "nodeagent exit status")
    no_secrets(c, vm, secrets_of(cabpk_write_files(corpus_init_userdata())))
    return c.failures


def sc_reboot(s):
    """A reboot with the same instance-id (same disk) does not run kubeadm again and
    still reports done."""
    c = Checks()
    _, fw = cp_init_data("rb-1", "rb-1")
    disk = s.fast_disk("reboot")
    vm1 = s.vm("reboot-1", disk, fw)
    c.ok(s.boot(vm1), "first boot did not power off")
    c.eq(vm1.phases()[-1:], ["done"], "first boot's final phase")
    vm2 = s.vm("reboot-2", disk, fw)
    c.ok(s.boot(vm2), "second boot did not power off")
    files = vm2.report_tar()
    c.eq(vm2.phases()[-1:], ["done"], "second boot's final phase")
    c.ok("kubeadm" not in vm2.phases(), "second boot entered the kubeadm phase")
    c.eq(standin_calls(files), [(INIT_CMD, "ok")], "kubeadm calls over both boots")
    # /run is a tmpfs: the sentinel of the first boot is gone, and (as with cloud-init, whose
    # runcmd is per-instance) nothing writes it again. The node's files are still there.
    c.ok("/etc/kubernetes/pki/ca.key" in files, "PKI missing after the reboot")
    return c.failures


def power_cut(s, name, kill_phase, delay):
    """Kill QEMU when `kill_phase` is reported, boot again from the same disk: the node
    reaches the same end state as an uninterrupted run."""
    c = Checks()
    userdata, fw = cp_init_data("cp-1", "cp-1")
    disk = s.fast_disk(name)
    vm1 = s.vm(f"{name}-1", disk, dict(fw, **{"test.kubeadm-delay": str(delay)}))
    vm1.start()
    seen = vm1.wait_for(lambda o: o.get("phase") == kill_phase, 90)
    if kill_phase == "kubeadm":
        time.sleep(1.0)  # the stand-in is inside its delay: kubeadm is running
    vm1.kill()
    s.record(vm1, f"power cut at {kill_phase}" if seen else f"{kill_phase} never reported")
    c.ok(seen is not None, f"first boot never reported phase {kill_phase}")
    c.ok("done" not in vm1.phases(), f"first boot reached done before the power cut (kill too late): {vm1.phases()}")
    vm2 = s.vm(f"{name}-2", disk, fw)
    c.ok(s.boot(vm2), "boot after the power cut did not power off")
    files = vm2.report_tar()
    check_status_stream(c, vm2, "cp-1", "done")
    check_node_files(c, vm2, files, cabpk_write_files(userdata), INIT_CMD)
    calls = standin_calls(files)
    # An init the power cut interrupted (begun, no status recorded) is reset before it starts
    # again (kubeadm/run.rs reset_interrupted): its manifests and etcd data would fail the new
    # init's pre-flight. A cut before init began leaves nothing to reset.
    want = [[(INIT_CMD, "ok")]]
    if kill_phase == "kubeadm":
        want.append([("reset -f", "ok"), (INIT_CMD, "ok")])
    c.ok(calls in want, f"finished kubeadm calls over both boots (a killed call records nothing): got {calls}, want one of {want}")
    landed = "during kubeadm" if "kubeadm" in vm1.phases() else "before kubeadm started"
    q.log(f"    the power cut landed {landed} (first boot's phases: {vm1.phases()}); kubeadm calls: {calls}")
    ref = getattr(s, "reference_end_state", None)
    if ref:
        # What kubeadm itself generates (leaf certificates with fresh keys, kubeconfigs) differs
        # between any two inits, as with real kubeadm: compare what the agent wrote.
        made = standin_created(files)
        got = {k: v for k, v in file_digest(files, END_STATE).items() if k not in made}
        ref = {k: v for k, v in ref.items() if k not in made}
        diff = sorted(set(ref.items()) ^ set(got.items()))
        c.ok(not diff, f"end state differs from an uninterrupted run: {diff[:4]}")
    return c.failures


def clone_userdata(userdata):
    """The bootstrap data of a clone of an already bootstrapped disk. That disk still holds the
    first instance's static pod manifests, and real kubeadm init refuses them in preflight
    (FileAvailable--etc-kubernetes-manifests-*.yaml), as the stand-in does; a clone meant to
    bootstrap again has to say so in its kubeadm config, as on a real node."""
    old = "      nodeRegistration:\n        imagePullPolicy: IfNotPresent\n"
    assert old in userdata, "InitConfiguration.nodeRegistration not found"
    return userdata.replace(old, old + "        ignorePreflightErrors:\n        - all\n", 1)


def sc_clone(s):
    """A clone (same disk, new instance-id) bootstraps again."""
    c = Checks()
    disk = s.fast_disk("clone")
    _, fw1 = cp_init_data("orig-1", "orig-1")
    vm1 = s.vm("clone-orig", disk, fw1)
    c.ok(s.boot(vm1), "first boot did not power off")
    c.eq(vm1.phases()[-1:], ["done"], "original's final phase")
    fw2 = q.fwcfg_guestinfo(metadata=capv_metadata("clone-2", "clone-2"),
                            userdata=clone_userdata(corpus_init_userdata()))
    vm2 = s.vm("clone-new", disk, fw2)
    c.ok(s.boot(vm2), "clone boot did not power off")
    files = vm2.report_tar()
    check_status_stream(c, vm2, "clone-2", "done")
    c.ok("kubeadm" in vm2.phases(), "the clone did not run kubeadm")
    c.eq(standin_calls(files), [(INIT_CMD, "ok"), (INIT_CMD, "ok")], "kubeadm calls (original + clone)")
    c.eq((report_file(files, "/run/test/hostname.txt") or b"").decode().strip(), "clone-2", "clone's hostname")
    return c.failures


def pair_nets():
    """Two NICs on a private point-to-point UDP network on 127.0.0.1 (QEMU dgram netdevs):
    either side can start first, and no guest packet can leave loopback."""
    a, b = free_port(), free_port()
    side = lambda local, remote: (f"dgram,local.type=inet,local.host=127.0.0.1,local.port={local},"
                                  f"remote.type=inet,remote.host=127.0.0.1,remote.port={remote}")
    return side(a, b), side(b, a)


CP_MAC, WK_MAC, WK_ADDR = "52:54:00:00:00:02", "52:54:00:00:00:03", "10.0.0.3"


def cluster_data(s, workdir, cp_addr="10.0.0.2"):
    """fw_cfg data for a control plane at cp_addr:6443 and one worker: minted by
    `nodeagent mint` when it is there, else the corpus init and a CABPK-shaped join."""
    _, _, nodeagent = s.fast()
    endpoint = f"{cp_addr}:6443"
    if mint_available(nodeagent):
        pki = mint_pki(nodeagent, workdir, "demo")
        net = lambda addr, mac: ["--network", f"static:{addr}/24,gw=10.0.0.1", "--mac", mac]
        cp = mint_bundle(nodeagent, workdir, "init", "demo", "demo-cp-1", endpoint, pki, extra=net(cp_addr, CP_MAC))
        wk = mint_bundle(nodeagent, workdir, "worker", "demo", "demo-md-1", endpoint, pki, extra=net(WK_ADDR, WK_MAC))
        return cp, wk, "minted"
    _, cp = cp_init_data("demo-cp-1", "demo-cp-1")
    wk = q.fwcfg_guestinfo(metadata=capv_metadata("demo-md-1", "demo-md-1"), userdata=worker_join_userdata(endpoint, "demo-md-1"))
    return cp, wk, "corpus init + CABPK-shaped join"


def sc_join(s, late=True):
    """A worker waits for a control plane that comes up late (a real TCP listener in a
    second VM on a private socket network), then joins."""
    c = Checks()
    cp_fw, wk_fw, source = cluster_data(s, s.workdir)
    net_wk, net_cp = pair_nets()
    wk = s.vm("join-worker", s.fast_disk("join-worker"), dict(wk_fw, **{"test.addr": "10.0.0.3/24"}),
              nets=[(net_wk, "52:54:00:00:00:03")])
    cp = s.vm("join-cp", s.fast_disk("join-cp"), dict(cp_fw, **{"test.addr": "10.0.0.2/24", "test.listen": "6443"}),
              nets=[(net_cp, "52:54:00:00:00:02")])
    wk.start()
    waiting = wk.wait_for(lambda o: o.get("phase") == "waiting", 90)
    c.ok(waiting is not None, "worker never reported waiting for the control plane")
    cp_start = time.monotonic() - wk.t0
    cp.start()
    ok = wk.wait(240)
    s.record(wk, "ok" if ok else "TIMEOUT")
    cp_done = cp.wait_for(lambda o: o.get("phase") in ("done", "failed"), 5)
    cp.kill()
    s.record(cp, "killed after the worker finished")
    files = wk.report_tar()
    c.ok(ok, "worker did not power off")
    c.eq(wk.phases()[-1:], ["done"], "worker's final phase")
    c.ok(cp_done and cp_done.get("phase") == "done", f"control plane did not reach done: {cp.phases()}")
    done_t = wk.first("done")
    c.ok(done_t is not None and done_t > cp_start, "worker reported done before the control plane was started")
    calls = standin_calls(files)
    c.ok(calls and calls[-1][0].startswith("join --config /run/kubeadm/kubeadm-join-config.yaml") and calls[-1][1] == "ok",
         f"worker's kubeadm calls: {calls}")
    c.eq((report_file(files, SENTINEL) or b"").decode().strip(), "success", "worker sentinel")
    q.log(f"    join data: {source}; control plane started at {cp_start:.1f}s, worker done at {done_t}")
    return c.failures


FAST = [
    ("artifact-guard", sc_artifact_guard),
    ("plumbing", sc_plumbing),
    ("net-plumbing", sc_net_plumbing),
    ("cp-init", sc_cp_init),
    ("malformed-userdata", sc_malformed),
    ("reboot-same-instance", sc_reboot),
    ("power-cut-in-kubeadm", variant(power_cut, """Power cut while kubeadm runs, then a boot from the same
        disk: same end state as an uninterrupted run, kubeadm finished exactly once.""",
                                     "powercut-kubeadm", "kubeadm", 30)),
    ("power-cut-in-apply", variant(power_cut, """Power cut as soon as apply starts, then a boot from the
        same disk: same end state as an uninterrupted run.""", "powercut-apply", "applying", 30)),
    ("clone-new-instance", sc_clone),
    ("worker-join-late-cp", sc_join),
]


def scenario_list(tier):
    out = []
    if tier in ("fast", "all"):
        out += [("fast/" + n, f) for n, f in FAST]
    if tier in ("systemd", "all"):
        from harness import systemd_tier

        out += [("systemd/" + n, f) for n, f in systemd_tier.SCENARIOS]
    if tier in ("kube", "all"):
        from harness import kube_tier

        out += [("kube/" + n, f) for n, f in kube_tier.SCENARIOS]
    if tier in ("cluster", "all"):
        from harness import cluster

        out += [("cluster/" + n, f) for n, f in cluster.SCENARIOS]
    return out


# Scenarios that boot more than one guest at a time (or start a control plane on the host)
# take the host's two cores alone; the others run side by side with --jobs, longest first.
ALONE_PREFIXES = ("kube/",)
ALONE = {"fast/net-plumbing", "fast/worker-join-late-cp", "cluster/init-and-worker",
         "cluster/three-nodes-cp-join-retry"}


def run_one(s, name, fn):
    """Run one scenario in this process; prints its verdict, returns its failures."""
    q.log(f"== {name}: {' '.join((fn.__doc__ or '').split())}")
    t = time.monotonic()
    try:
        failures = fn(s)
    except Exception:
        failures = ["harness error:\n" + traceback.format_exc()]
    print(f"{'PASS' if not failures else 'FAIL'} {name} ({time.monotonic() - t:.1f}s)", flush=True)
    for f in failures:
        print(f"    - {f}", flush=True)
    return failures


def run_side_by_side(s, names, jobs):
    """Run each scenario in `names` in a child process of its own (its own workdir and log),
    at most `jobs` at a time, and print each one's whole output when it ends (so that the
    outputs do not interleave). Returns {name: passed}; the children's boots join s.boots."""
    lock = threading.Lock()

    def child(name):
        wd = os.path.join(s.workdir, name.replace("/", "-"))
        os.makedirs(wd, exist_ok=True)
        log = os.path.join(wd, "scenario.log")
        # The child works through a short link to its directory: QEMU's and the harness's Unix
        # sockets live in the VMs' directories, and a socket path has at most 107 bytes (one
        # more directory level under a long checkout path went past it).
        short = tempfile.mkdtemp(prefix="naq-")
        link = os.path.join(short, "w")
        os.symlink(wd, link)
        try:
            with open(log, "wb") as out:
                rc = subprocess.run([sys.executable, "-m", "harness.scenarios", "--tier", "all", "--exact",
                                     "--workdir", link, "--boots-json", os.path.join(wd, "boots.json"), name],
                                    stdout=out, stderr=subprocess.STDOUT, cwd=TESTS).returncode
        finally:
            shutil.rmtree(short, ignore_errors=True)
        with lock:
            with open(log, encoding="utf-8", errors="replace") as f:
                sys.stdout.write(f.read())
            sys.stdout.flush()
            try:
                s.boots += [tuple(b) for b in json.load(open(os.path.join(wd, "boots.json")))]
            except (OSError, ValueError):
                pass
        return name, rc == 0

    q.log(f"== {len(names)} one-guest scenarios, {jobs} at a time (each output whole when it ends)")
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(child, names))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tier", default="fast", choices=["fast", "systemd", "kube", "cluster", "all"])
    ap.add_argument("--workdir", default=os.path.join(q.REPO, "target", "qemu-runs", time.strftime("%Y%m%d-%H%M%S")))
    ap.add_argument("--except", dest="excluded", action="append", default=[], metavar="NAME=WHY",
                    help="leave scenario NAME out, printing why (repeatable)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="run up to N one-guest scenarios side by side (child processes); the others alone after them")
    ap.add_argument("--exact", action="store_true", help="NAMEs are whole scenario names, not parts of them")
    ap.add_argument("--boots-json", help=argparse.SUPPRESS)  # where a child of --jobs leaves its boots
    ap.add_argument("names", nargs="*")
    args = ap.parse_args(argv)
    s = Session(args.workdir)
    excluded = dict(e.split("=", 1) if "=" in e else (e, "") for e in args.excluded)
    known = {n for n, _ in scenario_list("all")}
    for name, why in excluded.items():
        if name not in known:
            raise SystemExit(f"--except {name}: no such scenario")
        print(f"NOT RUN {name}: {why}", flush=True)
    match = (lambda n: n in args.names) if args.exact else (lambda n: any(x in n for x in args.names))
    chosen = [(n, f) for n, f in scenario_list(args.tier)
              if (not args.names or match(n)) and n not in excluded]
    t0 = time.monotonic()
    results = {}
    side = [n for n, _ in chosen if n not in ALONE and not n.startswith(ALONE_PREFIXES)] if args.jobs > 1 else []
    # Longest first, so that the pool does not end on one long scenario alone: the cluster
    # tier's (135-200 s), then the systemd tier's (60-190 s), then the fast tier's (1-70 s).
    side.sort(key=lambda n: (not n.startswith("cluster/"), not n.startswith("systemd/")))
    if len(side) > 1:
        s.fast()  # kernel, initramfs and the agent built once, before the children share them
        q.packer_artifact("plain")  # and the images checked once: the children are told where they are
        if any(n.startswith("cluster/") for n in side):
            q.packer_artifact("kube")
        os.environ["QEMU_ARTIFACTS"] = q.artifacts_env()
        results.update(run_side_by_side(s, side, args.jobs))
    for name, fn in chosen:
        if name not in results:
            results[name] = not run_one(s, name, fn)
    s.cleanup()
    if args.boots_json:
        with open(args.boots_json, "w") as f:
            json.dump(s.boots, f)
    durations = [d for _, d, _ in s.boots]
    if durations and not args.boots_json:
        print(f"boots: {len(durations)}, total {sum(durations):.1f}s, min {min(durations):.1f}s, "
              f"max {max(durations):.1f}s; wall time {time.monotonic() - t0:.1f}s; logs in {args.workdir}")
    passed = sum(results.values())
    failed = len(results) - passed
    if not args.boots_json:
        print(f"{passed} passed, {failed} failed")
    return 1 if failed or not chosen else 0


if __name__ == "__main__":
    # The tiers import harness.scenarios: run that one module, not a second copy of it.
    from harness import scenarios

    sys.exit(scenarios.main())
