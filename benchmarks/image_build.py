"""Image build benchmark: code-only rebuild time vs a cold build, and image size vs what it holds.

    python benchmarks/image_build.py [--base TAG] [--wheelhouse DIR] [--skip-cold]

Builds the 300T-A2 test image (torch from the overlay in tests/fixtures/overlays on the local Debian base,
as the integration tests do) twice:
  1. cold: every layer built again (--no-cache), packages downloaded as on a fresh machine;
  2. rebuild: after editing one trainer source file in a copy of this project.
Goal: rebuild / cold <= 0.05. Then compares the image size with base image + installed files (the venv,
the entrypoint files); goal <= 1.05. Needs a Docker engine: run `make engine` first (or let this script run
the same scripts).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OVERLAY = ROOT / "examples" / "overlays" / "torch-2.13.yaml"  # the overlay `make demo` uses
CARD = "300T-A2"


def _context(base: str, project_root: Path | None):
    from provisioner.image import recipes, render
    from provisioner.matrix import loader
    from provisioner.matrix.yamlio import load
    from provisioner.resolve import cached, request

    m = loader.load([str(OVERLAY)])
    torch = m.torch_npu(load(OVERLAY)["torch_npu"][0]["wheel"])["torch"]
    stack = cached.cached_resolve(m, request.build(m, card=CARD, torch=torch, base_image=base))
    return render.render(m, stack, recipes.choose(stack), project_root=project_root)


def _edited_copy(tmp: Path) -> Path:
    from tests.helpers.engine import edited_project_copy

    return edited_project_copy(tmp / "src", f"benchmark {time.time()}")


def _du(engine, tag: str, paths: list[str]) -> int:
    code, out, err = engine.run(tag, ["du", "-sbc", *paths], entrypoint=[], network="host")
    if code != 0:
        raise SystemExit(f"du in {tag} failed ({code}): {err.decode()[-400:]}")
    return int(out.decode().strip().splitlines()[-1].split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=os.environ.get("PROVISION_TEST_BASE", "provision-local/debian-python:bookworm"))
    parser.add_argument("--wheelhouse", default=os.environ.get("PROVISION_TEST_WHEELHOUSE", str(ROOT / ".cache" / "wheelhouse")))
    parser.add_argument("--skip-cold", action="store_true", help="use the cached build as the cold time (for a quick look)")
    args = parser.parse_args()

    from provisioner.image import build

    subprocess.run([str(ROOT / "scripts" / "engine.sh")], check=True)
    subprocess.run([str(ROOT / "scripts" / "base-image.sh"), args.base], check=True)
    from provisioner.image.build import system_ca_bundle

    opts = dict(wheelhouse=args.wheelhouse, trusted_ca=system_ca_bundle(), network="host")
    log = io.StringIO()

    cold_ctx = _context(args.base, None)
    print(f"cold build of {cold_ctx.tag} (--no-cache) ...", flush=True)
    cold = build.build(cold_ctx, build.BuildOptions(**opts, no_cache=not args.skip_cold), out=log, live=False)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = _context(args.base, _edited_copy(Path(tmp)))
        print("rebuild after editing provisioner/train/__init__.py ...", flush=True)
        rebuild = build.build(ctx, build.BuildOptions(**opts), out=log, live=False)
    rebuilt_steps = [s for s in rebuild.steps if not s["cached"] and not s["instruction"].startswith("FROM")]

    engine = build.connect()
    image = engine.image(rebuild.tag)
    base = engine.image(args.base)
    installed = _du(engine, rebuild.tag, ["/opt/venv", "/etc/provision", "/etc/profile.d/provision-cann.sh",
                                          "/usr/local/bin/provision-entrypoint"])
    # Put the image back on this project's real tree.
    build.build(_context(args.base, None), build.BuildOptions(**opts), out=log, live=False)

    ratio_time = rebuild.seconds / cold.seconds
    ratio_size = image.size / (base.size + installed)
    result = {
        "cold_build_s": round(cold.seconds, 1), "rebuild_s": round(rebuild.seconds, 1),
        "rebuild_over_cold": round(ratio_time, 4), "rebuilt_steps": [s["instruction"][:60] for s in rebuilt_steps],
        "image_bytes": image.size, "base_bytes": base.size, "installed_bytes": installed,
        "image_over_base_plus_installed": round(ratio_size, 4),
    }
    print(f"cold build            {cold.seconds:8.1f} s")
    print(f"code-only rebuild     {rebuild.seconds:8.1f} s   ratio {ratio_time:.3f} (goal <= 0.05)"
          f"   rebuilt: {len(rebuilt_steps)} steps from `COPY project/` on")
    print(f"image size            {image.attrs['Size'] / 1e9:8.3f} GB")
    print(f"base + installed      {(base.attrs['Size'] + installed) / 1e9:8.3f} GB   ratio {ratio_size:.3f} (goal <= 1.05)")
    print(json.dumps(result))
    return 0 if ratio_time <= 0.05 and ratio_size <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
