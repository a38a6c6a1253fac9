"""matrices/devices.yaml is complete for every chip family, and the code takes its names from there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from provisioner.devices.plan import MultiNode

PACKAGE = Path(__file__).resolve().parents[2] / "provisioner"
# Every module of the device planner, and the chip-id lists it reads and writes.
LIBRARY = sorted((PACKAGE / "devices").glob("*.py")) + [PACKAGE / "chipids.py"]
DEVICE_TEXT = re.compile(r"/dev/|/usr/local/|/etc/hccn|davinci\w*|devmm_svm|hisi_hdc|dvpp_cmdlist")


def test_every_device_family_has_a_row(shipped):
    rows = {r["id"] for r in shipped.rows("device_families")}
    assert {f["device_family"] for f in shipped.rows("families")} <= rows
    assert rows == {"910", "310P", "310", "310B", "950"}


def test_mount_rows_are_usable(shipped):
    families = {r["id"] for r in shipped.rows("device_families")}
    for row in shipped.rows("device_mounts"):
        assert set(row.get("families", [])) <= families, row["_at"]
        if any("{driver}" in h for h in row["host"]) and row.get("pick", "first") == "first" and len(row["host"]) == 1:
            assert row.get("container"), f"{row['_at']}: a driver-relative mount needs its container path"
        assert all(h.startswith(("/", "{driver}")) for h in row["host"]), row["_at"]


def test_each_family_has_exactly_one_required_driver_mount(shipped):
    for fam in shipped.rows("device_families"):
        rows = [r for r in shipped.rows("device_mounts") if r["set"] == f"driver-{fam['driver_mount']}" and r["need"] == "required"]
        assert len(rows) == 1, fam["id"]


def test_rank_table_rows_name_real_families(shipped):
    assert {r["family"] for r in shipped.rows("rank_tables")} <= {f["id"] for f in shipped.rows("families")}


def test_every_launch_env_row_is_fed_by_an_option(make_plan):
    plan = make_plan(
        "plan-800ta2-8", "800T-A2", "0-7", multi=MultiNode(2, 1, "10.0.0.1", "6000"), hccl_if_ip="10.0.0.2",
        socket_ifname="=eth0", hccl_connect_timeout="1200", hccl_exec_timeout="1800",
    )
    env = {e.name: e.value for e in plan.env}
    assert None not in env.values(), env
    assert (env["MASTER_PORT"], env["HCCL_CONNECT_TIMEOUT"], env["HCCL_EXEC_TIMEOUT"]) == ("6000", "1200", "1800")


def test_no_device_names_or_paths_in_library_code():
    hits = []
    for path in LIBRARY:
        name = path.name
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if DEVICE_TEXT.search(node.value):
                    hits.append(f"{name}:{node.lineno}: {node.value!r}")
    assert not hits, "device names and paths belong in matrices/devices.yaml:\n" + "\n".join(hits)
