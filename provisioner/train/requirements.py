"""Which optional library a config needs, checked before anything heavy is imported.

A strategy or method whose library is missing, or which the installed
torch_npu wheel does not support (``strategy: fsdp`` before torch_npu's FSDP2
patch: matrices/torch_npu.yaml ``torch_npu_features``), is refused up front
(also by ``provision-train --check`` and the self-test's train-steps) instead
of failing, or silently falling back, after the model is loaded. Only
``importlib`` probes and package metadata here: no torch.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def installed(module: str) -> bool:
    """Is a top-level module importable? (Finds it without importing it.)"""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def fsdp2_available() -> bool:
    """torch ships FSDP2's ``fully_shard`` (public from torch.distributed.fsdp, earlier under _composable)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations)))
    return (root / "distributed" / "fsdp" / "_fully_shard").is_dir() or (
        root / "distributed" / "_composable" / "fsdp" / "fully_shard.py"
    ).is_file()


def _extra_requirement(name: str) -> str | None:
    """The range the matrix allows for an optional package (matrices/extras.yaml), for the message."""
    try:
        from provisioner.matrix import loader

        for row in loader.load().rows("extras"):
            if row.get("name") == name:
                return str(row.get("requirement") or name)
    except Exception:  # the message is still useful without the range
        return None
    return None


def installed_version(dist: str) -> str | None:
    """The installed distribution's version (its metadata; nothing imported), or None."""
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _torch_npu_feature(feature: str) -> dict[str, Any] | None:
    """The row of matrices/torch_npu.yaml ``torch_npu_features`` for a feature (None: no row, no limit known)."""
    from provisioner.matrix import loader

    return next((r for r in loader.load().rows("torch_npu_features") if r.get("feature") == feature), None)


def fsdp_unsupported() -> str | None:
    """Why ``strategy: fsdp`` cannot run here, or None. torch's FSDP2 runs on CPU and CUDA by itself; on the NPU it
    needs torch_npu's FSDP2 patch, which only the torch_npu wheels in the matrix's ``torch_npu_features`` row
    ship. The installed torch_npu wheel's version is read from its metadata, before torch is imported."""
    if not installed("torch_npu"):
        return None
    version = installed_version("torch_npu")
    row = _torch_npu_feature("fsdp2")
    if version is None or row is None:
        return None
    from provisioner.versions import V, VersionError, spec

    try:
        if all(spec(s).matches(V(version)) for s in row["wheels"]):
            return None
    except VersionError:  # a version the matrix cannot order: the run itself will tell
        return None
    wanted = ", ".join(row["wheels"])
    instead = row.get("instead") or "zero3"
    ds = "" if installed("deepspeed") else ", in an image built with --with deepspeed"
    return (
        f"torch_npu {version} does not support {row['title']} (torch's fully_shard needs CUDA streams there; "
        f"torch_npu {wanted} patches it, matrices/torch_npu.yaml torch_npu_features): use strategy: {instead} "
        f"(DeepSpeed ZeRO-3 shards parameters, gradients and optimizer state the same way{ds}), or a stack "
        f"with torch_npu {wanted}"
    )


def strategy_problem(cfg: Any) -> str | None:
    """One line saying why the config's strategy cannot run here (a missing library, or a torch_npu without
    support for it), or None. The trainer, ``--check`` and the self-test ask the same question."""
    if cfg.strategy in ("zero2", "zero3") and not installed("deepspeed"):
        req = _extra_requirement("deepspeed") or "deepspeed"
        return (
            f"config: strategy: {cfg.strategy} needs DeepSpeed, which is not installed here "
            f"(pip install '{req}', or build the image with --with deepspeed); strategy fsdp needs only torch"
        )
    if cfg.strategy == "fsdp" and not fsdp2_available():
        return (
            "config: strategy: fsdp needs PyTorch FSDP2 (fully_shard), which this torch does not ship; "
            "use strategy zero3 (DeepSpeed) or a newer torch"
        )
    if cfg.strategy == "fsdp":
        why = fsdp_unsupported()
        if why:
            return f"config: strategy: fsdp: {why}"
    return None


