"""What a launched container runs: the torchrun command line and the environment, from a DevicePlan.

Pure functions (no engine, no torch), so the exact command and environment are
unit-tested and shown in `provision launch --json` before anything starts. One builder
for every place a plan's training runs: `provision launch` (launch/) and the pods of
`provision k8s` (devices/k8s.py) start the same torchrun line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from provisioner import chipids
from provisioner.devices.plan import DevicePlan
from provisioner.errors import ProvisionError
from provisioner.image.labels import LAUNCHER_LABEL, LAUNCHER_MODULE

TRAIN_MODULE = "provisioner.train"
CHECK_MODULE = "provisioner.launch.collective"
SELFTEST_MODULE = "provisioner.train.selftest"
# torchrun's --tee copies each worker's output to its own stdout/stderr with this
# prefix (a string.Template; ${rank} is the global rank, so the prefix names the
# same rank on every node). LAUNCH_ENV below sets the template.
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"
RANK_LINE = re.compile(r"^\[rank(\d+)\]:")
# The plan's variables (matrices/devices.yaml launch_env) that carry torchrun's --node-rank, --master-addr and
# --master-port on a node whose values come from its environment (a Kubernetes pod).
RENDEZVOUS_ENV = ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT")

# Set in the container unless the user (-e) or the image already sets them.
LAUNCH_ENV = {
    # Several workers on few cores: one OpenMP thread each avoids oversubscription
    # (torchrun does the same when unset, with a warning banner).
    "OMP_NUM_THREADS": "1",
    # Workers and torchrun write into pipes and files; unbuffered, lines reach the
    # user (and the rank prefixer) when printed, not when a buffer fills.
    "PYTHONUNBUFFERED": "1",
    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_PREFIX_TEMPLATE,
}


@dataclass(frozen=True)
class Target:
    """What torchrun starts (module or script), or a raw command (exec) run as given."""

    kind: str  # module | script | exec
    value: str | None  # module name or script path; None for exec
    args: tuple[str, ...] = ()

    @classmethod
    def train(cls, args: list[str] | tuple[str, ...] = ()) -> Target:
        return cls("module", TRAIN_MODULE, tuple(args))

    @classmethod
    def check(cls, args: list[str] | tuple[str, ...] = ()) -> Target:
        return cls("module", CHECK_MODULE, tuple(args))

    @classmethod
    def selftest(cls, args: list[str] | tuple[str, ...] = ()) -> Target:
        return cls("module", SELFTEST_MODULE, tuple(args))

    def trainer_config_args(self) -> tuple[str, ...]:
        """The trainer's --config and key=value overrides (what the self-test takes), from a train target."""
        if self.kind != "module" or self.value != TRAIN_MODULE:
            return ()
        out: list[str] = []
        args = list(self.args)
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--config" and i + 1 < len(args):
                out += ["--config", args[i + 1]]
                i += 2
                continue
            if arg.startswith("--config="):
                out.append(arg)
            elif "=" in arg and not arg.startswith("-"):
                out.append(arg)
            elif arg == "--resume":
                i += 1  # and its value
            i += 1
        return tuple(out)

    def __post_init__(self) -> None:
        if self.kind not in ("module", "script", "exec"):
            raise ValueError(f"unknown target kind {self.kind!r}")
        if self.kind == "exec" and not self.args:
            raise ProvisionError("--exec needs the command after `--` (e.g. -- python my.py)")
        if self.kind != "exec" and not self.value:
            raise ProvisionError(f"a {self.kind} target needs a name")


def launcher(image_labels: dict[str, str] | None) -> list[str]:
    """What starts torchrun in an image: the quick-tail launcher (provisioner/launch/teerun.py) where the image
    says it carries it (a label with exactly that module's name), else `torchrun` itself."""
    if (image_labels or {}).get(LAUNCHER_LABEL) == LAUNCHER_MODULE:
        return ["python", "-m", LAUNCHER_MODULE]
    return ["torchrun"]


def env_ref(name: str) -> str:
    """A reference to the container's variable `name` that Kubernetes expands in a pod's command and args
    (`$(NAME)`; values from fieldRefs included)."""
    return f"$({name})"


