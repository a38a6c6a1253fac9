"""`provision doctor` on this machine (torch CPU, no CANN, no NPU) and on container-like trees."""

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.host import doctor, fakehost
from provisioner.resolve import cached, request
from tests.helpers import hosts

REPO = Path(__file__).resolve().parents[2]


def ids(doc):
    return [(f["severity"], f["id"]) for f in doc["findings"]]


def base_env(**extra):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def cpu_doc(tmp_path_factory, matrix):
    """Doctor on this machine: the venv's torch (CPU build), no torch_npu, no CANN, an empty /dev."""
    dev = tmp_path_factory.mktemp("dev")
    return doctor.run("/", dev, env=base_env(), matrix=matrix)


def test_no_npu_machine_is_reported_honestly(cpu_doc):
    pytest.importorskip("torch")
    assert cpu_doc["schema"] == "provision.doctor/1" and cpu_doc["exit_code"] == 2
    assert ids(cpu_doc) == [
        ("error", "torch-npu-missing"),
        ("error", "cann-missing"),
        ("error", "library-missing"),   # libascend_hal.so
        ("error", "library-missing"),   # libascendcl.so
        ("error", "library-missing"),   # libhccl.so
        ("error", "driver-not-mapped"),
        ("error", "no-npu-devices"),
        ("warning", "library-missing"),  # libc_sec.so
        ("info", "stack-label-missing"),
        ("info", "bf16-not-checked"),
    ]
    libs = [f["message"] for f in cpu_doc["findings"] if f["id"] == "library-missing"]
    assert libs[0] == "cannot load libascend_hal.so (driver)"
    assert libs[2] == "cannot load libhccl.so (cann) (no CANN installed)"
    hal = next(f for f in cpu_doc["findings"] if "libascend_hal" in f["message"])
    assert "-v /usr/local/Ascend/driver:/usr/local/Ascend/driver:ro" in hal["remedy"]
    facts = cpu_doc["facts"]
    assert facts["torch"]["autoload_disabled"] is True and facts["cann_present"] is False
    assert facts["torch"]["torch"]["version"].startswith("2.")
    assert facts["summary"]["torch_npu"] == "not installed" and facts["summary"]["devices"] == "none"


