"""Validation up front (JobPlan): chips, model shape, batches, the stack's framework, memory, launch variables."""

from __future__ import annotations

import json

import pytest

from provisioner.jobs import memory, model, plan
from tests.jobs.conftest import QWEN7B_CONFIG, SFT


def build(shipped, job, stack, card="800T-A2", chips=4, nnodes=1):
    return plan.build(shipped, job, card=card, chips_per_node=chips, nnodes=nnodes, stack=stack, image="image img")


def refused(shipped, job, stack, **kw) -> str:
    with pytest.raises(plan.JobRefused) as exc:
        build(shipped, job, stack, **kw)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_qwen25_7b_shape_and_parameter_count():
    shape = model.read(str(QWEN7B_CONFIG), "cfg", qkv_bias=True)
    assert (shape.layers, shape.hidden, shape.ffn, shape.heads, shape.kv_heads, shape.vocab) == (28, 3584, 18944, 28, 4, 152064)
    # Qwen2.5-7B: 7.62B parameters (the model card's "Number of Parameters: 7.61B" counts 7,615,616,512).
    assert shape.params() == 7_615_616_512
    assert shape.qkv_bias and not shape.tied and shape.rope_theta == 1e6 and shape.norm_eps == 1e-6


def test_seed_003_tp2_dp2_plan(shipped, stacks, sft_job):
    p = build(shipped, sft_job(), stacks["llm"])
    assert [s.id for s in p.steps] == ["convert", "preprocess", "train", "export"]
    assert p.paths["weights"] == "/output/qwen25-7b-sft/weights/mcore-tp2-pp1"
    assert p.steps[2].outputs == ("/output/qwen25-7b-sft/provision-job/train.complete",)
    assert p.release == "2.3.0" and p.checkout == "/opt/MindSpeed-LLM" and p.precision == "bf16"
    est = p.memory
    # 3.8B parameters per chip x (6 + 12/2) bytes, activations 34 x 4096 x 3584 / 2 x 28 layers
    assert est["params_per_chip"] == 7_615_616_512 // 2
    assert est["parts_mb"]["training_state"] == round(7_615_616_512 / 2 * 12 / 2**20)
    assert est["parts_mb"]["activations"] == round(34 * 4096 * 3584 / 2 * 28 / 2**20)
    assert est["fits"] is True and est["total_mb"] < est["hbm_mb"] == 65536
    assert json.loads(plan.job_json(p))["digest"] == p.digest()


def test_parallelism_must_use_the_launch_chips(shipped, stacks, sft_job):
    msg = refused(shipped, sft_job(), stacks["llm"], chips=8)
    assert msg.endswith("job.yaml:5: TP2 x PP1 x DP2 uses 4 chips but the launch has 8 (8 chip(s)); make tensor x"
                        " pipeline x data = 8")
    msg = refused(shipped, sft_job(), stacks["llm"], chips=8, nnodes=2)
    assert "uses 4 chips but the launch has 16 (8 chip(s) x 2 nodes)" in msg


def test_heads_and_kv_heads_must_split_over_tp(shipped, stacks, sft_job):
    # 28 heads, 4 KV heads: TP 8 splits neither the query groups nor ... (28 % 8 != 0)
    job = sft_job(SFT.replace("tensor: 2, pipeline: 1, data: 2", "tensor: 8, pipeline: 1, data: 1"))
    msg = refused(shipped, job, stacks["llm"], chips=8)
    assert "tensor parallel 8 does not divide the model's attention heads (28)" in msg
    assert "tensor parallel 8 does not divide the model's KV heads (query groups) (4)" in msg
    job = sft_job(SFT.replace("tensor: 2, pipeline: 1, data: 2", "tensor: 1, pipeline: 3, data: 1"))
    assert "pipeline parallel 3 does not divide the model's 28 layers" in refused(shipped, job, stacks["llm"], chips=3)


