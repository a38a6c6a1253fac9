"""Job kinds, frameworks, model types and data formats (matrices/jobs.yaml), and the one rule that says
whether an image's stack carries a job's framework.

The stack is what `provision build` writes into the image label (provisioner.image.labels): a MindSpeed-LLM
or MindSpeed-RL set shows up as `extras.mindspeed_llm` (its `kind` says which), a MindSpore Transformers set
(`--with mindformers`) as `extras.mindformers`. A framework image also carries the labels
org.provision.framework.* (set, kind, locked environment, checkouts with the path each is kept at), read by
image.labels.framework_from_labels: when present, their kind must agree and their checkout path is where the
job's scripts run from. `stack_carries` and `checkout` are the only places that read these for jobs.
"""

from __future__ import annotations

from provisioner.errors import ProvisionError
from provisioner.jobs.spec import ENV_NAME


def kind(matrix, name: str, where: str) -> dict:
    rows = {r["id"]: r for r in matrix.rows("job_kinds")}
    if name not in rows:
        raise ProvisionError(f"{where}: unknown job kind {name!r} (known: {', '.join(sorted(rows))})")
    return rows[name]


def framework(matrix, kind_row: dict) -> dict:
    return next(r for r in matrix.rows("job_frameworks") if r["id"] == kind_row["framework"])


def model_row(matrix, model_type: str, where: str) -> dict:
    rows = {r["model_type"]: r for r in matrix.rows("job_models")}
    if model_type not in rows:
        raise ProvisionError(f"{where}: model_type {model_type!r} has no framework mapping in matrices/jobs.yaml"
                             f" job_models (known: {', '.join(sorted(rows))})")
    return rows[model_type]


def data_handler(matrix, framework_id: str, fmt: str, where: str) -> dict:
    rows = {r["id"]: r for r in matrix.rows("job_data_formats")}
    key = f"{framework_id}/{fmt}"
    if key not in rows:
        known = sorted(k.split("/", 1)[1] for k in rows if k.startswith(framework_id + "/"))
        raise ProvisionError(f"{where}: data format {fmt!r} has no {framework_id} handler (known: {', '.join(known)})")
    return rows[key]


def scripts(matrix, framework_id: str, model_type: str, release: str | None,
            labels: dict | None = None) -> tuple[dict, str | None]:
    """The framework scripts a job runs for this release and model type (matrices/jobs.yaml job_scripts):
    (paths by name, None), or ({}, why not) when the framework has rows for the model but none lists the
    release. A framework without rows for the model has no per-release scripts: ({}, None). Paths are relative
    to the job's checkout, or absolute in the image's checkout of the row's `checkout_repo` (where the image's
    `labels` or its recipe keep it: `checkout`)."""
    rows = [r for r in matrix.rows("job_scripts") if r["framework"] == framework_id and r["model_type"] == model_type]
    if not rows:
        return {}, None
    for row in rows:
        if release is not None and release in row["releases"]:
            bad = sorted(k for k, v in row["scripts"].items() if not _safe_relpath(v))
            if bad:
                return {}, f"job_scripts {row['id']}: {', '.join(bad)} is not a plain relative path"
            if row.get("checkout_repo"):
                owner = next((f for f in matrix.rows("job_frameworks") if f.get("checkout_repo") == row["checkout_repo"]),
                             None)
                if owner is None:
                    return {}, f"job_scripts {row['id']}: no framework keeps a {row['checkout_repo']} checkout"
                where = checkout(owner, None, labels)
                return {k: f"{where.rstrip('/')}/{v}" for k, v in row["scripts"].items()}, None
            return dict(row["scripts"]), None
    known = sorted({v for r in rows for v in r["releases"]}, key=_version_key)
    named = f"release {release}" if release else "no release"
    return {}, (f"its stack names {named}, and the paths of its {model_type} data scripts are known for releases"
                f" {', '.join(known)} only (matrices/jobs.yaml job_scripts)")


def flags(matrix, fw: dict, stack: dict | None) -> frozenset[str]:
    """The flags of matrices/jobs.yaml job_flags this stack's framework release takes: a row applies when the
    field `component` of the stack's extra is a release at or above the row's `since` (a commit, or nothing,
    is no release: the flag is left out, as a framework that does not declare it would refuse it)."""
    import re

    extra = ((stack or {}).get("extras") or {}).get(fw["stack_extra"]) or {}
    out = set()
    for row in matrix.rows("job_flags"):
        value = str(extra.get(row["component"]) or "")
        if row["framework"] == fw["id"] and re.fullmatch(r"[0-9]+(\.[0-9]+)*", value) \
                and _version_key(value) >= _version_key(str(row["since"])):
            out.add(row["flag"])
    return frozenset(out)


