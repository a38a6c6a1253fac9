"""Two nodes over network namespaces made here (root): node A's chips ping node B's chip address through a
veth pair, as `hccn_tool -i N -ping -g address A` does between the chips of two nodes. A peer on the plane
answers; an address nobody holds and a peer put on another subnet are lost, each one failing line."""

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from provisioner.matrix import loader
from provisioner.preflight import report
from tests.preflight.test_preflight import FIXTURES, STANDIN

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                 reason="needs root and iproute2 to make network namespaces")]
HERE = Path(__file__).resolve().parent
HCCN_TOOL = """#!{python}
import os, sys
if "-ping" in sys.argv:
    address = sys.argv[sys.argv.index("address") + 1]
    os.execv({ip!r}, ["ip", "netns", "exec", {ns!r}, {python!r}, {nsping!r}, address])
"""


def _ip(*args):
    subprocess.run([shutil.which("ip"), *args], check=True, capture_output=True)


@pytest.fixture
def two_nodes():
    """nsA (node A: 29.1.137.205/16) and nsB (node B: 29.1.170.143/16), joined by a veth pair."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"pfa{tag}", f"pfb{tag}"
    _ip("netns", "add", a)
    _ip("netns", "add", b)
    try:
        _ip("link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        _ip("link", "set", f"va{tag}", "netns", a)
        _ip("link", "set", f"vb{tag}", "netns", b)
        for ns, dev, addr in ((a, f"va{tag}", "29.1.137.205/16"), (b, f"vb{tag}", "29.1.170.143/16")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield a, b, f"vb{tag}"
    finally:
        for ns in (a, b):
            subprocess.run([shutil.which("ip"), "netns", "del", ns], capture_output=True)


def _node(tmp_path, ns):
    host = FIXTURES / "preflight-clean"
    root = tmp_path / "root"
    shutil.copytree(host / "tree", root)
    repo = str(HERE.parents[1])
    smi = root / "usr/local/bin/npu-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text(STANDIN.format(python=sys.executable, repo=repo, saved=str(host / "npu_info_before.txt")))
    tool = root / "usr/local/Ascend/driver/tools/hccn_tool"
    tool.parent.mkdir(parents=True)
    tool.write_text(HCCN_TOOL.format(python=sys.executable, ip=shutil.which("ip"), ns=ns,
                                     nsping=str(HERE / "nsping.py"))
                    + STANDIN.format(python=sys.executable, repo=repo,
                                     saved=str(host / "npu_info_before.txt")).split("\n", 1)[1])
    for p in (smi, tool):
        p.chmod(0o755)
    return root


def _ping(doc):
    return next((c["status"], c["message"]) for c in doc["checks"] if c["id"] == "npu-ping")


def test_chips_of_two_nodes_ping_across_namespaces(two_nodes, tmp_path):
    a, b, dev_b = two_nodes
    m = loader.load([])
    root = _node(tmp_path, a)
    doc = report.run(m, str(root), peers=["29.1.170.143"], run_tree_programs=True, timeout=20)
    assert _ping(doc) == ("pass", "8 ping(s) answered (29.1.170.143)")
    # an address nobody on the plane holds
    status, message = _ping(report.run(m, str(root), peers=["29.1.170.144"], run_tree_programs=True, timeout=20))
    assert status == "fail" and "NPU 0 -> 29.1.170.144: 0/3" in message and "NPU 7" in message
    # node B's chip moved to another subnet: node A has no route to it
    _ip("-n", b, "addr", "flush", "dev", dev_b)
    _ip("-n", b, "addr", "add", "29.2.170.143/16", "dev", dev_b)
    status, message = _ping(report.run(m, str(root), peers=["29.2.170.143"], run_tree_programs=True, timeout=20))
    assert status == "fail" and "NPU 3 -> 29.2.170.143: 0/3" in message
