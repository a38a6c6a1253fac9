import pytest
from hypothesis import given
from hypothesis import strategies as st

from provisioner import chipids
from provisioner.errors import ProvisionError


@pytest.mark.parametrize(
    "spec, ids",
    [("0-3,6", [0, 1, 2, 3, 6]), ("6,0-3", [0, 1, 2, 3, 6]), ("0,0-1", [0, 1]), (" 4 , 5 ", [4, 5]), ("15", [15])],
)
def test_parse(spec, ids):
    assert chipids.parse(spec) == ids


def test_all_takes_the_present_chips():
    assert chipids.parse("all", [3, 1, 2]) == [1, 2, 3]
    assert chipids.parse("ALL", [0]) == [0]


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("", "empty"),
        ("3-1", "runs backwards"),
        ("a", "cannot read 'a'"),
        ("0-", "cannot read '0-'"),
        ("0 - 3", "cannot read '0 - 3'"),
        ("1,,2", "cannot read ''"),
        ("-1", "cannot read '-1'"),
        ("0-99999", "out of range"),
        ("all", "no chip device nodes"),
    ],
)
def test_bad_specs_name_the_piece(spec, fragment):
    with pytest.raises(ProvisionError) as err:
        chipids.parse(spec, [])
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("ids, text", [([0, 1, 2, 3, 6], "0-3,6"), ([4, 5], "4,5"), ([7], "7"), ([0, 2, 3, 4, 9, 10], "0,2-4,9,10")])
def test_format_ids(ids, text):
    assert chipids.format_ids(ids) == text


@given(st.lists(st.integers(min_value=0, max_value=64), min_size=1, max_size=20))
def test_format_then_parse_round_trips(ids):
    assert chipids.parse(chipids.format_ids(ids)) == sorted(set(ids))


@pytest.mark.parametrize("value, names, ids, unread", [
    ("0-2,4", True, [0, 1, 2, 4], []),
    ("npu-1,Ascend910-3", True, [1, 3], []),
    ("npu-1,2", False, [2], ["npu-1"]),
    ("void", True, [], []),
    ("x, 2, 5-3", True, [2], ["x", "5-3"]),
])
def test_read_a_list_someone_else_wrote(value, names, ids, unread):
    assert chipids.read(value, names=names) == (ids, unread)


@pytest.mark.parametrize("value, ids", [("0,1,3", [0, 1, 3]), ("1,0", [1, 0]), ("0-1", None), ("0, 1", None),
                                        ("", None), ("0,,1", None)])
def test_plain_lists_are_commas_and_digits_only(value, ids):
    assert chipids.plain(value) == ids
