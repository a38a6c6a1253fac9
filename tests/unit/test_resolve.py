import re

import pytest

from provisioner.errors import ProvisionError, ResolveError
from provisioner.matrix import loader
from provisioner.resolve import request
from provisioner.resolve import solve as resolve


@pytest.fixture(scope="module")
def m():
    return loader.load(use_cache=False)


def stack(m, **kw):
    kw.setdefault("arch", "x86_64")
    return resolve.resolve(m, request.build(m, **kw))


def refused(m, **kw) -> ResolveError:
    kw.setdefault("arch", "x86_64")
    with pytest.raises(ResolveError) as err:
        resolve.resolve(m, request.build(m, **kw))
    return err.value


def test_newest_stack_for_300t_a2(m):
    s = stack(m, card="300T-A2")
    assert s["torch"]["version"] == "2.12.0" and s["torch_npu"]["version"] == "2.12.0"
    assert s["cann"]["version"] == "9.1.0" and s["python"] == "3.12"
    assert s["base_image"]["ref"] == "quay.io/ascend/cann:9.1.0-910b-ubuntu22.04-py3.12"
    assert s["base_image"]["mirrors"] == ["ascendai/cann:9.1.0-910b-ubuntu22.04-py3.12"]
    assert s["dtype"] == {"compute": "bf16", "loss_scaling": None}
    assert s["driver"]["paired"] == ["26.0.RC1", "26.1.0"]  # draft and published 9.1.0 release notes disagree


def test_every_choice_has_a_reason(m):
    s = stack(m, card="800T-A2", extras=["apex", "deepspeed"])
    for key in ["card", "arch", "base_image", "cann", "driver", "os", "python", "torch", "torch_npu", "apex",
                "deepspeed", "dtype", "torch_requirement"]:
        assert s["explain"].get(key), key
    assert s["sources"]["torch_npu"] and s["sources"]["cann"]


def test_wheel_rules_per_architecture(m):
    x86 = stack(m, card="300T-A2", torch="2.5.1")
    arm = stack(m, card="300T-A2", torch="2.5.1", arch="aarch64")
    assert x86["torch"]["requirement"] == "torch==2.5.1+cpu"
    assert x86["torch"]["index_url"] == "https://download.pytorch.org/whl/cpu"
    assert arm["torch"]["requirement"] == "torch==2.5.1" and arm["torch"]["index_url"] is None
    assert x86["id"] != arm["id"]


def test_first_generation_910_gets_fp16_with_loss_scaling(m):
    s = stack(m, card="800-9000")
    assert s["dtype"] == {"compute": "fp16", "loss_scaling": "dynamic"}
    assert s["base_image"]["tag"].split("-")[1] == "910"


def test_apex_pins_setuptools_and_python(m):
    s = stack(m, card="800T-A2", extras=["apex"])
    assert s["apex"]["setuptools"] == "65.7.0" and s["python"] == "3.10"
    assert not [w for w in s["warnings"] if "Apex" in w]  # a confirmed torch is preferred


def test_same_request_same_id(m):
    assert stack(m, card="300T-A2")["id"] == stack(m, card="300t-a2")["id"]


# --- refusals named in the issue ---------------------------------------------------------------

def test_training_on_ascend_310_is_refused_with_a_training_card(m):
    err = refused(m, card="300I")
    assert "cannot train" in err.reasons[0] and "inference" in err.reasons[0]
    assert err.alternatives and err.alternatives[0]["card"]["id"] == "800T-A2"


def test_inference_card_used_for_inference_is_fine(m):
    s = stack(m, card="300I-Pro", task="inference")
    assert s["chip"]["family"] == "310p" and s["dtype"]["compute"] == "fp16" and s["dtype"]["loss_scaling"] is None


def test_bf16_on_first_generation_910(m):
    err = refused(m, card="800-9000", dtype="bf16")
    assert "has no bf16" in err.reasons[0]
    assert err.alternatives[0]["dtype"]["compute"] == "fp16"


