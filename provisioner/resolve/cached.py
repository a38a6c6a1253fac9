"""The resolver's front door: load the matrix, build the request, resolve through the on-disk cache.

`cached_resolve` memoises `solve.resolve` by (matrix + code fingerprint,
request), so a warm `provision resolve` imports neither the solver nor the
matrix schema. Refusals are cached too and raised again as ResolveError. The
fingerprint (matrix/loader.py) covers the matrix files and the code of every
package the resolution depends on.
"""

from __future__ import annotations

import json

from provisioner.errors import ResolveError
from provisioner.matrix import cache
from provisioner.resolve.request import build

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.matrix.loader import Matrix
    from provisioner.resolve.request import Request
    from provisioner.shapes import Stack


def cached_resolve(matrix: Matrix, req: Request) -> Stack:
    """`solve.resolve(matrix, req)`, answered from the cache when the same inputs were resolved before."""
    from provisioner.version import requires_python

    # provision's own Requires-Python limits every image's Python (candidates.py): part of the inputs.
    key = cache.fingerprint(matrix.fingerprint, json.dumps(req.as_dict(), sort_keys=True, default=list),
                            requires_python())
    name = f"resolve-{key}.json"
    hit: dict | None = cache.read(name) if matrix.fingerprint else None
    if not _usable(hit):  # absent, or not what this code writes: a miss, and rewritten below
        from provisioner.resolve import solve

        try:
            hit = {"status": "ok", "stack": solve.resolve(matrix, req)}
        except ResolveError as exc:
            hit = {"status": "refused", "message": str(exc), "reasons": exc.reasons, "alternatives": exc.alternatives}
        if matrix.fingerprint:
            cache.write(name, hit)
    assert hit is not None
    if hit["status"] == "ok":
        return hit["stack"]
    raise ResolveError(hit["message"], reasons=hit["reasons"], alternatives=hit["alternatives"])


def _usable(hit) -> bool:
    if not isinstance(hit, dict):
        return False
    if hit.get("status") == "ok":
        return isinstance(hit.get("stack"), dict)
    return (hit.get("status") == "refused" and isinstance(hit.get("message"), str)
            and isinstance(hit.get("reasons"), list) and isinstance(hit.get("alternatives"), list))


def stack_for(overlays, options: dict) -> tuple[Matrix, Stack]:
    """Load the matrix (with overlays), build the request and resolve it (cached).

    Returns (matrix, stack); a refusal raises ResolveError, bad input ProvisionError.
    """
    from provisioner.matrix import loader

    m = loader.load(list(overlays or ()))
    opts = dict(options)
    profile = opts.pop("profile", None)
    return m, cached_resolve(m, build(m, profile=profile, **opts))