def test_batches_must_split_over_dp(shipped, stacks, sft_job):
    job = sft_job(SFT.replace("global_batch_size: 64", "global_batch_size: 63"))
    assert "global_batch_size 63 must be a multiple of micro_batch_size x data parallel = 2" in refused(
        shipped, job, stacks["llm"])


def test_a_stack_without_the_framework_is_refused_with_the_recipe(shipped, stacks, sft_job):
    msg = refused(shipped, sft_job(), stacks["plain"])
    assert msg == ("image img cannot run a mindspeed-llm-sft job: its stack has no MindSpeed-LLM; build an image with"
                   " MindSpeed-LLM: provision build --card 800T-A2 --recipe mindspeed-llm --with apex")
    grpo = sft_job(SFT.replace("mindspeed-llm-sft", "mindspeed-rl-grpo").replace("steps: 2000, save_interval: 500",
                                                                               "steps: 1000, save_interval: 500"))
    msg = refused(shipped, grpo, stacks["llm"])
    assert "its stack's framework set is mindspeed-llm-2.3.0, not MindSpeed-RL" in msg
    assert "provision build --profile mindspeed-rl-2.0.0-grpo --recipe mindspeed-llm" in msg
    ms = sft_job(SFT.replace("mindspeed-llm-sft", "mindspore-sft"))
    assert "its stack is a pytorch stack, MindSpore Transformers (mindformers) needs mindspore" in refused(shipped, ms, stacks["llm"])
    assert "its stack has no MindSpore Transformers" in refused(shipped, ms, stacks["mindspore"])
    assert "no provision stack label" in refused(shipped, ms, None)
    assert build(shipped, ms, stacks["mindformers"]).checkout == "/opt/mindformers"


def test_the_image_framework_labels_must_agree_and_give_the_checkout(shipped, stacks, sft_job):
    """org.provision.framework.* (image.labels.framework_from_labels): the kind must be the job's framework, and
    the checkout path the image reports is where the scripts run from; a path that is not plain is not used."""
    job = sft_job()
    llm = {"set": "mindspeed-llm-2.3.0", "kind": "mindspeed-llm", "env": "x",
           "checkouts": {"mindspeed_llm": {"commit": "1bdd9700", "ref": "2.3.0", "from": "gitee", "path": "/srv/MS-LLM"}}}
    p = plan.build(shipped, job, card="800T-A2", chips_per_node=4, stack=stacks["llm"], image="image img", framework=llm)
    assert p.checkout == "/srv/MS-LLM" and "cd /srv/MS-LLM" in p.files["steps/03-train.sh"]
    odd = {**llm, "checkouts": {"mindspeed_llm": {"path": "/opt/x; rm -rf /"}}}
    assert plan.build(shipped, job, card="800T-A2", chips_per_node=4, stack=stacks["llm"],
                      framework=odd).checkout == "/opt/MindSpeed-LLM"
    # A checkouts label the image could not use (image.labels notes why) is said among the plan's notes.
    from provisioner.image.labels import framework_from_labels

    bad = framework_from_labels({"org.provision.framework.set": "mindspeed-llm-2.3.0",
                                 "org.provision.framework.kind": "mindspeed-llm",
                                 "org.provision.framework.checkouts": "[1]"})
    assert bad["checkouts"] == {} and bad["notes"]
    noted = plan.build(shipped, job, card="800T-A2", chips_per_node=4, stack=stacks["llm"], image="image img",
                       framework=bad)
    assert noted.checkout == "/opt/MindSpeed-LLM" and f"image img: {bad['notes'][0]}" in noted.notes
    with pytest.raises(plan.JobRefused, match=r"its framework label names mindformers-1.7.0 \(mindformers\), not MindSpeed-LLM"):
        plan.build(shipped, job, card="800T-A2", chips_per_node=4, stack=stacks["llm"],
                   framework={"set": "mindformers-1.7.0", "kind": "mindformers", "env": None, "checkouts": {}})


