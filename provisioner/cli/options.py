"""The resolve options as data (no click here), so the click CLI and the
fast path of `provision resolve` (provisioner/cli/fast.py) read one table."""

from __future__ import annotations

from provisioner.arch import ALIASES as ARCH_ALIASES


class Opt:
    """One option: its flag, the keyword it fills, help text, allowed values, repeatable or not.
    (A plain class: typing.NamedTuple would cost the fast path its import of typing.)"""

    __slots__ = ("flag", "dest", "help", "choices", "multiple")

    def __init__(self, flag: str, dest: str, help: str, choices: tuple[str, ...] | None = None,
                 multiple: bool = False):
        self.flag, self.dest, self.help, self.choices, self.multiple = flag, dest, help, choices, multiple


RESOLVE = (
    Opt("--card", "card", "Card or server: 300T-A2, 800T-A2, 800T-A3, 300I-Pro, 800-9000, ... or a chip alias (910b)."),
    Opt("--profile", "profile", "Start from a named profile (see `provision matrix --section profiles`)."),
    Opt("--task", "task", "What the stack is for (default: train).", ("train", "inference")),
    Opt("--framework", "framework", "Framework (default: pytorch).", ("pytorch", "mindspore")),
    Opt("--cann", "cann", "CANN version, e.g. 8.3.RC1."),
    Opt("--torch", "torch", "torch version, e.g. 2.5.1 (2.1 means any 2.1.x)."),
    Opt("--torch-npu", "torch_npu", "torch_npu wheel version, e.g. 2.1.0.post17."),
    Opt("--mindspore", "mindspore", "MindSpore version (implies --framework mindspore)."),
    Opt("--python", "python", "Python version inside the image, e.g. 3.10."),
    Opt("--with", "extras", "Extras: apex, mindspeed-llm, deepspeed, mindformers (comma-separated or repeated).", multiple=True),
    Opt("--arch", "arch", "Target CPU architecture (default: this machine's).", tuple(ARCH_ALIASES)),
    Opt("--driver", "driver", "The host's HDK driver version, e.g. 24.1.rc3: only CANN releases it supports are chosen."),
    Opt("--os", "os_", "Container OS of the base image: ubuntu22.04, openeuler24.03, ..."),
    Opt("--dtype", "dtype", "Training precision to check against the chip.", ("bf16", "fp16", "fp32")),
    Opt("--base-image", "base_image", "Use your own base image instead of the official CANN image."),
    Opt("--registry", "registry", "Registry for the official base image (default: quay).", ("quay", "dockerhub")),
)
MATRIX = Opt("--matrix", "overlays",
             "Overlay YAML file or directory that adds or overrides matrix rows (repeatable; also PROVISION_MATRIX).",
             multiple=True)
# Which host the stack must run on (provisioner/resolve/hostfit.py); not part of the request itself.
HOST = (
    Opt("--for-host", "for_host", "The host the image must run on: this (default) reads the host at --root, whose"
        " driver, chips, architecture and OS family constrain the stack; none builds for another machine (also"
        " PROVISION_FOR_HOST=none).", ("this", "none")),
    Opt("--root", "root", "Root of the host to build for (default /): another host's files, as `provision audit"
        " --root` reads them."),
    Opt("--npu-smi-output", "npu_smi_outputs", "Saved `npu-smi info` output of that host, read instead of running"
        " npu-smi (repeatable).", multiple=True),
)
JSON = Opt("--json", "as_json", "Print machine-readable JSON (see docs/json.md).")

RESOLVE_KEYS = tuple(o.dest for o in RESOLVE)
HOST_KEYS = tuple(o.dest for o in HOST)


def pop_resolve(kwargs: dict) -> dict:
    """Take the resolve options out of a command's kwargs (renaming os_)."""
    out = {k: kwargs.pop(k, None) for k in RESOLVE_KEYS}
    out["os"] = out.pop("os_")
    return out


def pop_host(kwargs: dict) -> dict:
    """Take the host options (--for-host, --root, --npu-smi-output) out of a command's kwargs."""
    return {k: kwargs.pop(k, None) for k in HOST_KEYS}
