"""The test harness: one library for the QEMU tiers, the control-plane test and the
conformance runs. `qemu` boots every guest, `controlplane` starts every real control plane;
the tiers (`scenarios`, `systemd_tier`, `kube_tier`, `cluster`), `conformance`, `vmware`,
`surface`, `demo` and `controlplane_test` use them. Run a module with tests/harness/run
(`python3 -m harness.MODULE` with tests/ on the module path)."""

import os
import socket

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)


def free_port():
    """A TCP port that is free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