def test_a_7b_full_sft_that_cannot_fit_is_refused_with_a_split_that_fits(shipped, stacks, sft_job):
    job = sft_job(SFT.replace("tensor: 2, pipeline: 1, data: 2", "tensor: 1, pipeline: 1, data: 4"))
    msg = refused(shipped, job, stacks["llm"])
    est = memory.estimate(shipped, job, model.read(str(QWEN7B_CONFIG), "x", True), "megatron", "bf16", 65536)
    assert est["fits"] is False and est["total_mb"] > 65536
    assert msg.startswith(f"{job.source}:5: a 7.6B mindspeed-llm-sft with TP1 x PP1 x DP4 needs about")
    assert "more than the 64 GB HBM of a 800T-A2 chip; TP2 x PP1 x DP2 fits (about 57.4 GB per chip)" in msg
    # recompute does not save the optimizer state: still refused
    recompute = sft_job(SFT.replace("tensor: 2, pipeline: 1, data: 2", "tensor: 1, pipeline: 1, data: 4")
                        .replace("save_interval: 500", "save_interval: 500, recompute: full"))
    assert "needs about" in refused(shipped, recompute, stacks["llm"])


def test_a_card_with_less_hbm_refuses_what_an_800t_a2_runs(shipped, stacks, sft_job):
    # 300T-A2 lists 910B4 (32 GB) among its chips: the estimate is checked against the smallest
    msg = refused(shipped, sft_job(), stacks["llm"], card="300T-A2")
    assert "more than the 32 GB HBM of a 300T-A2 chip" in msg


def test_launch_variables_of_the_job_file(shipped, stacks, sft_job):
    job = sft_job(SFT + "env:\n  HCCL_CONECT_TIMEOUT: '1800'\n  HCCL_RDMA_TIMEOUT: '30'\n  HCCL_P2P_DISABLE: '1'\n")
    msg = refused(shipped, job, stacks["llm"])
    assert "job.yaml:9: HCCL_CONECT_TIMEOUT is not a known HCCL_* variable; did you mean HCCL_CONNECT_TIMEOUT?" in msg
    assert "job.yaml:10: HCCL_RDMA_TIMEOUT=30: outside [5, 20]" in msg
    ok = sft_job(SFT + "env:\n  HCCL_CONNECT_TIMEOUT: '1800'\n  HCCL_P2P_DISABLE: '1'\n  HCCL_WHITELIST_DISABLE: '1'\n")
    p = build(shipped, ok, stacks["llm"])
    assert p.env["HCCL_CONNECT_TIMEOUT"] == "1800" and p.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert any("HCCL_P2P_DISABLE is documented only for old CANN releases" in n for n in p.notes)


def test_grpo_rules_from_mindspeed_rl(shipped, stacks, sft_job):
    base = SFT.replace("mindspeed-llm-sft", "mindspeed-rl-grpo").replace("tensor: 2, pipeline: 1, data: 2",
                                                                       "tensor: 4, pipeline: 1, data: 2")
    job = sft_job(base.replace("steps: 2000, save_interval: 500", "steps: 1000, save_interval: 300")
                  .replace("seq_length: 4096", "seq_length: 2048").replace("global_batch_size: 64", "global_batch_size: 32"))
    msg = refused(shipped, job, stacks["rl"], chips=8)
    assert "save_interval 300 must divide steps 1000 (MindSpeed-RL saves only at multiples of save_interval)" in msg
    job = sft_job(base.replace("seq_length: 4096", "seq_length: 8192") + "grpo: {infer_tensor_parallel: 3}\n")
    msg = refused(shipped, job, stacks["rl"], chips=8)
    assert "infer_tensor_parallel 3 must divide the 8 chips" in msg
    assert "seq_length 8192 exceeds max_prompt_length + max_response_length = 4096" in msg
    good = sft_job(base.replace("seq_length: 4096", "seq_length: 2048").replace("steps: 2000, save_interval: 500",
                                                                               "steps: 800, save_interval: 200"))
    p = build(shipped, good, stacks["rl"], chips=8)
    assert p.memory["rollout"]["infer_tensor_parallel"] == 4 and p.memory["fits"]
    assert p.checkout == "/opt/MindSpeed-RL" and p.spec.grpo.n_samples_per_prompt == 8


