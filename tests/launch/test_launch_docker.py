"""provision launch against the real engine, with simulated hosts (mknod nodes with /dev/null's numbers, CPU).

The image is `launch_image` (torch CPU + this project); workers use gloo. The simulated hosts carry the HDK
driver the image's stack is paired with, so launch's driver check (tested on its own elsewhere) lets them run.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.launch.conftest import CPU_ENV, host_args, launch_containers

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ASCEND_NODES = re.compile(r"^(davinci|devmm|hisi|dvpp)")
RUN_LINE = re.compile(r"provision launch: run ([0-9a-f]{12}): \w+ in (\S+):")


@pytest.fixture(scope="session")
def image_driver(docker_client, launch_image) -> str:
    stack = json.loads(docker_client.images.get(launch_image).labels["org.provision.stack"])
    return stack["driver"]["paired"][0]


@pytest.fixture
def sim_host(real_host, image_driver):
    """The shared real_host (mknod nodes a container opens), with driver/version.info naming the image stack's
    paired driver."""

    def make(name: str = "plan-300ta2-4", sub: str = "a"):
        host = real_host(name, sub)
        info = host.root / "usr/local/Ascend/driver/version.info"
        info.write_text(re.sub(r"(?m)^Version=.*$", f"Version={image_driver}", info.read_text()))
        return host

    return make


def test_a_host_driver_older_than_the_image_needs_is_refused(launch_image, tmp_path):
    from tests.helpers import hosts

    host = hosts.materialize("plan-300ta2-4", tmp_path, nodes="mknod", null_numbers=True)  # its driver: 24.1.0
    proc = subprocess.run(launch_argv(host, launch_image, "0-1", "--check-only"), capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "needs HDK driver" in proc.stderr and "this host has 24.1.0" in proc.stderr


def launch_argv(host, image, spec="0-3", *extra, card="300T-A2", label=()):
    return [sys.executable, "-m", "provisioner.cli", "launch", "--card", card, "--devices", spec, *host_args(host),
            "--image", image, *CPU_ENV, *label, *extra]


def probes(stream: str) -> dict[int, dict]:
    """rank -> the probe's JSON, from lines `[rankN]:{"probe": ...}`."""
    out = {}
    for line in stream.splitlines():
        m = re.match(r"^\[rank(\d+)\]:(\{\"probe\".*)$", line)
        if m:
            doc = json.loads(m[2])
            assert doc["probe"] == int(m[1]), line  # the prefix names the rank that printed
            out[int(m[1])] = doc
    return out


