"""A CPU-backed test double of torch_npu (see tests/fakes/README.md).

Import-time contract (torch_npu/__init__.py): torch_npu needs CANN's libraries (libhccl.so, libascendcl.so)
and fails to import without them; once imported it registers the `npu` device with torch, `torch.npu`, the
`hccl` process-group backend and the Tensor/Module `.npu()` methods.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

for _var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
    if os.environ.get(_var) and Path(os.environ[_var]).is_dir():
        break
else:
    # What the real wheel's import raises on a machine without CANN (its _C extension links libhccl.so).
    raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")


def _wheel_version() -> str:
    """The version of the installed torch_npu distribution when a test gave the double one (a
    torch_npu-X.dist-info on the path, as the real wheel installs: npu_fake.env(torch_npu=...)), else torch's."""
    import importlib.metadata

    try:
        return importlib.metadata.version("torch_npu")
    except importlib.metadata.PackageNotFoundError:
        return torch.__version__.split("+")[0]


__version__ = _wheel_version()
FAKE = True  # lets a test tell the double from the real wheel

from . import npu  # noqa: E402
from ._attention import STATS as _ATTENTION_STATS  # noqa: E402,F401
from ._attention import npu_fusion_attention  # noqa: E402,F401

npu._register()

from . import _distributed, optim  # noqa: E402,F401

_distributed.register()


def get_npu_format(tensor) -> int:
    """torch_npu.get_npu_format: ACL_FORMAT_ND (2) for every tensor the double makes."""
    return 2


def npu_format_cast(tensor, acl_format):
    return tensor


def get_storage_size(tensor) -> int:
    return tensor.untyped_storage().nbytes() // tensor.element_size()
