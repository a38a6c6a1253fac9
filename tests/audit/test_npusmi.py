"""npu-smi parser on every real sample: chips, names, memory, health, processes; odd text never raises."""

from pathlib import Path

import pytest

from provisioner import npusmi

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "npu-smi"
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "samples"
HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"


def text(name: str) -> str:
    return (SAMPLES / name).read_text()


# sample -> (version, second id column, has HBM column, chips, {names}, memory per chip, healths, idle NPUs)
INFO = {
    "npu-smi_info_910B2_x8_A2_npu-smi-24.1.0.3_with_cann_toolkit_info.txt":
        ("24.1.0.3", None, True, 8, {"910B2"}, [65536] * 8, ["OK"] * 8, list(range(8))),
    "npu-smi_info_A3_Ascend910_8npu_x2chip_npu-smi-25.2.1_with_cann_toolkit_info.txt":
        ("25.2.1", "Phy-ID", True, 16, {"Ascend910"}, [65536] * 16, ["OK"] * 16, list(range(8))),
    "npu-smi_info_310P3_x8_Atlas300IPro-like_npu-smi-24.1.0.1_with_cann_toolkit_info.txt":
        ("24.1.0.1", "Device", False, 8, {"310P3"}, [21527] * 8, ["OK"] * 8,
         [0, 32, 96, 32768, 32800, 32832, 32864, 32896]),
    "npu-smi_info_Atlas800-9010_first-gen-910_npu-smi-24.1.RC2_names-redacted.txt":
        ("24.1.RC2", None, True, 8, {"xxx"}, [32768] * 8, ["OK", "OK", "OK", "Warning", "OK", "OK", "OK", "Warning"], []),
    "npu-smi_info_Ascend310_Atlas300I-model3000_4chips_npu-smi-21.0.4.txt":
        ("21.0.4.B030", "Device", False, 4, {"310"}, [8192] * 4, ["OK"] * 4, []),
    "firmware_version.info_7.7.0.1.231_driver_25.0.rc1.1_toolkit_opp_kernel_version.info_UNATTRIBUTED.txt":
        ("25.0.rc1.1", None, True, 1, {"910B4"}, [65536], ["OK"], []),
}
MAPPING = {
    "npu-smi_info_-m_Ascend310_Atlas300I_MiniD.txt": [(6, 0, 0, "MiniD"), (6, 1, 1, "MiniD"), (6, 2, 2, "MiniD"),
                                                      (6, 3, 3, "MiniD"), (6, 4, None, "Mcu")],
    "npu-smi_info_-m_official_doc_template_and_phyid-remap.txt": [(0, 0, 0, "Ascend xxx"), (0, 1, None, "Mcu")],
}


def test_every_sample_is_covered():
    names = {p.name for p in SAMPLES.glob("*.txt")}
    assert names == set(INFO) | set(MAPPING)


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference notes not next to the repository")
def test_copies_match_the_reference():
    for p in sorted(REFERENCE.glob("npu-smi*")):
        assert (SAMPLES / p.name).read_bytes() == p.read_bytes(), p.name


@pytest.mark.parametrize("name", sorted(INFO))
def test_info_samples(name):
    version, second, hbm, count, names, memory, health, idle = INFO[name]
    r = npusmi.parse_info(text(name))
    assert r["version"] == version
    assert r["second_id"] == second
    assert r["has_hbm"] is hbm
    assert len(r["chips"]) == count
    assert {c["name"] for c in r["chips"]} == names
    assert [npusmi.chip_memory_mb(c) for c in r["chips"]] == memory
    assert [c["health"] for c in r["chips"]] == health
    assert r["idle_npus"] == idle
    assert r["warnings"] == [] and r["error"] is None
    assert r["processes"] == []


def test_a2_row_values():
    c = npusmi.parse_info(text("npu-smi_info_910B2_x8_A2_npu-smi-24.1.0.3_with_cann_toolkit_info.txt"))["chips"][0]
    assert c == {
        "npu": 0, "chip": 0, "phy_id": None, "name": "910B2", "health": "OK", "power_w": 100.2, "temp_c": 36.0,
        "hugepages_used": 0, "hugepages_total": 0, "bus_id": "0000:C1:00.0", "aicore_pct": 0.0,
        "memory_used_mb": 0, "memory_total_mb": 0, "hbm_used_mb": 3407, "hbm_total_mb": 65536,
    }


def test_a3_chips_and_phy_ids():
    r = npusmi.parse_info(text("npu-smi_info_A3_Ascend910_8npu_x2chip_npu-smi-25.2.1_with_cann_toolkit_info.txt"))
    assert [(c["npu"], c["chip"], c["phy_id"]) for c in r["chips"][:4]] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    assert [c["phy_id"] for c in r["chips"]] == list(range(16))
    assert r["chips"][1]["power_w"] is None  # "-" on the second die of a module


