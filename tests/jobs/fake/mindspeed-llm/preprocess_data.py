"""Fake MindSpeed-LLM preprocess_data.py: reads the instruction file, writes the packed indexed dataset files
<prefix>_packed_{input_ids,attention_mask,labels}_document.{bin,idx}."""

import json
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]  # fakelib.py: next to the script or one level up
from fakelib import flag, need, record, write  # noqa: E402

argv = sys.argv[1:]
source, prefix = flag(argv, "--input"), flag(argv, "--output-prefix")
need(source, "input")
need(os.path.join(flag(argv, "--tokenizer-name-or-path"), "tokenizer_config.json"), "tokenizer")
with open(source, encoding="utf-8") as fh:
    records = json.load(fh)
record("preprocess_data.py", records=len(records))
for key in ("input_ids", "attention_mask", "labels"):
    for ext in ("bin", "idx"):
        write(f"{prefix}_packed_{key}_document.{ext}", f"{len(records)} records\n")