def test_torch_2_1_with_cann_9_1(m):
    err = refused(m, card="800T-A2", torch="2.1.0", cann="9.1.0")
    assert "--cann 9.1.0 conflicts with --torch 2.1.0" in err.reasons[0]
    assert "8.3.RC1" in err.reasons[0]
    fixes = {tuple(a["relaxed"]): a for a in err.alternatives}
    assert fixes[("--cann 9.1.0",)]["torch_npu"]["version"] == "2.1.0.post17"
    assert fixes[("--torch 2.1.0",)]["cann"]["version"] == "9.1.0"


def test_apex_with_python_3_11(m):
    err = refused(m, card="800T-A2", extras=["apex"], python="3.11")
    assert "Apex builds only for Python 3.7-3.10" in err.reasons[0]
    assert err.alternatives[0]["python"] == "3.10"


@pytest.mark.parametrize("wheel, phrase", [
    ("2.1.0.post1", "neither on PyPI nor in the official compatibility table"),
    ("2.1.0.post4", "not on PyPI"),
    ("2.5.1rc1", "no published CANN pairing"),
])
def test_torch_npu_versions_pip_cannot_install(m, wheel, phrase):
    err = refused(m, card="800T-A2", torch_npu=wheel)
    assert phrase in err.reasons[0]


def test_old_driver_with_cann_8_5(m):
    err = refused(m, card="800T-A2", driver="22.0.4", cann="8.5.0")
    assert "driver 22.0.4 is too old" in err.reasons[0]
    assert err.alternatives[0]["relaxed"] == ["--driver 22.0.4"]
    assert err.alternatives[0]["cann"]["version"] == "8.5.0"


def test_cann_7_driver_now_gets_the_cann_7_stack(m, monkeypatch):
    # HDK 23.0.3 pairs with CANN 7.0.0 only. torch_npu 2.1.0 (CANN 7.0.0) was marked "not on PyPI" and the
    # 7.0.1 images, dropped from today's list, were absent: the driver was "too old for every CANN".
    # Those images have Python 3.8/3.9 only, below provision's own Requires-Python: the stack needs the user's
    # own CANN 7.0.0 image (tests/unit/test_python_floor.py); the image facts are checked without the floor.
    err = refused(m, card="800T-A2", driver="23.0.3", cann="8.5.0")
    assert "driver 23.0.3 runs CANN 7.0.0" in err.reasons[0] and "--base-image" in err.reasons[0]
    s = stack(m, card="800T-A2", driver="23.0.3", arch="aarch64", base_image="my/cann:7.0.0")
    assert (s["torch_npu"]["version"], s["cann"]["version"], s["python"]) == ("2.1.0", "7.0.0", "3.10")
    from provisioner import version

    monkeypatch.setattr(version, "_cached_python", "")
    assert "driver 23.0.3 fits CANN 7.0.0" in refused(m, card="800T-A2", driver="23.0.3", cann="8.5.0").reasons[0]
    s = stack(m, card="800T-A2", driver="23.0.3", arch="aarch64")
    assert (s["torch_npu"]["version"], s["cann"]["version"]) == ("2.1.0", "7.0.0")
    assert s["base_image"]["tag"].startswith("7.0.1-910b-")
    assert any("not in today's cann-container-image list" in w and "--base-image" in w for w in s["warnings"])


def test_driver_picks_a_cann_it_supports(m):
    s = stack(m, card="800T-A2", driver="24.1.rc2")
    assert s["cann"]["version"] in ("8.0.RC3", "8.0.0", "8.1.RC1", "8.2.RC1", "8.3.RC1")
    assert s["driver"]["fit"] == "ok"


def test_unlisted_newer_driver_warns(m):
    s = stack(m, card="800T-A2", driver="27.0.0", cann="8.5.0")
    assert any("newer than any HDK" in w for w in s["warnings"])


