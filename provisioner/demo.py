"""`make demo`: the main job on a fresh machine, step by step.

Each step prints the command a user would type and runs it through the same
CLI entry point. Refusals (exit code 2) are expected for the field reports:
they show what is wrong with each and the corrected stack.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
from pathlib import Path

from provisioner.cli import main as cli

# The users' three field reports (profiles in matrices/profiles.yaml).
SEEDS = ["seed-310-grpo", "seed-800ta2-mindspore-sft", "seed-300ta2-kylin-lora"]


def step(title: str, args: list[str], expect: tuple[int, ...] = (0,)) -> int:
    print(f"\n=== {title}\n$ provision {shlex.join(args)}", flush=True)
    code = cli(args)
    sys.stdout.flush()
    sys.stderr.flush()
    if code not in expect:
        raise SystemExit(f"demo: unexpected exit code {code} from: provision {shlex.join(args)}")
    return code


def resolve_steps() -> None:
    step("The newest consistent stack for an Atlas 300T A2", ["resolve", "--card", "300T-A2"])
    from provisioner import matrix

    m = matrix.load()
    for n, name in enumerate(SEEDS):
        seed = m.profile(name)
        label = f"Seed {chr(ord('A') + n)}"
        step(f"{label}: {seed['description']}", ["resolve", "--profile", name], expect=(2,))
        fixed = m.profile(seed["fixed_by"])
        step(f"{label}, corrected: {fixed['description']}", ["resolve", "--profile", fixed["name"]])


# The image part builds with the CPU torch that is available offline on the CI machines; its torch_npu has
# no published CANN pairing, so the example overlay adds one (see the file).
OVERLAY = Path(__file__).resolve().parent.parent / "examples" / "overlays" / "torch-2.13.yaml"
CARD = "300T-A2"


def _captured(args: list[str], expect: tuple[int, ...]) -> tuple[int, str]:
    """step(), keeping stdout (the printed tag) while it is shown."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = step_quiet(args, expect)
    sys.stdout.write(buf.getvalue())
    return code, buf.getvalue().strip()


def step_quiet(args: list[str], expect: tuple[int, ...]) -> int:
    code = cli(args)
    sys.stderr.flush()
    if code not in expect:
        raise SystemExit(f"demo: unexpected exit code {code} from: provision {shlex.join(args)}")
    return code


def _demo_torch() -> str:
    """The torch line of the overlay's torch_npu wheel (versions stay in data, not in this file)."""
    from provisioner import matrix
    from provisioner.yamlio import load

    wheel = load(OVERLAY)["torch_npu"][0]["wheel"]
    return matrix.load([str(OVERLAY)]).torch_npu(wheel)["torch"]


def _ca_bundle() -> str | None:
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def image_steps() -> str:
    """Build the 300T-A2 image (on the local base when the official one cannot be pulled) and show its stack."""
    base = os.environ.get("PROVISION_DEMO_BASE", "provision-local/debian-python:bookworm")
    wheelhouse = os.environ.get("PROVISION_DEMO_WHEELHOUSE", ".cache/wheelhouse")
    torch = _demo_torch()
    overlay = os.path.relpath(OVERLAY) if OVERLAY.is_relative_to(Path.cwd()) else str(OVERLAY)
    common = ["--card", CARD, "--torch", torch, "--matrix", overlay, "--wheelhouse", wheelhouse,
              "--network", "host"]
    ca = _ca_bundle()
    if ca:
        common += ["--trusted-ca", ca]
    print(f"\n=== Build the {CARD} image (torch {torch}: the CPU torch available offline here; {OVERLAY.name}"
          " pairs its torch_npu with a CANN)", flush=True)
    print(f"$ provision build {shlex.join(common)}", flush=True)
    code, tag = _captured(["build", *common], expect=(0, 2))
    if code == 2:
        print(f"\nThe official CANN base image cannot be pulled here (no registry is reachable), so the image is"
              f" built on the local base {base} (Debian bookworm, python3; no CANN inside).", flush=True)
        args = ["build", *common, "--base-image", base]
        print(f"$ provision build {shlex.join(args[1:])}", flush=True)
        code, tag = _captured(args, expect=(0,))
    tag = tag.splitlines()[-1]
    print(f"\n=== The stack the image carries (label org.provision.stack of {tag})", flush=True)
    print(f"$ docker image inspect {tag} --format '{{{{index .Config.Labels \"org.provision.stack\"}}}}'", flush=True)
    import json

    from provisioner.build import client
    from provisioner.cli.matrix_cmds import format_stack

    labels = client().images.get(tag).labels
    stack = json.loads(labels["org.provision.stack"])
    print(format_stack(stack))
    for key in sorted(k for k in labels if k != "org.provision.stack"):
        print(f"  label {key}={labels[key]}")
    return tag


def main() -> int:
    resolve_steps()
    image_steps()
    print("\ndemo: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
