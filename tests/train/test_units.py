"""Device rules, FLOP/MFU arithmetic, schedules, metrics log and the built-in PNG writer."""

from __future__ import annotations

import json
import math

import pytest
import torch

from provisioner.train import device as devmod
from provisioner.train.config import ConfigError
from provisioner.train.device import DeviceInfo, Precision, choose_precision
from provisioner.train.metrics import MetricsLog, micro_batch_flops, peak_tflops
from provisioner.train.model import FlopShape
from provisioner.train.optim import lr_lambda, param_groups
from provisioner.train.plot import figure, loss_curve

NPU = DeviceInfo("npu", 0, "hccl", "Ascend910A")
CPU = DeviceInfo("cpu", 0, "gloo", "cpu")


def test_cann_detection_and_autoload_switch(monkeypatch, tmp_path):
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "TORCH_DEVICE_BACKEND_AUTOLOAD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(devmod, "_CANN_DIRS", (str(tmp_path / "nope"),))
    assert not devmod.cann_present()
    devmod.prepare_env()
    assert devmod.os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD")
    monkeypatch.setenv("ASCEND_HOME_PATH", "/usr/local/Ascend/ascend-toolkit/latest")
    assert devmod.cann_present()
    devmod.prepare_env()
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD" not in devmod.os.environ
    monkeypatch.delenv("ASCEND_HOME_PATH")
    monkeypatch.setattr(devmod, "_CANN_DIRS", (str(tmp_path),))
    assert devmod.cann_present()


def test_detect_on_this_machine_is_cpu_gloo():
    dev = devmod.detect(0)
    assert (dev.type, dev.backend) == ("cpu", "gloo")


def test_precision_rules(monkeypatch):
    monkeypatch.setattr(devmod, "bf16_supported", lambda dev: dev.name != "Ascend910A")
    assert choose_precision("auto", CPU) == Precision("fp32", False)
    assert choose_precision("auto", NPU) == Precision(
        "fp16", True
    )  # first-generation 910: fp16 + loss scaling
    b3 = DeviceInfo("npu", 0, "hccl", "Ascend910B3")
    assert choose_precision("auto", b3) == Precision("bf16", False)
    with pytest.raises(ConfigError, match="bf16 is not supported on Ascend910A"):
        choose_precision("bf16", NPU)
    with pytest.raises(ConfigError, match="fp16 is not supported on CPU"):
        choose_precision("fp16", CPU)


def test_local_rank_beyond_visible_devices_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    with pytest.raises(
        ConfigError, match=r"LOCAL_RANK 3 needs 4 NPUs but 2 visible \(ASCEND_RT_VISIBLE_DEVICES=0,1\)"
    ):
        devmod._check_rank(3, 2, "NPU", "ASCEND_RT_VISIBLE_DEVICES")


def test_rng_state_round_trips_through_a_weights_only_file(tmp_path):
    devmod.seed_all(1)
    state = devmod.rng_state(CPU)
    torch.save(state, tmp_path / "rng.pt")
    expected = (torch.rand(3), __import__("random").random(), __import__("numpy").random.rand())
    devmod.set_rng_state(CPU, torch.load(tmp_path / "rng.pt", weights_only=True))
    again = (torch.rand(3), __import__("random").random(), __import__("numpy").random.rand())
    assert torch.equal(expected[0], again[0]) and expected[1:] == again[1:]


def test_flop_formulas():
    full = FlopShape(body_params=1000, head_params=500, adapter_params=0, layers=2, attn_width=8, full=True)
    lora = FlopShape(body_params=1000, head_params=500, adapter_params=10, layers=2, attn_width=8, full=False)
    seqs, targets = [3, 5], 4
    attn = 12 * 2 * 8 * (9 + 25)
    assert micro_batch_flops(full, seqs, targets) == 6 * 1000 * 8 + 6 * 500 * 4 + attn
    assert micro_batch_flops(lora, seqs, targets) == (4 * 1000 + 6 * 10) * 8 + 4 * 500 * 4 + attn