def release_env(matrix, fw: dict, release: str | None) -> dict[str, str]:
    """The launch variables the framework release's own runtime environment sets (matrices/jobs.yaml
    job_release_env); none for a stack that names no release."""
    if not release:
        return {}
    out: dict[str, str] = {}
    for row in matrix.rows("job_release_env") if "job_release_env" in matrix.data else []:
        if row["framework"] == fw["id"] and release in row["releases"]:
            for name, value in row["env"].items():
                # names reach run.sh's export lines as they are (values are quoted): held to a plain name
                if not ENV_NAME.match(str(name)) or "\n" in str(value):
                    raise ProvisionError(f"{row.get('_at', 'job_release_env')}: job_release_env {row['id']}:"
                                         f" {str(name)!r} is not a plain variable name with a one-line value")
                out[str(name)] = str(value)
    return out


def example_gap(matrix, fw: dict, model_type: str, release: str | None, params: int) -> str | None:
    """A note when the framework release no longer ships the upstream examples for a model of this type and size
    (matrices/jobs.yaml job_example_gaps), else None. A stack that names no release (a commit) gets none."""
    import re

    if not release or not re.fullmatch(r"[0-9]+(\.[0-9]+)*", release):
        return None
    for row in matrix.rows("job_example_gaps") if "job_example_gaps" in matrix.data else []:
        if row["framework"] == fw["id"] and row["model_type"] == model_type \
                and _version_key(release) >= _version_key(str(row["since"])) and params < row["below_billions"] * 1e9:
            kept = " ".join(str(row["kept"]).split())  # one line: notes become `# note:` lines of manifests
            return (f"{fw['name']} {release} ships no example for a {params / 1e9:.1f}B {model_type} model"
                    f" ({kept}; since {row['since']}, matrices/jobs.yaml job_example_gaps {row['id']}):"
                    " the job's flags are provision's own, checked against the framework's arguments")
    return None


def _version_key(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in text.split("."))


def _safe_relpath(path: str) -> bool:
    import re

    return re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*", path) is not None


def memory_constant(matrix, ident: str) -> dict:
    return next(r for r in matrix.rows("job_memory") if r["id"] == ident)


def stack_carries(stack: dict | None, fw: dict, labels: dict | None = None) -> str | None:
    """None when the stack carries framework `fw`, else why not (one clause, for the refusal line).

    `labels`: the image's framework labels ({set, kind, env, checkouts}), when it has them."""
    if not stack:
        return "the image has no provision stack label, so nothing says it carries " + fw["name"]
    if stack.get("framework") != fw["stack_framework"]:
        return f"its stack is a {stack.get('framework') or 'unknown'} stack, {fw['name']} needs {fw['stack_framework']}"
    extra = (stack.get("extras") or {}).get(fw["stack_extra"])
    if not isinstance(extra, dict):
        return f"its stack has no {fw['name']}"
    kinds = fw.get("extra_kinds") or [fw["id"]]
    kind = extra.get("kind") or fw["stack_extra"]  # a mindformers set names no kind: its key is its kind
    if kind not in kinds:
        return f"its stack's framework set is {extra.get('set') or kind}, not {fw['name']}"
    if labels and labels.get("kind") and labels["kind"] not in kinds:
        return f"its framework label names {labels.get('set')} ({labels['kind']}), not {fw['name']}"
    return None


def build_hint(fw: dict, card: str) -> str:
    return fw["build"].format(card=card)


def _safe_path(path: str) -> bool:
    """An absolute path of plain characters: label text goes into job scripts only when it is one."""
    import re

    return re.fullmatch(r"(/[A-Za-z0-9._-]+)+", path) is not None and "/../" not in path + "/"


def release(stack: dict | None, fw: dict) -> str | None:
    """The framework release the stack names (e.g. MindSpeed-LLM 2.3.0), for notes and job.json."""
    extra = ((stack or {}).get("extras") or {}).get(fw["stack_extra"]) or {}
    value = extra.get("release") or extra.get("version")
    return str(value) if value else None


def checkout(fw: dict, override: str | None = None, labels: dict | None = None) -> str:
    """Where the framework's scripts are inside the image: the job file's framework_dir, else the path the
    image's checkouts label gives, else the recipe's clone directory (images/<recipe>.yaml repos.<repo>.dir),
    else the matrix default."""
    if override:
        return override
    kept = ((labels or {}).get("checkouts") or {}).get(fw.get("checkout_repo") or "")
    if isinstance(kept, dict) and isinstance(kept.get("path"), str) and _safe_path(kept["path"]):
        return kept["path"]
    if fw.get("checkout_repo"):
        try:
            from provisioner.image import recipes

            recipe = recipes.load(fw["recipe"])
            found = (recipe.repos.get(fw["checkout_repo"]) or {}).get("dir")
            if found:
                return found
        except ProvisionError:
            pass
    return fw["checkout"]
