"""strategy: fsdp only where torch_npu supports FSDP2 (matrices/torch_npu.yaml torch_npu_features): refused up
front, by --check, and never suggested by the memory plan on a torch 2.4/2.5 stack, with ZeRO-3 as the way
forward. The torch_npu double stands in for the wheel; its dist-info carries the wheel version."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from provisioner.matrix import loader
from provisioner.train import memory_fit, requirements
from provisioner.train.config import load_config
from provisioner.versions import V, spec
from tests.train import npu_fake
from tests.train.conftest import alpaca_records, tokenizer_files
from tests.train.test_memory import QWEN25_7B


def _check(tmp_path, torch_npu: str, *words: str):
    model = tmp_path / "qwen2.5-7b"
    if not model.exists():
        shutil.copytree(tokenizer_files(), model)
        (model / "config.json").write_text(json.dumps(QWEN25_7B))
        (tmp_path / "data.json").write_text(json.dumps(alpaca_records(8)))
    argv = ["-m", "provisioner.train", "--check", "--json", f"model={model}", f"data={tmp_path / 'data.json'}",
            f"output_dir={tmp_path / 'out'}", *words]
    return npu_fake.run(argv, npu_fake.env(tmp_path, torch_npu=torch_npu), timeout=120)


def test_the_matrix_row_covers_the_wheels_with_the_fsdp2_patch():
    row = next(r for r in loader.load().rows("torch_npu_features") if r["feature"] == "fsdp2")
    ok = [w["wheel"] for w in loader.load().rows("torch_npu") if all(spec(s).matches(V(w["wheel"])) for s in row["wheels"])]
    assert row["instead"] == "zero3"
    assert {"2.6.0", "2.6.0.post3", "2.7.1", "2.12.0"} <= set(ok)
    assert not [w for w in ok if V(w) < V("2.6.0rc1")]
    assert all(spec(s).matches(V("2.6.0rc1")) for s in row["wheels"])  # MindSpeed-LLM v2.1.0 installs it


def test_fsdp_on_a_torch_25_stack_is_refused_by_check_with_zero3_named(tmp_path):
    proc = _check(tmp_path, "2.5.1.post1", "strategy=fsdp", "method=full", "--world-size", "8")
    errors = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-2000:]
    assert errors[0].startswith("provision-train: error: config: strategy: fsdp: torch_npu 2.5.1.post1 does not "
                                "support PyTorch FSDP2 (fully_shard) on the NPU")
    assert "use strategy: zero3" in errors[0] and "torch_npu >=2.6.0rc1" in errors[0]
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
    # The torch 2.4 line too; zero3 (the way forward) passes the same check.
    assert _check(tmp_path, "2.4.0.post4", "strategy=fsdp").returncode == 2
    proc = _check(tmp_path, "2.5.1.post1", "strategy=zero3", "method=full", "--world-size", "8")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_fsdp_on_a_torch_26_stack_passes_check(tmp_path):
    proc = _check(tmp_path, "2.6.0", "strategy=fsdp", "method=full", "--world-size", "8")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["status"] == "ok"


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """Put an installed torch_npu wheel of a given version on sys.path (the double's package and the wheel's
    dist-info; nothing is imported: the checks only find the package and read its metadata)."""

    def install(version: str) -> None:
        monkeypatch.syspath_prepend(str(npu_fake.FAKES))
        monkeypatch.syspath_prepend(npu_fake.wheel_metadata(tmp_path, version))

    return install


def test_the_memory_plan_never_suggests_fsdp_where_torch_npu_lacks_it(tmp_path, monkeypatch, wheel):
    """Qwen2.5-7B full on 4 x 64 GB without DeepSpeed: fsdp is the suggestion on torch_npu 2.6; on 2.5 the plan
    must not name it (nothing else here fits with sharding, so the suggestion changes the method instead)."""
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # an image built without --with deepspeed
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN25_7B))
    (tmp_path / "d.json").write_text(json.dumps(alpaca_records(2)))
    cfg = load_config(None, [f"model={model}", f"data={tmp_path}/d.json", f"output_dir={tmp_path}/o", "method=full"])
    cap, label, _ = memory_fit.card_capacity("910B3")
    wheel("2.6.0")
    assert requirements.fsdp_unsupported() is None
    assert memory_fit.available_strategies() == ["ddp", "fsdp"]
    assert memory_fit.plan(cfg, 4, "bf16", cap, label).suggestion == ["strategy=fsdp"]
    wheel("2.5.1")
    assert "torch_npu 2.5.1 does not support" in (requirements.fsdp_unsupported() or "")
    assert memory_fit.available_strategies() == ["ddp"]
    p = memory_fit.plan(cfg, 4, "bf16", cap, label)
    assert p.fits is False and not any("fsdp" in w for w in p.suggestion or [])


def test_without_torch_npu_fsdp_is_torchs_own(monkeypatch):
    """CPU and CUDA machines: no torch_npu, no limit (torch's FSDP2 runs there)."""
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    assert requirements.fsdp_unsupported() is None