def test_peak_table_lookup(monkeypatch):
    monkeypatch.delenv("PROVISION_PEAK_TFLOPS", raising=False)
    assert peak_tflops("NVIDIA H200", "cuda", "bf16", None) == 989
    assert peak_tflops("NVIDIA H20", "cuda", "bf16", None) == 148
    assert peak_tflops("NVIDIA H100 PCIe", "cuda", "bf16", None) == 756
    assert peak_tflops("Ascend910B3", "npu", "bf16", None) == 320
    assert peak_tflops("Ascend910A", "npu", "fp16", None) == 256
    assert peak_tflops("Ascend910A", "npu", "bf16", None) is None
    assert peak_tflops("Some New Chip", "cuda", "bf16", None) is None
    assert peak_tflops("cpu", "cpu", "fp32", None) is None
    assert peak_tflops("cpu", "cpu", "fp32", 2.5) == 2.5
    monkeypatch.setenv("PROVISION_PEAK_TFLOPS", "123")
    assert peak_tflops("NVIDIA H200", "cuda", "bf16", None) == 123


def test_schedules():
    cos = lr_lambda(total_steps=100, warmup_steps=10, kind="cosine", min_ratio=0.1)
    assert cos(0) == pytest.approx(1 / 11) and cos(9) == pytest.approx(10 / 11)
    assert cos(10) == pytest.approx(1.0) and cos(100) == pytest.approx(0.1)
    assert cos(55) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    lin = lr_lambda(total_steps=20, warmup_steps=0, kind="linear", min_ratio=0.0)
    assert lin(0) == 1.0 and lin(10) == pytest.approx(0.5) and lin(20) == 0.0
    assert lr_lambda(10, 2, "constant", 0.0)(7) == 1.0


def test_no_weight_decay_on_biases_and_norms():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    decay, no_decay = param_groups(m, 0.1)
    assert [p.dim() for p in decay["params"]] == [2] and decay["weight_decay"] == 0.1
    assert len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0


def test_metrics_log_drops_lines_past_the_resumed_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 8)) + '{"step": 8, "lo'
    )
    log = MetricsLog(path, resume_step=5)
    log.write({"step": 6, "loss": 0.5})
    log.close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3, 4, 5, 6]
    MetricsLog(path, resume_step=None).close()  # a fresh run starts a fresh file
    assert path.read_text() == ""


def test_curve_figure_has_title_labels_eval_points_and_a_reward_panel(tmp_path):
    fig = figure([(1, 12.0), (2, 9.5), (3, 8.0)], [(3, 8.4)], title="full fine-tuning of qwen")
    (ax,) = fig.axes
    assert ax.get_title() == "full fine-tuning of qwen"
    assert ax.get_xlabel() == "optimizer step" and ax.get_ylabel().startswith("loss")
    train, evals = ax.get_lines()
    assert list(train.get_xdata()) == [1, 2, 3] and list(train.get_ydata()) == [12.0, 9.5, 8.0]
    assert evals.get_marker() == "o" and evals.get_linestyle() == "None" and list(evals.get_ydata()) == [8.4]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["train loss", "eval loss"]

    grpo = figure([(1, 0.1), (2, 0.05)], rewards=[(1, 0.2), (2, 0.6)], title="GRPO")
    loss_ax, reward_ax = grpo.axes
    assert reward_ax.get_ylabel() == "reward" and reward_ax.get_xlabel() == "optimizer step"
    assert list(reward_ax.get_lines()[0].get_ydata()) == [0.2, 0.6]

    import matplotlib.image

    path = tmp_path / "c.png"
    assert loss_curve(path, [(1, 1.0), (2, 0.5)], rewards=[(1, 0.0), (2, 1.0)])
    height, width = matplotlib.image.imread(str(path)).shape[:2]
    assert (width, height) == (800, 720)
    assert not loss_curve(tmp_path / "none.png", [])  # nothing to draw, no file
    assert not (tmp_path / "none.png").exists()
