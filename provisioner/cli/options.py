"""Options as data (no click here), so the click CLI and the fast paths of
`provision resolve` and `provision launch` (provisioner/cli/fast.py) read one
table; common.click_option makes a click option of each."""

from __future__ import annotations

from provisioner.arch import ALIASES as ARCH_ALIASES


class Opt:
    """One option: its flag, the keyword it fills, help text, allowed values, repeatable or not; its kind
    ("text", "path", "int" within low..high, or "flag": no value), default, short flag, and whether it is
    required. (A plain class: typing.NamedTuple would cost the fast path its import of typing.)"""

    __slots__ = ("flag", "dest", "help", "choices", "multiple", "kind", "default", "low", "high", "short",
                 "required", "show_default", "metavar")

    def __init__(self, flag: str, dest: str, help: str, choices: tuple[str, ...] | None = None,
                 multiple: bool = False, kind: str = "text", default=None, low: int | None = None,
                 high: int | None = None, short: str | None = None, required: bool = False,
                 show_default: bool = False, metavar: str | None = None):
        self.flag, self.dest, self.help, self.choices, self.multiple = flag, dest, help, choices, multiple
        self.kind, self.default, self.low, self.high, self.short = kind, default, low, high, short
        self.required, self.show_default, self.metavar = required, show_default, metavar

    def but(self, **changes) -> Opt:
        """This option with some fields changed (a command's own default or requirement)."""
        fields = {k: getattr(self, k) for k in self.__slots__}
        return Opt(**{**fields, **changes})


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
JSON = Opt("--json", "as_json", "Print machine-readable JSON (see docs/json.md).", kind="flag")

# The host and chips a container runs on (run-cmd, cdi, k8s, launch, selftest); the matrix option comes with them.
DEVICES = Opt("--devices", "devices", "Physical chip ids as in `ls /dev/davinci*`: 0-3,6 or all.", required=True)
DEVICE_HOST = (
    Opt("--card", "card", "Card or server: 300T-A2, 800T-A2, 800T-A3, 300I-Pro, 350, ...", required=True),
    DEVICES,
    Opt("--root", "root", "Host root the driver files are read from.", default="/", show_default=True),
    Opt("--dev-root", "dev_root", "Where the host's device nodes are.", default="/dev", show_default=True),
    Opt("--driver-mount", "driver_mount", "Mount driver/lib64 + version.info, or the whole driver directory"
        " (default per chip family).", ("lib64", "whole")),
)
NODE_RANK = Opt("--node-rank", "node_rank", "This node's rank (0 = master).", kind="int", low=0, default=0,
                show_default=True)
