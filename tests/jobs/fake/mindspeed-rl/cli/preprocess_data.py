"""Fake MindSpeed-RL cli/preprocess_data.py: `preprocess_data.py NAME --config-path DIR hydra.run.dir=...` reads
DIR/NAME.yaml as Hydra would and writes <output_prefix>_packed_{input_ids,attention_mask,labels}_document.*."""

import json
import os
import sys

import yaml

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]  # fakelib.py: next to the script or one level up
from fakelib import flag, need, record, write  # noqa: E402

name = sys.argv.pop(1)  # as the real script does
argv = sys.argv[1:]
with open(os.path.join(flag(argv, "--config-path"), f"{name}.yaml"), encoding="utf-8") as fh:
    cfg = yaml.safe_load(fh)
need(cfg["input"], "input")
need(os.path.join(cfg["tokenizer_name_or_path"], "tokenizer_config.json"), "tokenizer")
with open(cfg["input"], encoding="utf-8") as fh:
    records = json.load(fh)
record("preprocess_data.py", config=cfg, records=len(records))
for key in ("input_ids", "attention_mask", *cfg.get("dataset_additional_keys", [])):
    for ext in ("bin", "idx"):
        write(f"{cfg['output_prefix']}_packed_{key}_document.{ext}", f"{len(records)} records\n")