def test_310_and_310p_have_no_hbm_but_memory():
    r = npusmi.parse_info(text("npu-smi_info_Ascend310_Atlas300I-model3000_4chips_npu-smi-21.0.4.txt"))
    assert [(c["npu"], c["chip"], c["phy_id"], c["memory_used_mb"]) for c in r["chips"]] == [
        (6, 0, 3, 2703), (6, 1, 4, 2867), (6, 2, 5, 2867), (6, 3, 6, 2867)]
    assert all(c["hbm_total_mb"] is None for c in r["chips"])
    p = npusmi.parse_info(text("npu-smi_info_310P3_x8_Atlas300IPro-like_npu-smi-24.1.0.1_with_cann_toolkit_info.txt"))
    assert [c["npu"] for c in p["chips"]] == [0, 32, 96, 32768, 32800, 32832, 32864, 32896]
    assert p["chips"][0]["power_w"] is None  # NA


def test_first_gen_910_ddr_and_hbm():
    r = npusmi.parse_info(text("npu-smi_info_Atlas800-9010_first-gen-910_npu-smi-24.1.RC2_names-redacted.txt"))
    c = r["chips"][3]
    assert (c["health"], c["memory_total_mb"], c["hbm_total_mb"], c["power_w"]) == ("Warning", 15039, 32768, 206.9)


def test_masked_bus_id():
    r = npusmi.parse_info(text(
        "firmware_version.info_7.7.0.1.231_driver_25.0.rc1.1_toolkit_opp_kernel_version.info_UNATTRIBUTED.txt"))
    assert r["chips"][0]["bus_id"] == "xxxx:xx:xx.x" and r["chips"][0]["aicore_pct"] == 5.0


@pytest.mark.parametrize("name", sorted(MAPPING))
def test_mapping_samples(name):
    assert npusmi.is_mapping(text(name))
    r = npusmi.parse_mapping(text(name))
    assert [(x["npu"], x["chip"], x["logic_id"], x["name"]) for x in r["rows"]] == MAPPING[name]
    assert [x["mcu"] for x in r["rows"]] == [x[2] is None for x in MAPPING[name]]
    assert r["warnings"] == []


def test_process_rows():
    busy = (HOSTS / "broken-busy-chip/tree/usr/local/share/npu-smi-fixture/info.txt").read_text()
    r = npusmi.parse_info(busy)
    assert r["processes"] == [{"npu": 3, "chip": 0, "pid": 1203463, "name": "python3.10", "memory_mb": 58210}]
    assert r["idle_npus"] == [0, 1, 2, 4, 5, 6, 7]


def test_device_in_use_error_text():
    r = npusmi.parse_info("dcmi module initialize failed. ret is -8005\n")
    assert r["chips"] == [] and r["error"] == "dcmi module initialize failed. ret is -8005"


@pytest.mark.parametrize("junk", ["", "hello world\n", "| a | b |\n| c |\n", "+----+\n|    |\n+----+\n", "\x00\xff" * 10])
def test_unknown_text_warns_without_raising(junk):
    r = npusmi.parse_info(junk)
    assert r["chips"] == []
    assert r["warnings"] or r["error"]


def test_truncated_table_keeps_what_was_read():
    full = text("npu-smi_info_910B2_x8_A2_npu-smi-24.1.0.3_with_cann_toolkit_info.txt").splitlines()
    cut = next(i for i, line in enumerate(full) if "| 3     910B2" in line) + 1
    r = npusmi.parse_info("\n".join(full[:cut]))
    assert [c["npu"] for c in r["chips"]] == [0, 1, 2, 3]
    assert r["chips"][3]["hbm_total_mb"] is None
    assert any("no second line" in w for w in r["warnings"])


@pytest.mark.parametrize("name, memory, family, model", [
    ("910B2", 65536, "910b", "910B2"),
    ("910B", 32768, "910", "910-gen1"),      # plain 910B: first generation
    ("910ProB", 32768, "910", "910-gen1"),
    ("Ascend 910A", None, "910", "910-gen1"),  # npu-smi info -m spelling
    ("Ascend910", 65536, "a3", "910_93"),
    ("Ascend 910B3", None, "910b", "910B3"),
    ("310P3", 21527, "310p", "310P3"),
    ("310", 8192, "310", "310"),
    ("MiniD", 8192, "310", "310"),
    ("xxx", 32768, None, None),
])
def test_classify(matrix, name, memory, family, model):
    cls = npusmi.classify(name, memory, matrix.rows("chips"))
    assert (cls["family"], cls["model"]) == (family, model)


def test_classify_notes_unexpected_memory(matrix):
    cls = npusmi.classify("910B4", 65536, matrix.rows("chips"))
    assert cls["family"] == "910b" and "65536 MB" in cls["note"] and "32768" in cls["note"]
    assert npusmi.classify("910B4", 32768, matrix.rows("chips"))["note"] is None


def test_memory_decides_between_rows_with_the_same_name(matrix):
    # An overlay that lists "910B" for an A2 model too (as some tools do): 32 GB stays first-generation.
    rows = [*matrix.rows("chips"), {"model": "910B-A2-guess", "family": "910b", "npu_smi_names": ["910B"], "hbm_mb": 65536}]
    assert npusmi.classify("910B", 32768, rows)["family"] == "910"
    assert npusmi.classify("910B", 65536, rows)["family"] == "910b"
    assert npusmi.classify("910B", None, rows)["family"] == "910"  # without memory: the matrix's first row
