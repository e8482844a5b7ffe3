"""Google's pair packing and the error policy of the task readers (tokenisation with character spans is
FullTokenizer.tokenize_with_offsets, tested in test_pipeline_tokenization.py)."""

import pytest

from bert_jax.finetune.tasks import common


def test_pack_pair_truncates_longer_side_first():
  ids, seg = common.pack_pair([1, 2, 3, 4, 5], [6, 7], 100, 101, max_seq_length=7)
  assert ids == [100, 1, 2, 101, 6, 7, 101] and seg == [0, 0, 0, 0, 1, 1, 1]
  ids, seg = common.pack_pair([1, 2, 3, 4, 5], None, 100, 101, max_seq_length=5)
  assert ids == [100, 1, 2, 3, 101] and seg == [0] * 5


def test_error_policy_raises_or_counts():
  report = common.SkipReport(source="f.tsv")
  with pytest.raises(common.TaskDataError, match=r"^f.tsv:3: bad row: detail"):
    common.ErrorPolicy("raise", report)("f.tsv", 3, "bad row", "detail")
  skip = common.ErrorPolicy("skip", report)
  for line in range(15):
    skip("f.tsv", line, "bad row")
  assert report.total == 15 and len(report.samples["bad row"]) == 10
  assert report.to_dict()["counts"] == {"bad row": 15}
  with pytest.raises(ValueError, match="on_error"):
    common.ErrorPolicy("ignore", report)