def test_four_chips_check_then_torchrun(launch_image, sim_host, probe_dir, docker_client, no_leftovers):
    host = sim_host()
    proc = subprocess.run(
        launch_argv(host, launch_image, "0-3", "--check", "-v", f"{probe_dir}:/probe:ro", "--script",
                    "/probe/probe.py", "--json", label=no_leftovers),
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(proc.stdout)

    # the summary
    assert doc["schema"] == "provision.launch/1" and doc["status"] == "ok" and doc["exit_code"] == 0
    assert doc["devices"] == [0, 1, 2, 3] and doc["nproc_per_node"] == 4 and doc["mode"] == "devices"
    # the image says it carries the quick-tail launcher (provisioner/launch/teerun.py): torchrun's main through it
    assert doc["command"] == ["python", "-m", "provisioner.launch.teerun", "--nproc-per-node", "4", "--standalone",
                              "--tee", "3", "/probe/probe.py"]
    assert doc["container"] == f"provision-launch-{doc['run_id']}" and doc["kept"] is False
    assert doc["ranks_seen"] == [0, 1, 2, 3] and doc["signal"] is None

    # the collective check ran first, across the same four workers
    check = doc["check"]
    assert check["exit_code"] == 0 and check["container"] == doc["container"] + "-check"
    assert check["command"][-2:] == ["-m", "provisioner.launch.collective"]
    res = check["result"]
    assert res["status"] == "ok" and res["world_size"] == 4 and res["backend"] == "gloo" and res["device"] == "cpu"
    for r in res["results"]:
        assert r["ok"] and r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 1.5, rel=0.01)

    # four workers, each saw exactly the simulated chips and the launch environment
    seen = probes(proc.stderr)  # --json: logs go to stderr
    assert sorted(seen) == [0, 1, 2, 3]
    expected_nodes = {"davinci0", "davinci1", "davinci2", "davinci3", "davinci_manager", "devmm_svm", "hisi_hdc"}
    for rank, p in seen.items():
        assert p["world"] == 4 and p["sum"] == 10.0
        ascend = {n: mm for n, mm in p["devs"].items() if ASCEND_NODES.match(n)}
        assert set(ascend) == expected_nodes, ascend
        assert all(mm == [1, 3] for mm in ascend.values())
        env = p["env"]
        assert env["HCCL_CONNECT_TIMEOUT"] == "3600" and env["HCCL_EXEC_TIMEOUT"] == "3600"
        assert env["NPROC_PER_NODE"] == "4" and env["LOCAL_WORLD_SIZE"] == "4" and env["WORLD_SIZE"] == "4"
        assert env["OMP_NUM_THREADS"] == "1" and env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
        assert env["ASCEND_RT_VISIBLE_DEVICES"] is None and env["LOCAL_RANK"] == str(rank)
        assert all(p["files"].values()), p["files"]
    assert len({p["pid"] for p in seen.values()}) == 4
    assert not launch_containers(docker_client, doc["run_id"])


def test_exit_code_is_the_commands_and_keep_keeps_it(launch_image, sim_host, docker_client, no_leftovers):
    host = sim_host()
    cmd = "import sys; print('bye'); raise SystemExit(3)"
    proc = subprocess.run(launch_argv(host, launch_image, "1", "--exec", "--", "python", "-c", cmd, label=no_leftovers),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    # The container's output, as it printed it (the image's own CANN notice may come first).
    assert proc.stdout.splitlines()[-1] == "bye"
    assert re.search(r"run [0-9a-f]{12} failed: exit 3 after .* \(container provision-launch-\w+ removed\)", proc.stderr)

    name = f"provision-test-keep-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(launch_argv(host, launch_image, "1", "--keep", "--name", name, "--json", "--exec", "--",
                                      "python", "-c", "raise RuntimeError('boom')", label=no_leftovers),
                          capture_output=True, text=True, timeout=120)
    doc = json.loads(proc.stdout)
    kept = docker_client.containers.get(name)
    try:
        assert proc.returncode == 1 and doc["status"] == "failed" and doc["kept"] is True
        assert doc["error"] == "RuntimeError: boom"
        assert kept.status == "exited" and kept.labels["org.provision.launch"] == doc["run_id"]
        assert kept.labels["org.provision.launch.role"] == "run" and no_leftovers[1] in {f"{k}={v}" for k, v in kept.labels.items()}
        assert kept.attrs["State"]["ExitCode"] == 1
    finally:
        kept.remove(force=True)


def test_a_failing_worker_is_named(launch_image, sim_host, probe_dir, no_leftovers):
    proc = subprocess.run(launch_argv(sim_host(), launch_image, "0,1", "-v", f"{probe_dir}:/probe:ro", "--script",
                                      "/probe/fail.py", "--json", label=no_leftovers),
                          capture_output=True, text=True, timeout=180)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["status"] == "failed" and doc["exit_code"] == 1  # torchrun's
    assert doc["error"] == "rank 1: ValueError: bad batch on rank 1"
    assert "[rank0]:rank 0 done" in proc.stderr and "[rank1]:rank 1 shutting down 79" in proc.stderr
    assert "ValueError" not in "\n".join(doc["log_tail"])  # found in the stream, not only in the kept tail


