"""matrices/audit.yaml: the audit's thresholds and lists are data, validated like every matrix row."""

import textwrap

import pytest

from provisioner.errors import MatrixError
from provisioner.matrix import loader


def test_audit_sections_load_with_sources(matrix):
    assert {r["id"]: r["value"] for r in matrix.rows("audit_limits")}["shm_min_mb"] == 2048
    libs = {r["name"]: r for r in matrix.rows("audit_libraries")}
    assert libs["libhccl.so"]["provided_by"] == "cann" and libs["libascend_hal.so"]["provided_by"] == "driver"
    assert "/usr/local/bin/npu-smi" in [r["path"] for r in matrix.rows("audit_runtime_mounts")]
    nodes = {r["family"]: r["nodes"] for r in matrix.rows("audit_device_nodes")}
    assert "devmm_svm" in nodes["910b"] and "devmm_svm" not in nodes["950"]
    families = {f["id"] for f in matrix.rows("families")}
    assert set(nodes) == families
    env = {r["name"]: r for r in matrix.rows("audit_env")}
    assert (env["HCCL_CONNECT_TIMEOUT"]["min"], env["HCCL_CONNECT_TIMEOUT"]["max"]) == (120, 7200)
    for section in ("audit_limits", "audit_device_nodes", "audit_runtime_mounts", "audit_libraries", "audit_env"):
        for row in matrix.rows(section):
            assert row["source"], row["_at"]


def test_bad_audit_row_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""
        audit_libraries:
          - name: libfoo.so
            provided_by: somebody
            dirs: [/x]
            severity: error
            fix: mount it
            source: test
    """))
    with pytest.raises(MatrixError, match=r"bad.yaml:4: .*provided_by must be one of driver, cann, dcmi"):
        loader.load([bad], use_cache=False)


def test_threshold_overlay_changes_the_limit(tmp_path):
    over = tmp_path / "limits.yaml"
    over.write_text("audit_limits:\n  - id: shm_min_mb\n    value: 64\n    source: local policy\n")
    m = loader.load([over], use_cache=False)
    assert {r["id"]: r["value"] for r in m.rows("audit_limits")}["shm_min_mb"] == 64
