"""The claims of `provision matrix verify` beyond the index, image and table checks of verify.py.

Owns three kinds, each against a recorded snapshot (provisioner/matrix/snapshot.py):

* hdk: every CANN row's driver lists against the CANN <-> Ascend HDK tables of
  the CANN release notes (source-extracts.json, ``hdk``): a paired HDK the notes
  name must be listed; an HDK line marked Y for the release (or its ``9.0.X``
  line) must be accepted by the row, one marked N must not. Every release note
  recorded is read, cited by the row or not: a newer note widens older rows.
* job-name: job handler classes (job_data_formats) in the data-handler files,
  and job script paths (job_scripts), at every commit the matrix pins for that
  framework (framework-names.json).
* env: every launch variable (audit_env) against the page of the CANN
  environment-variable reference recorded for it (env-reference.json): a whole
  number's bounds and default (per chip family where the page gives them per
  product line, read through the row's by_family), a choice's values (each one
  documented must be accepted; one the page does not name is a note) and
  default. A variable with no page recorded is `unchecked`, never passing.
* lock-pin: each framework set (llm_bundles) of a kind whose release notes were
  recorded (release-pins.json) against the notes' version table: its CANN,
  torch, torch_npu and Python, and every package version the table names
  (triton-ascend) against the set's locks (framework_envs layers). A package
  the table names and a lock leaves out is a note.
* snapshot: each snapshot's age; older than STALE_DAYS is a note that
  `verify --all` shows (and its CLI warns about).
"""

from __future__ import annotations

import datetime
import re

STALE_DAYS = 90
_FRAMEWORK_REPOS = {"mindspeed-llm": "Ascend/MindSpeed-LLM", "mindspeed-rl": "Ascend/MindSpeed-RL"}
_CHECKOUT_OF = {"mindspeed-llm": "mindspeed_llm", "mindspeed-rl": "mindspeed_rl"}


def _covers(key: str, version: str) -> bool:
    """A table row key ("9.0.X", "8.5.2") covers CANN `version` (final releases only for an X line)."""
    from provisioner.versions import V, VersionError

    if key == version:
        return True
    if not key.upper().endswith(".X"):
        return False
    try:
        v = V(version)
    except VersionError:
        return False
    return v.is_final and version.startswith(key[:-1])


def _representatives(column: str) -> list[str]:
    """HDK versions a column stands for: "25.0.X" -> 25.0.0, "26.0.RC1/25.7.RC1" -> both."""
    return [re.sub(r"\.X$", ".0", part.strip(), flags=re.I) for part in column.split("/") if part.strip()]


def _listed(row: dict, driver: str) -> bool:
    """The row's HDK lists name `driver`: a paired or plain compatible version (or a patch build of one), or
    a compatible spec matching it. The listed part of resolve.driverfit's "ok", which this layer cannot import;
    a driver newer than every listed one is not listed."""
    from provisioner.versions import VersionError, any_match, is_patch_of, parse

    try:
        d = parse(driver)
    except VersionError:
        return False
    specs = list(row.get("hdk_compatible", []))
    plain = [*row.get("hdk_paired", []), *[c for c in specs if not any(ch in c for ch in "*<>=,") and ".." not in c]]
    for item in plain:
        try:
            e = parse(item)
        except VersionError:
            continue
        if d == e or is_patch_of(d, e):
            return True
    return bool(any_match(specs, driver))


def hdk(v) -> None:
    notes = {src: ext["hdk"] for src, ext in v.f.extracts.items() if isinstance(ext.get("hdk"), dict)}
    for row in v.m.rows("cann"):
        version = row["version"]
        for src, tables in sorted(notes.items()):
            cited = "" if src in row.get("source", []) else " (the row does not cite it)"
            listed = [*row.get("hdk_paired", []), *row.get("hdk_compatible", [])]
            for hdk_v in tables.get("paired", {}).get(version, []):
                ok = _listed(row, hdk_v)
                v.add("hdk", f"cann {version}", "hdk_paired", ", ".join(row.get("hdk_paired", [])) or "none",
                      f"{hdk_v} paired", f"{src} ({tables['read']}) pairs CANN {version} with HDK {hdk_v}{cited}",
                      row["_at"], ok=ok)
            for key, columns in tables.get("compatible", {}).items():
                if not _covers(key, version):
                    continue
                for column, yes in columns.items():
                    fits = [_listed(row, h) for h in _representatives(column)]
                    ok = all(fits) if yes else not any(fits)
                    v.add("hdk", f"cann {version}", "hdk_compatible", ", ".join(listed) or "none",
                          f"{column}: {'Y' if yes else 'N'}",
                          f"{src} ({tables['read']}) marks CANN {key} {'compatible' if yes else 'not compatible'}"
                          f" with HDK {column}{cited}", row["_at"], ok=ok)


def _pinned(v, framework: str) -> list[str]:
    """'owner/repo@commit12' of every commit the matrix pins for a framework's checkout."""
    checkout = _CHECKOUT_OF[framework]
    commits = {(b.get("commits") or {}).get(checkout) for b in v.m.rows("llm_bundles")}
    return sorted(f"{_FRAMEWORK_REPOS[framework]}@{c[:12]}" for c in commits if c)


