"""Config loading and validation, and the CLI's one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess

import pytest

from provisioner.errors import ProvisionError
from provisioner.train.config import ConfigError, load_config
from tests.train.conftest import PYTHON, train_env, write_config


@pytest.fixture
def base(tmp_path, tiny_model_dir, alpaca_file):
    return {"model": str(tiny_model_dir), "data": str(alpaca_file), "output_dir": str(tmp_path / "out")}


def test_defaults_and_overrides(tmp_path, base):
    cfg_file = write_config(tmp_path / "c.yaml", **base, method="full")
    cfg = load_config(cfg_file, ["lora.r=16", "max_steps=5", "learning_rate=1e-4", "packing=false"])
    assert cfg.method == "full" and cfg.max_steps == 5 and cfg.learning_rate == 1e-4
    assert cfg.lora.r == 16 and cfg.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.packing is False and cfg.max_seq_len == 2048 and cfg.max_grad_norm == 1.0
    assert cfg.system_prompt is None and cfg.template == "auto"  # i.e. Qwen2.5 ChatML and its default prompt
    assert cfg.data == [base["data"]]  # a single path becomes a list


def test_learning_rate_default_follows_method(tmp_path, base):
    assert load_config(None, [f"{k}={v}" for k, v in base.items()]).resolved_learning_rate() == 2e-4
    cfg = load_config(None, [f"{k}={v}" for k, v in base.items()] + ["method=full"])
    assert cfg.resolved_learning_rate() == 2e-5


def test_yaml_exponent_without_dot_is_a_number(tmp_path, base):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("".join(f"{k}: {v}\n" for k, v in base.items()) + "learning_rate: 2e-5\n")
    assert load_config(cfg_file).learning_rate == 2e-5


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("lerning_rate=1", "config: lerning_rate: unknown key (did you mean 'learning_rate'?)"),
        ("lora.rank=4", "config: lora.rank: unknown key"),
        ("max_steps=ten", "config: max_steps: expected an integer (got 'ten')"),
        ("max_steps=0", "config: max_steps: must be >= 1 (got 0)"),
        ("method=qlora", "config: method: must be one of full, lora, grpo (got 'qlora')"),
        ("packing=maybe", "config: packing: must be true, false or auto (got 'maybe')"),
        ("lora.target_modules=[]", "config: lora.target_modules: must name at least one module"),
        ("eval_split=0.2", None),
        ("metrics_file=m.json", "config: metrics_file: must be a plain file name ending in .jsonl"),
    ],
)
def test_bad_values_name_the_field(base, override, expected):
    args = [f"{k}={v}" for k, v in base.items()] + [override]
    if expected is None:
        load_config(None, args)
        return
    with pytest.raises(ConfigError) as err:
        load_config(None, args)
    assert str(err.value).startswith(expected)
    assert isinstance(err.value, ProvisionError) and err.value.exit_code == 2


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "provisioner.train", *args],
        capture_output=True,
        text=True,
        env=train_env(),
        timeout=120,
    )


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("provision-train: error: ")
    return lines[0]


def test_cli_missing_model_dir(tmp_path, base):
    cfg = write_config(tmp_path / "c.yaml", **{**base, "model": str(tmp_path / "nope")})
    line = _one_line_error(_cli("--config", str(cfg)))
    assert line == f"provision-train: error: config: model: directory not found: {tmp_path / 'nope'}"


def test_cli_model_dir_without_config_json(tmp_path, base):
    (tmp_path / "empty").mkdir()
    line = _one_line_error(
        _cli("--config", str(write_config(tmp_path / "c.yaml", **base)), f"model={tmp_path / 'empty'}")
    )
    assert "config: model:" in line and "no config.json" in line


def test_cli_unknown_method(tmp_path, base):
    line = _one_line_error(_cli("--config", str(write_config(tmp_path / "c.yaml", **base, method="qlora"))))
    assert line.endswith("config: method: must be one of full, lora, grpo (got 'qlora')")


def test_cli_broken_data_line(tmp_path, base, alpaca_jsonl):
    lines = alpaca_jsonl.read_text().splitlines()
    lines[2] = lines[2][:-5]  # cut the closing of record 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    line = _one_line_error(
        _cli("--config", str(write_config(tmp_path / "c.yaml", **{**base, "data": str(bad)})))
    )
    assert line.startswith(f"provision-train: error: {bad}:3: invalid JSON")


def test_cli_record_missing_field_in_json_array(tmp_path, base):
    records = [{"instruction": "a", "output": "b"}, {"instruction": "c"}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(records, indent=2))
    line = _one_line_error(
        _cli("--config", str(write_config(tmp_path / "c.yaml", **{**base, "data": str(bad)})))
    )
    assert line == f"provision-train: error: {bad}:6: missing 'output'"


def test_cli_missing_config_file_and_bad_yaml(tmp_path):
    line = _one_line_error(_cli("--config", str(tmp_path / "none.yaml")))
    assert line.endswith(f"{tmp_path / 'none.yaml'}: config file not found")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: x\ndata: [a, b\noutput_dir: y\n")
    assert f"{bad}:" in _one_line_error(_cli("--config", str(bad)))


def test_cli_usage_error_is_one_line():
    assert "usage:" in _one_line_error(_cli("--frobnicate"))


def test_check_validates_without_importing_torch(tmp_path, base):
    cfg = write_config(tmp_path / "c.yaml", **base)
    code = (
        "import sys; from provisioner.train.cli import main; "
        f"rc = main(['--config', {str(cfg)!r}, '--check', '--json']); "
        "print('torch' in sys.modules, 'transformers' in sys.modules); sys.exit(rc)"
    )
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=train_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    result, imported = proc.stdout.splitlines()
    data = json.loads(result)
    assert {k: data[k] for k in ("status", "train_records", "eval_records")} == {
        "status": "ok",
        "train_records": 64,
        "eval_records": 0,
    }
    assert data["memory"]["fits"] is None and data["memory"]["total_gib"] > 0  # no card named: no verdict
    assert imported == "False False"
