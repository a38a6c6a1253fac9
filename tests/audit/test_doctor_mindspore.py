"""`provision doctor` on a MindSpore stack: the checks over what the MindSpore probe reports.

The probe itself runs MindSpore in a child process; it is exercised for real inside the MindSpore image
(tests/integration/test_framework_images.py). Here the checks are held to facts of the shapes it reports.
"""

from __future__ import annotations

import pytest

from provisioner.host import doctor
from provisioner.host.doctor_mindspore import check_mindspore, probe
from provisioner.matrix import loader


@pytest.fixture(scope="module")
def m():
    return loader.load(use_cache=False)


STACK = {"framework": "mindspore", "mindspore": {"version": "2.7.1"},
         "extras": {"mindformers": {"version": "1.7.0"}}, "cann": {"version": "8.3.RC1"}}


def findings(m, ms_facts, cann=("8.3.RC1",), stack=STACK):
    facts = {"stack": {"stack": stack, "source": "test"}, "mindspore": ms_facts,
             "cann": [{"version": v, "kind": "toolkit"} for v in cann]}
    return {f.id: f for f in check_mindspore(doctor.DoctorContext(facts, m))}


def good(target="Ascend"):
    return {"mindspore": {"dist_version": "2.7.1", "version": "2.7.1"},
            "mindformers": {"dist_version": "1.7.0", "version": "1.7.0"},
            "device": {"wanted": target, "target": target}, "check": {"ok": True, "result": [[1, 4], [9, 16]]}}


def test_a_healthy_mindspore_image(m):
    got = findings(m, good())
    assert got["mindspore-run-check"].severity == "info"
    assert got["mindspore-cann-ok"].severity == "info" and "mindformers-ok" in got
    assert not [f for f in got.values() if f.severity != "info"]


def test_cpu_only_is_a_warning_not_an_error(m):
    got = findings(m, good("CPU"))
    assert got["mindspore-no-npu"].severity == "warning"
    assert got["mindspore-run-check"].severity == "info" and "on CPU" in got["mindspore-run-check"].message


def test_cann_that_does_not_pair_is_an_error(m):
    got = findings(m, good(), cann=("8.5.0",))
    assert got["mindspore-cann-mismatch"].severity == "error"
    assert "pairs with CANN 8.3.RC1" in got["mindspore-cann-mismatch"].message


@pytest.mark.parametrize("change, check, phrase", [
    ({"mindspore": {"dist_version": None}}, "mindspore-missing", "pip install mindspore==2.7.1"),
    ({"mindspore": {"dist_version": "2.7.1", "import_error": "ImportError: libge_runner.so"}},
     "mindspore-import-failed", "CANN"),
    ({"mindspore": {"dist_version": "2.7.0", "version": "2.7.0"}}, "stack-drift", "rebuild"),
    ({"mindformers": {"dist_version": None}}, "mindformers-missing", "--recipe mindspore"),
    ({"device": {"wanted": "Ascend", "error": "RuntimeError: device 0 busy"}}, "mindspore-device", "provision run-cmd"),
    ({"check": {"ok": False, "result": [[0, 0], [0, 0]]}}, "mindspore-run-check", "mindspore.run_check()"),
])
def test_each_failure_names_its_fix(m, change, check, phrase):
    got = findings(m, {**good(), **change})
    assert got[check].severity == "error", got
    assert phrase in (got[check].remedy or "") + got[check].message


def test_a_pytorch_stack_is_not_checked_for_mindspore(m):
    assert findings(m, {}, stack={"framework": "pytorch"}) == {}


def test_probe_without_mindspore_reports_it_missing(m):
    import os
    import sys

    facts = probe(sys.executable, dict(os.environ), npu_usable=False, timeout=120)
    assert facts["mindspore"]["dist_version"] is None and "import_error" in facts["mindspore"]
    got = findings(m, facts)
    assert "mindspore-import-failed" in got or "mindspore-missing" in got
