"""The hostile files and trees the fuzz suite draws from, made once per session under a sandbox.

Files: a good overlay and overlays that bomb (aliases), nest deep, remove rows, carry a newline into a base
image or a profile, are not UTF-8, or are not files at all (a FIFO, a /dev/zero link, a directory, a huge
sparse file, a missing path); stack JSON good, deep and with injected fields; a PEM bundle; a rank table.
Trees: fixture hosts (simulated device nodes) and copies whose version.info / hccn.conf / hostname are a
FIFO, a /dev/zero link, huge, or carry injected lines.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.matrix import loader
from tests.fuzz.harness import CANARY, Sandbox
from tests.helpers import hosts

REPO = Path(__file__).resolve().parents[2]
HUGE = 96 << 20


@dataclass
class Pool:
    sandbox: Sandbox
    files: dict[str, str] = field(default_factory=dict)
    overlays: list[str] = field(default_factory=list)
    stacks: list[str] = field(default_factory=list)
    roots: list[tuple[str, str]] = field(default_factory=list)  # (root, dev root)
    cards: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)


def _write(path: Path, data: str | bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return str(path)


def _odd_files(d: Path) -> dict[str, str]:
    """Paths that are not small regular UTF-8 files."""
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    fifo = d / "fifo"
    os.mkfifo(fifo)
    out["fifo"] = str(fifo)
    (d / "devzero").symlink_to("/dev/zero")
    out["devzero"] = str(d / "devzero")
    huge = d / "huge"
    with open(huge, "wb") as fh:
        fh.truncate(HUGE)  # sparse: costs no disk
    out["huge"] = str(huge)
    (d / "adir").mkdir()
    out["dir"] = str(d / "adir")
    out["missing"] = str(d / "missing" / "x.yaml")
    out["nonutf8"] = _write(d / "nonutf8.yaml", b"cards:\n  - id: \xff\xfe\x80\n")
    out["binary"] = _write(d / "binary.bin", bytes(range(256)) * 8)
    out["empty"] = _write(d / "empty", "")
    return out


def build(base: Path) -> Pool:
    work, outside = base / "work", base / "outside"
    work.mkdir(parents=True)
    outside.mkdir()
    (work / "link").symlink_to(outside)
    pool = Pool(Sandbox(base, work, outside))
    m = loader.load()
    pool.cards = [r["id"] for r in m.rows("cards")]
    pool.versions = sorted({r["version"] for r in m.rows("cann")} | {r["wheel"] for r in m.rows("torch_npu")}
                           | {r["torch"] for r in m.rows("torch_npu")} | {"3.10", "3.11", "24.1.rc3", "25.0.rc1.1"})
    pool.profiles = [r["name"] for r in m.rows("profiles")]

    files = base / "files"
    pool.files.update(_odd_files(files / "odd"))
    ov = files / "overlays"
    pool.overlays.append(_write(ov / "ok.yaml", (REPO / "tests/fixtures/overlays/torch-2.13.yaml").read_text()))
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    pool.overlays.append(_write(ov / "bomb.yaml", "\n".join(bomb) + "\ncards: *a8\n"))
    pool.overlays.append(_write(ov / "deep-flow.yaml", "cards: " + "[" * 20000 + "]" * 20000 + "\n"))
    pool.overlays.append(_write(ov / "deep-block.yaml", "".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "v\n"))
    for section in ("device_settings", "device_mounts", "registries", "cards", "chips", "cann", "device_families",
                    "torch_wheels", "images", "profiles", "apex"):
        rows = m.rows(section)
        if not rows:
            continue
        from provisioner.matrix import schema

        key = schema.SECTIONS[section].key
        pool.overlays.append(_write(ov / f"remove-{section}.yaml",
                                    json.dumps({section: [{key: rows[0][key], "remove": True}]})))
    reg = m.rows("registries")[0]
    pool.overlays.append(_write(ov / "inject-registry.yaml", json.dumps(
        {"registries": [{"id": reg["id"], "image": f"quay.io/x\nRUN {CANARY}", "source": reg["source"]}]})))
    prof = m.rows("profiles")[0]
    pool.overlays.append(_write(ov / "inject-profile.yaml", json.dumps(
        {"profiles": [{"name": prof["name"], "constraints": {**prof["constraints"], "base_image": f"x\nRUN {CANARY}"}}]})))
    pool.overlays.append(_write(ov / "inject-card.yaml", json.dumps(
        {"cards": [{**{k: v for k, v in m.rows("cards")[0].items() if not k.startswith("_")},
                    "name": f"card\nRUN {CANARY}"}]})))
    pool.overlays.append(_write(ov / "unicode-digits.yaml", json.dumps(
        {"cann": [{"version": "8.١.RC1", "source": "x"}]})))
    pool.overlays.append(_write(ov / "dir" / "a.yaml", "cards: []\n"))
    pool.overlays.append(str(ov / "dir"))
    pool.overlays.extend(pool.files.values())

    st = files / "stacks"
    from provisioner.resolve.cached import stack_for

    _, stack = stack_for([], {"card": "800T-A2", "arch": "x86_64", "profile": None, **{k: None for k in (
        "task", "framework", "cann", "torch", "torch_npu", "mindspore", "python", "os", "driver", "dtype",
        "base_image", "registry")}, "extras": ()})
    pool.stacks.append(_write(st / "ok.json", json.dumps(stack)))
    pool.stacks.append(_write(st / "resolve-doc.json", json.dumps({"schema": "provision.resolve/1", "stack": stack})))
    for where, value in ((("id",), f"1\nRUN {CANARY}"), (("cann", "version"), f"8.0\nRUN {CANARY}"),
                         (("chip", "family"), {"x": 1}), (("cann",), "x"), (("base_image", "ref"), f"a\n{CANARY}"),
                         (("driver", "summary"), f"x\n{CANARY}"), (("card", "id"), 5), (("python",), ["3"])):
        doc = json.loads(json.dumps(stack))
        node = doc
        for k in where[:-1]:
            node = node[k]
        node[where[-1]] = value
        pool.stacks.append(_write(st / f"bad-{'-'.join(where)}.json", json.dumps(doc)))
    pool.stacks.append(_write(st / "deep.json", "[" * 100000 + "]" * 100000))
    pool.stacks.append(_write(st / "deep-obj.json", '{"cann":' * 5000 + "1" + "}" * 5000))
    pool.stacks.extend(pool.files.values())
    pool.files["ca"] = _write(files / "ca.pem", (REPO / "tests/fixtures/ca/canary.pem").read_text())

    roots = base / "roots"
    made = {}
    for name in ("seed-800ta2", "plan-800ta2-8", "plan-300ta2-4"):
        h = hosts.materialize(name, roots / name)
        made[name] = h
        pool.roots.append((str(h.root), str(h.dev_root)))
    src = made["plan-800ta2-8"]
    for kind in ("fifo", "devzero", "huge", "inject"):
        h = hosts.materialize("plan-800ta2-8", roots / f"hostile-{kind}")
        for rel in ("usr/local/Ascend/driver/version.info", "etc/hccn.conf", "etc/hostname", "etc/os-release"):
            target = h.root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() or target.is_symlink():
                target.unlink()
            if kind == "fifo":
                os.mkfifo(target)
            elif kind == "devzero":
                target.symlink_to("/dev/zero")
            elif kind == "huge":
                with open(target, "wb") as fh:
                    fh.truncate(HUGE)
            else:
                target.write_text(f"Version=24.1.0\nRUN {CANARY}\naddress_0=1.2.3.4\nRUN {CANARY}\n"
                                  f"address_١=10.0.0.1\naddress_1=fe80::1%a\n{CANARY}\nPRETTY_NAME=\"x\n{CANARY}\"\n")
        pool.roots.append((str(h.root), str(h.dev_root)))
    del src
    pool.roots.append((pool.files["binary"], pool.files["binary"]))
    pool.roots.append((pool.files["missing"], pool.files["missing"]))
    shutil.copy(REPO / "tests/fixtures/ca/canary.pem", files / "ca-copy.pem")
    return pool