# The container's shape across nodes (launch, selftest, run-cmd, k8s); NODE_RANK goes after --nnodes where taken.
LAUNCH_NET = (
    Opt("--shm-size", "shm_size", "A private /dev/shm of this size (e.g. 16g) instead of --ipc=host."),
    Opt("--nnodes", "nnodes", "Nodes in the job.", kind="int", low=1, default=1, show_default=True),
    NODE_RANK,
    Opt("--master-addr", "master_addr", "Rendezvous host (node rank 0)."),
    Opt("--master-port", "master_port", "Rendezvous port (default from the matrix).", kind="int", low=1, high=65535),
    Opt("--hccl-if-ip", "hccl_if_ip", "HCCL_IF_IP: this host's IP for HCCL (multi-node)."),
    Opt("--socket-ifname", "socket_ifname", "HCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (e.g. eth0 or =eth0)."),
    Opt("--hccl-connect-timeout", "hccl_connect_timeout", "Seconds (120-7200) for HCCL link setup."),
    Opt("--hccl-exec-timeout", "hccl_exec_timeout", "Seconds a collective may wait (range per chip family: audit.yaml)."),
    Opt("--task", "task", "Refuse cards that cannot train when train (default: train).", ("train", "inference")),
)
# `provision launch`'s own options (after DEVICE_HOST, MATRIX and LAUNCH_NET; --json and ARGS last).
LAUNCH = (
    Opt("--image", "image", "Image to run (local to the engine; e.g. one `provision build` made).", required=True),
    Opt("--check", "check", "Run the collective smoke test (all_reduce over every chip) first; stop if it fails.",
        kind="flag"),
    Opt("--check-only", "check_only", "Run only the collective smoke test.", kind="flag"),
    Opt("--preflight", "preflight", "Run `provision preflight` on this host first (chips, NPU network, clock);"
        " stop if a check fails.", kind="flag"),
    Opt("--selftest", "selftest", "Run the self-test first (chips, attention, fused optimizer, HCCL, three training"
        " steps with the job's own --config); stop if it fails. `provision selftest` runs only it.", kind="flag"),
    Opt("--module", "module", "Python module torchrun starts instead of the trainer (ARGS go to it)."),
    Opt("--script", "script", "Script path inside the container that torchrun starts (ARGS go to it)."),
    Opt("--exec", "exec_", "ARGS are the whole command, run as given (no torchrun added).", kind="flag"),
    Opt("--env", "env", "KEY=VALUE set in the container (repeatable; KEY alone copies this shell's value).",
        multiple=True, short="-e"),
    Opt("--volume", "volumes", "HOST:CONTAINER[:ro|rw] bind mount for data, models, output (repeatable).",
        multiple=True, short="-v"),
    Opt("--workdir", "workdir", "Working directory inside the container.", short="-w"),
    Opt("--network", "network", "Docker network mode (default: the bridge; host on multi-node)."),
    Opt("--mode", "mode", "devices: --device nodes; runtime: the Ascend runtime; auto: runtime if registered and"
        " --dev-root is /dev.", ("auto", "devices", "runtime"), default="auto", show_default=True),
    Opt("--user", "user", "Run as this user inside (default: the image's)."),
    Opt("--name", "name", "Container name (default: provision-launch-<run id>; the check adds -check)."),
    Opt("--rank-table", "rank_table", "hccl.json to mount and point RANK_TABLE_FILE at.", kind="path"),
    Opt("--label", "labels", "KEY=VALUE label on the container(s) (repeatable).", multiple=True),
    Opt("--keep", "keep", "Keep the container(s) after they exit (stopped), for docker logs / inspect.", kind="flag"),
    Opt("--stop-timeout", "stop_timeout", "Seconds between SIGTERM and SIGKILL when stopping on Ctrl-C / SIGTERM.",
        kind="int", low=1, high=3600, default=20, show_default=True),
    Opt("--no-init", "no_init", "Run torchrun as PID 1 (no docker --init).", kind="flag"),
    Opt("--job", "job_file", "Run a framework job file (MindSpeed-LLM SFT, MindSpeed-RL GRPO, MindSpore SFT): every"
        " step, resumable.", kind="path", metavar="FILE"),
    Opt("--dry-run", "dry_run", "With --job: validate and show the steps; write and start nothing.", kind="flag"),
    Opt("--stack", "stack_file", "With --job --dry-run: check the job against this stack JSON (`provision resolve"
        " --json` output or an image's label) instead of the image's, before the image exists; no engine is asked.",
        kind="path", metavar="FILE"),
)

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


def multi_node(kw: dict):
    """The --nnodes / --node-rank / --master-addr / --master-port options as a devices.plan.MultiNode."""
    from provisioner.devices import plan as devices

    return devices.MultiNode(
        nnodes=kw.get("nnodes") or 1,
        node_rank=kw.get("node_rank") or 0,
        master_addr=kw.get("master_addr"),
        master_port=str(kw["master_port"]) if kw.get("master_port") else None,
    )


def plan_options(matrix, kw: dict, **extra):
    """devices.plan.Options from the DEVICE_HOST and LAUNCH_NET values in a command's keywords."""
    from provisioner.devices import plan as devices

    task = kw.get("task") or matrix.policy.get("default_task", "train")
    return devices.Options(
        card=kw["card"],
        devices=kw["devices"],
        root=kw["root"],
        dev_root=kw["dev_root"],
        task=task,
        shm_size=kw.get("shm_size"),
        driver_mount=kw.get("driver_mount"),
        multi=multi_node(kw),
        hccl_if_ip=kw.get("hccl_if_ip"),
        socket_ifname=kw.get("socket_ifname"),
        hccl_connect_timeout=kw.get("hccl_connect_timeout"),
        hccl_exec_timeout=kw.get("hccl_exec_timeout"),
        **extra,
    )
