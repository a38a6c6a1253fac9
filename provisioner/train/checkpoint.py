"""Atomic checkpoints: write into a temporary directory, then rename into place.

Protocol (a kill at any moment leaves either the old set or the new one):
  1. rank 0 creates ``checkpoints/.tmp-step-N``; every rank writes its files
     into it and fsyncs them;
  2. rank 0 writes MANIFEST.json (every file and its size), fsyncs, renames the
     directory to ``checkpoints/step-N`` and fsyncs the parent;
  3. old checkpoints beyond ``save_total_limit`` are renamed away, then deleted.
A directory counts as a checkpoint only if its manifest is present and every
listed file has the recorded size, so ``--resume`` never picks a half-written one.
The output directory must be shared by all ranks (one node, or shared storage).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from provisioner.train import dist
from provisioner.train.config import ConfigError

MANIFEST = "MANIFEST.json"
STATE = "trainer_state.json"
_NAME = re.compile(r"^step-(\d{8})$")


def checkpoints_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


@dataclass
class Saved:
    """What a checkpoint holds besides tensors; stored as trainer_state.json."""

    step: int
    consumed_micro_batches: int
    world_size: int
    tokens_seen: int
    method: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def is_complete(path: Path) -> bool:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        for rel, size in manifest["files"].items():
            if (path / rel).stat().st_size != size:
                return False
        state = json.loads((path / STATE).read_text())
        named = _NAME.match(path.name)
        return named is not None and int(named.group(1)) == state["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def complete_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = checkpoints_dir(output_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name) and is_complete(p)]
    return sorted(found, key=lambda p: p.name)


def find_resume(output_dir: str | Path, resume: str | None) -> Path | None:
    """``auto``: newest complete checkpoint or None; a path: that checkpoint, which must be complete."""
    if resume in (None, "", "none", "no"):
        return None
    if resume == "auto":
        found = complete_checkpoints(output_dir)
        return found[-1] if found else None
    path = Path(resume)
    if not is_complete(path):
        raise ConfigError(f"--resume: {resume} is not a complete checkpoint (no valid {MANIFEST})")
    return path


def clean_stale(output_dir: str | Path) -> None:
    """Remove leftovers of interrupted writes and deletions (rank 0, at start)."""
    root = checkpoints_dir(output_dir)
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith((".tmp-", ".trash-")):
                shutil.rmtree(p, ignore_errors=True)


def _fsync_tree(path: Path) -> None:
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def begin(output_dir: str | Path, step: int, is_main: bool) -> Path:
    tmp = checkpoints_dir(output_dir) / f".tmp-{step_dir_name(step)}"
    if is_main:
        if tmp.exists():
            shutil.rmtree(tmp)
        (tmp / "rng").mkdir(parents=True)
    dist.barrier()
    return tmp


def commit(tmp: Path, step: int, save_total_limit: int, is_main: bool) -> Path:
    """Called by every rank once its files are written; rank 0 seals and renames."""
    final = tmp.parent / step_dir_name(step)
    _fsync_tree(tmp)
    dist.barrier()
    if is_main:
        files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        _write_json(tmp / MANIFEST, {"step": step, "files": files})
        _fsync_dir(tmp)
        if final.exists():  # saving the same step again, e.g. after a resume
            trash = final.parent / f".trash-{final.name}"
            shutil.rmtree(trash, ignore_errors=True)
            os.replace(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
        rotate(final.parent.parent, save_total_limit)
    dist.barrier()
    return final


def rotate(output_dir: Path, keep: int) -> None:
    if keep <= 0:
        return
    done = complete_checkpoints(output_dir)
    for old in done[: max(0, len(done) - keep)]:
        trash = old.parent / f".trash-{old.name}"
        os.replace(old, trash)  # no longer looks like a checkpoint before any file goes
        shutil.rmtree(trash, ignore_errors=True)


def _write_json(path: Path, data: Any) -> None:
    with open(path, "w") as fh:
        json.dump(data, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())


def save_weights(model: nn.Module, path: Path, method: str) -> None:
    """Model (full) or adapter (LoRA) weights in safetensors, loadable by transformers / peft."""
    from provisioner.train.model import inner_model

    if method == "lora":
        model.save_pretrained(str(path), safe_serialization=True)
    else:
        inner_model(model).save_pretrained(str(path), safe_serialization=True)


def load_weights(model: nn.Module, path: Path, method: str) -> None:
    from safetensors.torch import load_file

    from provisioner.train.model import inner_model

    if method == "lora":
        from peft import set_peft_model_state_dict

        file = path / "adapter_model.safetensors"
        if not file.is_file():
            raise ConfigError(
                f"--resume: {path} holds no LoRA adapter; was it written by a method: full run?"
            )
        result = set_peft_model_state_dict(model, load_file(str(file)))
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ConfigError(f"--resume: {path}: adapter does not match the model (e.g. {unexpected[0]})")
        return
    files = sorted(path.glob("model*.safetensors"))
    if not files:
        raise ConfigError(
            f"--resume: {path} holds no full model weights; was it written by a method: lora run?"
        )
    base = inner_model(model)
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    missing, unexpected = base.load_state_dict(state, strict=False)
    tied = _tied_names(base)
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise ConfigError(
            f"--resume: {path}: weights do not match the model (e.g. {(missing or unexpected)[0]})"
        )


def _tied_names(model: nn.Module) -> set[str]:
    """Parameter names that share storage with another parameter (tied embeddings)."""
    by_ptr: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_ptr.setdefault(p.data_ptr(), []).append(name)
    return {n for names in by_ptr.values() if len(names) > 1 for n in names}


def save_torch(obj: Any, path: Path) -> None:
    torch.save(obj, path)


def load_torch(path: Path, device: Any) -> Any:
    return torch.load(path, map_location=device, weights_only=True)


def write_state(path: Path, saved: Saved, config_yaml: str) -> None:
    _write_json(path / STATE, saved.to_json())
    (path / "config.yaml").write_text(config_yaml)


def read_state(path: Path) -> Saved:
    data = json.loads((path / STATE).read_text())
    return Saved(**data)
