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


_CHECKOUT_REPOS = {"mindspeed_llm": "Ascend/MindSpeed-LLM", "mindspeed_rl": "Ascend/MindSpeed-RL"}


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
    name = {"mindspeed-llm": "MindSpeed-LLM", "mindspeed-rl": "MindSpeed-RL"}.get(row["framework"], row["framework"])
    if not commit or checkout not in _CHECKOUT_REPOS:
        return None, name
    return f"{_CHECKOUT_REPOS[checkout]}@{commit[:12]}", name


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
