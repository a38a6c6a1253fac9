"""What an image sets up for the NPU software around torch: the C++ ABI NNAL/ATB is sourced with, and
DeepSpeed's CPU Adam compiled at build time (`--with deepspeed`)."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.helpers.engine import build_args, provision

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ABI = "import torch; print(int(torch.compiled_with_cxx11_abi()))"


def test_torch_abi_recorded_for_atb(session_image, run_in_image):
    code, out, err = run_in_image(session_image, ["bash", "-c", f"cat /etc/provision/torch-cxx11-abi; python -c '{ABI}'"])
    assert code == 0, err
    recorded, actual = out.split()
    assert recorded == actual and recorded in ("0", "1")


def test_entrypoint_sources_atb_with_that_abi(session_image, run_in_image):
    """A stand-in CANN 9 layout: ATB's set_env.sh gets --cxx_abi=<recorded> and not the command's arguments."""
    script = (
        "mkdir -p /usr/local/Ascend/ascend-toolkit /usr/local/Ascend/cann-9.0.1/share/info/ascendnpu-ir/bin "
        "/usr/local/Ascend/nnal/atb && "
        "echo 'export ASCEND_TOOLKIT_HOME=/usr/local/Ascend/cann-9.0.1' > /usr/local/Ascend/ascend-toolkit/set_env.sh && "
        "echo 'export BISHENG_IR=on' > /usr/local/Ascend/cann-9.0.1/share/info/ascendnpu-ir/bin/set_env.sh && "
        "echo 'export ATB_ARGS=\"$*\"' > /usr/local/Ascend/nnal/atb/set_env.sh && "
        "env -u PROVISION_CANN_ENV -u TORCH_DEVICE_BACKEND_AUTOLOAD "
        "/usr/local/bin/provision-entrypoint bash -c 'echo $BISHENG_IR $ATB_ARGS' x --not-for-atb")
    code, out, err = run_in_image(session_image, ["bash", "-c", script])
    assert code == 0, err
    code2, abi, _ = run_in_image(session_image, ["cat", "/etc/provision/torch-cxx11-abi"])
    assert out.split() == ["on", f"--cxx_abi={abi.strip()}"]


CPU_ADAM = """
import json, torch
from deepspeed.git_version_info import accelerator_name, installed_ops
from deepspeed.ops.adam import DeepSpeedCPUAdam
p = torch.nn.Parameter(torch.ones(8))
opt = DeepSpeedCPUAdam([p], lr=0.1)
p.grad = torch.ones(8)
opt.step()
print(json.dumps({"accelerator": accelerator_name, "cpu_adam": installed_ops.get("cpu_adam"),
                  "shm_comm": installed_ops.get("deepspeed_shm_comm"), "stepped": float(p.detach()[0]) < 1.0}))
"""
# A CPU rehearsal of ZeRO-2 (CPU Adam offload) over two workers, through the self-test's train-steps, which
# runs the trainer's DeepSpeed engine: every DeepSpeed TorchBackend on the CPU loads deepspeed_shm_comm.
ZERO2 = ("python -m torch.distributed.run --standalone --nproc-per-node 2 -m provisioner.train.selftest --json"
         " strategy=zero2 method=full")


# A second pytorch-recipe build (--with deepspeed): the `full` tier (make test-all); the Dockerfile's op
# pre-build is in the goldens of make test.
@pytest.mark.full
def test_deepspeed_cpu_adam_is_prebuilt(docker_client, base_image, wheelhouse, run_in_image):
    """Built for the CPU accelerator on this CANN-less base; the final image has no compiler, so a JIT build
    at run time could not even start: the step works only with the pre-built op. ZeRO-2 on the CPU needs
    deepspeed_shm_comm too (before, the image had only cpu_adam and the rehearsal failed at its JIT build)."""
    tag = f"provision-test/npu-deepspeed-{uuid.uuid4().hex[:10]}:1"
    proc = provision(*build_args(base_image, wheelhouse, "--with", "deepspeed", "--tag", tag))
    assert proc.returncode == 0, proc.stderr[-6000:]
    try:
        code, out, err = run_in_image(tag, ["bash", "-c", "command -v gcc g++ c++ || echo no-compiler"])
        assert out.strip() == "no-compiler"
        code, out, err = run_in_image(tag, ["python", "-c", CPU_ADAM], env={"DS_ACCELERATOR": "cpu"})
        assert code == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1]) == {"accelerator": "cpu", "cpu_adam": True, "shm_comm": True,
                                                            "stepped": True}
        code, out, err = run_in_image(tag, ["bash", "-c", ZERO2], env={"DS_ACCELERATOR": "cpu"})
        assert code == 0, (out + err)[-4000:]
        steps = {c["id"]: c for c in json.loads(out.strip().splitlines()[-1])["checks"]}["train-steps"]
        assert steps["status"] == "ok" and steps["detail"].startswith("full, fp32, zero2, "), steps
    finally:
        docker_client.images.remove(tag, force=True)
