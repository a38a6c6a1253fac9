"""Reading Alpaca and chat records into conversations."""

from __future__ import annotations

import json

import pytest

from provisioner.train.data import DataError, load_conversations, to_conversation


def test_alpaca_with_input_system_and_history():
    rec = {
        "instruction": "Translate",
        "input": "bonjour",
        "output": "hello",
        "system": "Be brief.",
        "history": [["hi", "hey"]],
    }
    conv = to_conversation(rec, "f:1")
    assert conv.system == "Be brief."
    assert conv.turns == (("hi", "hey"), ("Translate\nbonjour", "hello"))


def test_alpaca_without_input_and_chat_messages():
    assert to_conversation({"instruction": "Q", "input": "", "output": "A"}, "f:1").turns == (("Q", "A"),)
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
    ]
    conv = to_conversation({"messages": msgs}, "f:1")
    assert conv.system == "S" and conv.turns == (("u1", "a1"), ("u2", "a2"))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"instruction": "x"}, "f:7: missing 'output'"),
        ({"instruction": "x", "output": 3}, "f:7: 'output' must be a string"),
        ({"prompt": "x"}, "f:7: neither 'messages' (chat) nor 'instruction' (alpaca) present"),
        (
            {"messages": [{"role": "user", "content": "u"}]},
            "f:7: conversation must end with an assistant message",
        ),
        (
            {"messages": [{"role": "assistant", "content": "a"}]},
            "f:7: messages[0]: assistant message without",
        ),
        ({"messages": [{"role": "tool", "content": "a"}]}, "f:7: messages[0]: unknown role 'tool'"),
        (
            {"instruction": "x", "output": "y", "history": [["only one"]]},
            "f:7: history[0] must be a [user, assistant]",
        ),
        ([1, 2], "f:7: expected a JSON object, got list"),
    ],
)
def test_bad_records(record, message):
    with pytest.raises(DataError) as err:
        to_conversation(record, "f:7")
    assert str(err.value).startswith(message)


def test_jsonl_broken_line_and_blank_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    good = json.dumps({"instruction": "a", "output": "b"})
    path.write_text(f'{good}\n\n{good}\n{{"instruction": "a",\n')
    with pytest.raises(DataError) as err:
        load_conversations([str(path)])
    assert str(err.value).startswith(f"{path}:4: invalid JSON")


def test_json_array_keeps_line_numbers(tmp_path):
    path = tmp_path / "d.json"
    recs = [{"instruction": f"q{i}", "output": f"a{i}"} for i in range(3)]
    path.write_text(json.dumps(recs, indent=1))
    convs = load_conversations([str(path)])
    assert [c.source for c in convs] == [f"{path}:2", f"{path}:6", f"{path}:10"]
    path.write_text(json.dumps(recs, indent=1)[:-3])  # cut inside the last record
    with pytest.raises(DataError) as err:
        load_conversations([str(path)])
    # The cut record opens on line 10; the decoder notices on the last line, 13.
    assert str(err.value) == f"{path}:13: invalid JSON: Expecting ',' delimiter (column 2)"
