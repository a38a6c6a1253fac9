"""Property tests: random and truncated npu-smi / version.info text never raises; bad input becomes a finding."""

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner import npusmi
from provisioner.host import audit
from provisioner.host import probe as host

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "npu-smi").glob("*.txt"))
SAMPLE_TEXT = {p.name: p.read_text() for p in SAMPLES}
TOOLKIT = (Path(__file__).resolve().parents[1] / "fixtures/hosts/seed-800ta2/tree/usr/local/Ascend/ascend-toolkit/"
           "8.2.RC1/aarch64-linux/ascend_toolkit_install.info").read_text()
# CI runs a fixed, reproducible set of examples (a red CI must be reproducible);
# PROVISION_EXPLORE=N runs N fresh random examples per test to hunt for new cases.
_EXPLORE = int(os.environ.get("PROVISION_EXPLORE", "0"))
SETTINGS = settings(max_examples=_EXPLORE or 150, derandomize=not _EXPLORE, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

NPU_SMI_IDS = {"npu-smi-unparsed", "npu-smi-partly-unparsed", "npu-smi-failed"}


def _check_info(r: dict) -> None:
    assert set(r) == {"version", "npu_smi_version", "second_id", "has_hbm", "chips", "processes", "idle_npus",
                      "warnings", "error"}
    assert all(isinstance(c["npu"], int) for c in r["chips"])
    # Something is always said: chips, an idle-table line, a warning or an error.
    assert r["chips"] or r["idle_npus"] or r["warnings"] or r["error"]


@SETTINGS
@given(st.text())
def test_random_text(text):
    _check_info(npusmi.parse_info(text))
    m = npusmi.parse_mapping(text)
    assert isinstance(m["rows"], list) and (m["rows"] or m["warnings"])


@SETTINGS
@given(st.sampled_from(sorted(SAMPLE_TEXT)), st.data())
def test_truncated_samples(name, data):
    text = SAMPLE_TEXT[name]
    cut = data.draw(st.integers(0, len(text)))
    full = npusmi.parse_info(text) if not npusmi.is_mapping(text) else None
    r = npusmi.parse_info(text[:cut])
    _check_info(r)
    if full is not None:
        assert len(r["chips"]) <= len(full["chips"])
    npusmi.parse_mapping(text[:cut])


@SETTINGS
@given(st.sampled_from(sorted(SAMPLE_TEXT)), st.data())
def test_mutated_lines(name, data):
    lines = SAMPLE_TEXT[name].splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        junk = data.draw(st.one_of(st.text(max_size=120), st.from_regex(r"\|[ 0-9A-Za-z./:x-]{0,40}\|[ 0-9A-Za-z./:-]{0,40}\|.{0,60}", fullmatch=True)))
        lines[i] = junk
    _check_info(npusmi.parse_info("\n".join(lines)))


VERSIONISH = st.one_of(
    st.from_regex(r"[0-9]{1,3}(\.[0-9a-zA-Z]{1,5}){0,5}", fullmatch=True),
    st.text(max_size=30),
    st.sampled_from(["25.0.rc1.1", "23.0.7", "7.7.0.1.231", "8.2.RC1", "", "25" + "a" * 40 + "!", "1..2", "v"]),
)
RANGE = st.one_of(
    st.builds(lambda a, b: f"[{a},{b}]", VERSIONISH, VERSIONISH),
    st.builds(lambda a, b: f"[{a},{b}.],[{b},{b}.]", VERSIONISH, VERSIONISH),
    st.text(max_size=40),
)


def kv_text(keys, values):
    return st.lists(st.tuples(st.sampled_from(keys), values), max_size=8).map(
        lambda items: "".join(f"{k}={v}\n" for k, v in items))


DRIVER = st.one_of(kv_text(["Version", "package_version", "compatible_version_fw", "Innerversion"],
                           st.one_of(VERSIONISH, RANGE)), st.text(max_size=200))
FIRMWARE = st.one_of(kv_text(["Version", "package_version", "compatible_version_drv", "firmware_version"],
                             st.one_of(VERSIONISH, RANGE)), st.text(max_size=200))
TOOLKIT_TEXT = st.one_of(st.just(TOOLKIT), kv_text(["version", "arch", "package_name"], VERSIONISH), st.text(max_size=80))


def _audit_tree(matrix, driver: str, firmware: str, toolkit: str, smi: str | None = None) -> tuple[dict, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, text in (("usr/local/Ascend/driver/version.info", driver),
                          ("usr/local/Ascend/firmware/version.info", firmware),
                          ("usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux/ascend_toolkit_install.info", toolkit),
                          ("smi.txt", smi)):
            if text is not None:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text, errors="surrogateescape")
        (root / "dev").mkdir()
        rep = host.probe(root, root / "dev", npu_smi_outputs=[root / "smi.txt"] if smi is not None else [],
                         run_npu_smi=False, engine="skip", chip_rows=matrix.rows("chips"),
                         runtime_mounts=audit.runtime_mounts(matrix))
        return rep, audit.audit(rep, matrix, audit.AuditOptions(card="800T-A2", mode="runtime"))


def _valid(text) -> bool:
    from provisioner.versions import V, VersionError

    try:
        V(text)
        return True
    except (VersionError, TypeError):
        return False


@SETTINGS
@given(DRIVER, FIRMWARE, TOOLKIT_TEXT)
def test_random_version_files_become_findings(matrix, driver, firmware, toolkit):
    rep, doc = _audit_tree(matrix, driver, firmware, toolkit)
    assert rep["probe_errors"] == []
    found = {f["id"] for f in doc["findings"]}
    assert "check-crashed" not in found, doc["findings"]
    version = (rep["driver"]["info"] or {}).get("Version")
    if not version:
        assert "driver-version-unknown" in found
    elif not _valid(version):
        assert "driver-version-unparsable" in found, found
    fw = (rep["firmware"]["info"] or {}).get("Version")
    if not fw:
        assert "firmware-version-unknown" in found
    elif not _valid(fw):
        assert "firmware-version-unparsable" in found, found
    rng = rep["driver"]["compatible_firmware"]
    if version and fw and _valid(version) and _valid(fw) and rng and not all(_valid(x) for x in rng):
        assert "firmware-version-unparsable" in found, found


@SETTINGS
@given(st.one_of(st.text(max_size=400), st.sampled_from(sorted(SAMPLE_TEXT)).flatmap(
    lambda n: st.integers(0, len(SAMPLE_TEXT[n])).map(lambda cut: SAMPLE_TEXT[n][:cut]))))
def test_bad_npu_smi_text_becomes_a_finding(matrix, text):
    rep, doc = _audit_tree(matrix, "Version=25.0.rc1.1\n", "Version=7.7.0.1.231\n", TOOLKIT, smi=text)
    found = {f["id"] for f in doc["findings"]}
    assert "check-crashed" not in found, doc["findings"]
    info = rep["npu_smi"]["info"]
    if npusmi.is_mapping(text):
        return
    if info["warnings"] or info["error"]:
        assert found & NPU_SMI_IDS, (info, found)
