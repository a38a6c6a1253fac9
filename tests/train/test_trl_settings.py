"""The TRL release GRPO needs, by setting (provisioner/train/trl_settings.yaml): the defaults run on every TRL
an image can carry (0.17.0 on the torch 2.1-2.5 sets), a value an older TRL would mistake is passed in its
spelling or refused up front, by name, with the release it needs."""

from __future__ import annotations

import json

import pytest

from provisioner.train import trl_settings
from provisioner.train.config import ConfigError, GRPOSettings, load_config


def test_the_defaults_are_dapo_and_group_on_a_new_trl_and_their_nearest_on_0_17():
    g = GRPOSettings()
    assert g.loss_type == "auto" and g.scale_rewards == "group"
    assert trl_settings.problem(g, "0.22.0") is None
    assert trl_settings.settings(g, "0.22.0") == {"loss_type": "dapo", "scale_rewards": "group"}
    assert trl_settings.settings(g, "1.16.0") == {"loss_type": "dapo", "scale_rewards": "group"}
    # TRL 0.17-0.21: no dapo (bnpo is their default), scale_rewards is a bool (True: by the group's std)
    for old in ("0.17.0", "0.21.0"):
        assert trl_settings.problem(g, old) is None
        assert trl_settings.settings(g, old) == {"loss_type": "bnpo", "scale_rewards": True}


def test_none_is_false_on_an_old_trl_not_a_truthy_string():
    """TRL 0.21 reads `if self.scale_rewards:`: the string "none" would scale by the group's std."""
    g = GRPOSettings(scale_rewards="none")
    assert trl_settings.settings(g, "0.21.0")["scale_rewards"] is False
    assert trl_settings.settings(g, "0.22.0")["scale_rewards"] == "none"


@pytest.mark.parametrize("setting, value", [("loss_type", "dapo"), ("scale_rewards", "batch")])
def test_what_an_old_trl_cannot_do_is_refused_with_the_release_it_needs(setting, value):
    g = GRPOSettings(**{setting: value})
    why = trl_settings.problem(g, "0.21.0")
    assert why and why.startswith(f"config: grpo.{setting}: {value} needs TRL >= 0.22.0, the installed one is 0.21.0")
    assert "use " in why and "\n" not in why
    assert trl_settings.problem(g, "0.22.0") is None


def test_a_trl_without_loss_type_is_refused():
    why = trl_settings.problem(GRPOSettings(), "0.16.1")
    assert why and "needs TRL >= 0.17.0" in why and "0.16.1" in why


def test_explicit_values_every_supported_trl_has_pass_through():
    for loss in ("grpo", "bnpo", "dr_grpo"):
        assert trl_settings.settings(GRPOSettings(loss_type=loss), "0.17.0")["loss_type"] == loss
        assert trl_settings.problem(GRPOSettings(loss_type=loss), "0.17.0") is None


def test_the_data_cites_upstream_for_every_row():
    data = trl_settings.data()
    assert data["minimum_source"] and data["auto_source"]
    for row in data["settings"]:
        assert "huggingface/trl" in row["source"] and row["reason"], row


def _grpo_args(tmp_path, tiny_model_dir, *over):
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "ground_truth": "2"}) + "\n")
    return [f"model={tiny_model_dir}", f"data={data}", f"output_dir={tmp_path / 'out'}", "method=grpo", *over]


def test_config_load_and_check_refuse_what_the_installed_trl_lacks(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """Up front (at load) and by provision-train --check: one line, exit 2."""
    from provisioner.train.cli import main

    monkeypatch.setattr(trl_settings, "installed_version", lambda: "0.17.0")
    load_config(None, _grpo_args(tmp_path, tiny_model_dir))  # the defaults: bnpo and True there
    with pytest.raises(ConfigError, match="grpo.loss_type: dapo needs TRL >= 0.22.0, the installed one is 0.17.0"):
        load_config(None, _grpo_args(tmp_path, tiny_model_dir, "grpo.loss_type=dapo"))
    rc = main(["--check", *_grpo_args(tmp_path, tiny_model_dir, "grpo.scale_rewards=batch")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "grpo.scale_rewards: batch needs TRL >= 0.22.0" in err[0], err


def test_the_installed_trl_takes_what_the_settings_give():
    """The installed TRL's GRPOConfig accepts the mapped values (and has every setting value trl_settings.yaml
    says it has from its release on)."""
    trl = pytest.importorskip("trl")
    import dataclasses

    version = trl_settings.installed_version()
    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    assert {"loss_type", "scale_rewards"} <= fields
    for scale in ("group", "none", "batch"):
        g = GRPOSettings(scale_rewards=scale)
        if trl_settings.problem(g, version) is None:
            cfg = trl.GRPOConfig(output_dir="unused", report_to=[], use_cpu=True, **trl_settings.settings(g, version))
            assert cfg.loss_type in ("dapo", "bnpo")
