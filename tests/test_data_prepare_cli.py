"""data/prepare_snownlp.py's command line and the data/ writers: a bad flag is one `error:` line and exit 2
before anything is built (tracebacks before: RecursionError at --max_ner_chars=0, ValueError at fractions
summing to 1, NotADirectoryError for a file as --output_dir; a negative fraction ran), and files are written
whole or not at all."""

import pytest

from bert_jax import cli
from bert_jax import input_warnings
from data import prepare_snownlp
from data import sample_corpora
from data import snownlp_sentiment


@pytest.mark.parametrize("flags,message", [
    (["--dev_fraction=0.6", "--test_fraction=0.6"], r"--dev_fraction=0.6 \+ --test_fraction=0.6 >= 1"),
    (["--dev_fraction=-0.1"], r"--dev_fraction=-0.1; expected 0 <= fraction < 1"),
    (["--test_fraction=1"], r"--test_fraction=1.0; expected 0 <= fraction < 1"),
    (["--max_ner_chars=0"], "--max_ner_chars=0; expected >= 1"),
    (["--max_qa_context_chars=0"], "--max_qa_context_chars=0; expected >= 1"),
    (["--reviews_per_document=0"], "--reviews_per_document=0; expected >= 1"),
    (["--vocab_min_count=0"], "--vocab_min_count=0; expected >= 1"),
    (["--seed=x"], "argument --seed: invalid int value: 'x'"),
    (["--output_dir=FILE"], "--output_dir=.*is a file; expected a directory"),
])
def test_prepare_snownlp_flag_mistakes_are_one_error_line(tmp_path, flags, message, capsys):
  (tmp_path / "a_file").write_text("x")
  argv = [f"--output_dir={tmp_path / 'out'}"] + [f.replace("FILE", str(tmp_path / "a_file")) for f in flags]
  input_warnings.clear_input_warnings()   # earlier tests' warnings would be repeated at exit
  with pytest.raises(SystemExit) as e:
    cli.run_plain_main(prepare_snownlp.main, argv)
  err = capsys.readouterr().err.strip().splitlines()
  assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
  import re  # pylint: disable=g-import-not-at-top
  assert re.search(message, err[0]), err[0]
  assert not (tmp_path / "out").exists()


def test_a_vocab_min_count_that_keeps_only_the_special_tokens_is_an_error_naming_the_largest_that_keeps_some():
  """It wrote a 6-line vocab ([PAD] .. [MASK] and a blank token), silently."""
  texts = ["我爱北京", "北京天安门", "cpu 北京"]
  tokens, _ = prepare_snownlp.build_vocab(texts, 3)
  assert tokens[5:] == ["京", "北"]
  with pytest.raises(ValueError, match=r"^--vocab_min_count=4 leaves only the special tokens in the vocab: the "
                                       r"most frequent character of the train splits occurs 3 time\(s\); "
                                       r"expected --vocab_min_count <= 3$"):
    prepare_snownlp.build_vocab(texts, 4)


def test_a_writer_that_fails_leaves_the_old_file_whole(tmp_path):
  """write_tsv raised on a bad row after truncating the file and writing the rows before it."""
  path = tmp_path / "train.tsv"
  snownlp_sentiment.write_tsv(str(path), [(1, "好"), (0, "差")])
  before = path.read_bytes()
  with pytest.raises(ValueError, match="tab or newline"):
    snownlp_sentiment.write_tsv(str(path), [(1, "很好"), (0, "a\tb")])
  assert path.read_bytes() == before
  assert [p.name for p in tmp_path.iterdir()] == ["train.tsv"]     # no temp file left


def test_corpus_writers_keep_google_format(tmp_path):
  docs = [["s1.", "s2."], ["t1 with\nnewline."], ["u1."]]
  expected = "s1.\ns2.\n\nt1 with newline.\n\nu1.\n"
  assert open(sample_corpora.write_google_format(docs, str(tmp_path / "a.txt")), encoding="utf-8").read() == expected
  stats = prepare_snownlp.write_corpus(str(tmp_path / "b.txt"), [d for d in docs if len(d) != 1 or "\n" not in d[0]])
  assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "s1.\ns2.\n\nu1.\n"
  assert stats["documents"] == 2 and stats["bytes"] == len("s1.\ns2.\n\nu1.\n")
