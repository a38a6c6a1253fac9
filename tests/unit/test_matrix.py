import json
import subprocess
import sys
import textwrap

import pytest

from provisioner.errors import MatrixError
from provisioner.matrix import loader


@pytest.fixture(scope="module")
def shipped():
    return loader.load(use_cache=False)


def overlay(tmp_path, text, name="overlay.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_every_shipped_row_cites_a_source(shipped):
    ids = {s["id"] for s in shipped.rows("sources")}
    for section, rows in shipped.data.items():
        if section in ("policy", "sources"):
            continue
        for row in rows:
            assert row.get("source"), f"{row['_at']}: no source"
            for src in row["source"]:
                assert src in ids or " " in src or "/" in src, f"{row['_at']}: {src!r}"


def test_card_lookup_is_case_insensitive_with_aliases(shipped):
    assert shipped.lookup_card("300t-a2")[0]["id"] == "300T-A2"
    assert shipped.lookup_card("ATLAS-800T-A2")[0]["id"] == "800T-A2"
    card, family, alias = shipped.lookup_card("910b")
    assert (card["id"], family["id"], alias) == ("800T-A2", "910b", "910b")
    assert shipped.lookup_card("800-9010")[1]["bf16"] is False
    for cid in ["300T-A2", "800T-A2", "900-A2", "800T-A3", "300I", "300I-Pro", "300I-Duo", "800-9000", "300T", "350"]:
        assert shipped.lookup_card(cid)[0]["id"] == cid


def test_unknown_card_suggests(shipped):
    with pytest.raises(MatrixError, match="did you mean"):
        shipped.lookup_card("300T-A")


def test_plain_910b_name_is_first_generation(shipped):
    gen1 = next(c for c in shipped.rows("chips") if "910B" in c["npu_smi_names"])
    assert gen1["family"] == "910" and gen1["hbm_mb"] == 32768
    a2 = {c["model"] for c in shipped.rows("chips") if c["family"] == "910b"}
    assert {"910B1", "910B2", "910B3", "910B4"} <= a2


def test_images_parse_and_cover_each_chip(shipped):
    assert [i["python"] for i in shipped.images("8.5.1", "910b") if not i["devel"]]
    chips = {i["chip"] for row in shipped.rows("images") for i in shipped.images(row["cann"])}
    assert chips == {"910b", "a3", "910", "310p", "950"}


def test_overlay_adds_and_overrides_rows(tmp_path):
    path = overlay(tmp_path, """
        torch_npu:
          - wheel: "2.13.0"
            cann: 9.1.0
            source: local test of the 0day build
        cards:
          - id: my-box
            name: Lab box
            family: 910b
            form: server
            chips_per_server: 4
            source: our lab inventory
    """)
    m = loader.load([path], use_cache=False)
    row = m.torch_npu("2.13.0")
    assert row["cann"] == "9.1.0" and row["on_pypi"] is True  # untouched fields survive
    assert row["_at"].endswith("overlay.yaml:3")
    assert m.lookup_card("MY-BOX")[0]["chips_per_server"] == 4


def test_overlay_from_environment_and_remove(tmp_path, monkeypatch):
    path = overlay(tmp_path, """
        cards:
          - id: 900-9000
            remove: true
    """)
    monkeypatch.setenv("PROVISION_MATRIX", str(path))
    with pytest.raises(MatrixError, match="unknown card"):
        loader.load(use_cache=False).lookup_card("900-9000")


def test_removing_a_referenced_row_is_caught(tmp_path):
    path = overlay(tmp_path, "cards:\n  - id: \"350\"\n    remove: true\n")
    with pytest.raises(MatrixError, match="unknown reference card '350'"):
        loader.load([path], use_cache=False)


def test_overlay_directory(tmp_path):
    d = tmp_path / "more"
    d.mkdir()
    overlay(d, "extras:\n  - name: flash\n    requirement: flash-thing==1.0\n    source: example\n", "a.yaml")
    m = loader.load([d], use_cache=False)
    assert any(r["name"] == "flash" for r in m.rows("extras"))


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("cann:\n  - version: 8.9.RC9\n    status: release\n    hdk_pairde: [1.0]\n    source: x y\n", 4, "unknown key 'hdk_pairde'"),
        ("cann:\n  - version: 8.9.RC9\n    status: release\n    hdk_paired: [24.1.RC1, not-a-version]\n    source: x y\n", 4, "bad version string"),
        ("torch:\n  - version: 2.13.0\n    python: 3.10\n    source: x y\n", 3, "YAML reads 3.1 as a number (put it in quotes)"),
        ("torch_npu:\n  - wheel: 9.9.9\n    torch: 9.9.9\n    on_pypi: true\n    cann: 8.9.RC9\n    source: x y\n", 5, "names CANN '8.9.RC9', which is not in the matrix"),
        ("cards:\n  - {id: a1, name: A, family: 910b, form: card, source: s t}\n  - {id: A1, name: B, family: 910b, form: card, source: s t}\n", 3, "duplicate cards id"),
        ("cards:\n  - {id: a1, name: A, family: 910c, form: card, source: s t}\n", 2, "unknown family '910c'"),
        ("gpus:\n  - {id: x}\n", 1, "unknown section 'gpus'"),
        ("extras:\n  - {name: x, requirement: y, source: NOPE-ID}\n", 2, "unknown source id 'NOPE-ID'"),
        ("cann:\n  - version: 8.9.RC9\n    status: release\n", 2, "lacks source"),
        ("cann: [\n", 2, "invalid YAML"),
    ],
)
def test_bad_overlays_name_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(MatrixError) as err:
        loader.load([path], use_cache=False)
    text = str(err.value)
    assert text.startswith(f"{path}:{line}:") or text.startswith(f"bad.yaml:{line}:"), text
    assert message in text


def test_missing_overlay_is_one_line_error(tmp_path):
    with pytest.raises(MatrixError, match="not found"):
        loader.load([tmp_path / "nope.yaml"])


def test_cli_reports_matrix_error_with_exit_2(tmp_path):
    path = overlay(tmp_path, "cann:\n  - version: 1\n    status: release\n    source: s t\n")
    proc = subprocess.run([sys.executable, "-m", "provisioner.cli", "matrix", "--matrix", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and ":2:" in proc.stderr and "Traceback" not in proc.stderr


def test_warm_cache_skips_yaml(tmp_path):
    env = {"PROVISION_CACHE": str(tmp_path / "c"), "PATH": "/usr/bin:/bin"}
    code = "import sys; from provisioner.matrix import loader; loader.load(); print(json.dumps('yaml' in sys.modules))"
    code = "import json; " + code
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(first.stdout) is True and json.loads(second.stdout) is False


def test_200t_a2_box16_takes_16_processors_in_two_rings():
    """issue 26.3: MindCluster 7.3.0 dl_affinity_0016 (Box16 allocation constraints: 1-8 in one HCCS ring, 10/12/14
    over two rings, 16 = the whole node) confirms chips_per_server 16; it was unconfirmed."""
    m = loader.load(use_cache=False)
    [card] = [c for c in m.rows("cards") if c["id"] == "200T-A2"]
    assert card["chips_per_server"] == 16 and "chips_per_server" not in card.get("unconfirmed", [])
    assert "MINDCLUSTER-BOX16" in card["source"]
