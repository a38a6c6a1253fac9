"""Data conversions a job runs before the framework's preprocessing, for data formats whose fields the framework's
handler cannot name (matrices/jobs.yaml job_data_formats `convert`).

    orz   Open-Reasoner-Zero's math data (data/orz_math_57k_collected.json and its siblings): a JSON list of
          dialogues of two turns, [{"from": "human", "value": PROBLEM},
          {"from": "assistant", "ground_truth": {"value": ANSWER, ...}}], read by position as Open-Reasoner-Zero's
          own CustomDataset reads them (playground/zero_setting_base.py: dialogue[0]["value"],
          dialogue[1]["ground_truth"]["value"]). The answer is nested, and MindSpeed-RL's map_keys name top-level
          columns only (handler_utils.py), so each dialogue becomes one JSON line {"problem": ..., "answer": ...},
          which R1AlpacaStyleInstructionHandler reads with deepscaler's map_keys (prompt=problem, response=answer;
          the answer becomes the labels the rule reward checks).

The job runs this file as a script inside its container (render ships it into the job directory as
tools/dataconv.py): standard library only, no provisioner imports, no torch. A record of another shape stops the
conversion with one line naming the record; a record with an empty problem or answer is left out and counted.
Usage: python dataconv.py orz INPUT OUTPUT
"""

from __future__ import annotations

import json
import os
import sys


class BadRecord(ValueError):
    """A record the conversion cannot read; the message names it."""


def orz_record(item, n: int) -> dict | None:
    """One Open-Reasoner-Zero dialogue -> {"problem", "answer"}, or None when either is empty."""
    if not isinstance(item, list) or len(item) != 2 or not all(isinstance(t, dict) for t in item):
        raise BadRecord(f"record {n}: expected a pair of turns [{{from, value}}, {{from, ground_truth: {{value}}}}],"
                        f" got {_shape(item)}")
    problem = item[0].get("value")
    truth = item[1].get("ground_truth")
    answer = truth.get("value") if isinstance(truth, dict) else None
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(problem, str):
        raise BadRecord(f"record {n}: the first turn has no text value (got {_shape(problem)})")
    if not isinstance(answer, str):
        raise BadRecord(f"record {n}: the second turn has no ground_truth.value text (got {_shape(answer)})")
    if not problem.strip() or not answer.strip():
        return None
    return {"problem": problem, "answer": answer}


def convert_orz(records) -> tuple[list[dict], int]:
    """(converted records, how many were left out for an empty problem or answer)."""
    if not isinstance(records, list):
        raise BadRecord(f"expected a JSON list of dialogues, got {_shape(records)}")
    out, empty = [], 0
    for n, item in enumerate(records):
        row = orz_record(item, n)
        if row is None:
            empty += 1
        else:
            out.append(row)
    return out, empty


CONVERSIONS = {"orz": convert_orz}


def write_jsonl(rows: list[dict], path: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in CONVERSIONS:
        print(f"usage: dataconv.py {{{','.join(sorted(CONVERSIONS))}}} INPUT OUTPUT", file=sys.stderr)
        return 2
    name, src, dst = argv
    try:
        with open(src, encoding="utf-8") as f:
            records = json.load(f)
    except (OSError, ValueError) as e:
        print(f"dataconv {name}: cannot read {src}: {e}", file=sys.stderr)
        return 2
    try:
        rows, empty = CONVERSIONS[name](records)
    except BadRecord as e:
        print(f"dataconv {name}: {src}: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"dataconv {name}: {src}: no record with a problem and an answer", file=sys.stderr)
        return 2
    write_jsonl(rows, dst)
    left = f" ({empty} left out: empty problem or answer)" if empty else ""
    print(f"dataconv {name}: {len(rows)} records -> {dst}{left}")
    return 0


def _shape(value) -> str:
    if isinstance(value, dict):
        return "an object with keys " + ", ".join(sorted(map(str, value))[:6])
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return type(value).__name__


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
