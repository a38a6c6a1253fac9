"""CANN <-> Ascend HDK ranges of the 8.5/9.x releases as the release notes state them (matrices/cann.yaml).

The 9.1.0 and 9.1.1 release notes (hicann/release-management) mark CANN 8.5.2 and 9.0.X compatible with HDK
25.0.X, 25.2.X, 25.3.X, 25.5.X, 26.0.RC1/25.7.RC1, 26.1.0/26.1.1, and 9.1.X with all of them but 25.0.X; the
MindIE 26.0.0 note gives CANN 8.5.1 the HDK versions of 8.5.0.
"""

from __future__ import annotations

import pytest

from provisioner.cli import main
from provisioner.errors import ResolveError
from provisioner.matrix import loader
from provisioner.resolve import driverfit, request
from provisioner.resolve import solve as resolve


@pytest.fixture(scope="module")
def m():
    return loader.load(use_cache=False)


def fit(m, driver: str, cann: str) -> str:
    return driverfit.driver_fit(driver, m.cann(cann), m)


@pytest.mark.parametrize("cann", ["8.5.2", "9.0.0", "9.0.1"])
@pytest.mark.parametrize("driver", ["25.0.RC1", "25.2.0", "25.3.0", "25.3.RC1", "25.5.0", "26.1.1"])
def test_cann_8_5_2_and_9_0_run_on_the_25_x_drivers(m, cann, driver):
    assert fit(m, driver, cann) == "ok"


@pytest.mark.parametrize("cann", ["9.1.0", "9.1.1"])
def test_cann_9_1_excludes_hdk_25_0_only(m, cann):
    assert fit(m, "25.0.RC1", cann) == "no"
    assert driverfit.driver_verdict("25.0.RC1", m.cann(cann), m)[0] == "too-old"
    for driver in ("25.2.0", "25.3.0", "25.5.1", "26.0.RC1", "25.7.RC1", "26.1.0", "26.1.1"):
        assert fit(m, driver, cann) == "ok", driver


def test_cann_9_1_1_is_known_with_its_paired_hdk(m):
    row = m.cann("9.1.1")
    assert row["status"] == "release" and row["hdk_paired"] == ["26.1.1"]
    assert "RELMGMT-911" in row["source"]


def test_cann_8_5_1_takes_the_hdk_of_8_5_0(m):
    # it had no list and inherited 8.5.0's as a floor only: a 25.5.0 host was "unknown", not "ok"
    a, b = m.cann("8.5.1"), m.cann("8.5.0")
    assert a["hdk_paired"] == b["hdk_paired"] and a["hdk_compatible"] == b["hdk_compatible"]
    assert "MINDIE-2600" in a["source"]
    assert fit(m, "25.5.0", "8.5.1") == "ok" and fit(m, "25.0.RC1", "8.5.1") == "ok"


def test_cann_9_0_0_resolves_on_a_25_3_0_host(m):
    s = resolve.resolve(m, request.build(m, card="800T-A2", driver="25.3.0", cann="9.0.0", torch="2.7.1",
                                         arch="aarch64"))
    assert s["cann"]["version"] == "9.0.0" and s["driver"]["fit"] == "ok"


def test_cann_9_1_0_on_a_25_0_host_is_refused_naming_the_range(m):
    with pytest.raises(ResolveError) as err:
        resolve.resolve(m, request.build(m, card="800T-A2", driver="25.0.RC1", cann="9.1.0", arch="aarch64"))
    assert "25.2.*" in err.value.reasons[0] and "25.0.*" not in err.value.reasons[0]


def test_the_must_show_command(capsys):
    code = main(["resolve", "--card", "800T-A2", "--driver", "25.3.0", "--cann", "9.0.0", "--torch", "2.7.1",
                 "--arch", "aarch64", "--for-host", "none"])
    out = capsys.readouterr().out
    assert code == 0 and "driver 25.3.0: ok" in out