def missing_library(cfg: Any) -> str | None:
    """One line naming what the config needs and is not installed (or not supported here), or None."""
    problem = strategy_problem(cfg)
    if problem:
        return problem
    if cfg.method == "grpo":
        if not installed("trl"):
            return "config: method: grpo needs TRL (pip install 'provisioner[grpo]', or trl), which is not installed"
        from provisioner.train import trl_settings

        trl_problem = trl_settings.problem(cfg.grpo)  # its version against the settings (trl_settings.yaml)
        if trl_problem:
            return trl_problem
        if "math" in cfg.grpo.rewards and not installed("math_verify"):
            return (
                "config: grpo.rewards: math needs the math-verify package, which is not installed "
                "(pip install 'provisioner[grpo]', or math-verify)"
            )
        if cfg.grpo.rollout == "vllm" and not installed("vllm"):
            return "config: grpo.rollout: vllm is not installed (use rollout: auto or hf)"
    return None


def _trl_rollout_row(trl: str) -> dict[str, Any] | None:
    """The matrices/trl.yaml ``trl_rollout`` row whose TRL range holds ``trl`` (None: no row for it)."""
    from provisioner.matrix import loader
    from provisioner.versions import V, VersionError, spec

    try:
        v = V(trl)
        return next((r for r in loader.load().rows("trl_rollout") if all(spec(s).matches(v) for s in r["trl"])), None)
    except VersionError:
        return None


def vllm_rollout(cfg: Any, device_type: str) -> tuple[bool, str]:
    """(colocated vLLM?, why not): the rollout a GRPO config gets on a device of this type, decided before
    anything heavy is imported, so that the memory plan counts vLLM's share whenever the run will use it.

    ``rollout: auto`` picks vLLM where vllm (and vllm-ascend on an NPU) is installed at a version the
    installed TRL supports (matrices/trl.yaml), and nothing there stops it; else transformers generate, with
    the reason. ``rollout: vllm`` where it cannot run raises ConfigError naming the way forward: no device,
    not installed, a vLLM outside TRL's range, or FSDP2 with offload on an NPU (TRL moves offloaded
    parameters to "cuda" when it syncs them into vLLM)."""
    from provisioner.train.errors import ConfigError

    g = cfg.grpo
    if cfg.method != "grpo" or g.rollout == "hf":
        return False, "rollout: hf" if cfg.method == "grpo" else ""
    explicit = g.rollout == "vllm"

    def no(why: str, way: str) -> tuple[bool, str]:
        if explicit:
            raise ConfigError(f"config: grpo.rollout: vllm: {why}; {way}")
        return False, why

    if device_type not in ("npu", "cuda"):
        return no("vLLM needs an NPU or a GPU", "use rollout: hf (or auto) here")
    wanted = ["vllm", "vllm_ascend"] if device_type == "npu" else ["vllm"]
    missing = [m for m in wanted if not installed(m)]
    if missing:
        return no(f"{' and '.join(m.replace('_', '-') for m in missing)} not installed",
                  "use rollout: auto or hf, or an image with vLLM")
    trl, vllm = installed_version("trl"), installed_version("vllm")
    row = _trl_rollout_row(trl) if trl else None
    if row is None:
        if explicit:
            return True, ""
        return False, f"no matrices/trl.yaml row says which vLLM TRL {trl or '(not installed)'} supports"
    if row.get("vllm") and vllm:
        from provisioner.versions import V, VersionError, spec

        try:
            inside = all(spec(s).matches(V(vllm)) for s in row["vllm"])
        except VersionError:
            inside = True  # a version the matrix cannot order: TRL itself will warn
        if not inside:
            wanted_range = ",".join(row["vllm"])
            return no(f"TRL {trl} supports vLLM {wanted_range} (matrices/trl.yaml), this is vllm {vllm}",
                      f"install vllm{wanted_range} (with its vllm-ascend), or use rollout: hf")
    offload = cfg.offload_params or cfg.resolved_offload_optimizer()
    sync = row.get("fsdp2_offload_sync_device")
    if device_type == "npu" and cfg.strategy == "fsdp" and offload and sync and sync != device_type:
        return no(f"TRL {trl} moves FSDP2's offloaded parameters to {sync!r} when it loads them into vLLM",
                  "turn offload off, use strategy zero3 with offload, or rollout: hf")
    return True, ""