def test_missing_image_is_one_line(docker_client, sim_host):
    proc = subprocess.run(launch_argv(sim_host(), "provision-test/no-such-image:none"), capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "not in the local Docker engine" in proc.stderr


class Reader:
    """Collect a subprocess's lines in the background; wait for one that matches."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, predicate, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.lines), timeout)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def pgrep(pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_and_removes_everything(launch_image, sim_host, probe_dir, docker_client, no_leftovers,
                                             signum, code):
    host = sim_host()
    marker = f"MARK{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        launch_argv(host, launch_image, "0,1", "-v", f"{probe_dir}:/probe:ro", "--script", "/probe/sleeper.py",
                    "--stop-timeout", "10", "--", marker, label=no_leftovers),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = Reader(proc.stdout), Reader(proc.stderr)
    try:
        both = out.wait_for(lambda ls: {f"[rank{r}]:{marker} ready" for r in (0, 1)}
                            <= {line.split(" rank")[0] for line in ls}, timeout=180)
        assert both, f"workers never got ready:\n{out.text}\n{err.text}"
        m = RUN_LINE.search(err.text)
        assert m, err.text
        run_id, name = m[1], m[2]
        assert launch_containers(docker_client, run_id)[0].name == name
        workers = pgrep(marker)
        assert len(workers) >= 3, workers  # this launch, torchrun and two workers are running now

        if signum == signal.SIGINT:
            # While it runs, its chips are taken: a second launch on chip 1 is refused, naming the container.
            again = subprocess.run(launch_argv(host, launch_image, "1", "--exec", "--", "true", label=no_leftovers),
                                   capture_output=True, text=True, timeout=60)
            assert again.returncode == 2 and f"already mapped into running container '{name}'" in again.stderr

        sent = time.monotonic()
        err_before = len(err.lines)
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == code
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 15, f"stopping took {took:.1f} s"
    err.wait_for(lambda ls: any("interrupted by" in line for line in ls), timeout=10)  # the reader may lag
    assert f"interrupted by {signum.name}" in err.text and f"container {name} removed" in err.text
    # An intended stop reads as one line: no traceback (torchrun's SignalException) and none of torchrun's
    # shutdown notices reach the user; stderr gets the closing line (and a "stopping" notice only when the
    # stop takes more than a second).
    for text in (out.text, err.text):
        assert "Traceback" not in text and "SignalException" not in text and "death signal" not in text, text
    after = err.lines[err_before:]
    assert after[-1].startswith(f"provision launch: interrupted by {signum.name} after "), after
    assert len(after) <= 2 and all(line.startswith("provision launch: ") for line in after), after
    assert not launch_containers(docker_client, run_id)
    left = []
    for _ in range(20):  # the engine reaps the container's processes right after removal
        left = pgrep(marker)
        if not left:
            break
        time.sleep(0.25)
    assert not left, left


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_meet_at_the_master(launch_image, sim_host, docker_client, no_leftovers):
    """Two launches on one machine as node 0 and node 1 (host network, loopback): one 4-rank collective."""
    port = str(_free_port())
    procs = []
    for rank in (0, 1):
        host = sim_host(sub=f"node{rank}")
        procs.append(subprocess.Popen(
            launch_argv(host, launch_image, "0,1", "--nnodes", "2", "--node-rank", str(rank), "--master-addr",
                        "127.0.0.1", "--master-port", port, "--socket-ifname", "lo", "--check-only", "--json",
                        label=no_leftovers),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    docs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-4000:]
        docs.append(json.loads(out))
    for rank, doc in enumerate(docs):
        assert doc["status"] == "ok" and doc["nnodes"] == 2 and doc["node_rank"] == rank
        assert doc["command"][:14] == ["python", "-m", "provisioner.launch.teerun", "--nproc-per-node", "2",
                                       "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                                       "--master-port", port, "--tee"]
        res = doc["check"]["result"]
        assert res["world_size"] == 4 and res["local_world_size"] == 2 and res["status"] == "ok"
        # each node's first worker reports; the prefix is the global rank (node 1 runs ranks 2-3)
        assert doc["ranks_seen"] == [2 * rank]
