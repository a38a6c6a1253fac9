"""`provision resolve|render` for the host they run on (provisioner/resolve/hostfit.py), on fixture hosts.

The fixture trees are read where they are (tests/fixtures/hosts/<name>/tree: version.info, the npu-smi stand-in
script with real saved output, /proc/sys/kernel/arch, os-release); no device nodes are needed to resolve.
Golden files hold what a user sees (stderr, then stdout). Regenerate them with:
    PROVISION_REGEN=1 .venv/bin/python -m pytest tests/unit/test_hostfit.py
and review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from provisioner import version
from provisioner.cli import app, main
from provisioner.host import buildfacts, fakehost
from provisioner.matrix import loader
from provisioner.resolve import driverfit
from tests.helpers import hosts

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "hostfit"
REGEN = bool(os.environ.get("PROVISION_REGEN"))


def root(name: str) -> str:
    return str(hosts.FIXTURES / name / "tree")


def smi_outputs(args) -> list[str]:
    """A fixture tree's saved npu-smi output, as an operator passes it: provision never runs the npu-smi of a
    --root tree (only the live root's)."""
    args = list(args)
    if "--root" not in args or any(a.startswith("--npu-smi-output") for a in args) or \
            buildfacts.runs_programs({"live": False}):  # a test standing the tree in for the live root
        return []
    tree = Path(args[args.index("--root") + 1])
    return [a for f in fakehost.saved_npu_smi(tree) for a in ("--npu-smi-output", str(f))]


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([*args, *smi_outputs(args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys, *args) -> tuple[int, dict, str]:
    code, out, err = run(capsys, *args, "--json")
    return code, json.loads(out), err


@pytest.fixture(scope="module")
def m():
    return loader.load()


# fixture host -> (its driver, the card picked from npu-smi, the CANN chosen, the container OS)
# (seed-300ta2-kylin, driver 23.0.7, runs only CANN 7.0.0, whose images' Python is below provision's own: it is
# refused with the upgrade and its own base image, tests/unit/test_python_floor.py)
HOSTS = {
    "fit-800ta2-24.1rc3": ("24.1.rc3", "800T-A2", "8.2.RC1", "ubuntu22.04"),
    "seed-800ta2": ("25.0.rc1.1", "800T-A2", "9.0.0", "ubuntu22.04"),      # 9.0.X runs on HDK 25.0.X (9.1.x notes)
    "a3-16": ("25.2.1", "800T-A3", "9.1.0", "openeuler24.03"),             # openEuler host: openEuler image
}


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_no_card_no_driver_picks_the_chip_and_a_cann_the_driver_runs(name, m, capsys):
    driver, card, cann, os_ = HOSTS[name]
    code, doc, err = run_json(capsys, "resolve", "--root", root(name))
    assert code == 0 and err == "", err
    stack = doc["stack"]
    assert (stack["card"]["id"], stack["cann"]["version"], stack["os"]) == (card, cann, os_)
    assert driverfit.driver_fit(driver, m.cann(cann), m) in ("ok", "newer")
    assert stack["driver"]["host"] == driver and stack["request"]["driver"] == driver
    host = stack["host"]
    assert host["root"] is None and host["found"] and host["driver"]["version"] == driver
    taken = {c["option"]: c for c in host["constraints"] if c["from"] == "host"}
    assert taken["driver"]["value"] == driver and "version.info" in taken["driver"]["why"]
    assert taken["card"]["value"] == card and host["chips"]["summary"] in taken["card"]["why"]
    assert taken["arch"]["value"] == stack["arch"] == host["arch"]
    assert all(c["why"] for c in host["constraints"])
    assert stack["explain"]["host"].startswith("read from --root: ") and "(the host's driver" in stack["explain"]["driver"]


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_the_host_gives_the_stack_its_options_would(name, capsys):
    """The host only fills options: the same options typed for no host give the same stack (and image tag)."""
    code, doc, _ = run_json(capsys, "resolve", "--root", root(name))
    req = doc["stack"]["request"]
    code2, doc2, _ = run_json(capsys, "resolve", "--for-host", "none", "--card", req["card"], "--driver",
                              req["driver"], "--arch", req["arch"], *(["--os", req["os"]] if "os" in req else []))
    assert code == code2 == 0
    assert doc2["stack"]["id"] == doc["stack"]["id"] and "host" not in doc2["stack"]


GOLDEN_CASES = {
    "seed-300ta2-kylin": [],
    "fit-800ta2-24.1rc3": [],
    "fit-800ta2-23.0rc3": [],
    "seed-800ta2": [],
    "a3-16": [],
    "broken-no-driver": ["--card", "300T-A2", "--arch", "x86_64"],  # no host arch: the option keeps it stable
    "broken-mixed-families": [],
    "seed-800ta2-card-mismatch": ["--card", "300I-Pro"],
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden(case, capsys):
    name = case.removesuffix("-card-mismatch")
    code, out, err = run(capsys, "resolve", "--root", root(name), *GOLDEN_CASES[case])
    text = f"exit {code}\n--- stderr\n{err}--- stdout\n{out}"
    assert root(name) not in text and str(hosts.FIXTURES) not in text  # the host is told apart by words, not paths
    path = GOLDEN / f"resolve-{case}.txt"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing golden file {path}; run with PROVISION_REGEN=1"
    assert text == path.read_text(encoding="utf-8")


def test_a_driver_older_than_every_official_image_is_refused_with_the_upgrade(capsys):
    code, out, err = run(capsys, "resolve", "--root", root("fit-800ta2-23.0rc3"))
    assert code == 2 and out == ""
    first, *rest = err.splitlines()
    assert first.startswith("provision: refused: the driver of the host read from --root, ")
    # CANN 7.0.0's images have Python 3.8/3.9, below provision's own Requires-Python: the oldest is 8.0.RC2
    assert "23.0.rc3 (/usr/local/Ascend/driver/version.info), is older than every CANN with an official image for" \
           f" chip 910b with the Python provision needs ({version.requires_python()}, its Requires-Python): the" \
           " oldest, CANN 8.0.RC2, needs HDK 24.1.RC2 (paired)" in first
    text = "\n".join(rest)
    assert "to open the newest stack (800T-A2, CANN 9.1.0, " in text
    assert "upgrade the Ascend HDK (driver and firmware) to one CANN 9.1.0 lists: 26.0.RC1 or 26.1.0 (paired)" in text
    assert "the newest stack driver 23.0.rc3 runs today: 800T-A2, CANN 7.0.RC1, torch 2.1.0 + torch_npu 2.1.0.rc1" in text
    assert "on your own CANN 7.0.RC1 base image (--base-image IMAGE)" in text

    code, doc, _ = run_json(capsys, "resolve", "--root", root("fit-800ta2-23.0rc3"))
    assert code == 2 and doc["status"] == "refused" and doc["host"]["driver"]["version"] == "23.0.rc3"
    newest, today = doc["alternatives"]
    assert newest["cann"]["version"] == "9.1.0" and newest["relaxed"] == ["the host's driver 23.0.rc3 (after the HDK upgrade)"]
    assert today["cann"]["version"] == "7.0.RC1" and today["base_image"]["official"] is False
    assert today["driver"]["fit"] == "ok" and today["driver"]["host"] == "23.0.rc3"


def test_other_refusals_name_the_hosts_driver(capsys):
    code, doc, _ = run_json(capsys, "resolve", "--root", root("fit-800ta2-24.1rc3"), "--torch", "2.12.0")
    assert code == 2
    assert any("the host's driver 24.1.rc3" in r for r in doc["reasons"]) and not any(
        "--driver" in r for r in doc["reasons"])
    assert any("the host's driver 24.1.rc3" in a["relaxed"] for a in doc["alternatives"])


def test_card_of_another_family_is_refused_with_both_named(capsys):
    code, out, err = run(capsys, "resolve", "--root", root("seed-800ta2"), "--card", "300I-Pro")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--card 300I-Pro is Ascend 310P, but the host read from --root" in err and "Ascend 910B (Atlas A2)" in err
    assert "8 x 910B2" in err and "--card 800T-A2" in err and "--for-host none" in err
    # a card of the host's family is fine, and recorded as checked
    code, doc, _ = run_json(capsys, "resolve", "--root", root("seed-800ta2"), "--card", "300T-A2")
    checked = [c for c in doc["stack"]["host"]["constraints"] if c["option"] == "card"]
    assert code == 0 and checked == [{"option": "card", "value": "300T-A2", "from": "request", "kind": "check",
                                      "why": "Ascend 910B (Atlas A2), as the chips of the host read from --root"
                                             " (8 x 910B2)"}]


def test_a_profile_card_is_checked_too(capsys):
    code, out, err = run(capsys, "resolve", "--root", root("a3-16"), "--profile", "a2-torch2.1-lora-deepspeed")
    assert code == 2 and "profile a2-torch2.1-lora-deepspeed (card 300T-A2) is Ascend 910B (Atlas A2), but" in err


def test_arch_of_another_host_is_refused(capsys):
    code, out, err = run(capsys, "resolve", "--root", root("seed-800ta2"), "--arch", "x86_64")
    assert code == 2 and "--arch x86_64 does not run on the host read from --root" in err and "which is aarch64" in err
    code, doc, _ = run_json(capsys, "resolve", "--root", root("seed-800ta2"), "--arch", "arm64")
    assert code == 0 and doc["stack"]["arch"] == "aarch64"


@pytest.mark.parametrize("name, phrase", [
    ("broken-mixed-families", "has chips of several families (4 x 910B2, 4 x 910B); name the one the image is for"),
    ("broken-unhealthy-910", "names chips the matrix does not know (xxx)"),
    ("broken-no-driver", "no Ascend driver found on the host read from --root"),
])
def test_card_required_when_the_host_cannot_tell(name, phrase, capsys):
    code, out, err = run(capsys, "resolve", "--root", root(name))
    assert code == 2 and out == "" and err.startswith("provision: error: --card is required: ") and phrase in err
    assert err.count("\n") == 1


def test_a_tree_without_its_saved_npu_smi_output_says_how_to_pass_it(capsys):
    """--root never runs the tree's npu-smi: the refusal says so, not that npu-smi showed no chips."""
    code = main(["resolve", "--root", root("fit-800ta2-24.1rc3")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("provision: error: --card is required: ") and err.count("\n") == 1
    assert "npu-smi is not run for another system's tree: pass its saved output with --npu-smi-output" in err


def test_no_driver_keeps_the_newest_stack_with_one_line(capsys):
    code, doc, err = run_json(capsys, "resolve", "--root", root("broken-no-driver"), "--card", "300T-A2")
    _, plain, _ = run_json(capsys, "resolve", "--for-host", "none", "--card", "300T-A2")
    assert code == 0 and doc["stack"]["id"] == plain["stack"]["id"]
    assert err.count("\n") == 1 and err.startswith("provision: no Ascend driver found on the host read from --root ")
    assert doc["stack"]["host"] == {"root": None, "found": False, "driver": None, "chips": None,
                                    "arch": None, "os": None, "constraints": [], "notes": [err[11:].strip()]}


def test_this_machine_without_a_driver(capsys, monkeypatch):
    from provisioner.host import buildfacts

    if buildfacts.driver_dir("/"):
        pytest.skip("this machine has an Ascend driver")
    monkeypatch.delenv("PROVISION_FOR_HOST", raising=False)
    code, doc, err = run_json(capsys, "resolve", "--card", "300T-A2")
    assert code == 0 and doc["stack"]["host"]["root"] == "/" and not doc["stack"]["host"]["found"]
    assert err == ("provision: no Ascend driver found on this host (looked for /usr/local/Ascend/driver,"
                   " /usr/local/npu/driver): the stack is not limited by a host driver (--root DIR reads another"
                   " host's files; --for-host none builds for another machine)\n")
    code, doc, err = run_json(capsys, "resolve", "--card", "300T-A2", "--for-host", "none")
    assert code == 0 and err == "" and "host" not in doc["stack"]
    monkeypatch.setenv("PROVISION_FOR_HOST", "nope")
    code, _, err = run(capsys, "resolve", "--card", "300T-A2")
    assert code == 2 and "PROVISION_FOR_HOST='nope': use this or none" in err


def test_for_host_none_reads_nothing(capsys):
    code, out, err = run(capsys, "resolve", "--for-host", "none", "--root", root("seed-800ta2"))
    assert code == 2 and "--for-host none reads no host; drop --root" in err
    code, doc, err = run_json(capsys, "resolve", "--for-host", "none", "--card", "800T-A2", "--arch", "aarch64")
    assert code == 0 and doc["stack"]["cann"]["version"] == "9.1.0" and "host" not in doc["stack"]


def test_driver_option_overrides_the_host_with_a_note(capsys):
    code, doc, err = run_json(capsys, "resolve", "--root", root("fit-800ta2-24.1rc3"), "--driver", "25.5.0")
    assert code == 0 and doc["stack"]["cann"]["version"] == "9.1.0"
    assert "--driver 25.5.0 as requested; the host read from --root" in err and "has driver 24.1.rc3" in err
    assert not [c for c in doc["stack"]["host"]["constraints"] if c["option"] == "driver"]


def test_saved_npu_smi_output_without_a_driver(capsys, tmp_path):
    saved = hosts.FIXTURES / "fit-800ta2-24.1rc3" / "tree" / "usr/local/share/npu-smi-fixture/info.txt"
    empty = tmp_path / "empty"
    empty.mkdir()
    code, doc, err = run_json(capsys, "resolve", "--root", str(empty), "--npu-smi-output", str(saved))
    assert code == 0 and doc["stack"]["card"]["id"] == "800T-A2"
    host = doc["stack"]["host"]
    assert host["chips"]["source"] == "saved npu-smi output" and host["driver"] is None
    assert "CANN is not limited by a driver" in err and "architecture of the target host is not known" in err
    code, out, err = run(capsys, "resolve", "--npu-smi-output", str(tmp_path / "missing.txt"))
    assert code == 2 and "--npu-smi-output" in err and "no such file" in err
    code, out, err = run(capsys, "resolve", "--root", str(tmp_path / "nowhere"))
    assert code == 2 and "not a directory" in err


HOST_CASES = [
    ["resolve", "--root", root("fit-800ta2-24.1rc3")],
    ["resolve", "--root", root("fit-800ta2-24.1rc3"), "--json"],
    ["resolve", "--root", root("fit-800ta2-23.0rc3")],                 # refused: click path
    ["resolve", "--root", root("seed-800ta2"), "--card", "300I-Pro"],  # refused: click path
    ["resolve", "--root", root("broken-no-driver"), "--card", "300T-A2"],
    ["resolve", "--for-host", "none", "--card", "300T-A2"],
]


@pytest.mark.parametrize("args", HOST_CASES)
def test_fast_path_prints_what_click_prints(args, capsys):
    fast = (main(list(args)), *capsys.readouterr())
    slow = (app.run(list(args)), *capsys.readouterr())
    assert fast == slow


def test_fast_path_parses_the_host_options():
    from provisioner.cli.fast import RESOLVE_OPTS, parse

    got = parse(["--root", "/h", "--npu-smi-output", "a", "--npu-smi-output=b", "--for-host", "this"], RESOLVE_OPTS)
    assert got is not None
    assert (got["root"], got["npu_smi_outputs"], got["for_host"], got["as_json"]) == ("/h", ("a", "b"), "this", False)
    assert parse(["--for-host", "elsewhere"], RESOLVE_OPTS) is None


def _counting_host(tmp_path: Path, boot_id: str | None) -> tuple[Path, Path]:
    """fit-800ta2-24.1rc3 whose npu-smi logs every run; with a boot id when given."""
    host = tmp_path / "host"
    shutil.copytree(hosts.FIXTURES / "fit-800ta2-24.1rc3" / "tree", host, symlinks=True)
    calls = tmp_path / "calls"
    smi = host / "usr/local/sbin/npu-smi"
    smi.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec cat "$(dirname "$0")/../share/npu-smi-fixture/info.txt"\n')
    smi.chmod(0o755)
    if boot_id:
        (host / "proc/sys/kernel/random").mkdir(parents=True)
        (host / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")
    return host, calls


def test_npu_smi_runs_once_per_boot(tmp_path, capsys, monkeypatch):
    # This tree stands in for the live root (only there does npu-smi run).
    monkeypatch.setattr(buildfacts, "runs_programs", lambda facts: True)
    host, calls = _counting_host(tmp_path, "7b1c2f0e-0000-4000-8000-000000000001")
    first = run_json(capsys, "resolve", "--root", str(host))
    second = run_json(capsys, "resolve", "--root", str(host))
    assert first == second and first[0] == 0
    assert calls.read_text().splitlines() == ["info"]
    (host / "proc/sys/kernel/random/boot_id").write_text("7b1c2f0e-0000-4000-8000-000000000002\n")  # a reboot
    assert run_json(capsys, "resolve", "--root", str(host)) == first
    assert calls.read_text().splitlines() == ["info", "info"]
    info = host / "usr/local/Ascend/driver/version.info"  # a driver upgrade is seen at once
    info.write_text(info.read_text().replace("Version=24.1.rc3", "Version=25.5.0"))
    code, doc, _ = run_json(capsys, "resolve", "--root", str(host))
    assert code == 0 and doc["stack"]["host"]["driver"]["version"] == "25.5.0"
    assert doc["stack"]["cann"]["version"] == "9.1.0" and len(calls.read_text().splitlines()) == 3


def test_without_a_boot_id_npu_smi_runs_every_time(tmp_path, capsys, monkeypatch):
    # This tree stands in for the live root (only there does npu-smi run).
    monkeypatch.setattr(buildfacts, "runs_programs", lambda facts: True)
    host, calls = _counting_host(tmp_path, None)
    for _ in range(2):
        assert run_json(capsys, "resolve", "--root", str(host))[0] == 0
    assert calls.read_text().splitlines() == ["info", "info"]


def test_render_records_the_host_in_the_context(tmp_path, capsys):
    out = tmp_path / "ctx"
    code, doc, err = run_json(capsys, "render", "--root", root("fit-800ta2-24.1rc3"), "-o", str(out))
    assert code == 0 and err == ""
    stack = json.loads((out / "files/rootfs/etc/provision/stack.json").read_text())
    assert stack["host"]["driver"]["version"] == "24.1.rc3" and stack["cann"]["version"] == "8.2.RC1"
    assert doc["manifest"]["stack"]["host"] == stack["host"]
    dockerfile = (out / "Dockerfile").read_text()
    assert '\\"host\\":{\\"root\\":null' in dockerfile  # the image label carries it, with no path of this machine
    assert str(hosts.FIXTURES) not in dockerfile and str(hosts.FIXTURES) not in json.dumps(doc)
    code, text, _ = run(capsys, "render", "--root", root("fit-800ta2-24.1rc3"), "-o", str(tmp_path / "ctx2"))
    assert code == 0 and "  host read from --root: driver 24.1.rc3, 8 x 910B2 (910b)" in text


def test_render_on_a_host_whose_driver_runs_no_image_writes_nothing(tmp_path, capsys):
    out = tmp_path / "ctx"
    code, text, err = run(capsys, "render", "--root", root("fit-800ta2-23.0rc3"), "-o", str(out))
    assert code == 2 and text == "" and err.count("\n") == 1 and not out.exists()
    assert err.startswith("provision: error: no stack: the driver of the host read from --root, ")


def _host_copy(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    shutil.copytree(hosts.FIXTURES / "fit-800ta2-24.1rc3" / "tree", host, symlinks=True)
    return host


def test_an_unparsable_driver_version_limits_nothing(tmp_path, capsys):
    host = _host_copy(tmp_path)
    (host / "usr/local/Ascend/driver/version.info").write_text("Version=V100R001C15\n")
    code, doc, err = run_json(capsys, "resolve", "--root", str(host))
    assert code == 0 and doc["stack"]["cann"]["version"] == "9.1.0" and "driver" not in doc["stack"]["request"]
    assert "'V100R001C15' (/usr/local/Ascend/driver/version.info), is not a version: CANN is not limited" in err


def test_npu_smi_failing_needs_the_card(tmp_path, capsys, monkeypatch):
    # This tree stands in for the live root (only there does npu-smi run).
    monkeypatch.setattr(buildfacts, "runs_programs", lambda facts: True)
    host = _host_copy(tmp_path)
    smi = host / "usr/local/sbin/npu-smi"
    smi.write_text("#!/bin/sh\necho 'dcmi module initialize failed. ret is -8005' >&2\nexit 1\n")
    code, out, err = run(capsys, "resolve", "--root", str(host))
    assert code == 2 and err.startswith("provision: error: --card is required: the chips of the host read from --root")
    assert "npu-smi info failed: exit code 1: dcmi module initialize failed. ret is -8005" in err
    code, doc, err = run_json(capsys, "resolve", "--root", str(host), "--card", "300T-A2")
    assert code == 0 and doc["stack"]["cann"]["version"] == "8.2.RC1"  # the driver still limits CANN
    assert "the chips of the host read from --root" in err and "were not read" in err


def test_paths_of_another_hosts_files_are_told_as_the_hosts_own():
    """Notes go into the stack and so into image labels: a path under --root becomes the host's own path."""
    from provisioner.resolve import hostfit

    there = {"root": "/srv/copies/node7/", "live": False}
    assert hostfit._host_paths(there, "cannot read /srv/copies/node7/etc/passwd") == "cannot read /etc/passwd"
    assert hostfit._host_paths(there, None) is None
    here = {"root": "/", "live": True}
    assert hostfit._host_paths(here, "cannot read /etc/passwd") == "cannot read /etc/passwd"


def test_render_text_on_a_host_without_a_driver(tmp_path, capsys):
    """No driver limits nothing: the one line on stderr says so, and the text report has no host line."""
    bare = tmp_path / "bare"
    bare.mkdir()
    code, text, err = run(capsys, "render", "--root", str(bare), "--card", "800T-A2", "-o", str(tmp_path / "ctx"))
    assert code == 0 and err.count("\n") == 1 and "no Ascend driver found" in err
    assert text.startswith(f"{tmp_path / 'ctx'}: build context for ") and "  host " not in text


@pytest.mark.parametrize("version", ["25.0.rc1+$(x)", "25.0.rc1+a b", "abc", "25.0.rc1;x"])
def test_a_host_driver_that_is_not_a_version_is_a_note_never_blamed_on_driver(version, tmp_path, capsys):
    """Review A #6: the host's version.info is checked with --driver's grammar; a value that fails it is a note
    ("not a version: CANN is not limited by it"), not an error naming --driver, which the user never passed."""
    tree = tmp_path / "tree"
    shutil.copytree(root("seed-800ta2"), tree, symlinks=True)
    info = tree / "usr" / "local" / "Ascend" / "driver" / "version.info"
    info.write_text(info.read_text().replace("Version=25.0.rc1.1", f"Version={version}", 1))
    smi = [a for f in fakehost.saved_npu_smi(Path(root("seed-800ta2"))) for a in ("--npu-smi-output", str(f))]
    code = main(["resolve", "--root", str(tree), "--card", "800T-A2", *smi])
    out, err = capsys.readouterr()
    assert code == 0 and "--driver:" not in err, err
    assert "is not a version: CANN is not limited by it" in out + err
