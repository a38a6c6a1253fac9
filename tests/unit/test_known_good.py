"""The known-good fix of a field report respects the host (provisioner/resolve/knowngood.py).

`provision resolve --profile REPORT` on a host: the fix (the report's `fixed_by` profile) is resolved for the same
host, so it names the host's architecture (never "this machine's"), and where the host's driver does not run it
the stack shown is the nearest one the host runs today, with the HDK upgrade the fix itself needs. Fixture hosts:
seed-800ta2 (driver 25.0.rc1.1, aarch64), seed-300ta2-kylin (23.0.7, aarch64), seed-310-300i (Ascend 310).
"""

from __future__ import annotations

import pytest

from provisioner.matrix import loader
from provisioner.resolve import driverfit
from tests.unit.test_hostfit import root, run, run_json

MS_REPORT = "seed-800ta2-mindspore-sft"  # fixed by mindspore-2.7.1-a2 (CANN 8.3.RC1, which lists HDK 25.3)
LORA_REPORT = "seed-300ta2-kylin-lora"   # fixed by a2-torch2.1-lora-deepspeed (CANN 8.3.RC1)


@pytest.fixture(scope="module")
def m():
    return loader.load()


def fix_text(err: str) -> str:
    """The known-good block of a refusal's text (up to the nearest valid stacks of the report)."""
    assert "Known-good fix for this report: " in err, err
    return err.split("Known-good fix for this report: ", 1)[1].split("\nNearest valid stacks:", 1)[0]


def test_a_driver_that_cannot_run_the_fix_gets_the_nearest_stack_it_runs(capsys, m):
    code, doc, _ = run_json(capsys, "resolve", "--profile", MS_REPORT, "--root", root("seed-800ta2"))
    assert code == 2 and doc["status"] == "refused"
    good, host = doc["known_good"], doc["known_good_host"]
    fixed = m.profile("mindspore-2.7.1-a2")["constraints"]["cann"]
    assert good["cann"]["version"] != fixed and good["relaxed"]
    assert driverfit.driver_fit("25.0.rc1.1", m.cann(good["cann"]["version"]), m) in ("ok", "newer")
    assert good["framework"] == "mindspore" and good["arch"] == "aarch64"
    assert good["explain"]["arch"].startswith("aarch64: the architecture of the host read from --root")
    assert host["runs_on"] == "the host" and "the host's driver 25.0.rc1.1" in host["why"]
    assert host["upgrade"]["cann"] == fixed and host["upgrade"]["hdk"].startswith("25.3")
    after = host["after_upgrade"]
    assert after["cann"]["version"] == fixed and after["arch"] == "aarch64" and "host" not in after["driver"]

    code, out, err = run(capsys, "resolve", "--profile", MS_REPORT, "--root", root("seed-800ta2"))
    text = fix_text(err)
    head, stack = text.split("\n", 1)
    assert head.startswith("profile mindspore-2.7.1-a2, as near as the host runs it (without --cann")
    shown = stack.split("\n  !", 1)[0]  # the stack the block shows first: one the host runs
    assert f"cann               {fixed}" not in shown and "this machine's architecture" not in text
    assert f"upgrade (driver and firmware) to one CANN {fixed} lists: 25.3" in text


def test_a_driver_that_runs_nothing_near_the_fix_says_so_with_the_upgrade(capsys):
    code, doc, _ = run_json(capsys, "resolve", "--profile", LORA_REPORT, "--root", root("seed-300ta2-kylin"))
    assert code == 2 and doc["known_good"] is None
    host = doc["known_good_host"]
    assert host["runs_on"] == "the host" and "23.0.7" in host["why"]
    assert host["after_upgrade"]["arch"] == "aarch64" and host["upgrade"]["cann"] == host["after_upgrade"]["cann"]["version"]
    code, out, err = run(capsys, "resolve", "--profile", LORA_REPORT, "--root", root("seed-300ta2-kylin"))
    text = fix_text(err)
    assert text.startswith("profile a2-torch2.1-lora-deepspeed does not run on the host: the driver of the host read")
    assert "the host runs no stack near it today; it runs after an Ascend HDK upgrade" in text
    assert "this machine's architecture" not in text and "aarch64: the architecture of the host read" in text


def test_a_fix_the_host_runs_names_the_hosts_architecture(capsys):
    """--driver names the target's driver (one that runs the fix): the fix is that stack, for the host's arch."""
    args = ("resolve", "--profile", MS_REPORT, "--root", root("seed-800ta2"), "--driver", "25.3.0")
    code, doc, _ = run_json(capsys, *args)
    good = doc["known_good"]
    assert code == 2 and doc["known_good_host"] is None and good["cann"]["version"] == "8.3.RC1"
    assert good["arch"] == "aarch64" and good["driver"]["host"] == "25.3.0"
    code, out, err = run(capsys, *args)
    text = fix_text(err)
    assert text.startswith("profile mindspore-2.7.1-a2\n") and "this machine's architecture" not in text
    assert "aarch64: the architecture of the host read from --root" in text


def test_a_fix_for_another_chip_family_is_for_another_machine(capsys):
    code, doc, _ = run_json(capsys, "resolve", "--profile", "seed-310-grpo", "--root", root("seed-310-300i"))
    good, host = doc["known_good"], doc["known_good_host"]
    assert code == 2 and host["runs_on"] == "another machine" and host["upgrade"] is None
    assert "4 x 310" in host["why"] and good["card"]["id"] == "800T-A2" and good["arch"] == "aarch64"


def test_without_a_host_the_fix_is_the_profiles_stack(capsys, m):
    code, doc, _ = run_json(capsys, "resolve", "--profile", MS_REPORT, "--for-host", "none", "--arch", "aarch64")
    assert code == 2 and doc["known_good_host"] is None
    assert doc["known_good"]["cann"]["version"] == m.profile("mindspore-2.7.1-a2")["constraints"]["cann"]