def test_unknown_extra_and_framework_mixups_are_input_errors(m):
    with pytest.raises(ProvisionError, match="unknown --with"):
        request.build(m, card="800T-A2", extras=["flash"])
    with pytest.raises(ProvisionError, match="do not apply to --framework mindspore"):
        request.build(m, card="800T-A2", framework="mindspore", torch="2.5.1")


# --- profiles -----------------------------------------------------------------------------------

KNOWN_GOOD = ["mindspeed-rl-2.0.0-grpo", "mindspeed-rl-2.2.0-grpo", "mindspeed-rl-2.3.0-grpo", "mindspore-2.7.1-a2", "a2-torch2.1-lora-deepspeed",
              "mindspeed-llm-2.3.0-a2", "llamafactory-a2-cann9.0", "llamafactory-a2-cann9.1", "a3-torch2.12-cann9.1"]


@pytest.mark.parametrize("name", KNOWN_GOOD)
def test_known_good_profiles_reproduce(m, name):
    prof = m.profile(name)
    s = stack(m, profile=name)
    got = {
        "cann": s["cann"]["version"],
        "torch_npu": s["torch_npu"] and s["torch_npu"]["version"],
        "mindspore": s["mindspore"] and s["mindspore"]["version"],
        "python": s["python"],
        "image_tag": s["base_image"]["tag"],
    }
    for key, want in prof["expect"].items():
        assert got[key] == want, (name, key)
    assert not [w for w in s["warnings"] if "conflict" in w]


def test_every_known_good_profile_is_tested(m):
    assert sorted(p["name"] for p in m.rows("profiles") if p["kind"] == "known-good") == sorted(KNOWN_GOOD)


def _core(s):
    return (s["card"]["id"], s["cann"]["version"], s["python"],
            s["torch_npu"] and s["torch_npu"]["version"], s["mindspore"] and s["mindspore"]["version"],
            bool(s["apex"]), sorted(s["extras"]))


@pytest.mark.parametrize("report, must_say", [
    ("seed-310-grpo", ["cannot train", "2.5.1rc1", "--cann 8.3.RC2 conflicts with --torch 2.5.1"]),
    ("seed-800ta2-mindspore-sft", ["--mindspore 2.3.0 works with CANN 8.0.RC2", "CANN 8.3.RC1 works with MindSpore 2.7.1"]),
    ("seed-300ta2-kylin-lora", ["2.1.0.post1 is neither on PyPI nor in the official compatibility table"]),
])
def test_field_reports_are_refused_and_corrected(m, report, must_say):
    err = refused(m, profile=report)
    text = " | ".join(err.reasons)
    for phrase in must_say:
        assert phrase in text
    fixed = stack(m, profile=m.profile(report)["fixed_by"])
    assert _core(err.alternatives[0]) == _core(fixed)


def test_seed_grpo_on_the_right_hardware_is_the_mindspeed_rl_set(m):
    s = stack(m, profile="mindspeed-rl-2.0.0-grpo")
    ms = s["extras"]["mindspeed_llm"]
    assert ms["mindspeed"] == "0dfa0035ec54d9a74b2f6ee2867367df897299df"
    assert ms["megatron"] == "core_r0.8.0" and ms["mindspeed_llm"] == "421ef7bcb83fb31844a1efb688cde71705c0526e"
    assert s["apex"] and s["torch"]["version"] == "2.5.1"


