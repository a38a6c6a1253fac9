"""A Hugging Face model's shape, read from its config.json, and its parameter count.

Only the fields a decoder-only transformer job needs: layers, heads, KV heads, hidden and FFN sizes,
vocabulary, RoPE base, norm epsilon, tied embeddings. The values reach framework flags and configs, so
each one is checked to be a number of the right kind here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from provisioner.errors import ProvisionError


@dataclass(frozen=True)
class Shape:
    model_type: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    max_positions: int
    rope_theta: float
    norm_eps: float
    tied: bool
    qkv_bias: bool
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_params(self) -> int:
        """Parameters of one decoder layer (attention with optional QKV bias, SwiGLU MLP, two norms)."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        attn = h * h + 2 * h * kv + h * h
        if self.qkv_bias:
            attn += h + 2 * kv
        return attn + 3 * h * self.ffn + 2 * h

    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def params(self) -> int:
        total = self.layers * self.layer_params() + self.embedding_params() + self.hidden
        return total + (0 if self.tied else self.embedding_params())

    def billions(self) -> str:
        return f"{self.params() / 1e9:.1f}B"

    def to_dict(self) -> dict:
        return {**asdict(self), "params": self.params()}


def read(path: str, where: str, qkv_bias: bool = False) -> Shape:
    """Read config.json at `path`; `where` names it in errors (the job file line that led here).
    `qkv_bias` is the model type's default when the config does not say (matrices/jobs.yaml job_models)."""
    try:
        with open(path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except FileNotFoundError:
        raise ProvisionError(f"{where}: {path} not found: the job reads the model's config.json for its shape"
                             " (layers, heads); give model_config: when the model directory is not readable here") from None
    except OSError as exc:
        raise ProvisionError(f"{where}: {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ProvisionError(f"{where}: {path} is not JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise ProvisionError(f"{where}: {path} is not a model config (a JSON object)")
    return from_config(cfg, f"{where} ({path})", qkv_bias)


def model_type(path: str) -> str | None:
    """Just the model_type of a config.json (None when unreadable): picks the job_models row first."""
    try:
        with open(path, encoding="utf-8") as fh:
            value = json.load(fh).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def from_config(cfg: dict, where: str, qkv_bias: bool = False) -> Shape:
    def need_int(key: str, fallback: str | None = None) -> int:
        value = cfg.get(key, cfg.get(fallback) if fallback else None)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ProvisionError(f"{where}: config.json {key} must be a positive whole number, got {value!r}")
        return value

    def number(key: str, default: float) -> float:
        value = cfg.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ProvisionError(f"{where}: config.json {key} must be a positive number, got {value!r}")
        return float(value)

    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type.replace("_", "").isalnum():
        raise ProvisionError(f"{where}: config.json has no usable model_type")
    heads = need_int("num_attention_heads")
    kv = cfg.get("num_key_value_heads") or heads
    if not isinstance(kv, int) or kv <= 0 or heads % kv:
        raise ProvisionError(f"{where}: config.json num_key_value_heads {kv!r} must divide num_attention_heads {heads}")
    hidden = need_int("hidden_size")
    if hidden % heads:
        raise ProvisionError(f"{where}: config.json hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    tied = cfg.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ProvisionError(f"{where}: config.json tie_word_embeddings must be true or false")
    bias = cfg.get("attention_bias")
    return Shape(
        model_type=model_type,
        layers=need_int("num_hidden_layers"),
        hidden=hidden,
        ffn=need_int("intermediate_size"),
        heads=heads,
        kv_heads=kv,
        vocab=need_int("vocab_size"),
        max_positions=need_int("max_position_embeddings"),
        rope_theta=number("rope_theta", 10000.0),
        norm_eps=number("rms_norm_eps", 1e-6),
        tied=tied,
        # Qwen2 configs carry no attention_bias (the architecture always has it); Llama's say so explicitly.
        qkv_bias=bias if isinstance(bias, bool) else qkv_bias,
        bos_token_id=_token(cfg, "bos_token_id"),
        eos_token_id=_token(cfg, "eos_token_id"),
    )


def _token(cfg: dict, key: str) -> int | None:
    value = cfg.get(key)
    if isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
