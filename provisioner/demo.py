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
import stat
import sys
import tempfile
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


# The card the launch steps simulate, and how many of its chips.
LAUNCH_CARD = "300T-A2"
LAUNCH_CHIPS = 2
SIM_ID = 1000  # uid/gid of the simulated host's driver account


def simulated_host(base: Path, image_stack: dict | None, chips: int = LAUNCH_CHIPS) -> tuple[Path, Path]:
    """A host root and dev root for LAUNCH_CARD: chip and manager nodes made with mknod (needs root).

    Node names come from the card's device family in matrices/devices.yaml; every
    node gets /dev/null's numbers, so a container can open it and nothing real is
    touched. The root holds an empty driver tree; its version.info names the
    driver the image's stack is paired with, when the image says.
    """
    from provisioner import hostfs, matrix

    m = matrix.load()
    _, family, _ = m.lookup_card(LAUNCH_CARD)
    dfam = next(r for r in m.rows("device_families") if r["id"] == family["device_family"])
    dev = base / "dev"
    dev.mkdir(parents=True)
    names = [dfam["chip_node"].format(id=i) for i in range(chips)]
    names += [row["name"] for row in dfam["nodes"] if row["need"] == "required"]
    root = base / "root"
    # The driver's run account owns the nodes (mode 0660) on real hosts; its gid varies by install.
    user = hostfs.account(root)["user"]
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text(f"root:x:0:0::/root:/bin/sh\n{user}:x:{SIM_ID}:{SIM_ID}::/home/{user}:/bin/sh\n")
    (root / "etc" / "group").write_text(f"root:x:0:\n{user}:x:{SIM_ID}:\n")
    null = os.stat("/dev/null").st_rdev
    for name in names:
        os.mknod(dev / name, 0o660 | stat.S_IFCHR, null)
        os.chown(dev / name, SIM_ID, SIM_ID)
        os.chmod(dev / name, 0o660)  # mknod applies the umask
    driver = root / hostfs.DRIVER_DIRS[0]
    (driver / "lib64").mkdir(parents=True)
    paired = ((image_stack or {}).get("driver") or {}).get("paired") or []
    (driver / "version.info").write_text(f"Version={paired[0]}\n" if paired else "")
    install = "/" + str(Path(hostfs.DRIVER_DIRS[0]).parent)
    (root / "etc" / "ascend_install.info").write_text(f"Driver_Install_Path_Param={install}\n")
    (root / "usr" / "local" / "dcmi").mkdir(parents=True)
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    npu_smi = root / "usr" / "local" / "bin" / "npu-smi"
    npu_smi.write_text("#!/bin/sh\necho 'npu-smi: simulated host, no chips to report' >&2\nexit 1\n")
    npu_smi.chmod(0o755)
    return root, dev


def _image_facts(image: str) -> tuple[dict | None, str | None]:
    """The image's stack label, and why the bundled trainer cannot run in it (None: it can)."""
    import json

    from provisioner import enginefacts

    try:
        import docker

        client = docker.from_env(timeout=60)
        labels = (client.api.inspect_image(image).get("Config") or {}).get("Labels") or {}
        probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('provisioner.train') else 3)"
        try:
            client.containers.run(image, ["python", "-c", probe], remove=True, network_mode="none",
                                  environment={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
            missing = None
        except docker.errors.ContainerError as exc:
            missing = "provisioner.train is not in the image yet" if exc.exit_status == 3 else f"python failed: {exc}"
        client.close()
    except Exception as exc:  # noqa: BLE001 - the launch step itself reports an absent engine or image
        return None, f"cannot look into {image}: {' '.join(str(exc).split())[:160]}"
    raw = labels.get(enginefacts.STACK_LABEL)
    try:
        stack = json.loads(raw) if raw else None
    except ValueError:
        stack = None
    return stack, missing


def launch_steps(image: str, train_args: list[str] | None = None) -> None:
    """Launch `image` on a simulated 2-chip Atlas 300T A2 host (fake device nodes, CPU workers):
    the collective smoke test, then a short run of the bundled trainer when the image has it.

    `train_args` are the trainer's arguments for that short run (after `--`).
    """
    title = f"Launch on a simulated {LAUNCH_CHIPS}-chip {LAUNCH_CARD} host"
    if os.geteuid() != 0:
        print(f"\n=== {title}: skipped (simulated device nodes are made with mknod, which needs root)")
        return
    stack, no_trainer = _image_facts(image)
    with tempfile.TemporaryDirectory(prefix="provision-demo-host-") as tmp:
        root, dev = simulated_host(Path(tmp), stack)
        base = ["launch", "--card", LAUNCH_CARD, "--devices", f"0-{LAUNCH_CHIPS - 1}", "--root", str(root),
                "--dev-root", str(dev), "--image", image,
                # torch_npu without CANN breaks `import torch` unless backend autoloading is off.
                "-e", "TORCH_DEVICE_BACKEND_AUTOLOAD=0"]
        step(f"{title}: collective smoke test (all_reduce over both chips' workers; gloo on CPU here)",
             base + ["--check-only"])
        if no_trainer:
            print(f"\n=== {title}: short trainer run skipped ({no_trainer})")
        elif not train_args:
            print(f"\n=== {title}: short trainer run skipped (no trainer arguments given to launch_steps)")
        else:
            step(f"{title}: a short run of the bundled trainer", base + ["--", *train_args])


def main() -> int:
    resolve_steps()
    image = image_steps()
    launch_steps(image)
    print("\ndemo: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
