"""GRPO prompt records (orz, GSM8K, chat) and the reward functions: real math-verify, no torch."""

from __future__ import annotations

import json

import pytest

from provisioner.train.config import ConfigError, load_config
from provisioner.train.data import DataError
from provisioner.train.grpo.data import R1_SYSTEM_PROMPT, check_records, load_prompts, render_chatml
from provisioner.train.grpo.rewards import check_reward_names, format_think_answer, load_reward, math_accuracy

# The record shape of Open-Reasoner-Zero's data/orz_math_57k_collected.json (a JSON array of dialogues).
ORZ = [
    [
        {"from": "human", "value": "Natalia sold 48 clips in April and half as many in May. How many in total?"},
        {"from": "assistant", "ground_truth": {"value": "72"}},
    ],
    [
        {"from": "human", "value": "Simplify $\\frac{144}{10}$."},
        {"from": "assistant", "ground_truth": {"value": "\\frac{72}{5}"}},
    ],
]


def test_orz_gsm8k_and_chat_records(tmp_path):
    orz = tmp_path / "orz_math.json"
    orz.write_text(json.dumps(ORZ, indent=4))
    gsm = tmp_path / "gsm8k.jsonl"
    gsm.write_text(
        json.dumps({"question": "Weng earns $12 an hour. How much for 50 minutes?", "answer": "12/60=0.2\n#### 10"})
        + "\n"
        + json.dumps({"question": "How many?", "answer": "It is 1,000.\n#### 1,000"})
        + "\n"
    )
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        json.dumps(
            {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "ground_truth": 4}
        )
        + "\n"
        + json.dumps({"prompt": "3+3?", "ground_truth": "6"})
        + "\n"
    )
    recs = load_prompts([str(orz), str(gsm), str(chat)])
    assert [r.ground_truth for r in recs] == ["72", "\\frac{72}{5}", "10", "1000", "4", "6"]
    assert recs[0].turns == (("user", ORZ[0][0]["value"]),) and recs[0].source == f"{orz}:2"
    assert recs[4].system == "Be brief."
    text = render_chatml(recs[0], None)
    assert text.startswith(f"<|im_start|>system\n{R1_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert render_chatml(recs[4], None).startswith("<|im_start|>system\nBe brief.<|im_end|>")  # its own wins
    assert not render_chatml(recs[0], "").startswith("<|im_start|>system")


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([{"from": "human", "value": "q"}], "a list of two objects"),
        ([{"from": "human", "value": "q"}, {"from": "assistant", "ground_truth": {}}], "ground_truth.value"),
        ({"question": "q", "answer": "no final line"}, "'#### <final answer>'"),
        ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}, "end with a user"),
        ({"text": "hello"}, "not a prompt record"),
    ],
)
def test_bad_records_name_file_and_line(tmp_path, record, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "fine", "ground_truth": "1"}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(DataError) as err:
        load_prompts([str(path)])
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value)


def test_math_reward_needs_a_reference_on_every_record(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "hi"}) + "\n")
    recs = load_prompts([str(path)])
    check_records(recs, ["format"])
    with pytest.raises(DataError, match="no ground_truth, which the math reward needs"):
        check_records(recs, ["math", "format"])


def test_math_reward_verifies_answers_with_math_verify():
    completions = [
        "<think>48 + 24</think> <answer>72</answer>",
        "so the total is \\boxed{72}.",
        "<think>hmm</think><answer>\\boxed{\\frac{144}{2}}</answer>",
        "<answer>73</answer>",
        "I do not know.",
        "the answer is \\boxed{14.4}",
        "\\boxed{\\frac{72}{5}}",
    ]
    truth = ["72", "72", "72", "72", "72", "\\frac{72}{5}", "\\frac{72}{5}"]
    assert math_accuracy([""] * 7, completions, ground_truth=truth) == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert math_accuracy([""], ["\\boxed{1}"], ground_truth=[None]) == [None]  # no reference: no opinion
    # TRL passes conversational completions as message lists.
    assert math_accuracy([""], [[{"role": "assistant", "content": "\\boxed{72}"}]], ground_truth=["72"]) == [1.0]


def test_format_reward_and_rewards_by_import_path(tmp_path):
    assert format_think_answer([], ["<think>a</think>\n<answer>b</answer>", "<answer>b</answer>", "x"]) == [1.0, 0.0, 0.0]
    mod = tmp_path / "my_reward.py"
    mod.write_text("def short(prompts, completions, **kw):\n    return [1.0 / (1 + len(c)) for c in completions]\n")
    fn = load_reward(f"{mod}:short")
    assert fn([], ["", "abc"]) == [1.0, 0.25]
    assert load_reward("json:dumps") is json.dumps  # a module on the path
    check_reward_names(["math", f"{mod}:short", "json:loads"])
    for bad, msg in [
        ("nosuchmod_xyz:f", "module 'nosuchmod_xyz' not found"),
        (f"{tmp_path}/none.py:f", "file not found"),
        ("math", None),
        ("plain", "neither a built-in reward"),
    ]:
        if msg is None:
            continue
        with pytest.raises(ConfigError, match=msg):
            check_reward_names([bad])
    with pytest.raises(ConfigError, match="has no function 'nope'"):
        load_reward(f"{mod}:nope")


def test_grpo_config_validation(tmp_path, tiny_model_dir):
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt": "hi", "ground_truth": "1"}) + "\n")
    base = [f"model={tiny_model_dir}", f"data={data}", f"output_dir={tmp_path / 'out'}", "method=grpo"]
    cfg = load_config(None, base)
    assert cfg.tuning == "lora" and cfg.resolved_learning_rate() == 1e-5 and cfg.grpo.rewards == ["math", "format"]
    assert load_config(None, [*base, "grpo.tuning=full"]).resolved_learning_rate() == 1e-6
    for override, message in [
        ("grpo.num_generations=1", "a group needs at least 2 completions"),
        ("grpo.loss_type=ppo", "grpo.loss_type: must be one of"),
        ("grpo.reward_weights=[1.0]", "1 weights for 2 rewards"),
        ("grpo.epsilon_high=0.1", "must be >= epsilon"),
        ("data_format=alpaca", "method grpo reads prompts"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(None, [*base, override])