def job_names(v) -> None:
    for row in v.m.rows("job_data_formats"):
        framework = row["id"].split("/", 1)[0]
        if framework not in _FRAMEWORK_REPOS:
            continue  # mindformers: the handler is its scripts, checked as job_scripts
        for key in _pinned(v, framework):
            rec = v.f.names.get(key)
            if rec is None:
                v.add("job-name", f"job_data_formats {row['id']}", "handler", row["handler"], "not recorded",
                      f"framework-names.json has no {key}; run scripts/refresh_snapshots.py names", row["_at"],
                      ok=False)
                continue
            there = row["handler"] in rec["classes"]
            near = [c for c in rec["classes"] if c.endswith("Handler")]
            v.add("job-name", f"job_data_formats {row['id']}", "handler", row["handler"],
                  "defined" if there else "no such class",
                  f"{rec['read']}" + ("" if there else f" defines {', '.join(near)}"), row["_at"], ok=there)
    commits = {r["version"]: r["commit"] for r in v.m.rows("mindformers") if r.get("commit")}
    for row in v.m.rows("job_scripts"):
        for release in row["releases"]:
            where, label = _scripts_repo(v, row, release, commits)
            rec = v.f.names.get(where) if where else None
            for name, path in sorted(row["scripts"].items()):
                if rec is None:
                    v.add("job-name", f"job_scripts {row['id']}", f"scripts.{name}", path, "not recorded",
                          f"no recorded file list for {label} {release} ({where or 'no pinned commit'})",
                          row["_at"], ok=False)
                    continue
                there = path in rec["files"]
                v.add("job-name", f"job_scripts {row['id']}", f"scripts.{name}", path,
                      "present" if there else "absent",
                      f"{label} {release}: {rec['read']}", row["_at"], ok=there)


# The same repositories keyed by the llm_bundles `commits` entry (a job_scripts row's checkout_repo) that holds them.
_CHECKOUT_REPOS = {_CHECKOUT_OF[f]: repo for f, repo in _FRAMEWORK_REPOS.items()}


def _scripts_repo(v, row: dict, release: str, mf_commits: dict) -> tuple[str | None, str]:
    """('owner/repo@commit12' whose file list holds a job_scripts row's paths for a release, the framework's name):
    MindFormers by its pinned commit; a MindSpeed set by the commit its llm_bundles row (of that kind and release)
    pins for the row's checkout_repo, else the framework's own checkout."""
    if row["framework"] == "mindformers":
        commit = mf_commits.get(release)
        return (f"mindspore-lab/mindformers@{commit[:12]}" if commit else None), "MindFormers"
    checkout = row.get("checkout_repo") or _CHECKOUT_OF.get(row["framework"])
    bundle = next((b for b in v.m.rows("llm_bundles")
                   if b.get("kind") == row["framework"] and str(b.get("release")) == release), None)
    commit = ((bundle or {}).get("commits") or {}).get(checkout or "")
    name = next((f["name"] for f in v.m.rows("job_frameworks") if f["id"] == row["framework"]), row["framework"])
    if not commit or checkout not in _CHECKOUT_REPOS:
        return None, name
    return f"{_CHECKOUT_REPOS[checkout]}@{commit[:12]}", name


def _bounds(v, row: dict, family: str | None) -> dict:
    """min/max/default of an audit_env row on chips of `family`, as audit, doctor and the device plan read it."""
    rule = v.m.rule_for_family(row, family)
    return {k: rule.get(k) for k in ("min", "max", "default")}


def _span(b: dict) -> str:
    lo = "-inf" if b.get("min") is None else b["min"]
    hi = "inf" if b.get("max") is None else b["max"]
    return f"[{lo}, {hi}]" + (f" default {b['default']}" if b.get("default") is not None else "")