def test_the_package_docstring_names_every_module():
    """provisioner/jobs/__init__.py lists what each module owns: a new module gets its line."""
    import pathlib
    import re

    import provisioner.jobs as pkg

    folder = pathlib.Path(pkg.__file__).parent
    listed = set(re.findall(r"^    (\w+)\s{2,}", pkg.__doc__ or "", re.M))
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    assert modules <= listed, f"not in the docstring: {sorted(modules - listed)}"


@pytest.mark.parametrize("data, output, expected", [
    # one shared filesystem: the data beside the runs; the output mounted rw inside the ro data directory
    ("/mnt/shared/alpaca.json", "/mnt/shared/runs/sft",
     [("/models/Qwen2.5-7B", "ro"), ("/mnt/shared", "ro"), ("/mnt/shared/runs/sft", "rw")]),
    # the data inside the output: the output's rw mount serves it
    ("/out/job/train.json", "/out/job", [("/models/Qwen2.5-7B", "ro"), ("/out/job", "rw")]),
    ("/out/job/data/train.json", "/out/job", [("/models/Qwen2.5-7B", "ro"), ("/out/job", "rw")]),
    # the data inside the model directory
    ("/models/Qwen2.5-7B/train.json", "/out/job", [("/models/Qwen2.5-7B", "ro"), ("/out/job", "rw")]),
])
def test_k8s_and_launch_mount_nested_layouts_alike(shipped, stacks, sft_job, data, output, expected):
    """`k8s --job` volumes and `launch --job` binds come from one mount plan: an output nested in the data
    directory stays writable, and data inside the output is not mounted read-only over it."""
    from provisioner.jobs import k8s as jobk8s
    from provisioner.launch import jobrun

    job = sft_job(SFT.replace("/data/alpaca_data.json", data).replace("/output/qwen25-7b-sft", output))
    p = build(shipped, job, stacks["llm"])
    binds = jobrun.job_mounts(p)
    assert [(h, m) for h, c, m in binds if h == c] == expected
    volumes, mounts = jobk8s.storage(p, [])
    assert [v["name"] for v in volumes] == [m["name"] for m in mounts]
    k8s = [(v["hostPath"]["path"], m["mountPath"], "ro" if m.get("readOnly") else "rw") for v, m in zip(volumes, mounts, strict=True)]
    assert k8s == binds
    kinds = {v["hostPath"]["path"]: v["hostPath"]["type"] for v in volumes}
    assert kinds[output] == "DirectoryOrCreate"


def test_a_claim_serves_the_paths_under_it(shipped, stacks, sft_job):
    from provisioner.jobs import k8s as jobk8s

    job = sft_job(SFT.replace("/data/alpaca_data.json", "/mnt/shared/a.json")
                  .replace("/output/qwen25-7b-sft", "/mnt/shared/runs/sft"))
    volumes, mounts = jobk8s.storage(build(shipped, job, stacks["llm"]), [("shared", "/mnt/shared")])
    assert [(m["mountPath"], m.get("readOnly", False)) for m in mounts] == [
        ("/mnt/shared", False), ("/models/Qwen2.5-7B", True)]
    assert volumes[0]["persistentVolumeClaim"] == {"claimName": "shared"}


def test_local_storage_only_on_one_node(shipped, stacks, sft_job):
    """Each rank writes its checkpoint shards on its own node: with storage: local on 2 nodes none holds a
    whole checkpoint, so the plan refuses it (naming the fix); one node keeps working."""
    job = sft_job(SFT + "storage: local\n")
    msg = refused(shipped, job, stacks["llm"], chips=2, nnodes=2)
    assert msg.startswith(f"{job.source}:8: storage: local on 2 nodes") and "storage: shared" in msg, msg
    assert build(shipped, job, stacks["llm"]).spec.storage == "local"
    assert build(shipped, sft_job(SFT), stacks["llm"], chips=2, nnodes=2).nnodes == 2


