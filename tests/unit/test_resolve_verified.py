"""Stacks the resolver refused because of wrong matrix flags, found now that `matrix verify` corrected them.

Each test names the request, what the resolver answered before the corrections, and the fact that
changed (recorded in the row's notes with its evidence).

These are facts of the matrix (a wheel, an image); the stacks of the oldest of them have only images whose
Python is below provision's own Requires-Python, so they are checked under `no_floor` (a provision that would
install there), and with the floor they ask for --base-image (tests/unit/test_python_floor.py says why)."""

import pytest

from provisioner import version
from provisioner.errors import ResolveError
from provisioner.matrix import loader
from provisioner.resolve import request
from provisioner.resolve import solve as resolve


@pytest.fixture(scope="module")
def m():
    return loader.load(use_cache=False)


@pytest.fixture
def no_floor(monkeypatch):
    monkeypatch.setattr(version, "_cached_python", "")


def stack(m, **kw):
    kw.setdefault("arch", "aarch64")
    return resolve.resolve(m, request.build(m, **kw))


def unlisted(s) -> bool:
    return any("not in today's cann-container-image list" in w and "--base-image" in w for w in s["warnings"])


@pytest.mark.parametrize("wheel, cann", [("2.2.0", "8.0.RC1"), ("2.2.0.post2", "8.0.RC2"), ("2.1.0.post6", "8.0.RC2"),
                                         ("2.3.1", "8.0.RC2"), ("2.1.0.post3", "8.0.RC1"), ("2.1.0", "7.0.0")])
def test_wheels_with_only_cp38_cp310_are_installable(m, wheel, cann, no_floor):
    # was: "torch_npu X is not on PyPI: it exists only as a release asset ..." (presence read through one
    # Python); and their CANN had no image in today's list
    s = stack(m, card="800T-A2", torch_npu=wheel)
    assert s["torch_npu"]["version"] == wheel and s["torch_npu"]["on_pypi"] and s["cann"]["version"] == cann
    assert s["python"] in ("3.8", "3.9", "3.10")
    assert unlisted(s)  # the image comes from the earlier published tags, with --base-image advice


@pytest.mark.parametrize("wheel, cann", [("2.2.0", "8.0.RC1"), ("2.1.0.post3", "8.0.RC1"), ("2.1.0", "7.0.0")])
def test_wheels_whose_images_are_below_the_floor_build_on_ones_own_image(m, wheel, cann):
    with pytest.raises(ResolveError) as err:
        stack(m, card="800T-A2", torch_npu=wheel)
    assert "offer Python 3.8, 3.9 only, and provision itself" in err.value.reasons[0]
    s = stack(m, card="800T-A2", torch_npu=wheel, base_image=f"my/cann:{cann.lower()}")
    assert (s["torch_npu"]["version"], s["cann"]["version"], s["python"]) == (wheel, cann, "3.10")


def test_cann_releases_that_got_no_stack(m, no_floor):
    # was: "no official CANN 8.0.RC2 base image exists for chip 910b"
    for cann in ("8.0.RC1", "8.0.RC2", "7.0.0"):
        s = stack(m, card="800T-A2", cann=cann)
        assert s["cann"]["version"] == cann and unlisted(s)
    # first-generation 910 and 310P had no 8.0.RC1 image either
    assert stack(m, card="800-9000", cann="8.0.RC1")["base_image"]["tag"].startswith("8.0.rc1-910-")
    assert stack(m, card="300I-Duo", task="inference", cann="8.0.RC1")["base_image"]["tag"].startswith("8.0.rc1-310p-")


def test_unlisted_images_warn_only_where_they_are_used(m):
    s = stack(m, card="800T-A2", torch_npu="2.4.0.post2")  # its CANN 8.0.0 has scanned tags only
    assert s["cann"]["version"] == "8.0.0" and unlisted(s)
    assert "not in today's list" in s["explain"]["base_image"]
    s = stack(m, card="800T-A2", torch_npu="2.7.1.post4")  # CANN 9.0.0: in today's list
    assert s["cann"]["version"] == "9.0.0" and not unlisted(s)


def test_branch_tip_post_releases_have_a_derived_pairing(m):
    # was: "torch_npu 2.7.1.post10 is on PyPI but has no published CANN pairing"
    s = stack(m, card="800T-A2", torch_npu="2.7.1.post10")
    assert s["cann"]["version"] == "9.1.0" and s["torch_npu"]["product"] == "26.1.0"
    assert any("v2.7.1-26.1.0" in w and "derived" in w for w in s["warnings"])


def test_release_candidates_are_known(m):
    # was: "torch_npu 2.4.0rc1 is neither on PyPI nor in the official compatibility table"
    with pytest.raises(ResolveError) as err:
        stack(m, card="800T-A2", torch_npu="2.4.0rc1")
    assert "is on PyPI but has no published CANN pairing" in err.value.reasons[0]


def test_presence_per_architecture(m):
    # 2.10.0.post6: x86_64 wheels stop at Python 3.11, aarch64 at 3.12
    assert stack(m, card="800T-A2", torch_npu="2.10.0.post6", python="3.12")["python"] == "3.12"
    with pytest.raises(ResolveError) as err:
        stack(m, card="800T-A2", torch_npu="2.10.0.post6", python="3.12", arch="x86_64")
    assert "works with Python 3.10, 3.11" in err.value.reasons[0]


def test_x86_64_pin_rule_per_torch_line(m):
    s = stack(m, card="800T-A2", torch="2.12.0", arch="x86_64")
    assert s["torch"]["requirement"] == "torch==2.12.0+cpu"
    assert "pins torch==2.12.0; the +cpu build satisfies it" in s["explain"]["torch_requirement"]
    s = stack(m, card="800T-A2", torch="2.5.1", arch="x86_64")
    assert "pins torch==2.5.1+cpu" in s["explain"]["torch_requirement"]
    s = stack(m, card="800T-A2", torch_npu="2.2.0", arch="x86_64", base_image="my/cann:8.0.rc1")
    assert "pins no torch version" in s["explain"]["torch_requirement"]


def test_mindspore_python_from_its_wheels(m):
    # was: "MindSpore 2.7.1's Python range is not confirmed" on every MindSpore 2.7.1 stack
    s = stack(m, card="800T-A2", framework="mindspore", mindspore="2.7.1", arch="x86_64")
    assert not any("Python range is not confirmed" in w for w in s["warnings"])
    # MindSpore 2.8.0 was missing; it resolves, with its unconfirmed pairing said
    s = stack(m, card="800T-A2", framework="mindspore", mindspore="2.8.0", arch="x86_64")
    assert s["cann"]["version"] == "8.5.0" and any("pairing is unconfirmed" in w for w in s["warnings"])


def test_no_listed_image_is_not_stated_as_fact(m):
    with pytest.raises(ResolveError) as err:
        stack(m, card="800-9000", cann="8.0.RC3")
    reason = err.value.reasons[0]
    assert "no CANN 8.0.RC3 base image for chip 910 is listed" in reason and "--base-image" in reason
    assert "exists" not in reason
    assert stack(m, card="800-9000", cann="8.0.RC3", base_image="my/cann:8.0.rc3")["cann"]["version"] == "8.0.RC3"