def env_ranges(v) -> None:
    for row in v.m.rows("audit_env"):
        name, at = row["name"], row["_at"]
        subject = f"audit_env {name}"
        rec = v.f.env_ref.get(name)
        if not rec or not rec.get("page"):
            why = rec.get("unchecked", "no page recorded") if rec else "env-reference.json has no entry for it"
            v.add("env", subject, "range", row["kind"], "unchecked",
                  f"{why}; record its page with scripts/refresh_snapshots.py env", at, unchecked=True)
            continue
        where = f"{rec['read']} ({rec['page']})"
        kind = rec.get("kind", row["kind"])
        if kind != row["kind"]:
            v.add("env", subject, "kind", row["kind"], kind, f"{where} documents a {kind} value: {rec.get('quote', '')}",
                  at, ok=False)
            continue
        if kind == "int":
            groups = rec.get("ranges") or [{"families": [None], **{k: rec.get(k) for k in ("min", "max", "default")}}]
            for g in groups:
                want = {k: g.get(k) for k in ("min", "max", "default")}
                for fam in g["families"]:
                    have = _bounds(v, row, fam)
                    ok = have["min"] == want["min"] and have["max"] == want["max"] and (
                        want["default"] is None or str(have["default"]) == str(want["default"]))
                    on = f" on {fam}" if fam else ""
                    v.add("env", subject, f"range{on}", _span(have), _span(want),
                          f"{where}: {g.get('quote') or rec.get('quote', '')}", at, ok=ok)
        elif kind == "choice":
            documented, accepted = rec.get("values") or [], row.get("values") or []
            missing = [x for x in documented if x not in accepted]
            v.add("env", subject, "values", ", ".join(accepted), ", ".join(documented),
                  f"{where}: {rec.get('quote', '')}" + (f"; the row refuses {', '.join(missing)}" if missing else ""),
                  at, ok=not missing)
            extra = [x for x in accepted if x not in documented]
            if extra:
                v.add("env", subject, "values", ", ".join(extra), "not on the page",
                      f"{where} does not name {', '.join(extra)}", at, note=True)
            if rec.get("default") is not None:
                v.add("env", subject, "default", row.get("default") or "none", rec["default"],
                      f"{where}: {rec.get('quote', '')}", at, ok=str(row.get("default")) == str(rec["default"]))
        else:
            v.add("env", subject, "kind", kind, "documented", f"{where}: {rec.get('quote', '')}", at)


def _locked(env: dict, package: str) -> str | None:
    """The version a framework environment's lock pins `package` to (None: not in the lock)."""
    from packaging.utils import canonicalize_name

    want = canonicalize_name(package)
    for lines in (env.get("layers") or {}).values():
        for line in lines:
            name, _, version = line.partition("==")
            if canonicalize_name(name) == want:
                return version.strip()
    return None


def _pythons(text) -> set[str]:
    """"3.10-3.11" or "3.10" -> the minor versions it covers."""
    from provisioner.versions import PyRange, VersionError

    try:
        r = PyRange(text if "-" in str(text) else f"{text}-{text}")
    except (VersionError, ValueError):
        return set()
    return {f"{r.lo[0]}.{n}" for n in range(r.lo[1], r.hi[1] + 1)} if r.lo[0] == r.hi[0] else set()


def lock_pins(v) -> None:
    from provisioner.versions import V, VersionError

    def same(a, b) -> bool:
        try:
            return V(str(a)).key == V(str(b)).key
        except VersionError:
            return str(a) == str(b)

    envs = v.m.rows("framework_envs")
    for _, rec in sorted(v.f.release_pins.items()):
        for row in v.m.rows("llm_bundles"):
            pins = rec["rows"].get(row.get("release")) if row.get("kind") == rec["kind"] else None
            if not pins:
                continue
            subject, at = f"llm_bundles {row['id']}", row["_at"]
            notes = (rec.get("notes") or {}).get(row.get("release")) or {}
            for key, want in sorted(pins.items()):
                says = f"{rec['read']} pairs {rec['kind']} {row['release']} with {key} {want}"
                if notes.get(key):
                    says += f" ({notes[key]})"
                if key == "cann":
                    have = row.get("cann") or []
                    v.add("lock-pin", subject, "cann", ", ".join(have) or "none", want, says, at,
                          ok=any(same(c, want) for c in have))
                elif key == "torch":
                    have = row.get("torch") or []
                    v.add("lock-pin", subject, "torch", ", ".join(have) or "none", want, says, at,
                          ok=any(same(t, want) for t in have))
                elif key == "torch_npu":
                    have = row.get("torch_npu_product")
                    v.add("lock-pin", subject, "torch_npu_product", have or "none", want, says, at,
                          ok=have is not None and same(have, want))
                elif key == "python":
                    v.add("lock-pin", subject, "python", row.get("python") or "none", want, says, at,
                          ok=want in _pythons(row.get("python")))
                else:
                    for env in (e for e in envs if e.get("set") == row["id"]):
                        got = _locked(env, key)
                        esub = f"framework_envs {env['id']}"
                        if got is None:
                            v.add("lock-pin", esub, key, "not in the lock", want,
                                  f"{says}; the lock leaves it out ({(env.get('notes') or '').strip()[:120]})".rstrip(" ()"),
                                  env["_at"], note=True)
                            continue
                        v.add("lock-pin", esub, key, got, want, says, env["_at"], ok=same(got, want))


def ages(v, today: datetime.date | None = None) -> list[str]:
    """A note per snapshot older than STALE_DAYS; returns the warning lines."""
    today = today or datetime.date.today()
    out = []
    for name, day in sorted(v.f.dates.items()):
        if not day:
            continue
        try:
            taken = datetime.date.fromisoformat(day)
        except ValueError:
            continue
        age = (today - taken).days
        if age > STALE_DAYS:
            line = (f"matrices/snapshots/{name} is {age} days old (read {day}, more than {STALE_DAYS});"
                    " refresh it with scripts/refresh_snapshots.py")
            out.append(line)
            v.add("snapshot", name, "age", f"<= {STALE_DAYS} days", f"{age} days", line, f"matrices/snapshots/{name}",
                  note=True)
    return out