def test_mindspeed_rl_releases_are_the_sets_of_their_cann(m):
    """MindSpeed-RL 2.1.0 and 2.2.0 (install guides at tags v2.1.0 bfe1bd5a and v2.2.0 194b52b7): torch 2.5.1 on CANN
    8.2.RC1 and 8.3.RC1, with the MindSpeed, MindSpeed-LLM and vllm-ascend commits their guides check out."""
    s = stack(m, profile="mindspeed-rl-2.2.0-grpo")
    ms = s["extras"]["mindspeed_llm"]
    assert ms["set"] == "mindspeed-rl-2.2.0" and ms["mindspeed_rl"] == "v2.2.0"
    assert ms["commits"] == {"mindspeed": "ca70c1338f1b3d1ce46a0ea426e5779ae1312e2e",
                             "megatron": "baf94af3c667248865f23df73b9fb8e2395e6fd0",
                             "mindspeed_llm": "bf1e61f4f9dc1baa3124a69c5e15af5a2e46b731",
                             "mindspeed_rl": "194b52b7b34b69963f21bee0d13d01c155cd2db2",
                             "vllm_ascend": "8c7bc4592fc3b7628b837031f1557979ffbf7601"}
    assert s["apex"] and s["torch"]["version"] == "2.5.1" and s["cann"]["version"] == "8.3.RC1"
    s = stack(m, card="800T-A2", cann="8.2.RC1", torch="2.5.1", python="3.10", extras=["apex", "mindspeed-llm"],
              base_image="registry.example.com/ascend/cann:8.2.rc1-910b-ubuntu22.04-py3.10")
    assert s["extras"]["mindspeed_llm"]["set"] == "mindspeed-rl-2.1.0"
    assert s["extras"]["mindspeed_llm"]["commits"]["vllm_ascend"] == "dedace4c45758772afb79177145e6ada4760f0d5"


def test_a_pinned_set_that_does_not_fit_is_refused_with_alternatives_not_a_traceback(m):
    """Pins of MindSpeed-RL v2.1.0 (CANN 8.2.RC1) on CANN 8.3.RC1: the alternative that drops the pinned
    `--with mindspeed-llm` is a stack without it (the constraint's flag reads "--with mindspeed-llm (pinned refs)");
    it was built with the extra still asked and no set fitting, and ended in ValueError from max()."""
    err = refused(m, card="800T-A2", cann="8.3.RC1", torch="2.5.1", python="3.10", extras=["apex", "mindspeed-llm"],
                  pins=(("mindspeed_rl", "v2.1.0"),), base_image="registry.example.com/ascend/cann:8.3.rc1-py3.10")
    relaxed = [a for a in err.alternatives if "--with mindspeed-llm (pinned refs)" in a["relaxed"]]
    assert relaxed and all("mindspeed_llm" not in a["extras"] for a in relaxed)


def test_mindspeed_rl_2_3_0_gets_torch_npu_2_5_1_on_cann_8_5_0_from_its_own_guide_and_nothing_else_does(m):
    """MindSpeed-RL v2.3.0 (4b30d034 docs/install_guide.md) pairs torch/torch_npu 2.5.1 with CANN 8.5.0; Ascend/pytorch
    releases 2.5.1.post1 with CANN 8.2.RC1 only (COMPATIBILITY.en.md @ 9e73e708) and TorchNPU 7.1.0's range ends at
    8.3.RC1. The set's pairing reaches that set alone: a plain torch 2.5.1 stack on 8.5.0 stays refused, as does
    another MindSpeed-RL set pinned there."""
    s = stack(m, profile="mindspeed-rl-2.3.0-grpo")
    ms = s["extras"]["mindspeed_llm"]
    assert ms["set"] == "mindspeed-rl-2.3.0" and ms["mindspeed_rl"] == "v2.3.0"
    assert ms["commits"] == {"mindspeed": "ac9f0e74061f968fdb285aa6a0df68a980fb0412",
                             "megatron": "a845aa7e12b3a117e24c2352b9e3e60bad2e3a17",
                             "mindspeed_llm": "a2c0733b9c8674e240a0a7607ed3f973115cc6b7",
                             "mindspeed_rl": "4b30d034e4fb6abc5ce844a667491e8a3cc4909c",
                             "vllm_ascend": "8c7bc4592fc3b7628b837031f1557979ffbf7601"}
    assert (s["cann"]["version"], s["torch"]["version"], s["torch_npu"]["version"]) == ("8.5.0", "2.5.1", "2.5.1.post1")
    assert "mindspeed-rl-2.3.0's install guide" in s["explain"]["cann"]
    assert any("paired by mindspeed-rl-2.3.0's install guide only" in w for w in s["warnings"])
    err = refused(m, card="800T-A2", cann="8.5.0", torch="2.5.1", python="3.10")
    assert "torch 2.5.1 works with CANN 8.0.RC2–8.3.RC1" in " | ".join(err.reasons)
    refused(m, card="800T-A2", cann="8.5.0", torch="2.5.1", python="3.10", extras=["apex", "mindspeed-llm"],
            pins=(("mindspeed_rl", "v2.2.0"),))
    # asked for MindSpeed without pins on CANN 8.5.0, a MindSpeed-LLM set still wins over the RL-only pairing
    s = stack(m, card="800T-A2", cann="8.5.0", python="3.10", extras=["mindspeed-llm"])
    assert s["extras"]["mindspeed_llm"]["kind"] == "mindspeed-llm" and s["torch"]["version"] != "2.5.1"


