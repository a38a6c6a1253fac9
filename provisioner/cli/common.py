"""Options and output helpers shared by the command modules."""

from __future__ import annotations

import json
import sys

import click


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON (see docs/json.md).")(f)


def matrix_option(f):
    return click.option(
        "--matrix",
        "overlays",
        multiple=True,
        type=click.Path(),
        help="Overlay YAML file or directory that adds or overrides matrix rows (repeatable; also PROVISION_MATRIX).",
    )(f)


_RESOLVE_OPTIONS = [
    click.option("--card", help="Card or server: 300T-A2, 800T-A2, 800T-A3, 300I-Pro, 800-9000, ... or a chip alias (910b)."),
    click.option("--profile", help="Start from a named profile (see `provision matrix --section profiles`)."),
    click.option("--task", type=click.Choice(["train", "inference"]), help="What the stack is for (default: train)."),
    click.option("--framework", type=click.Choice(["pytorch", "mindspore"]), help="Framework (default: pytorch)."),
    click.option("--cann", help="CANN version, e.g. 8.3.RC1."),
    click.option("--torch", help="torch version, e.g. 2.5.1 (2.1 means any 2.1.x)."),
    click.option("--torch-npu", "torch_npu", help="torch_npu wheel version, e.g. 2.1.0.post17."),
    click.option("--mindspore", help="MindSpore version (implies --framework mindspore)."),
    click.option("--python", help="Python version inside the image, e.g. 3.10."),
    click.option("--with", "extras", multiple=True, help="Extras: apex, mindspeed-llm, deepspeed (comma-separated or repeated)."),
    click.option("--arch", type=click.Choice(["x86_64", "aarch64", "amd64", "arm64"]), help="Target CPU architecture (default: this machine's)."),
    click.option("--driver", help="The host's HDK driver version, e.g. 24.1.rc3: only CANN releases it supports are chosen."),
    click.option("--os", "os_", help="Container OS of the base image: ubuntu22.04, openeuler24.03, ..."),
    click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), help="Training precision to check against the chip."),
    click.option("--base-image", "base_image", help="Use your own base image instead of the official CANN image."),
    click.option("--registry", type=click.Choice(["quay", "dockerhub"]), help="Registry for the official base image (default: quay)."),
]


def resolve_options(f):
    """All `provision resolve` options, for every command that builds on a Stack."""
    for option in reversed(_RESOLVE_OPTIONS):
        f = option(f)
    return matrix_option(f)


RESOLVE_KEYS = ("card", "profile", "task", "framework", "cann", "torch", "torch_npu", "mindspore", "python", "extras",
                "arch", "driver", "os_", "dtype", "base_image", "registry")


def pop_resolve(kwargs: dict) -> dict:
    """Take the resolve options out of a command's kwargs (renaming os_)."""
    out = {k: kwargs.pop(k, None) for k in RESOLVE_KEYS}
    out["os"] = out.pop("os_")
    return out


def resolve_stack(overlays, options: dict):
    """Load the matrix (with overlays) and resolve; errors propagate as ProvisionError."""
    from provisioner import cache, matrix, request

    m = matrix.load(list(overlays or ()))
    opts = dict(options)
    profile = opts.pop("profile", None)
    req = request.build(m, profile=profile, **opts)
    return m, cache.cached_resolve(m, req)


def emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, ensure_ascii=False)
    sys.stdout.write("\n")


def table(rows: list[list], headers: list[str]) -> str:
    """A plain aligned text table."""
    cells = [[("" if c is None else str(c)) for c in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
