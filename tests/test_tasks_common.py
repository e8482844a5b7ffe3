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


def test_pair_lengths_are_what_googles_popping_leaves():
  for la in range(12):
    for lb in range(12):
      for max_length in range(20):
        a, b = list(range(la)), list(range(lb))
        common.truncate_seq_pair(a, b, max_length)
        assert common.pair_lengths(la, lb, max_length) == (len(a), len(b)), (la, lb, max_length)


def test_keep_tokens_keeps_the_head_the_tail_or_both():
  ids = list(range(10))
  assert common.keep_tokens(ids, 4) == [0, 1, 2, 3]
  assert common.keep_tokens(ids, 4, "tail") == [6, 7, 8, 9]
  assert common.keep_tokens(ids, 4, "head_tail") == [0, 7, 8, 9]          # a quarter from the start
  assert common.keep_tokens(ids, 8, "head_tail", head_fraction=0.5) == [0, 1, 2, 3, 6, 7, 8, 9]
  assert common.keep_tokens(ids, 6, "head_tail", head_fraction=0.0) == [4, 5, 6, 7, 8, 9]
  assert common.keep_tokens(ids, 6, "head_tail", head_fraction=1.0) == [0, 1, 2, 3, 4, 5]
  assert common.keep_tokens(ids, 12, "tail") == ids and common.keep_tokens(ids, 0, "tail") == []
  with pytest.raises(ValueError, match="truncation='middle'; expected one of head, tail, head_tail"):
    common.keep_tokens(ids, 4, "middle")


def test_pack_pair_with_head_tail_cuts_each_text_to_googles_count_from_its_middle():
  a, b = list(range(1, 13)), [50, 51, 52, 53]       # 12 + 4 tokens into 13 - 3 = 10: A keeps 6, B keeps 4
  ids, seg = common.pack_pair(a, b, 100, 101, max_seq_length=13, truncation="head_tail", head_fraction=0.5)
  assert ids == [100, 1, 2, 3, 10, 11, 12, 101, 50, 51, 52, 53, 101]
  assert seg == [0] * 8 + [1] * 5
  ids, _ = common.pack_pair(a, None, 100, 101, max_seq_length=6, truncation="tail")
  assert ids == [100, 9, 10, 11, 12, 101]
