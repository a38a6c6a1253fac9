import pytest

from provisioner.versions import PyRange, Spec, V, VersionError, any_match, sort_versions


@pytest.mark.parametrize(
    "lower, higher",
    [
        ("8.0.RC1", "8.0.RC2"),
        ("8.0.RC3", "8.0.0"),
        ("8.0.0", "8.1.RC1"),
        ("8.2.RC1.alpha003", "8.2.RC1"),
        ("9.0.0-beta.2", "9.0.0"),
        ("24.1.rc3", "24.1.0"),
        ("25.0.rc1", "25.0.rc1.1"),
        ("25.0.rc1.1", "25.0.0"),
        ("2.1.0.post8", "2.1.0.post17"),
        ("2.5.1rc1", "2.5.1"),
        ("2.5.1", "2.5.1.post1"),
        ("7.1.0.11.220", "7.7.0.1.231"),
        ("3.9", "3.10"),
    ],
)
def test_ordering(lower, higher):
    assert V(lower) < V(higher)
    assert not V(higher) < V(lower)


def test_case_and_padding_do_not_matter():
    assert V("8.3.RC1") == V("8.3.rc1")
    assert V("8.5") == V("8.5.0")
    assert V("25.0.RC1") == V("25.0.rc1")
    assert hash(V("8.3.RC1")) == hash(V("8.3.rc1"))


def test_final_and_local():
    assert V("8.5.0").is_final and not V("8.5.0.alpha001").is_final and not V("2.5.1rc1").is_final
    assert V("2.5.1.post1").is_final
    assert V("2.5.1+cpu").public() == V("2.5.1")


@pytest.mark.parametrize("bad", ["", "abc", "8..1", "3.x", "1.0.zz9"])
def test_not_versions(bad):
    with pytest.raises(VersionError):
        V(bad)


@pytest.mark.parametrize(
    "spec, yes, no",
    [
        ("25.5.*", ["25.5.0", "25.5.1", "25.5.rc1"], ["25.3.0", "26.0.RC1"]),
        ("8.0.RC2..8.3.RC1", ["8.0.RC2", "8.1.RC1", "8.3.RC1"], ["8.0.RC1", "8.3.RC2", "8.5.0"]),
        ("8.1.RC1..9.0.*", ["8.5.0", "9.0.0", "9.0.1"], ["9.1.0", "8.0.0"]),
        (">=24.1.rc1,<25", ["24.1.rc1", "24.1.0"], ["23.0.7", "25.0.rc1"]),
        ("7.0.0..7.1.99", ["7.1.0.11.220"], ["7.3.0.1.231"]),
    ],
)
def test_specs(spec, yes, no):
    s = Spec(spec)
    assert all(s.matches(v) for v in yes)
    assert not any(s.matches(v) for v in no)


def test_any_match_is_an_or():
    assert any_match(["25.5.*", "26.0.RC1"], "26.0.RC1")
    assert not any_match([], "1.0")


def test_python_range():
    r = PyRange("3.9-3.11")
    assert "3.10" in r and "3.11" in r and "3.11.4" in r
    assert "3.12" not in r and "3.8" not in r
    assert "3.10" in PyRange("3.10")


def test_sort_versions():
    assert sort_versions(["9.0.0", "8.0.RC1", "8.0.0", "8.5.0"]) == ["8.0.RC1", "8.0.0", "8.5.0", "9.0.0"]


def test_long_invalid_strings_are_refused_quickly():
    # A host file can hold anything (the audit feeds driver/firmware Version keys
    # here); the check must be linear, not backtrack exponentially.
    import time

    start = time.perf_counter()
    for n in (30, 3000):
        with pytest.raises(VersionError):
            V("25" + "a" * n + "!")
    assert time.perf_counter() - start < 0.5
    assert V("25.0.rc1.1") > V("25.0.RC1") and V("7.0.T10") < V("7.0.0")


def test_patch_builds():
    from provisioner.versions import is_patch_of

    assert is_patch_of(V("25.0.rc1.1"), V("25.0.RC1"))
    assert is_patch_of(V("24.1.0.3"), V("24.1.0"))
    assert not is_patch_of(V("25.0.rc2"), V("25.0.RC1"))
    assert not is_patch_of(V("25.0.0"), V("25.0.RC1"))
    assert not is_patch_of(V("25.0.RC1"), V("25.0.RC1"))


def test_prefix_does_not_pad_pre_releases():
    assert not Spec("23.0.0.*").matches("23.0.rc2")
    assert Spec("8.5.0.*").matches("8.5")
    assert Spec("8.0.*").matches("8.0.RC1")
