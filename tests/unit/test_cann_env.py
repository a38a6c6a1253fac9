"""templates/files/cann-env.sh: the environment every shell of an image gets, as the official CANN images'
entrypoint sets it (toolkit, ascendnpu-ir, NNAL/ATB with the installed torch's C++ ABI), on a stand-in CANN
layout in a temporary directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "templates" / "files" / "cann-env.sh"


def layout(root: Path, version: str = "9.0.1", ir: bool = True, atb: bool = True) -> Path:
    """A CANN install as the official images have it: <root>/ascend-toolkit/set_env.sh pointing at
    <root>/cann-<version>, ascendnpu-ir under its share/info, NNAL beside the toolkit."""
    home = root / f"cann-{version}"
    (root / "ascend-toolkit").mkdir(parents=True)
    (root / "ascend-toolkit" / "set_env.sh").write_text(
        f"export ASCEND_TOOLKIT_HOME={home}\nexport ASCEND_HOME_PATH={home}\nexport TOOLKIT_ARGS=\"$*\"\n")
    if ir:
        (home / "share/info/ascendnpu-ir/bin").mkdir(parents=True)
        (home / "share/info/ascendnpu-ir/bin/set_env.sh").write_text("export BISHENG_IR=on IR_ARGS=\"$*\"\n")
    if atb:
        (root / "nnal/atb").mkdir(parents=True)
        (root / "nnal/atb/set_env.sh").write_text(
            'for a in "$@"; do case "$a" in --cxx_abi=*) abi=${a#--cxx_abi=};; esac; done\n'
            'export ATB_HOME_PATH=' + str(root) + '/nnal/atb/latest/atb/cxx_abi_${abi:-probed} ATB_ARGS="$*"\n')
    return root / "ascend-toolkit" / "set_env.sh"


def source(set_env: Path, *command_args: str, **env) -> dict[str, str]:
    """Source cann-env.sh the way the entrypoint does, with a command line of its own in $@."""
    probe = ("set -- " + " ".join(command_args) + "\n" if command_args else "") + f". {SCRIPT}\n" + (
        'for v in PROVISION_CANN_ENV PROVISION_ATB_ENV ASCEND_HOME_PATH BISHENG_IR IR_ARGS ATB_HOME_PATH ATB_ARGS '
        'TOOLKIT_ARGS; do eval "echo $v=\\${$v-unset}"; done\n')
    base = {"PATH": "/usr/bin:/bin", "HOME": str(set_env.parent), "PROVISION_CANN_SET_ENV": str(set_env)}
    out = subprocess.run(["bash", "-c", probe], env={**base, **env}, capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


def test_toolkit_ascendnpu_ir_and_atb_with_the_torch_abi(tmp_path):
    set_env = layout(tmp_path)
    got = source(set_env, "python", "train.py", "--lr", "1", PROVISION_TORCH_CXX11_ABI="0")
    assert got["PROVISION_CANN_ENV"] == str(set_env)
    assert got["BISHENG_IR"] == "on"
    assert got["PROVISION_ATB_ENV"] == str(tmp_path / "nnal/atb/set_env.sh")
    assert got["ATB_HOME_PATH"].endswith("/cxx_abi_0") and got["ATB_ARGS"] == "--cxx_abi=0"
    # None of the scripts sees the command line the entrypoint was given.
    assert got["TOOLKIT_ARGS"] == "" and got["IR_ARGS"] == ""


def test_without_a_known_abi_atb_probes_for_itself(tmp_path):
    got = source(layout(tmp_path))
    assert got["ATB_ARGS"] == "" and got["ATB_HOME_PATH"].endswith("/cxx_abi_probed")


@pytest.mark.parametrize("ir, atb", [(False, True), (True, False), (False, False)])
def test_older_cann_without_ascendnpu_ir_or_nnal(tmp_path, ir, atb):
    """CANN before 8.5 has no ascendnpu-ir; a toolkit without NNAL has no ATB: nothing to source, no error."""
    got = source(layout(tmp_path, version="8.3.RC1", ir=ir, atb=atb), PROVISION_TORCH_CXX11_ABI="1")
    assert got["BISHENG_IR"] == ("on" if ir else "unset")
    assert got["ATB_ARGS"] == ("--cxx_abi=1" if atb else "unset")
    assert got["PROVISION_ATB_ENV"] == (str(tmp_path / "nnal/atb/set_env.sh") if atb else "unset")


def test_no_cann_means_cpu_only(tmp_path):
    got = source(tmp_path / "none" / "set_env.sh")
    assert got["PROVISION_CANN_ENV"] == "absent" and got["ATB_ARGS"] == "unset"