def torchrun_argv(plan: DevicePlan, target: Target, nproc: int, start: list[str] | None = None,
                  from_env: bool = False) -> list[str]:
    """`torchrun` (or `start`, see launcher()) with one worker per chip; --standalone on one node, static
    rendezvous across nodes. `from_env`: the node rank, master address and port as references to the plan's
    variables of those names (env_ref), for a pod whose rank and master Kubernetes supplies."""
    argv = [*(start or ["torchrun"]), "--nproc-per-node", str(nproc)]
    m = plan.multi
    if m.nnodes > 1:
        if from_env:
            have = {e.name for e in plan.env}
            missing = [n for n in RENDEZVOUS_ENV if n not in have]
            if missing:
                raise ProvisionError(f"the device plan sets no {', '.join(missing)} for a {m.nnodes}-node rendezvous")
            rank, addr, port = (env_ref(n) for n in RENDEZVOUS_ENV)
        else:
            m.require_master()
            rank, addr, port = str(m.node_rank), str(m.master_addr), str(m.master_port)
        argv += ["--nnodes", str(m.nnodes), "--node-rank", rank, "--master-addr", addr, "--master-port", port]
    else:
        argv.append("--standalone")
    # --tee 3: every worker's stdout and stderr reach the console with the rank prefix.
    argv += ["--tee", "3"]
    argv += ["-m", target.value or ""] if target.kind == "module" else [target.value or ""]
    return argv + list(target.args)


def command(plan: DevicePlan, target: Target, nproc: int, start: list[str] | None = None,
            from_env: bool = False) -> list[str]:
    """The container's command: the exec command as given, else torchrun (started by `start`) around the target."""
    return list(target.args) if target.kind == "exec" else torchrun_argv(plan, target, nproc, start, from_env)


def visible_ids(name: str, value: str, plan: DevicePlan) -> list[int]:
    """Check an ASCEND_RT_VISIBLE_DEVICES value: ascending container-local ids (0..N-1), comma-separated.

    CANN numbers the mapped chips 0..N-1 inside the container and stops reading
    the value at the first character it does not expect, silently; a physical id
    or a descending list makes chips disappear, so both are refused here.
    """
    n = len(plan.chips)
    host = ",".join(map(str, plan.chips))
    hint = (f"{name}={value!r}: give ascending container-local ids from 0 to {n - 1}, comma-separated, no spaces"
            f" (host chips {host} are NPU {','.join(map(str, range(n)))} inside)")
    ids = chipids.plain(value)
    if ids is None or any(i >= n for i in ids) or any(b <= a for a, b in zip(ids, ids[1:], strict=False)):
        raise ProvisionError(hint)
    return ids


def environment(plan: DevicePlan, user_env: dict[str, str], image_env: dict[str, str]) -> tuple[dict[str, str], int]:
    """Variables to add to the plan's (docker_kwargs has those) and the number of workers per node.

    User values (-e) win over the launch defaults; an image that sets a default
    keeps its value. ASCEND_RT_VISIBLE_DEVICES, from -e or the image, must hold
    container-local ids; when it narrows the chips, torchrun starts one worker
    per id it names.
    """
    env = {k: v for k, v in LAUNCH_ENV.items() if k not in user_env and k not in image_env}
    env.update(user_env)
    nproc = len(plan.chips)
    vis = plan.settings["visible_env"]
    source = env.get(vis, image_env.get(vis))
    if source is not None:
        nproc = len(visible_ids(vis, source, plan))
        if nproc != len(plan.chips) and any(e.name == "NPROC_PER_NODE" for e in plan.env):
            env["NPROC_PER_NODE"] = str(nproc)
    return env, nproc


def parse_env(items: list[str] | tuple[str, ...], host_env: dict[str, str]) -> dict[str, str]:
    """-e KEY=VALUE (or -e KEY: the value this shell has, as docker does)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ProvisionError(f"-e {item!r}: write KEY=VALUE (KEY: letters, digits, _)")
        if not sep:
            if key not in host_env:
                raise ProvisionError(f"-e {key}: not set in this shell; write {key}=VALUE")
            value = host_env[key]
        out[key] = value
    return out


def parse_volume(item: str) -> tuple[str, str, str]:
    """-v HOST:CONTAINER[:ro|rw] -> (absolute host path, container path, mode)."""
    import os

    parts = item.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise ProvisionError(f"-v {item!r}: write HOST_PATH:CONTAINER_PATH[:ro|rw]")
    host, inside = os.path.abspath(parts[0]), parts[1]
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise ProvisionError(f"-v {item!r}: the mode is ro or rw, not {mode!r}")
    if not inside.startswith("/"):
        raise ProvisionError(f"-v {item!r}: the container path must be absolute")
    if not os.path.exists(host):
        raise ProvisionError(f"-v {item!r}: {host} does not exist")
    return host, inside, mode