def test_profile_options_are_overridden_by_flags(m):
    s = stack(m, profile="llamafactory-a2-cann9.0", card="800T-A3")
    assert s["card"]["id"] == "800T-A3" and s["base_image"]["tag"].startswith("9.0.0-a3-")


def test_overlay_makes_the_0day_torch_resolvable(m, tmp_path):
    with pytest.raises(ResolveError):
        stack(m, card="300T-A2", torch="2.13.0")
    path = tmp_path / "o.yaml"
    path.write_text('torch_npu:\n  - wheel: "2.13.0"\n    cann: 9.1.0\n    source: local test\n')
    m2 = loader.load([path], use_cache=False)
    s = stack(m2, card="300T-A2", torch="2.13.0", base_image="local/debian:bookworm")
    assert s["torch_npu"]["version"] == "2.13.0" and s["python"] == "3.11"
    assert s["base_image"] == {"ref": "local/debian:bookworm", "tag": None, "official": False, "mirrors": []}


def test_driver_patch_build_fits_its_release(m):
    s = stack(m, card="800T-A2", driver="25.0.rc1.1", cann="8.2.RC1")
    assert s["driver"]["fit"] == "ok"


def test_mindspeed_on_first_generation_910_is_refused_not_a_crash(m):
    # The nearest stacks drop --with mindspeed-llm: they are made without it, not from an empty set list.
    err = refused(m, card="800-9000", extras=["mindspeed-llm"])
    assert "MindSpeed-LLM does not support Ascend 910 (first generation)" in str(err)
    assert err.alternatives, "a stack without --with mindspeed-llm is offered"
    for alt in err.alternatives:
        assert alt["relaxed"] == ["--with mindspeed-llm"]
        assert "mindspeed_llm" not in alt["extras"] and "mindspeed-llm" not in alt["request"].get("extras", [])


def test_mindspore_dtype_line_does_not_cite_torch_npu(m):
    s = stack(m, card="800T-A2", framework="mindspore")
    assert "torch_npu" not in s["explain"]["dtype"]
    assert not any("Ascend/pytorch" in ref for ref in s["sources"]["dtype"])
    torch = stack(m, card="800T-A2")
    assert "torch_npu reports it" in torch["explain"]["dtype"]


def test_the_printed_install_line_quotes_its_words(m):
    """Review A #2: the `install` line is pasted into shells; a requirement with shell characters is quoted."""
    from provisioner.resolve.report import format_stack

    s = stack(m, card="300T-A2", arch="x86_64")
    line = next(x for x in format_stack(s).splitlines() if x.lstrip().startswith("install"))
    assert f"pip install {s['torch']['requirement']}" in line  # plain pins stay as they were
    odd = {**s, "torch": {**s["torch"], "requirement": "torch>=2;x $(y)", "index_url": None}}
    line = next(x for x in format_stack(odd).splitlines() if x.lstrip().startswith("install"))
    assert "pip install 'torch>=2;x $(y)';" in line