def test_data_options_only_for_kinds_that_read_them(shipped, stacks, sft_job):
    """MindSpore SFT's preprocessing reads neither map_keys nor prompt_type: given, they are refused (file:line)
    rather than ignored; the MindSpeed kinds keep them."""
    text = SFT.replace("format: alpaca}", "format: alpaca, map_keys: {prompt: problem}, prompt_type: qwen}")
    job = sft_job(text.replace("mindspeed-llm-sft", "mindspore-sft"))
    msg = refused(shipped, job, stacks["mindformers"])
    assert f"{job.source}:4: data.map_keys is not used by mindspore-sft jobs" in msg, msg
    assert "data.prompt_type is not used by mindspore-sft jobs" in msg
    p = build(shipped, sft_job(text), stacks["llm"])
    assert "--map-keys" in p.files["steps/02-preprocess.sh"] and "--prompt-type qwen" in p.files["steps/02-preprocess.sh"]


def test_data_options_in_the_matrix_match_the_templates(shipped):
    """job_kinds data_options (matrices/jobs.yaml) lists exactly the data: options a kind's templates read."""
    from provisioner.paths import data_dir

    for row in shipped.rows("job_kinds"):
        folder = data_dir("templates") / "jobs" / row["id"]
        text = "".join(p.read_text() for p in sorted(folder.rglob("*.j2")))
        read = {key for key in ("map_keys", "prompt_type") if f"data.{key}" in text}
        assert read == set(row.get("data_options") or ()), row["id"]


def test_a_release_without_the_models_upstream_example_says_so(shipped, stacks, sft_job):
    """MindSpeed-LLM 26.0.0 and 26.1.0 dropped the Qwen2.5 examples below 72B (examples/mcore/qwen25 at 57c33296 and
    2b7130ca holds the 72B scripts only; 2.3.0 at 1bdd9700 has 3B to 72B): a 7B job there renders, with a note."""
    from tests.jobs.conftest import _resolve

    new = _resolve(card="800T-A2", cann="9.0.0", extras=("mindspeed-llm",))
    assert new["extras"]["mindspeed_llm"]["release"] == "26.0.0"
    p = build(shipped, sft_job(), new)
    gap = [n for n in p.notes if "ships no example" in n]
    assert gap and gap[0].startswith("MindSpeed-LLM 26.0.0 ships no example for a 7.6B qwen2 model")
    assert "job_example_gaps mindspeed-llm/qwen2-below-72b" in gap[0]
    assert p.to_dict()["notes"] == p.notes  # printed at launch, `# note:` lines of the k8s manifests
    assert not [n for n in build(shipped, sft_job(), stacks["llm"]).notes if "ships no example" in n]  # 2.3.0


def test_mindspeed_rl_converts_with_its_own_cli_on_2_0_and_with_mindspeed_llm_from_2_1(shipped, stacks, sft_job):
    """cli/convert_ckpt.py is in MindSpeed-RL @ 62e9928a (2.0.0) and in none of v2.1.0 (bfe1bd5a), v2.2.0
    (194b52b7) and v2.3.0 (4b30d034), whose GRPO guide converts with MindSpeed-LLM at its install guide's commit: the job runs that
    checkout's convert_ckpt.py (the image keeps it at /opt/MindSpeed-LLM) for the weights and the export."""
    from tests.jobs.conftest import EXAMPLES

    job = sft_job((EXAMPLES / "seed000-grpo-qwen25-7b.yaml").read_text())
    for stack, converter in ((stacks["rl"], "python cli/convert_ckpt.py \\"),
                             (stacks["rl210"], "python /opt/MindSpeed-LLM/convert_ckpt.py \\"),
                             (stacks["rl220"], "python /opt/MindSpeed-LLM/convert_ckpt.py \\"),
                             (stacks["rl230"], "python /opt/MindSpeed-LLM/convert_ckpt.py \\")):
        p = build(shipped, job, stack, chips=8)
        steps = [f for f in p.files if f.endswith(("-convert.sh", "-export.sh"))]
        assert len(steps) == 2, sorted(p.files)
        for step in steps:
            assert converter in p.files[step].splitlines(), (stack["extras"]["mindspeed_llm"]["set"], step)
    # a labelled image keeps the MindSpeed-LLM checkout where its label says
    labels = {"set": "mindspeed-rl-2.2.0", "kind": "mindspeed-rl", "checkouts": {"mindspeed_llm": {"path": "/srv/llm"}}}
    p = plan.build(shipped, job, card="800T-A2", chips_per_node=8, stack=stacks["rl220"], image="img", framework=labels)
    assert "python /srv/llm/convert_ckpt.py \\" in p.files["steps/01-convert.sh"].splitlines()


