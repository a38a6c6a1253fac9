"""The job file: read a small YAML file into a JobSpec, checking every field (errors say file:line).

A job file names the framework job kind, the model directory, the data, the parallelism, the training
lengths and the output directory. Paths are absolute paths as the job's hosts (and containers) see them:
they reach shell scripts and configs, so only plain path characters are accepted. The file may come
from someone else; nothing in it is trusted before this module has checked it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import validate
from provisioner.errors import ProvisionError

NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")  # a DNS-1035 label, as KubeRay wants a RayJob name
NAME_MAX = 40  # leaves room for the suffixes Kubernetes objects get (-worker-0, -job, KubeRay's -xxxxx)
# A path that is safe in a shell word, a YAML scalar and a Kubernetes hostPath: no spaces, quotes,
# globs, variables or `..`.
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+@=,/-]*\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
ENV_VALUE = re.compile(r"^[A-Za-z0-9._+@=,:;/ ^-]*\Z")
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")

FORMATS = ("alpaca", "sharegpt", "orz")  # which framework reads which: matrices/jobs.yaml job_data_formats
RECOMPUTE = ("none", "full")
STORAGE = ("shared", "local")

TOP_KEYS = {"kind", "name", "model", "model_config", "data", "parallel", "train", "grpo", "output", "resume",
            "storage", "env", "framework_dir", "wait_timeout"}
DATA_KEYS = {"path", "format", "map_keys", "prompt_type"}
PARALLEL_KEYS = {"tensor", "pipeline", "data"}
TRAIN_KEYS = {"seq_length", "micro_batch_size", "global_batch_size", "steps", "lr", "min_lr", "save_interval",
              "keep_checkpoints", "recompute", "seed", "weight_decay", "warmup_fraction"}
GRPO_KEYS = {"n_samples_per_prompt", "max_prompt_length", "max_response_length", "kl_coef", "temperature",
             "infer_tensor_parallel", "gpu_memory_utilization", "reward"}


@dataclass(frozen=True)
class Data:
    path: str
    format: str = "alpaca"
    map_keys: tuple[tuple[str, str], ...] = ()
    prompt_type: str | None = None


@dataclass(frozen=True)
class Parallel:
    tensor: int
    pipeline: int
    data: int

    @property
    def chips(self) -> int:
        return self.tensor * self.pipeline * self.data

    def label(self) -> str:
        return f"TP{self.tensor} x PP{self.pipeline} x DP{self.data}"


@dataclass(frozen=True)
class Train:
    seq_length: int
    global_batch_size: int
    steps: int
    micro_batch_size: int = 1
    lr: float = 1.25e-6
    min_lr: float | None = None
    save_interval: int | None = None  # None: once, at the last step
    keep_checkpoints: int = 2  # the newest resumable checkpoints kept; older ones are removed; 0: none after the export
    recompute: str = "none"
    seed: int = 1234
    weight_decay: float = 0.0
    warmup_fraction: float = 0.01

    @property
    def save_every(self) -> int:
        return self.save_interval or self.steps


@dataclass(frozen=True)
class Grpo:
    n_samples_per_prompt: int = 8
    max_prompt_length: int = 2048
    max_response_length: int = 2048
    kl_coef: float = 0.001
    temperature: float = 1.0
    infer_tensor_parallel: int | None = None  # None: the actor's tensor parallel size
    gpu_memory_utilization: float = 0.4
    reward: tuple[str, ...] = ("base_acc",)


@dataclass(frozen=True)
class JobSpec:
    kind: str
    name: str
    model: str
    data: Data
    parallel: Parallel
    train: Train
    output: str
    source: str  # the job file as named on the command line
    model_config: str | None = None  # a config.json on this machine, when the model dir is not readable here
    grpo: Grpo | None = None
    resume: bool = True
    storage: str = "shared"
    env: tuple[tuple[str, str], ...] = ()
    framework_dir: str | None = None
    wait_timeout: int = 21600  # seconds a node waits for node 0's shared outputs
    model_config_as_written: str | None = None
    where: dict = field(default_factory=dict, compare=False)  # dotted key -> file:line

    def at(self, key: str) -> str:
        """file:line of a key (dotted: train.steps), or of the file when it has no line."""
        return self.where.get(key) or self.where.get(key.split(".")[0]) or f"{self.source}:1"

    def to_dict(self) -> dict:
        from dataclasses import asdict

        out = asdict(self)
        out.pop("where")
        # as written in the job file: job.json and the manifests carry no paths of this machine
        out["source"] = os.path.basename(self.source)
        out["model_config"] = out.pop("model_config_as_written")
        out["env"] = dict(self.env)
        out["data"]["map_keys"] = dict(self.data.map_keys)
        if self.grpo:
            out["grpo"]["reward"] = list(self.grpo.reward)
        return out


# ------------------------------------------------------------------------------------------ reading


def load(path: str) -> JobSpec:
    """Read and check a job file; ProvisionError names file:line of the first problem."""
    from provisioner.matrix.yamlio import load as load_yaml

    p = Path(path)
    if not p.is_file():
        raise ProvisionError(f"--job {path}: no such file")
    doc = load_yaml(p, path)
    if not isinstance(doc, dict):
        raise ProvisionError(f"{path}:1: a job file is a mapping (kind:, name:, model:, data:, parallel:, train:, output:)")
    return parse(doc, path)


def parse(doc, source: str) -> JobSpec:
    """Check a loaded job document (yamlio Nodes carry the lines)."""
    where: dict[str, str] = {}
    _record(doc, "", where, source)
    _keys(doc, TOP_KEYS, "", where, source)
    for key in ("kind", "name", "model", "data", "parallel", "train", "output"):
        if key not in doc:
            raise ProvisionError(f"{source}:1: the job file needs {key}:")
    kind = _text(doc, "kind", where)
    name = _text(doc, "name", where)
    if not NAME.match(name) or len(name) > NAME_MAX:
        raise ProvisionError(f"{where['name']}: name {name!r}: use lower-case letters, digits and '-', starting with"
                             f" a letter, at most {NAME_MAX} characters (it names containers and Kubernetes objects)")
    model = _path(doc, "model", where)
    output = _path(doc, "output", where)
    model_config = None
    if doc.get("model_config") is not None:
        rel = _text(doc, "model_config", where)
        base = os.path.dirname(os.path.abspath(source))
        model_config = os.path.normpath(os.path.join(base, rel))
        if not os.path.isfile(model_config):
            raise ProvisionError(f"{where['model_config']}: model_config {rel}: no such file")

    data_doc = _section(doc, "data", DATA_KEYS, where, source)
    data = Data(
        path=_path(data_doc, "path", where, "data"),
        format=_choice(data_doc, "format", FORMATS, where, "data", "alpaca"),
        map_keys=_map_keys(data_doc, where),
        prompt_type=_opt_word(data_doc, "prompt_type", where, "data"),
    )
    if os.path.dirname(data.path) == "/":
        raise ProvisionError(f"{where['data.path']}: data.path {data.path}: put the data file in a directory of its own"
                             " (its directory is mounted into the containers, and / is the whole host)")
    par_doc = _section(doc, "parallel", PARALLEL_KEYS, where, source)
    parallel = Parallel(
        tensor=_int(par_doc, "tensor", where, "parallel", 1),
        pipeline=_int(par_doc, "pipeline", where, "parallel", 1, default=1),
        data=_int(par_doc, "data", where, "parallel", 1),
    )
    tr = _section(doc, "train", TRAIN_KEYS, where, source)
    steps = _int(tr, "steps", where, "train", 1)
    train = Train(
        seq_length=_int(tr, "seq_length", where, "train", 8),
        global_batch_size=_int(tr, "global_batch_size", where, "train", 1),
        steps=steps,
        micro_batch_size=_int(tr, "micro_batch_size", where, "train", 1, default=1),
        lr=_float(tr, "lr", where, "train", Train.lr),
        min_lr=_float(tr, "min_lr", where, "train", None),
        save_interval=_int(tr, "save_interval", where, "train", 1, default=None),
        keep_checkpoints=_int(tr, "keep_checkpoints", where, "train", 0, default=Train.keep_checkpoints),
        recompute=_choice(tr, "recompute", RECOMPUTE, where, "train", "none"),
        seed=_int(tr, "seed", where, "train", 0, default=Train.seed),
        weight_decay=_float(tr, "weight_decay", where, "train", Train.weight_decay),
        warmup_fraction=_float(tr, "warmup_fraction", where, "train", Train.warmup_fraction),
    )
    if train.save_interval and train.save_interval > steps:
        raise ProvisionError(f"{where['train.save_interval']}: save_interval {train.save_interval} is more than"
                             f" steps {steps}")
    if train.min_lr is not None and train.min_lr > train.lr:
        raise ProvisionError(f"{where['train.min_lr']}: min_lr {train.min_lr} is above lr {train.lr}")
    if not 0 <= train.warmup_fraction < 1:
        raise ProvisionError(f"{where['train.warmup_fraction']}: warmup_fraction must be in [0, 1)")

    grpo = None
    if "grpo" in doc:
        g = _section(doc, "grpo", GRPO_KEYS, where, source)
        reward = g.get("reward", list(Grpo.reward))
        if isinstance(reward, str):
            reward = [reward]
        if not isinstance(reward, list) or not reward or not all(isinstance(r, str) and KEY.match(r) for r in reward):
            raise ProvisionError(f"{where.get('grpo.reward', where['grpo'])}: reward is a list of verifier names (e.g. [base_acc])")
        util = _float(g, "gpu_memory_utilization", where, "grpo", Grpo.gpu_memory_utilization)
        if not 0 < util < 1:
            raise ProvisionError(f"{where['grpo.gpu_memory_utilization']}: gpu_memory_utilization must be in (0, 1)")
        grpo = Grpo(
            n_samples_per_prompt=_int(g, "n_samples_per_prompt", where, "grpo", 1, default=Grpo.n_samples_per_prompt),
            max_prompt_length=_int(g, "max_prompt_length", where, "grpo", 8, default=Grpo.max_prompt_length),
            max_response_length=_int(g, "max_response_length", where, "grpo", 8, default=Grpo.max_response_length),
            kl_coef=_float(g, "kl_coef", where, "grpo", Grpo.kl_coef),
            temperature=_float(g, "temperature", where, "grpo", Grpo.temperature),
            infer_tensor_parallel=_int(g, "infer_tensor_parallel", where, "grpo", 1, default=None),
            gpu_memory_utilization=util,
            reward=tuple(reward),
        )

    resume = doc.get("resume", True)
    if not isinstance(resume, bool):
        raise ProvisionError(f"{where['resume']}: resume is true (skip finished steps, resume training from the"
                             " last checkpoint) or false (refuse an output directory that holds a run)")
    storage = _choice(doc, "storage", STORAGE, where, "", "shared")
    env = _env(doc, where)
    framework_dir = _path(doc, "framework_dir", where) if doc.get("framework_dir") is not None else None
    wait_timeout = _int(doc, "wait_timeout", where, "", 60, default=JobSpec.wait_timeout)
    if _under(output, model) or _under(model, output):
        raise ProvisionError(f"{where['output']}: output {output} and model {model} must not contain each other"
                             " (the model is mounted read-only)")
    return JobSpec(kind=kind, name=name, model=model, data=data, parallel=parallel, train=train, output=output,
                   source=source, model_config=model_config, grpo=grpo, resume=resume, storage=storage, env=env,
                   framework_dir=framework_dir, wait_timeout=wait_timeout,
                   model_config_as_written=doc.get("model_config"), where=where)


# ------------------------------------------------------------------------------------------ helpers


def _record(node, prefix: str, where: dict, source: str) -> None:
    """Remember file:line of every key, dotted (train.steps)."""
    if not isinstance(node, dict):
        return
    lines = getattr(node, "key_lines", {})
    file = getattr(node, "file", source)
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if key in lines:
            where[dotted] = f"{file}:{lines[key]}"
        if isinstance(value, dict):
            _record(value, dotted + ".", where, source)


def _keys(doc: dict, allowed: set, prefix: str, where: dict, source: str) -> None:
    for key in doc:
        if key not in allowed:
            at = where.get(prefix + key, f"{source}:1")
            section = f" in {prefix.rstrip('.')}" if prefix else ""
            raise ProvisionError(f"{at}: unknown key {key!r}{section} (expected one of: {', '.join(sorted(allowed))})")


def _section(doc: dict, key: str, allowed: set, where: dict, source: str) -> dict:
    value = doc[key]
    if not isinstance(value, dict):
        raise ProvisionError(f"{where[key]}: {key} is a mapping")
    _keys(value, allowed, key + ".", where, source)
    return value


def _dot(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def _text(doc: dict, key: str, where: dict, section: str = "") -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ProvisionError(f"{where.get(_dot(section, key), '?')}: {_dot(section, key)} must be text")
    return value.strip()


def _path(doc: dict, key: str, where: dict, section: str = "") -> str:
    dotted = _dot(section, key)
    value = _text(doc, key, where, section)
    if not SAFE_PATH.match(value) or "/../" in value + "/" or value.endswith("/..") or "//" in value:
        raise ProvisionError(f"{where[dotted]}: {dotted} {value!r}: give an absolute path of letters, digits and"
                             " ._+@=,-/ (no spaces, quotes, variables or '..')")
    return value.rstrip("/") or "/"


def _int(doc: dict, key: str, where: dict, section: str, low: int, default=...) -> int:
    dotted = _dot(section, key)
    if key not in doc:
        if default is ...:
            raise ProvisionError(f"{where.get(section, '?')}: {section} needs {key}:")
        return default
    value = doc[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ProvisionError(f"{where[dotted]}: {dotted} must be a whole number >= {low}, got {value!r}")
    return value


def _float(doc: dict, key: str, where: dict, section: str, default):
    dotted = _dot(section, key)
    if key not in doc:
        return default
    value = doc[key]
    if isinstance(value, str):
        try:
            value = float(value)  # YAML 1.1 reads 1e-6 (no dot) as text
        except ValueError:
            pass
    try:
        number = validate.finite(value, dotted)  # .nan and .inf are YAML floats
    except validate.Invalid:
        number = -1
    if number < 0:
        raise ProvisionError(f"{where[dotted]}: {dotted} must be a finite, non-negative number, got {doc[key]!r}")
    return float(number)


def _choice(doc: dict, key: str, choices: tuple, where: dict, section: str, default: str) -> str:
    dotted = _dot(section, key)
    if key not in doc:
        return default
    value = doc[key]
    if value not in choices:
        raise ProvisionError(f"{where[dotted]}: {dotted} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _opt_word(doc: dict, key: str, where: dict, section: str) -> str | None:
    if doc.get(key) is None:
        return None
    value = _text(doc, key, where, section)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        raise ProvisionError(f"{where[_dot(section, key)]}: {_dot(section, key)} {value!r}: letters, digits, . _ - only")
    return value


def _map_keys(doc: dict, where: dict) -> tuple[tuple[str, str], ...]:
    value = doc.get("map_keys")
    if value is None:
        return ()
    at = where["data.map_keys"]
    if not isinstance(value, dict):
        raise ProvisionError(f"{at}: data.map_keys maps the handler's fields to your data's (prompt: problem)")
    out = []
    for k, v in value.items():
        if not KEY.match(str(k)) or not isinstance(v, str) or not (v == "" or KEY.match(v)):
            raise ProvisionError(f"{where.get('data.map_keys.' + str(k), at)}: data.map_keys {k}: {v!r}:"
                                 " field names are letters, digits and _")
        out.append((str(k), v))
    return tuple(out)


def _env(doc: dict, where: dict) -> tuple[tuple[str, str], ...]:
    value = doc.get("env")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ProvisionError(f"{where['env']}: env maps variable names to values")
    out = []
    for k, v in value.items():
        at = where.get(f"env.{k}", where["env"])
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise ProvisionError(f"{at}: env {k}: give the value as text (quote numbers: \"1800\")")
        v = str(v)
        if not ENV_NAME.match(k):
            raise ProvisionError(f"{at}: env {k!r}: variable names are letters, digits and _")
        if not ENV_VALUE.match(v):
            raise ProvisionError(f"{at}: env {k}={v!r}: values may hold letters, digits, spaces and ._+@=,:;/^-"
                                 " (no quotes or $)")
        out.append((k, v))
    return tuple(out)


def _under(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/")