def test_an_image_label_with_driver_lists_that_do_not_parse_is_a_note(m):
    """Review A #4: label_row / stack_row fall back to the matrix with a note instead of a VersionError later."""
    from provisioner.resolve import driverfit

    for bad in ({"paired": "zz"}, {"paired": [1]}, {"paired": [None]}, {"paired": ["x"]},
                {"compatible": [">=x"]}, {"compatible": "25.0.*"}):
        notes: list[str] = []
        assert driverfit.label_row("8.1.RC1", bad, notes) is None, bad
        assert len(notes) == 1 and "not used" in notes[0], notes
        row, fit_matrix = driverfit.stack_row(m, {"cann": {"version": "8.1.RC1"}, "driver": bad}, notes)
        assert row is m.cann("8.1.RC1") and fit_matrix is m
        assert driverfit.driver_fit("25.0.rc1", row, fit_matrix) in driverfit.FITS
    good = driverfit.label_row("8.1.RC1", {"paired": ["25.0.rc1"], "compatible": ["24.1.*"]})
    assert good is not None and driverfit.driver_fit("25.0.rc1", good, None) == "ok"


@pytest.mark.parametrize("cann, sets", [("8.3.RC1", "mindspeed-llm-2.2.0"), ("8.2.RC1", "mindspeed-llm-2.1.0"),
                                        ("9.1.0", "mindspeed-llm-26.1.0")])
def test_mindspeed_on_a_cann_without_its_python_names_the_python(m, cann, sets):
    """The sets of these CANN releases need Python 3.10 and the official images carry another Python: the refusal
    says so, in one line, with the ways forward - not a CANN range that contains the requested CANN."""
    err = refused(m, card="300T-A2", cann=cann, extras=["mindspeed-llm"])
    summary = str(err)
    assert "\n" not in summary and summary == err.reasons[0]
    assert summary.startswith(f"--cann {cann} conflicts with --with mindspeed-llm on Python: ")
    assert f"{sets} " in summary or f"{sets}," in summary or f"{sets})" in summary
    assert re.search(r"needs? Python 3\.10, and ", summary)
    assert "Python 3.10" not in summary.split(" offer ")[1].split(";")[0]
    assert "--base-image" in summary and "--python 3.10" in summary
    assert "works with CANN" not in summary  # the old pairwise range hid the real conflict
    # the way forward works: the same request with a Python 3.10 base image resolves to that set
    s = stack(m, card="300T-A2", cann=cann, extras=["mindspeed-llm"], python="3.10",
              base_image="registry.example.com/cann-py3.10:latest")
    assert s["extras"]["mindspeed_llm"]["set"] == sets and s["python"] == "3.10"


@pytest.mark.parametrize("extras", [[], ["mindspeed-llm"]])
def test_cann_whose_images_lack_the_requested_python_says_so(m, extras):
    """--cann 8.3.RC1 --python 3.10: the official CANN 8.3.RC1 images have Python 3.11 only. The refusal says that
    and the way forward (--base-image), and lists the CANNs that fit --python 3.10 - its old CANN range
    (8.0.RC2-9.0.1) contained 8.3.RC1 and hid the gap."""
    err = refused(m, card="300T-A2", cann="8.3.RC1", python="3.10", extras=extras)
    first = err.reasons[0]
    assert first.startswith("--cann 8.3.RC1 conflicts with --python 3.10: the listed CANN 8.3.RC1 images for chip"
                            " 910b offer Python 3.11 only; pass --base-image with a CANN 8.3.RC1 image that has"
                            " Python 3.10, or choose another CANN (the listed images fit --python 3.10 with CANN ")
    fits = first.rsplit(" with CANN ", 1)[1].rstrip(")").split(", ")
    assert "8.1.RC1" in fits and "8.5.0" in fits and "8.3.RC1" not in fits and "8.2.RC1" not in fits
    assert "–" not in first and "(and --python" not in first  # a list, not a range; --python 3.10 is given
    # the way forward works
    s = stack(m, card="300T-A2", cann="8.3.RC1", python="3.10", extras=extras,
              base_image="registry.example.com/cann-py3.10:8.3.rc1")
    assert s["cann"]["version"] == "8.3.RC1" and s["python"] == "3.10"