def test_mindspeed_rl_2_1_and_2_2_get_their_releases_vllm_variables(shipped, stacks, sft_job):
    """MindSpeed-RL 2.1.0/2.2.0/2.3.0's vllm_engine.py reads os.environ['VLLM_USE_V1'] unguarded and their
    configs/envs/runtime_env.yaml sets it with VLLM_VERSION and VLLM_DP_SIZE (job_release_env); 2.0.0 has none of
    them. The job file's env still wins."""
    from tests.jobs.conftest import EXAMPLES

    text = (EXAMPLES / "seed000-grpo-qwen25-7b.yaml").read_text()
    for key, want in (("rl", None), ("rl210", "1"), ("rl220", "1"), ("rl230", "1")):
        p = build(shipped, sft_job(text), stacks[key], chips=8)
        assert p.env.get("VLLM_USE_V1") == want, key
        runtime = p.files["configs/runtime_env.yaml"]
        assert ('VLLM_USE_V1: "1"' in runtime) == (want is not None) and ('VLLM_VERSION: "0.9.1"' in runtime) == (want is not None)
    p = build(shipped, sft_job(text + "  VLLM_DP_SIZE: '2'\n"), stacks["rl220"], chips=8)
    assert p.env["VLLM_DP_SIZE"] == "2" and p.env["VLLM_USE_V1"] == "1"


def test_a_release_variable_that_is_no_plain_name_is_refused(stacks, sft_job, tmp_path):
    """job_release_env names go into run.sh's export lines: an overlay's `X;rm -rf /` stops the plan in one line."""
    from provisioner.errors import ProvisionError
    from provisioner.matrix import loader
    from tests.jobs.conftest import EXAMPLES

    overlay = tmp_path / "o.yaml"
    overlay.write_text("job_release_env:\n  - id: bad\n    framework: mindspeed-rl\n    releases: ['2.2.0']\n"
                       "    env: {'X;rm -rf /': '1'}\n    source: test\n")
    m = loader.load([str(overlay)], use_cache=False)
    with pytest.raises(ProvisionError, match=r"job_release_env bad: 'X;rm -rf /' is not a plain variable name"):
        build(m, sft_job((EXAMPLES / "seed000-grpo-qwen25-7b.yaml").read_text()), stacks["rl220"], chips=8)


def test_an_example_gap_note_stays_one_line(sft_job, tmp_path):
    """The note goes into `# note:` lines of the k8s manifests: an overlay's multi-line `kept` cannot break out."""
    from provisioner.matrix import loader
    from tests.jobs.conftest import _resolve

    overlay = tmp_path / "o.yaml"
    overlay.write_text("job_example_gaps:\n  - id: mindspeed-llm/qwen2-below-72b\n"
                       "    kept: \"72B only\\nkind: Secret\"\n")
    m = loader.load([str(overlay)], use_cache=False)
    p = build(m, sft_job(), _resolve(card="800T-A2", cann="9.0.0", extras=("mindspeed-llm",)))
    [gap] = [n for n in p.notes if "ships no example" in n]
    assert "\n" not in gap and "(72B only kind: Secret;" in gap
