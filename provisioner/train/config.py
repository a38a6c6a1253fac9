"""Trainer configuration: a YAML file plus ``key=value`` overrides, checked up front.

No torch here: ``provision-train --check`` and the host-side launcher validate
a config without the training stack installed. Every problem becomes a
``ConfigError`` whose one-line message names the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner import hostfile, safeyaml
from provisioner.errors import ProvisionError
from provisioner.train.errors import ConfigError

QWEN25_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


@dataclass
class LoraSettings:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])


@dataclass
class GRPOSettings:
    """``method: grpo``: group sampling, rewards and the clipped policy loss (TRL's GRPOTrainer does the math)."""

    tuning: str = "lora"  # lora (adapters; the reference is the adapter-free base) or full
    num_generations: int = 8  # completions sampled per prompt (the group)
    max_prompt_len: int = 1024  # prompts longer than this many tokens are dropped, and counted
    max_completion_len: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    beta: float = 0.0  # KL weight to the reference policy; 0: no reference forward at all
    epsilon: float = 0.2  # clip range of the probability ratio
    epsilon_high: float | None = None  # upper clip (DAPO's clip-higher); null: epsilon
    num_iterations: int = 1  # optimisation passes over each generation batch (> 1: the clip bites)
    # token aggregation: grpo, bnpo, dr_grpo, dapo; auto: dapo where the installed TRL has it, else bnpo
    loss_type: str = "auto"
    scale_rewards: str = "group"  # divide advantages by the std of the group, the batch, or none
    rewards: list[str] = field(default_factory=lambda: ["math", "format"])  # names or module:function
    reward_weights: list[float] = field(default_factory=list)  # empty: all 1.0
    rollout: str = "auto"  # auto (vllm where installed and on a device), hf (transformers generate), vllm
    vllm_memory_fraction: float = 0.3  # colocated vLLM's share of device memory


@dataclass
class TrainConfig:
    # Required: what to train, on what, and where to write.
    model: str = ""
    data: list[str] = field(default_factory=list)
    output_dir: str = ""
    # Method and length of the run.
    method: str = "lora"
    tokenizer: str | None = None
    max_steps: int | None = None  # None: derived from num_epochs
    num_epochs: float = 1.0
    learning_rate: float | None = None  # None: 2e-4 for lora, 2e-5 for full
    max_seq_len: int = 2048
    micro_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    # Optimiser and schedule.
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.03
    warmup_steps: int | None = None
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    optimizer: str = "auto"
    # Model execution.
    precision: str = "auto"
    # Decoder layers recomputed in backward: true (all), false (none), a number k (the first k layers), or
    # auto: the fewest that let the memory plan fit the device (memory_fit.resolve_checkpointing).
    gradient_checkpointing: bool | int | str = True
    attn_implementation: str = "auto"
    packing: bool | str = "auto"
    loss_chunk_tokens: int = 8192
    npu_jit_compile: bool | str = "auto"  # auto: the chip family's mode (train/ascend.yaml)
    strategy: str = "ddp"
    offload_optimizer: bool | str = "auto"  # auto: on for zero2 (as before), off for zero3 and fsdp
    offload_params: bool = False  # zero3/fsdp: parameters (and, for fsdp, gradients) live on the CPU
    trust_remote_code: bool = False  # let transformers run code shipped in the model directory
    # Memory plan: the card (matrix name, e.g. 800T-A2 or 910B3) whose HBM the plan is checked against;
    # null: the detected device. memory_check false turns a refusal into a warning.
    card: str | None = None
    memory_check: bool = True
    lora: LoraSettings = field(default_factory=LoraSettings)
    grpo: GRPOSettings = field(default_factory=GRPOSettings)
    # Data formatting.
    data_format: str = "auto"
    template: str = "auto"  # chatml (Qwen2.5) when the tokenizer has its tokens, else the tokenizer's own
    system_prompt: str | None = None  # None: the template's default (Qwen2.5's for chatml); "": none
    mask_history: bool = False
    train_on_prompt: bool = False
    eval_data: list[str] = field(default_factory=list)
    eval_split: float = 0.0
    eval_steps: int = 0  # 0: evaluate only at the end (when eval data exists)
    seed: int = 42
    data_seed: int | None = None
    # Outputs.
    logging_steps: int = 1
    save_steps: int = 500  # 0: save only at the end
    save_total_limit: int = 2  # 0: keep every checkpoint
    export_merged: bool = False
    metrics_file: str = "metrics.jsonl"
    progress_bar: bool | str = "auto"
    peak_tflops: float | None = None
    dist_timeout_s: int | None = None  # None: 1800 s, longer than HCCL_EXEC_TIMEOUT when that is set

    def resolved_learning_rate(self) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        if self.method == "grpo":
            return 1e-5 if self.grpo.tuning == "lora" else 1e-6
        return 2e-4 if self.method == "lora" else 2e-5

    @property
    def tuning(self) -> str:
        """Which weights train: ``lora`` (adapters) or ``full``, whatever the objective."""
        return self.grpo.tuning if self.method == "grpo" else self.method

    def resolved_offload_optimizer(self) -> bool:
        if self.offload_optimizer == "auto":
            return self.strategy == "zero2"
        return bool(self.offload_optimizer)

    def checkpointed_layers(self, layers: int) -> int:
        """Decoder layers to recompute of ``layers``, without a memory plan: ``auto`` counts as all of them
        (memory_fit.resolve_checkpointing decides ``auto`` from the plan). A number above ``layers`` is
        refused by the plan."""
        gc = self.gradient_checkpointing
        if gc is True or gc == "auto":
            return layers
        if gc is False:
            return 0
        return int(gc)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


REQUIRED = ("model", "data", "output_dir")
CHOICES: dict[str, tuple[str, ...]] = {
    "method": ("full", "lora", "grpo"),
    "lr_scheduler": ("cosine", "linear", "constant"),
    "optimizer": ("auto", "adamw", "npu_fused_adamw"),
    "precision": ("auto", "bf16", "fp16", "fp32"),
    "attn_implementation": ("auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3"),
    "strategy": ("ddp", "zero2", "zero3", "fsdp"),
    "data_format": ("auto", "alpaca", "chat", "orz", "gsm8k"),
    "template": ("auto", "chatml", "tokenizer"),
}
_PATH_LISTS = ("data", "eval_data")


def load_config(path: str | os.PathLike | None, overrides: list[str] | tuple[str, ...] = (),
                local: bool = True) -> TrainConfig:
    """Read ``path`` (may be None when everything comes as overrides), apply overrides, validate (``local``:
    see validate)."""
    return _load(path, overrides, local)[0]


def _load(path, overrides, local: bool) -> tuple[TrainConfig, dict[str, Any]]:
    raw: dict[str, Any] = {}
    if path is not None:
        raw = _read_yaml(Path(path))
    for item in overrides:
        key, value = _parse_override(item)
        _set_dotted(raw, key, value)
    cfg = from_dict(raw)
    validate(cfg, local)
    return cfg, raw


def portable_text(path: str | os.PathLike) -> str:
    """The config file for a run on other machines (a Kubernetes ConfigMap; no torch needed): checked as
    load_config checks it, except for what only the machine that runs it can answer (local=False), and
    written back as YAML of exactly the keys the file sets, each with the value the schema read."""
    cfg, raw = _load(path, (), local=False)

    def given(obj: Any, part: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in part.items():
            current = getattr(obj, key)
            out[key] = given(current, value) if dataclasses.is_dataclass(current) else current
        return out

    return yaml.safe_dump(given(cfg, raw), sort_keys=False, allow_unicode=True)


def from_dict(raw: dict[str, Any]) -> TrainConfig:
    """Build a TrainConfig from plain data, checking names and types (not values)."""
    cfg = TrainConfig()
    _fill(cfg, raw, prefix="")
    return cfg


def validate(cfg: TrainConfig, local: bool = True) -> None:
    """Check values that do not need torch: choices, ranges, paths. ``local`` False: the config runs on other
    machines (a pod), so neither its paths nor its libraries and reward modules are looked for here."""
    for name in REQUIRED:
        if not getattr(cfg, name):
            raise ConfigError(f"config: {name}: required")
    for name, allowed in CHOICES.items():
        value = getattr(cfg, name)
        if value not in allowed:
            raise ConfigError(f"config: {name}: must be one of {', '.join(allowed)} (got {value!r})")
    for name in ("packing", "progress_bar", "offload_optimizer", "npu_jit_compile"):
        if getattr(cfg, name) not in (True, False, "auto"):
            raise ConfigError(f"config: {name}: must be true, false or auto (got {getattr(cfg, name)!r})")
    gc = cfg.gradient_checkpointing
    if not isinstance(gc, bool) and gc != "auto" and (not isinstance(gc, int) or gc < 0):
        raise ConfigError(f"config: gradient_checkpointing: must be true, false, auto or a number of layers >= 0"
                          f" (got {gc!r})")
    if cfg.method == "grpo" and not isinstance(gc, (bool, str)):
        raise ConfigError(f"config: gradient_checkpointing: method grpo checkpoints every layer or none (TRL's"
                          f" gradient_checkpointing): true, false or auto (got {gc!r})")
    if local:
        _check_model_dir("model", cfg.model)
    if local and cfg.tokenizer is not None and not Path(cfg.tokenizer).is_dir():
        raise ConfigError(f"config: tokenizer: directory not found: {cfg.tokenizer}")
    for name in _PATH_LISTS:
        for item in getattr(cfg, name):
            p = Path(item)
            if local and not p.is_file():
                raise ConfigError(f"config: {name}: file not found: {item}")
            if p.suffix not in (".json", ".jsonl"):
                raise ConfigError(f"config: {name}: expected a .json or .jsonl file: {item}")
    out = Path(cfg.output_dir)
    if local and out.exists() and not out.is_dir():
        raise ConfigError(f"config: output_dir: exists and is not a directory: {cfg.output_dir}")
    positive_ints = (
        "max_seq_len",
        "micro_batch_size",
        "gradient_accumulation_steps",
        "logging_steps",
    )
    for name in positive_ints:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"config: {name}: must be >= 1 (got {getattr(cfg, name)})")
    for name in ("save_steps", "save_total_limit", "eval_steps", "loss_chunk_tokens"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"config: {name}: must be >= 0 (got {getattr(cfg, name)})")
    if cfg.max_seq_len < 16:
        raise ConfigError(f"config: max_seq_len: must be >= 16 (got {cfg.max_seq_len})")
    if cfg.dist_timeout_s is not None and cfg.dist_timeout_s < 1:
        raise ConfigError(f"config: dist_timeout_s: must be >= 1 (got {cfg.dist_timeout_s})")
    if cfg.max_steps is not None and cfg.max_steps < 1:
        raise ConfigError(f"config: max_steps: must be >= 1 (got {cfg.max_steps})")
    if cfg.max_steps is None and cfg.num_epochs <= 0:
        raise ConfigError(f"config: num_epochs: must be > 0 (got {cfg.num_epochs})")
    if cfg.learning_rate is not None and cfg.learning_rate <= 0:
        raise ConfigError(f"config: learning_rate: must be > 0 (got {cfg.learning_rate})")
    if cfg.warmup_steps is not None and cfg.warmup_steps < 0:
        raise ConfigError(f"config: warmup_steps: must be >= 0 (got {cfg.warmup_steps})")
    for name in ("warmup_ratio", "min_lr_ratio"):
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ConfigError(f"config: {name}: must be between 0 and 1 (got {getattr(cfg, name)})")
    if not 0.0 <= cfg.eval_split < 1.0:
        raise ConfigError(f"config: eval_split: must be in [0, 1) (got {cfg.eval_split})")
    if cfg.eval_split > 0 and cfg.eval_data:
        raise ConfigError("config: eval_split: give either eval_data or eval_split, not both")
    if cfg.max_grad_norm < 0:
        raise ConfigError(f"config: max_grad_norm: must be >= 0 (got {cfg.max_grad_norm})")
    if cfg.weight_decay < 0:
        raise ConfigError(f"config: weight_decay: must be >= 0 (got {cfg.weight_decay})")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0.0 <= getattr(cfg, name) < 1.0:
            raise ConfigError(f"config: {name}: must be in [0, 1) (got {getattr(cfg, name)})")
    if cfg.peak_tflops is not None and cfg.peak_tflops <= 0:
        raise ConfigError(f"config: peak_tflops: must be > 0 (got {cfg.peak_tflops})")
    if not cfg.metrics_file.endswith(".jsonl") or "/" in cfg.metrics_file:
        raise ConfigError(
            f"config: metrics_file: must be a plain file name ending in .jsonl (got {cfg.metrics_file!r})"
        )
    lora = cfg.lora
    if lora.r < 1:
        raise ConfigError(f"config: lora.r: must be >= 1 (got {lora.r})")
    if lora.alpha <= 0:
        raise ConfigError(f"config: lora.alpha: must be > 0 (got {lora.alpha})")
    if not 0.0 <= lora.dropout < 1.0:
        raise ConfigError(f"config: lora.dropout: must be in [0, 1) (got {lora.dropout})")
    if not lora.target_modules:
        raise ConfigError("config: lora.target_modules: must name at least one module")
    if cfg.export_merged and cfg.tuning != "lora":
        raise ConfigError("config: export_merged: only meaningful when LoRA adapters train")
    if cfg.strategy in ("ddp", "zero2") and cfg.offload_params:
        raise ConfigError(f"config: offload_params: needs strategy zero3 or fsdp (got {cfg.strategy})")
    if cfg.strategy == "ddp" and cfg.offload_optimizer is True:
        raise ConfigError("config: offload_optimizer: needs strategy zero2, zero3 or fsdp (got ddp)")
    if cfg.card is not None and not cfg.card.strip():
        raise ConfigError("config: card: must name a card or chip (or be null)")
    if cfg.method == "grpo":
        _validate_grpo(cfg.grpo, local)
        if cfg.data_format == "alpaca":
            raise ConfigError("config: data_format: method grpo reads prompts (auto, chat, orz, gsm8k), not alpaca")
    elif cfg.data_format in ("orz", "gsm8k"):
        raise ConfigError(f"config: data_format: {cfg.data_format} records are prompts for method: grpo")
    if not local:
        return
    from provisioner.train.requirements import missing_library

    problem = missing_library(cfg)
    if problem:
        raise ConfigError(problem)


GRPO_CHOICES: dict[str, tuple[str, ...]] = {
    "tuning": ("lora", "full"),
    "loss_type": ("auto", "grpo", "bnpo", "dr_grpo", "dapo"),
    "scale_rewards": ("group", "batch", "none"),
    "rollout": ("auto", "hf", "vllm"),
}


def _validate_grpo(g: GRPOSettings, local: bool = True) -> None:
    for name, allowed in GRPO_CHOICES.items():
        value = getattr(g, name)
        if value not in allowed:
            raise ConfigError(f"config: grpo.{name}: must be one of {', '.join(allowed)} (got {value!r})")
    for name in ("num_generations", "max_prompt_len", "max_completion_len", "num_iterations"):
        if getattr(g, name) < 1:
            raise ConfigError(f"config: grpo.{name}: must be >= 1 (got {getattr(g, name)})")
    if g.num_generations < 2:
        raise ConfigError("config: grpo.num_generations: a group needs at least 2 completions (got 1)")
    if g.temperature <= 0:
        raise ConfigError(f"config: grpo.temperature: must be > 0 (got {g.temperature})")
    if not 0.0 < g.top_p <= 1.0:
        raise ConfigError(f"config: grpo.top_p: must be in (0, 1] (got {g.top_p})")
    if g.beta < 0:
        raise ConfigError(f"config: grpo.beta: must be >= 0 (got {g.beta})")
    if not 0.0 < g.epsilon < 1.0:
        raise ConfigError(f"config: grpo.epsilon: must be in (0, 1) (got {g.epsilon})")
    if g.epsilon_high is not None and g.epsilon_high < g.epsilon:
        raise ConfigError(f"config: grpo.epsilon_high: must be >= epsilon ({g.epsilon}) (got {g.epsilon_high})")
    if not 0.0 < g.vllm_memory_fraction < 1.0:
        raise ConfigError(f"config: grpo.vllm_memory_fraction: must be in (0, 1) (got {g.vllm_memory_fraction})")
    if not g.rewards:
        raise ConfigError("config: grpo.rewards: name at least one reward (math, format, or module:function)")
    if g.reward_weights and len(g.reward_weights) != len(g.rewards):
        raise ConfigError(
            f"config: grpo.reward_weights: {len(g.reward_weights)} weights for {len(g.rewards)} rewards"
        )
    if local:
        from provisioner.train.grpo.rewards import check_reward_names

        check_reward_names(g.rewards)
    elif twice := next((r for n, r in enumerate(g.rewards) if r in g.rewards[:n]), None):
        raise ConfigError(f"config: grpo.rewards: {twice!r} is listed twice")


def _check_model_dir(name: str, value: str) -> None:
    p = Path(value)
    if not p.is_dir():
        raise ConfigError(f"config: {name}: directory not found: {value}")
    if not (p / "config.json").is_file():
        raise ConfigError(f"config: {name}: {value} has no config.json (not a Hugging Face model directory)")


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    try:
        # Bounded (a regular file, a size cap) and checked for depth and alias bombs before it is built.
        data = safeyaml.load(hostfile.read_text(path, str(path), limit=4 << 20), str(path))
    except ProvisionError as exc:
        raise ConfigError(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: config must be a mapping of keys to values")
    return data


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {item!r}: expected key=value")
    try:
        value = safeyaml.load(text, f"override {key}") if text.strip() else None
    except safeyaml.YamlLimitError as exc:
        raise ConfigError(str(exc)) from None
    except ProvisionError:
        value = text
    return key, value


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def _fill(obj: Any, raw: dict[str, Any], prefix: str) -> None:
    fields = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if key not in fields:
            hint = difflib.get_close_matches(str(key), list(fields), n=1)
            extra = f" (did you mean {prefix}{hint[0]!r}?)" if hint else ""
            raise ConfigError(f"config: {name}: unknown key{extra}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"config: {name}: expected a mapping")
            _fill(current, value, prefix=f"{name}.")
            continue
        setattr(obj, key, _coerce(name, fields[key].type, value))


def _coerce(name: str, type_text: Any, value: Any) -> Any:
    """Coerce ``value`` to the annotated type (annotations are strings here)."""
    t = str(type_text).replace(" ", "")
    optional = t.endswith("|None")
    base = t[: -len("|None")] if optional else t
    if value is None:
        if optional:
            return None
        raise ConfigError(f"config: {name}: must not be empty")
    if base == "bool|int|str":
        if isinstance(value, (bool, int)) or value == "auto":
            return value
        raise ConfigError(f"config: {name}: must be true, false, auto or a number of layers (got {value!r})")
    if base == "bool|str":
        if isinstance(value, bool) or value == "auto":
            return value
        raise ConfigError(f"config: {name}: must be true, false or auto (got {value!r})")
    if base == "list[float]":
        items = value if isinstance(value, list) else [value]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return [float(v) for v in items]
        raise ConfigError(f"config: {name}: expected a number or a list of numbers")
    if base == "list[str]":
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ConfigError(f"config: {name}: expected a string or a list of strings")
    if base == "bool":
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config: {name}: expected true or false (got {value!r})")
    if base == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"config: {name}: expected an integer (got {value!r})")
    if base == "float":
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)  # YAML reads "2e-5" (no dot) as a string
            except ValueError:
                pass
        if number is None:
            raise ConfigError(f"config: {name}: expected a number (got {value!r})")
        if not math.isfinite(number):  # .nan, .inf and "1e999" read as numbers but no setting means them
            raise ConfigError(f"config: {name}: must be a finite number (got {value!r})")
        return number
    if base == "str":
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"config: {name}: expected a string (got {value!r})")
    raise AssertionError(f"unhandled config type {t} for {name}")


def dump_config(cfg: TrainConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
