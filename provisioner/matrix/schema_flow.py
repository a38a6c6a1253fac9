"""The sections of the job-flow matrices (framework jobs, upgrades, the error table, preflight): what each row
of matrices/jobs.yaml, upgrade.yaml, errors.yaml and preflight.yaml holds. schema.py merges them into SECTIONS
and owns the checks; this module only declares them.
"""

from __future__ import annotations

from provisioner.matrix.fields import (
    BOOL,
    INT,
    NOTES,
    SPECS,
    STR,
    STR_MAP,
    TEXT,
    VER,
    Section,
    enum,
    list_of,
    opt,
    records,
)

FLOW_SECTIONS: dict[str, Section] = {
    "job_frameworks": Section(
        "id",
        {"id": STR, "name": STR, "stack_framework": enum("pytorch", "mindspore"), "stack_extra": STR,
         "recipe": STR, "checkout": STR, "build": STR},
        {"extra_kinds": list_of(STR), "checkout_repo": opt(STR), **NOTES},
        doc="which framework a job kind needs from the image's stack, and how to build an image with it",
    ),
    "job_kinds": Section(
        "id",
        {"id": STR, "title": STR, "framework": STR, "launcher": enum("torchrun", "ray", "msrun"),
         "memory": enum("megatron", "grpo", "mindformers"),
         "steps": records({"id": STR, "title": STR, "template": STR, "run": enum("once", "distributed", "ray"),
                           "outputs": list_of(STR)}, {"when": enum("convert")}),
         "env": STR_MAP},
        {"data_options": list_of(enum("map_keys", "prompt_type")), **NOTES},
        doc="framework job kinds: their steps (templates/jobs/<kind>/), launcher, default environment and the"
            " job file's data: options their templates use (others are refused)",
    ),
    "job_models": Section(
        "model_type",
        {"model_type": STR, "name": STR, "qkv_bias": BOOL},
        {"mindspeed_llm": STR_MAP, "mindspeed_rl": STR_MAP, "mindformers": STR_MAP, **NOTES},
        doc="how a Hugging Face model type maps onto each framework's converter and prompt template",
    ),
    "job_scripts": Section(
        "id",
        {"id": STR, "framework": STR, "model_type": STR, "releases": list_of(STR), "scripts": STR_MAP},
        {"checkout_repo": opt(STR), **NOTES},
        doc="the framework scripts a job runs, by framework release and model type (paths in its checkout, or in"
            " the image's checkout of `checkout_repo`)",
    ),
    "job_release_env": Section(
        "id",
        {"id": STR, "framework": STR, "releases": list_of(STR), "env": STR_MAP},
        dict(NOTES),
        doc="launch variables a framework release's own runtime environment sets and its code reads (between the"
            " job kind's and the job file's)",
    ),
    "job_example_gaps": Section(
        "id",
        {"id": STR, "framework": STR, "model_type": STR, "since": VER, "below_billions": INT, "kept": TEXT},
        dict(NOTES),
        doc="model sizes whose upstream example scripts a framework release no longer ships (a job of such a"
            " model renders, with a note that no upstream script of the release backs its flags)",
    ),
    "job_flags": Section(
        "id",
        {"id": STR, "framework": STR, "component": STR, "flag": STR, "since": VER},
        dict(NOTES),
        doc="framework flags a job passes from a release on (the release the stack's extra names in `component`)",
    ),
    "job_data_formats": Section(
        "id",
        {"id": STR, "handler": STR},
        {"convert": opt(STR), "map_keys": STR_MAP, **NOTES},
        doc="the preprocessing handler per framework and data format (<framework>/<format>); `convert` names the"
            " conversion the job runs first (provisioner/jobs/dataconv.py) and `map_keys` the handler's fields in"
            " its output",
    ),
    "job_memory": Section(
        "id",
        {"id": STR, "fixed": INT, "sharded": INT, "why": TEXT},
        dict(NOTES),
        doc="constants of the per-chip memory estimate of framework jobs",
    ),
    # --- stack diff and upgrade plans (matrices/upgrade.yaml) ---
    "upgrade_rules": Section(
        "id",
        {"id": STR, "when": STR_MAP, "says": TEXT},
        {"needs": STR_MAP, "fix": opt(TEXT), **NOTES},
        doc="breaking-change rules `provision diff` and `provision upgrade` report (provisioner/upgrade/rules.py)",
    ),
    "upgrade_steps": Section(
        "id",
        {"id": STR, "stage": enum("hdk", "cann"), "order": INT, "package": STR, "commands": list_of(STR)},
        {"order_first": opt(INT), "cann": SPECS, "exact": opt(BOOL), **NOTES},
        doc="the packages a host upgrade installs, in order, and their commands (placeholders: validated values)",
    ),
    "upgrade_hdk_chips": Section(
        "family",
        {"family": STR, "chip": STR},
        dict(NOTES),
        doc="the chip word of HDK and CANN package names per chip family",
    ),
    "upgrade_facts": Section(
        "id",
        {"id": STR, "says": TEXT},
        dict(NOTES),
        doc="the sourced sentences an upgrade plan states (install order, reboot, rollback)",
    ),
    # --- failure explanations (matrices/errors.yaml) ---
    "errors": Section(
        "id",
        {"id": STR, "role": enum("cause", "consequence", "symptom", "warning"),
         "kind": enum("device", "memory", "operator", "network", "timeout", "driver", "config", "process"),
         "says": TEXT},
        {"match": list_of(STR), "code": opt(STR), "example": opt(STR), "fix": opt(TEXT), **NOTES},
        doc="error texts of Ascend jobs, their role in a failure, cause and fix (provisioner/explain/rules.py)",
    ),
    # --- host preflight (matrices/preflight.yaml) ---
    "preflight_limits": Section(
        "id",
        {"id": STR, "value": INT},
        {"unit": opt(STR), **NOTES},
        doc="thresholds `provision preflight` judges at (idle HBM share, HCCL_CONNECT_TIMEOUT default)",
    ),
    "preflight_chip_limits": Section(
        "family",
        {"family": STR},
        {"temp_max_c": opt(INT), "power_max_w": opt(INT), **NOTES},
        doc="a chip family's temperature and power limits preflight judges against (datasheet figures)",
    ),
    "preflight_bandwidth": Section(
        "id",
        {"id": STR, "topology": enum("hccs-8-a2", "a3-supernode", "roce"), "op": enum("all_reduce", "all_gather"),
         "min_bytes": INT, "busbw_min_mbps": INT},
        dict(NOTES),
        doc="the busbw floor of a collective per topology, message sizes from min_bytes up (preflight)",
    ),
}
