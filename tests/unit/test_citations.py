"""Citations of single rows that an audit found wrong or outdated (issue 26.3), held to what the cited files say.

- torch_npu 2.12.0.post2: docker/OVERVIEW.md of Ascend/pytorch @ 9e73e708 (and every later state in the index)
  lists only 2.12.0-cann9.1.0-* image tags, so it cannot vouch for a 2.12.0.post2 image; the branch tip's
  version.txt does (PT-BRANCHES).
- LLaMA-Factory's NPU image moved from CANN 9.0.0 + torch_npu 2.7.1.post4 (6b9df75ab, 2026-05-13) to CANN 9.1.0 +
  torch 2.10.0 + torch_npu 2.10.0.post2 (0bbe481e6, 2026-08-10; still so at ff6d4d12e).
"""

from __future__ import annotations

import pytest

from provisioner.matrix import loader


@pytest.fixture(scope="module")
def m():
    return loader.load()


def test_the_2_12_0_post2_row_cites_the_branch_not_the_image_overview(m):
    row = next(r for r in m.rows("torch_npu") if r["wheel"] == "2.12.0.post2")
    assert not any("OVERVIEW.md" in s for s in row["source"]) and "PT-BRANCHES" in row["source"]
    assert "2.12.0.post2-cann" not in row["notes"]


def test_the_llamafactory_profiles_follow_its_npu_image(m):
    old, new = m.profile("llamafactory-a2-cann9.0"), m.profile("llamafactory-a2-cann9.1")
    assert "@ 6b9df75ab" in str(old["source"]) and "@ 0bbe481e6" in str(new["source"])
    assert (new["constraints"]["cann"], new["constraints"]["torch"], new["constraints"]["torch_npu"]) == \
        ("9.1.0", "2.10.0", "2.10.0.post2")


def test_torchnpu_26_2_0_names_its_beta_tags(m):
    # the row said "only a 0day build"; Ascend/pytorch @ 9e73e708 also has six v26.2.0-beta.1-pytorch<torch> tags
    row = next(r for r in m.rows("torch_npu_releases") if r["product"] == "26.2.0")
    for build in ("2.7.1.post9", "2.9.0.post7", "2.10.0.post5", "2.11.0.post1", "2.12.0.post1"):
        assert build in row["notes"], build
    assert "v26.2.0-beta.1" in row["notes"] and not any(r["wheel"] == "2.10.0.post5" for r in m.rows("torch_npu"))
