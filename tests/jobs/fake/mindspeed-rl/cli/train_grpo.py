"""Fake MindSpeed-RL cli/train_grpo.py: reads the Hydra config as the real one does (--config-path,
--config-name, key=value overrides), connects to the running Ray cluster with the config's runtime_env
(ray.init, as the real main() does), checks the cluster has the NPUs the actor needs, runs one task per
node on a STRICT_SPREAD placement group of NPU bundles, then "trains", saving Megatron checkpoints every
save_interval iterations, resuming from actor_config.load when finetune is false."""

import os
import socket
import sys
import time

import ray
import yaml
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]  # fakelib.py: next to the script or one level up
from fakelib import flag, need, record, write  # noqa: E402

argv = sys.argv[1:]
cfg_dir, name = flag(argv, "--config-path"), flag(argv, "--config-name")
with open(os.path.join(cfg_dir, f"{name}.yaml"), encoding="utf-8") as fh:
    cfg = yaml.safe_load(fh)
model_name = cfg["defaults"][0]["model"][0]
with open(os.path.join(cfg_dir, "model", f"{model_name}.yaml"), encoding="utf-8") as fh:
    model = yaml.safe_load(fh)[model_name]
for item in argv:
    if "=" in item and not item.startswith("-") and not item.startswith("hydra."):
        key, value = item.split("=", 1)
        section, field = key.split(".", 1)
        cfg[section][field] = {"true": True, "false": False}.get(value, value)
mt, actor, rl = cfg["megatron_training"], cfg["actor_config"], cfg["rl_config"]
need(mt["data_path"] + "_packed_input_ids_document.idx", "dataset")
need(os.path.join(actor["load"], "latest_checkpointed_iteration.txt"), "weights to load")
start = 0
if not actor["finetune"]:
    with open(os.path.join(actor["load"], "latest_checkpointed_iteration.txt"), encoding="utf-8") as fh:
        start = int(fh.read())

with open(rl["runtime_env_path"], encoding="utf-8") as fh:
    runtime_env = yaml.safe_load(fh)
ray.init(runtime_env=runtime_env)
npus = int(ray.cluster_resources().get("NPU", 0))
want = rl["actor_resource"]["num_npus"]
assert npus == want, f"the cluster has {npus} NPUs, the actor needs {want}"
nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("NPU")]
per_node = int(nodes[0]["Resources"]["NPU"])
pg = placement_group([{"NPU": per_node}] * len(nodes), strategy="STRICT_SPREAD")
ray.get(pg.ready(), timeout=120)


@ray.remote
def probe():
    return {"host": socket.gethostname(), "ip": ray.util.get_node_ip_address(),
            "davinci": sorted(d for d in os.listdir("/dev") if d.startswith("davinci") and d[7:].isdigit()),
            "HCCL_CONNECT_TIMEOUT": os.environ.get("HCCL_CONNECT_TIMEOUT"),
            "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": os.environ.get("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES")}


seen = ray.get([probe.options(num_cpus=0, resources={"NPU": per_node},
                              scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote()
                for i in range(len(nodes))])
record("train_grpo.py", start=start, npus=npus, nodes=seen, model=model, config=cfg)
iters, every = mt["train_iters"], mt["save_interval"]
save = actor["save"]
step_s = float(os.environ.get("FAKE_STEP_SECONDS", "0"))
for it in range(start + 1, iters + 1):
    time.sleep(step_s)
    print(f"iteration {it}/{iters} | reward {it / iters:.3f}", flush=True)
    if it % every == 0:
        write(os.path.join(save, f"iter_{it:07d}", "mp_rank_00", "model_optim_rng.pt"), f"{it}\n")
        write(os.path.join(save, "latest_checkpointed_iteration.txt"), str(it))
print("training process successfully!", flush=True)
