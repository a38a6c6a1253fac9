#!/usr/bin/env python3
"""Maintainer tool: rewrite the recorded facts `provision matrix verify` checks offline.

    python scripts/refresh_snapshots.py pypi
        Reads torch-npu, torch and mindspore from the index pip is configured for
        (index URL, proxy, CA bundle: `pip config list` and PIP_* variables), each
        torch-npu wheel's metadata included (PEP 658 file or HTTP ranges of the
        wheel; cached by sha256), and writes matrices/snapshots/pypi.json.
        torch is kept from the oldest torch line the matrix knows.

    python scripts/refresh_snapshots.py images --git-dir DIR [--rev HEAD] [--scan-rev cves]
        DIR is a clone (or bare mirror) of Ascend/cann-container-image. Today's
        tag list is the directory names under cann/ at REV; the earlier tags are
        the ones its security-scan reports name (security/reports/... at
        SCAN_REV). Writes matrices/snapshots/cann-images.json.

    python scripts/refresh_snapshots.py sources --git-dir DIR ID=PATH [ID=PATH ...]
        DIR is a clone of the repository the sources cite (Ascend/pytorch); for
        each source id the commit is read from its `ref` in matrices/sources.yaml
        ("@ <commit>") and PATH's tables are extracted at that commit. Writes
        matrices/snapshots/source-extracts.json (other ids already there stay).

    python scripts/refresh_snapshots.py hdk (--git-dir DIR | --text) ID=PATH [ID=PATH ...]
        The CANN <-> Ascend HDK tables of CANN release notes (hicann/release-management
        <version>/release-notes.md): the version-mapping table (paired HDK) and the
        compatibility table (Y/N per HDK line). With --git-dir, PATH is read at the
        commit of the id's `ref` ("@ <commit>"); with --text, PATH is a local copy of
        that file at that commit (ID=PATH=COPY; a source read elsewhere). Several PATHs of one id
        merge. Writes the `hdk` part of matrices/snapshots/source-extracts.json.

    python scripts/refresh_snapshots.py names --git-dir DIR --repo OWNER/NAME
            [--classes PATH ...] [--files PATH ...] COMMIT [COMMIT ...]
        The names jobs rely on in an upstream repository at pinned commits: the
        classes defined in each --classes file (data handlers) and which --files
        paths exist (job scripts). Writes matrices/snapshots/framework-names.json
        (other repositories and commits already there stay).

    python scripts/refresh_snapshots.py pins --git-dir DIR --repo OWNER/NAME --file PATH
            [--kind mindspeed-llm] COMMIT [COMMIT ...]
        The version table of a framework's release notes (MindSpeed-LLM
        docs/zh/release_notes_llm.md, "MindSpeed LLM软件版本配套表") at each commit:
        per release the CANN, torch, torch_npu, Python and package (triton-ascend)
        versions. `matrix verify` holds the framework sets of that kind and their
        locks to them. Writes matrices/snapshots/release-pins.json (other commits stay;
        a commit read again keeps its hand-written "notes": release -> key -> text).

    python scripts/refresh_snapshots.py env NAME URL COPY [--read TEXT] [--families F,F --after TEXT]
        One launch variable's CANN environment-variable reference page: URL is the page
        (its version is in the path, e.g. canncommercial/850), COPY a local copy of it
        (HTML or markdown). The range, default and the sentence stating them are read
        from COPY (after the first TEXT with --after, for the bounds of --families only);
        a choice variable's values are kept from the entry already there (check them by
        hand). Writes that variable's entry of matrices/snapshots/env-reference.json.
    python scripts/refresh_snapshots.py env NAME --unchecked WHY
        Records that the variable's page was not read (verify reports it unchecked).

Every file is written atomically; review the diff, then run
`provision matrix verify` and fix the matrix rows it reports. `provision matrix
verify --all` warns when a snapshot is older than 90 days.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from provisioner.matrix import loader, pypi, snapshot  # noqa: E402
from provisioner.matrix.loader import IMAGE_TAG  # noqa: E402
from provisioner.versions import V, VersionError  # noqa: E402

TAG = re.compile(r"^(?P<cann>\d+\.\d+\.[0-9A-Za-z]+(?:\.[A-Za-z]+\d+)?(?:-beta\.\d+)?)-(?P<rest>[0-9a-z]+-[a-z]+\d+\.\d+-py\d+\.\d+(?:-devel)?)$")


def git(git_dir: str, *args: str) -> str:
    proc = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def dump(path: str, obj) -> None:
    snapshot.write_atomic(path, json.dumps(obj, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {path}")


def cmd_pypi(args) -> None:
    settings = pypi.pip_settings()
    if args.index_url:
        settings = pypi.PipSettings(**{**settings.__dict__, "index_url": args.index_url.rstrip("/")})
    print(f"reading {settings.describe()}", file=sys.stderr)
    m = loader.load(use_cache=False)
    oldest = min((V(r["version"]) for r in m.rows("torch")), key=lambda v: v.key)

    def keep(project, version):
        if project != "torch":
            return True
        try:
            v = V(version)
        except VersionError:
            return False
        return v.is_final and v.minor() >= oldest.minor()

    facts = snapshot.read_index(pypi.Index(settings), keep=keep, progress=lambda s: print(s, file=sys.stderr))
    snapshot.write_atomic(snapshot.snapshot_path("pypi.json"), snapshot.index_json(facts))
    print(f"wrote {snapshot.snapshot_path('pypi.json')} ({facts.stats})")


def _commit(git_dir: str, rev: str) -> tuple[str, str]:
    out = git(git_dir, "log", "-1", "--format=%H %cs", rev).split()
    return out[0], out[1]


def cmd_images(args) -> None:
    sha, day = _commit(args.git_dir, args.rev)
    listed = sorted(n for n in git(args.git_dir, "ls-tree", "--name-only", f"{sha}:cann").split()
                    if TAG.match(n) and IMAGE_TAG.match(TAG.match(n)["rest"]))
    scan_sha, scan_day = _commit(args.git_dir, args.scan_rev)
    reports = git(args.git_dir, "ls-tree", "-r", "--name-only", scan_sha, "--", "security/reports").split()
    scanned = sorted({Path(p).stem for p in reports
                      if re.search(r"/(ascend|ascendai)/cann/", p) and TAG.match(Path(p).stem)})
    dump(snapshot.snapshot_path("cann-images.json"), {
        "schema": "provision.image-tags/1",
        "listed": {"source": f"github Ascend/cann-container-image @ {sha[:12]} ({day}): directory names under cann/",
                   "tags": listed},
        "scanned": {"source": f"github Ascend/cann-container-image branch {args.scan_rev} @ {scan_sha[:12]}"
                              f" ({scan_day}): security/reports/<registry>/<repo>/<tag>.md",
                    "tags": scanned},
    })


def _load(name: str, schema: str) -> dict:
    path = snapshot.snapshot_path(name)
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"schema": schema, "sources": {}}


def _cited_items(items: list[str]) -> list[tuple[str, str, str]]:
    """(source id, PATH, the commit its ref names) for each ID=PATH argument; exits on one that is not."""
    refs = {r["id"]: r["ref"] for r in loader.load(use_cache=False).rows("sources")}
    out = []
    for item in items:
        ident, _, file = item.partition("=")
        if ident not in refs or not file:
            sys.exit(f"{item}: expected ID=PATH with an id from matrices/sources.yaml")
        m_commit = re.search(r"@ ?([0-9a-f]{7,40})", refs[ident])
        if not m_commit:
            sys.exit(f"{ident}: its ref names no commit ('@ <commit>'): {refs[ident]}")
        out.append((ident, file, m_commit.group(1)))
    return out


def cmd_sources(args) -> None:
    current = _load("source-extracts.json", "provision.source-extracts/1")
    for ident, file, commit in _cited_items(args.items):
        sha, day = _commit(args.git_dir, commit)
        tables = snapshot.extract_tables(git(args.git_dir, "show", f"{sha}:{file}"))
        current["sources"][ident] = {"read": f"{file} @ {sha[:12]} ({day})", **tables}
        print(f"{ident}: {len(tables['pairs'])} pairings, {len(tables['python'])} Python ranges")
    current["updated"] = datetime.date.today().isoformat()
    dump(snapshot.snapshot_path("source-extracts.json"), current)


def cmd_hdk(args) -> None:
    current = _load("source-extracts.json", "provision.source-extracts/1")
    merged: dict = {}
    for ident, file, commit in _cited_items(args.items):
        if args.text:
            file, _, local = file.partition("=")
            if not local:
                sys.exit(f"{ident}={file}: with --text, expected ID=PATH=LOCAL_COPY")
            text, where = Path(local).read_text(encoding="utf-8"), f"{file} @ {commit[:12]} (a copy)"
        else:
            sha, day = _commit(args.git_dir, commit)
            text, where = git(args.git_dir, "show", f"{sha}:{file}"), f"{file} @ {sha[:12]} ({day})"
        tables = snapshot.extract_hdk(text)
        if not tables["paired"] and not tables["compatible"]:
            sys.exit(f"{ident}: {file} has no CANN/HDK table")
        got = merged.setdefault(ident, {"read": [], "paired": {}, "compatible": {}})
        got["read"].append(where)
        got["paired"].update(tables["paired"])
        got["compatible"].update(tables["compatible"])
        print(f"{ident}: {len(tables['paired'])} paired, {len(tables['compatible'])} compatibility rows")
    for ident, got in merged.items():
        current["sources"].setdefault(ident, {})["hdk"] = {**got, "read": "; ".join(got["read"])}
    current["updated"] = datetime.date.today().isoformat()
    dump(snapshot.snapshot_path("source-extracts.json"), current)


def cmd_names(args) -> None:
    current = _load("framework-names.json", "provision.framework-names/1")
    for rev in args.commits:
        sha, day = _commit(args.git_dir, rev)
        classes: list[str] = []
        for path in args.classes:
            text = git(args.git_dir, "show", f"{sha}:{path}")
            classes += re.findall(r"^class ([A-Za-z_][A-Za-z0-9_]*)", text, flags=re.M)
        tree = set(git(args.git_dir, "ls-tree", "-r", "--name-only", sha).split())
        files = sorted(p for p in args.files if p in tree)
        current["sources"][f"{args.repo}@{sha[:12]}"] = {
            "read": f"github {args.repo} @ {sha[:12]} ({day}): " + ", ".join([*args.classes, *args.files]),
            "classes": sorted(set(classes)), "files": files}
        print(f"{args.repo}@{sha[:12]}: {len(set(classes))} classes, {len(files)}/{len(args.files)} files")
    current["updated"] = datetime.date.today().isoformat()
    dump(snapshot.snapshot_path("framework-names.json"), current)


def cmd_pins(args) -> None:
    current = _load("release-pins.json", "provision.release-pins/1")
    for rev in args.commits:
        sha, day = _commit(args.git_dir, rev)
        rows = snapshot.extract_release_pins(git(args.git_dir, "show", f"{sha}:{args.file}"))
        if not rows:
            sys.exit(f"{args.repo}@{sha[:12]}: {args.file} has no release version table")
        key = f"{args.repo}@{sha[:12]}"
        notes = (current["sources"].get(key) or {}).get("notes")  # kept by hand: re-reading keeps them
        current["sources"][key] = {
            "read": f"github {args.repo} @ {sha[:12]} ({day}): {args.file}", "kind": args.kind, "rows": rows,
            **({"notes": notes} if notes else {})}
        print(f"{args.repo}@{sha[:12]}: {len(rows)} releases ({', '.join(rows)})")
    current["updated"] = datetime.date.today().isoformat()
    dump(snapshot.snapshot_path("release-pins.json"), current)


def cmd_env(args) -> None:
    current = _load("env-reference.json", "provision.env-reference/1")
    names = {r["name"]: r for r in loader.load(use_cache=False).rows("audit_env")}
    if args.name not in names:
        sys.exit(f"{args.name}: not an audit_env row of matrices/audit.yaml")
    variables = current.setdefault("variables", {})
    if args.unchecked:
        variables[args.name] = {"page": None, "unchecked": args.unchecked}
    else:
        if not (args.url and args.copy):
            sys.exit("give URL and COPY (or --unchecked WHY)")
        text = Path(args.copy).read_text(encoding="utf-8")
        if args.after:
            at = text.find(args.after)
            if at < 0:
                sys.exit(f"{args.copy}: no {args.after!r}")
            text = text[at:]
        found = snapshot.extract_env(text)
        if not found:
            sys.exit(f"{args.copy}: no range or default found; record it by hand")
        m = re.search(r"/(canncommercial|CANNCommunityEdition)/([0-9A-Za-z]+)/", args.url)
        read = args.read or (f"{m.group(1)}/{m.group(2)} {Path(args.url).stem}" if m else args.url)
        entry = dict(variables.get(args.name) or {})
        entry.pop("unchecked", None)
        entry.update(page=args.url, read=read, kind=names[args.name]["kind"])
        if args.families:
            group = {"families": args.families.split(","), **{k: found[k] for k in ("min", "max", "default", "quote")
                                                              if k in found}}
            ranges = [g for g in entry.get("ranges", []) if g["families"] != group["families"]]
            entry["ranges"] = [*ranges, group]
        else:
            entry.update(found)
        variables[args.name] = entry
    print(f"{args.name}: {variables[args.name]}")
    current["updated"] = datetime.date.today().isoformat()
    dump(snapshot.snapshot_path("env-reference.json"), current)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pypi")
    p.add_argument("--index-url", help="read this index instead of pip's (a mirror of PyPI)")
    p.set_defaults(run=cmd_pypi)
    p = sub.add_parser("images")
    p.add_argument("--git-dir", required=True)
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--scan-rev", default="cves")
    p.set_defaults(run=cmd_images)
    p = sub.add_parser("sources")
    p.add_argument("--git-dir", required=True)
    p.add_argument("items", nargs="+", metavar="ID=PATH")
    p.set_defaults(run=cmd_sources)
    p = sub.add_parser("hdk")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--git-dir")
    src.add_argument("--text", action="store_true", help="each PATH is a local copy of the file")
    p.add_argument("items", nargs="+", metavar="ID=PATH")
    p.set_defaults(run=cmd_hdk)
    p = sub.add_parser("names")
    p.add_argument("--git-dir", required=True)
    p.add_argument("--repo", required=True, help="owner/name, as the matrix cites it")
    p.add_argument("--classes", action="append", default=[], metavar="PATH")
    p.add_argument("--files", action="append", default=[], metavar="PATH")
    p.add_argument("commits", nargs="+", metavar="COMMIT")
    p.set_defaults(run=cmd_names)
    p = sub.add_parser("pins")
    p.add_argument("--git-dir", required=True)
    p.add_argument("--repo", required=True, help="owner/name, as the matrix cites it")
    p.add_argument("--file", required=True, metavar="PATH")
    p.add_argument("--kind", default="mindspeed-llm", help="the llm_bundles kind the table speaks of")
    p.add_argument("commits", nargs="+", metavar="COMMIT")
    p.set_defaults(run=cmd_pins)
    p = sub.add_parser("env")
    p.add_argument("name")
    p.add_argument("url", nargs="?")
    p.add_argument("copy", nargs="?")
    p.add_argument("--read", help="how to name the page's version (default: from the URL)")
    p.add_argument("--families", help="comma-separated chip family ids these bounds apply to")
    p.add_argument("--after", help="read from the first occurrence of this text (a product's paragraph)")
    p.add_argument("--unchecked", metavar="WHY")
    p.set_defaults(run=cmd_env)
    args = ap.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