def test_doctor_never_imports_torch_itself(tmp_path):
    code = ("import sys; from provisioner.host import doctor; from provisioner.matrix import loader;"
            f" d = doctor.run('/', {str(tmp_path)!r}, matrix=loader.load());"
            " assert 'torch' not in sys.modules, 'torch imported in the doctor process';"
            " print(d['exit_code'])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "2"


def test_no_torch_at_all(tmp_path, matrix):
    # A Python without torch: a bare venv that sees only this repository.
    env_dir = tmp_path / "bare"
    venv.create(env_dir, with_pip=False)
    py = str(env_dir / "bin" / "python")
    doc = doctor.run("/", tmp_path, env=base_env(PYTHONPATH=str(REPO)), matrix=matrix, python=py)
    assert ("error", "torch-missing") in ids(doc)
    assert doc["facts"]["torch"]["torch"] == {"dist_version": None,
                                              "import_error": "ModuleNotFoundError: No module named 'torch'"}


def test_probe_that_dies_is_a_finding(tmp_path, matrix):
    doc = doctor.run("/", tmp_path, env=base_env(), matrix=matrix, python="/nonexistent/python")
    [f] = [f for f in doc["findings"] if f["id"] == "torch-probe-failed"]
    assert f["severity"] == "error" and "cannot run /nonexistent/python" in f["message"]


def container_tree(tmp_path: Path, stack: dict | None) -> tuple[Path, Path]:
    """A container's view: CANN toolkit + mapped driver (files from the seed-800ta2 fixture), nodes by mknod."""
    src = hosts.FIXTURES / "seed-800ta2" / "tree"
    root = tmp_path / "ctr"
    for rel in ("usr/local/Ascend/ascend-toolkit", "usr/local/Ascend/driver", "etc/ascend_install.info"):
        s = src / rel
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if s.is_dir():
            shutil.copytree(s, root / rel, symlinks=True)
        else:
            shutil.copy(s, root / rel)
    if stack is not None:
        (root / "etc/provision").mkdir(parents=True)
        (root / "etc/provision/stack.json").write_text(json.dumps(stack))
    dev = tmp_path / "dev"
    fakehost.make_nodes(dev, [fakehost.Node(f"davinci{n}", "c", 236, n, 0o660, 1000, 1000) for n in range(2)]
                        + [fakehost.Node("davinci_manager", "c", 235, 0, 0o660, 1000, 1000),
                           fakehost.Node("devmm_svm", "c", 238, 0, 0o660, 1000, 1000),
                           fakehost.Node("hisi_hdc", "c", 237, 0, 0o660, 1000, 1000)])
    return root, dev


def test_container_tree_with_stack_label(tmp_path, matrix):
    torch = pytest.importorskip("torch")
    stack = cached.cached_resolve(matrix, request.build(matrix, card="800T-A2", cann="8.2.RC1", arch="aarch64"))
    root, dev = container_tree(tmp_path, stack)
    doc = doctor.run(root, dev, env=base_env(), matrix=matrix)
    facts = doc["facts"]
    assert facts["stack"]["source"] == "/etc/provision/stack.json" and facts["stack"]["stack"]["id"] == stack["id"]
    assert [c["version"] for c in facts["cann"]] == ["8.2.RC1"] and facts["devices"]["davinci_ids"] == [0, 1]
    assert ids(doc) == [
        ("error", "torch-npu-missing"),
        ("error", "stack-drift"),
        ("info", "driver-cann-ok"),
        ("info", "bf16-not-checked"),
    ]
    drift = next(f for f in doc["findings"] if f["id"] == "stack-drift")
    assert drift["message"] == f"torch {torch.__version__} is installed but the image's stack says {stack['torch']['version']}"
    missing = next(f for f in doc["findings"] if f["id"] == "torch-npu-missing")
    assert missing["remedy"] == f"pip install '{stack['torch_npu']['requirement']}'"


def test_container_tree_without_version_files_and_with_bad_env(tmp_path, matrix):
    root, dev = container_tree(tmp_path, None)
    (root / "usr/local/Ascend/driver/version.info").unlink()
    env = base_env(HCCL_CONNECT_TIMEOUT="30", HCCL_IF_IP="10.0.0.300", HCCL_IF_BASE_PORT="60000",
                   HCCL_SOCKET_IFNAME="=surely-not-a-nic0", ASCEND_RT_VISIBLE_DEVICES="1,0",
                   ASCEND_VISIBLE_DEVICES="0-3")
    doc = doctor.run(root, dev, env=env, matrix=matrix)
    got = {(f["id"], f["message"]) for f in doc["findings"]}
    assert ("driver-version-not-mapped", "/usr/local/Ascend/driver/version.info is not mapped") in got
    assert ("env-invalid", "HCCL_CONNECT_TIMEOUT=30: outside [120, 7200]") in got
    assert ("env-invalid", "HCCL_IF_IP=10.0.0.300: not an IP address") in got
    assert any(i == "env-invalid" and m.startswith("HCCL_SOCKET_IFNAME==surely-not-a-nic0: no network interface")
               for i, m in got)
    assert not any(m.startswith("HCCL_IF_BASE_PORT") for _, m in got)
    assert ("rt-visible-devices-invalid", "ASCEND_RT_VISIBLE_DEVICES=1,0: must be ascending container-local ids below 2") in got
    assert ("devices-unexpected", "ASCEND_VISIBLE_DEVICES=0-3 but the container has /dev/davinci[0, 1]") in got
    assert doc["facts"]["env"]["HCCL_CONNECT_TIMEOUT"] == "30"


def test_stack_from_environment_and_bad_stack_file(tmp_path, matrix):
    root, dev = container_tree(tmp_path, None)
    doc = doctor.run(root, dev, env=base_env(PROVISION_STACK="{not json"), matrix=matrix)
    assert ("warning", "stack-label-unreadable") in ids(doc)
    assert doc["facts"]["stack"]["source"] == "$PROVISION_STACK"


@pytest.mark.parametrize("req, version, ok", [
    ("torch==2.13.0.*", "2.13.0+cpu", True),
    ("torch==2.5.1+cpu", "2.5.1+cpu", True),
    ("torch==2.5.1+cpu", "2.13.0+cpu", False),
    ("torch==2.6.0", "2.6.0", True),
    ("torch ==2.6.0", "2.7.1", False),
])
def test_requirement_pin(req, version, ok):
    assert doctor._requirement_ok(req, version) is ok


def _facts(torch_npu: dict, torch_version="2.13.0+cpu", cann=False):
    return {"torch": {"torch": {"dist_version": torch_version, "version": torch_version}, "torch_npu": torch_npu,
                      "npu": {}}, "cann_present": cann, "stack": {"stack": None}}


def test_pairing_from_the_wheel_pin(matrix):
    mismatch = _facts({"dist_version": "2.5.1", "requires": ["torch==2.5.1+cpu"], "version": "2.5.1"})
    found = list(doctor.check_torch(doctor.DoctorContext(mismatch, matrix)))
    assert [(f.id, f.message) for f in found] == [
        ("torch-pair-mismatch", "torch_npu 2.5.1 requires torch==2.5.1+cpu but torch 2.13.0+cpu is installed")]
    by_matrix = _facts({"dist_version": "2.1.0.post17", "requires": [], "version": "2.1.0.post17"})
    found = list(doctor.check_torch(doctor.DoctorContext(by_matrix, matrix)))
    assert [(f.id, f.remedy) for f in found] == [("torch-pair-mismatch", "pip install torch==2.1.0")]


def test_bf16_against_the_stack(matrix):
    facts = {"torch": {"npu": {"available": True, "bf16": False, "name": "Ascend910ProB"}},
             "stack": {"stack": {"dtype": {"compute": "bf16"}}}}
    [f] = list(doctor.check_bf16(doctor.DoctorContext(facts, matrix)))
    assert (f.severity, f.id) == ("error", "bf16-unsupported")
    facts["torch"]["npu"]["bf16"] = True
    [f] = list(doctor.check_bf16(doctor.DoctorContext(facts, matrix)))
    assert (f.severity, f.id) == ("info", "bf16-supported")


def test_doctor_cli_json(tmp_path, capsys):
    rc = main(["doctor", "--dev-root", str(tmp_path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == doc["exit_code"] == 2 and doc["schema"] == "provision.doctor/1"
    rc = main(["doctor", "--root", "/nonexistent/x"])
    err = capsys.readouterr().err
    assert rc == 2 and err == "provision: error: --root /nonexistent/x: not a directory\n"


@pytest.fixture(scope="module")
def torch_npu_target(tmp_path_factory):
    """The real torch_npu 2.13.0 wheel (x86_64 CPython 3.11 here), installed beside the venv without deps."""
    pytest.importorskip("torch")
    target = tmp_path_factory.mktemp("torch-npu")
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                          "torch-npu==2.13.0"], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        pytest.skip(f"torch-npu 2.13.0 not installable here: {res.stderr.strip().splitlines()[-1:]}")
    return target


@pytest.mark.slow
def test_torch_npu_installed_but_no_cann(torch_npu_target, tmp_path, matrix):
    doc = doctor.run("/", tmp_path, env=base_env(PYTHONPATH=str(torch_npu_target)), matrix=matrix)
    t = doc["facts"]["torch"]
    assert t["autoload_disabled"] is True
    assert t["torch_npu"]["dist_version"] == "2.13.0" and t["torch_npu"]["requires"] == ["torch==2.13.0.*"]
    assert "libhccl.so" in t["torch_npu"]["import_error"]
    found = {f["id"]: f for f in doc["findings"]}
    assert found["torch-pair-ok"]["message"] == (
        f"torch {t['torch']['version']} with torch_npu 2.13.0 (it requires torch==2.13.0.*)")
    assert found["torch-npu-import-failed"]["remedy"].startswith("CANN is missing in this container")
    assert "torch-npu-missing" not in found and doc["exit_code"] == 2


def test_manager_nodes_follow_the_chip_family(matrix):
    facts = {"devices": {"davinci_ids": [0], "nodes": [{"name": "davinci0"}, {"name": "davinci_manager"},
                                                        {"name": "hisi_hdc"}]},
             "torch": {"npu": {}}, "stack": {"stack": {"chip": {"family": "950"}}}}
    assert list(doctor.check_devices(doctor.DoctorContext(facts, matrix))) == []  # 950 has no devmm_svm
    facts["stack"] = {"stack": None}
    [f] = list(doctor.check_devices(doctor.DoctorContext(facts, matrix)))
    assert (f.id, f.message) == ("device-nodes-missing", "/dev/devmm_svm not in the container")


def test_a_stack_whose_dtype_is_not_an_object_is_a_note_not_a_crash(tmp_path, matrix):
    """A stack label with `dtype: "bf16"` (text, not {compute, ...}): stack_doc refuses it (a note), and the bf16
    check guards its read as its siblings do; never check-crashed."""
    root, dev = container_tree(tmp_path, None)
    env = base_env(PROVISION_STACK=json.dumps({"id": "x", "dtype": "bf16", "cann": {"version": "8.1.RC1"},
                                               "framework": "pytorch", "task": "train"}))
    doc = doctor.run(root, dev, env=env, matrix=matrix)
    assert not any(f["id"] == "check-crashed" for f in doc["findings"]), doc["findings"]
    assert "dtype must be an object" in doc["facts"]["stack"]["error"]
    facts = {"torch": {"npu": {"available": True, "bf16": False, "name": "Ascend910ProB"}},
             "stack": {"stack": {"dtype": "bf16"}}}
    [f] = list(doctor.check_bf16(doctor.DoctorContext(facts, matrix)))
    assert (f.severity, f.id) != ("error", "check-crashed")
