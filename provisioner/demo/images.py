"""Demo: build the 300T-A2 image and show the stack it carries."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from provisioner.demo.steps import captured

# The image part builds with the CPU torch that is available offline on the CI machines; its torch_npu has
# no published CANN pairing, so the example overlay adds one (see the file).
OVERLAY = Path(__file__).resolve().parents[2] / "examples" / "overlays" / "torch-2.13.yaml"
CARD = "300T-A2"


def _demo_torch() -> str:
    """The torch line of the overlay's torch_npu wheel (versions stay in data, not in this file)."""
    from provisioner.matrix import loader
    from provisioner.matrix.yamlio import load

    wheel = load(OVERLAY)["torch_npu"][0]["wheel"]
    row = loader.load([str(OVERLAY)]).torch_npu(wheel)
    if row is None:
        raise SystemExit(f"demo: {OVERLAY.name} names torch_npu {wheel}, which the matrix does not load")
    return row["torch"]


def image_steps() -> str:
    """Build the 300T-A2 image (on the local base when the official one cannot be pulled) and show its stack."""
    base = os.environ.get("PROVISION_DEMO_BASE", "provision-local/debian-python:bookworm")
    wheelhouse = os.environ.get("PROVISION_DEMO_WHEELHOUSE", ".cache/wheelhouse")
    torch = _demo_torch()
    overlay = os.path.relpath(OVERLAY) if OVERLAY.is_relative_to(Path.cwd()) else str(OVERLAY)
    common = ["--card", CARD, "--torch", torch, "--matrix", overlay, "--wheelhouse", wheelhouse,
              "--network", "host"]
    from provisioner.image.build import system_ca_bundle

    ca = system_ca_bundle()
    if ca:
        common += ["--trusted-ca", ca]
    print(f"\n=== Build the {CARD} image (torch {torch}: the CPU torch available offline here; {OVERLAY.name}"
          " pairs its torch_npu with a CANN)", flush=True)
    print(f"$ provision build {shlex.join(common)}", flush=True)
    code, tag = captured(["build", *common], expect=(0, 2))
    if code == 2:
        print(f"\nThe official CANN base image cannot be pulled here (no registry is reachable), so the image is"
              f" built on the local base {base} (Debian bookworm, python3; no CANN inside).", flush=True)
        args = ["build", *common, "--base-image", base]
        print(f"$ provision build {shlex.join(args[1:])}", flush=True)
        code, tag = captured(args, expect=(0,))
    tag = tag.splitlines()[-1]
    print(f"\n=== The stack the image carries (label org.provision.stack of {tag})", flush=True)
    print(f"$ docker image inspect {tag} --format '{{{{index .Config.Labels \"org.provision.stack\"}}}}'", flush=True)

    from provisioner.image.build import connect
    from provisioner.image.labels import STACK_LABEL, stack_from_labels
    from provisioner.resolve.report import format_stack

    with connect() as eng:
        labels = eng.image(tag).labels
    stack = stack_from_labels(labels, tag)
    print(format_stack(stack))
    for key in sorted(k for k in labels if k != STACK_LABEL):
        print(f"  label {key}={labels[key]}")
    return tag


