"""Bad configs, flags and input give one `error: ...` line (exit 2) before any model or data work; questionable
input is counted and reported, and --strict makes it an error (issue 13, the validation half).

Subprocess tests stop before any model or data work (a few seconds each); the validators and readers are
called in-process.
"""

import importlib.util
import json
import logging
import os
import subprocess
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from bert_jax import cli, errors, input_warnings
from bert_jax.finetune import loop
from bert_jax.finetune.plan import resolve_finetune
from bert_jax.finetune.tasks import classification, common, ner, squad
from bert_jax.input_pipeline import checks, text_io
from bert_jax.pretrain import loop as pretrain
from bert_jax.pretrain.plan import resolve_pretrain

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(name, arg):
  spec = importlib.util.spec_from_file_location(f"{name}_config_for_validation", os.path.join(REPO, "configs",
                                                                                                f"{name}.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.get_config(arg)


@pytest.fixture(autouse=True)
def _no_strict_mode_left_behind():
  input_warnings.set_strict(False)
  input_warnings.clear_input_warnings()
  yield
  input_warnings.set_strict(False)
  input_warnings.clear_input_warnings()


@pytest.fixture
def files(tmp_path):
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat", "."]
  (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
  (tmp_path / "no_mask_vocab.txt").write_text("\n".join(tokens[:4] + tokens[5:]) + "\n", encoding="utf-8")
  (tmp_path / "corpus.txt").write_text("the cat sat .\non a mat .\n\nthe mat .\na cat sat .\n", encoding="utf-8")
  (tmp_path / "one_doc.txt").write_text("the cat sat .\non a mat .\nthe mat .\n", encoding="utf-8")
  (tmp_path / "empty.txt").write_text("", encoding="utf-8")
  return tmp_path


def pretrain_config(files, **overrides):
  c = _config("pretrain", "size=tiny,runlocal")
  c.data.input_files = str(files / "corpus.txt")
  c.data.vocab_file = str(files / "vocab.txt")
  for key, value in overrides.items():
    node = c
    *parents, leaf = key.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  return c


# ---- pre-training validation (in-process: 8 devices as in tests/conftest.py) ----------------------------
@pytest.mark.parametrize("overrides, message", [
    ({"batch_size": 12}, r"config.batch_size=12 is not divisible by 8 data shard\(s\) .* x "
                         r"config.grad_accum_steps=1 = 8; use a multiple of 8, e.g. 8 or 16"),
    ({"batch_size": 16, "grad_accum_steps": 4}, r"batch_size=16 .*grad_accum_steps=4 = 32; use a multiple of 32"),
    ({"data.max_seq_length": 1024}, r"config.data.max_seq_length=1024 exceeds model.max_position_embeddings=512"),
    ({"data.phases": ((0.9, 64, 10), (0.1, 1024, 80))}, r"config.data.phases\[1\] length=1024 exceeds"),
    ({"data.max_predictions_per_seq": 0}, r"config.data.max_predictions_per_seq=0 with the 'mlm' target"),
    ({"data.input_files": "ONE_DOC"}, r"1 document\(s\), need at least 2 \(next-sentence pairs"),
    ({"data.input_files": "EMPTY"}, r"empty.txt is empty"),
    ({"data.input_files": "NOMATCH"}, r"no file matches .*nothing_\*.txt"),
    ({"data.input_files": ""}, r"config.data.input_files is empty"),
    ({"data.vocab_file": "MISSING"}, r"config.data.vocab_file=.*missing.txt': no such file"),
    ({"data.vocab_file": "NO_MASK"}, r"lacks the special token\(s\) \['\[MASK\]'\]"),
    ({"init_checkpoint": "bert-base-uncasd"}, r"config.init_checkpoint='bert-base-uncasd'.* did you mean"),
    ({"targets": ("mlm", "nsp", "sop")}, r"config.targets=.*pick one"),
    ({"optimizer.name": "sgd"}, r"optimizer.name='sgd'; expected adamw, lamb or stable_adamw"),
    ({"optimizer.learning_rate": 0.0}, r"config.optimizer.learning_rate=0.0; expected > 0"),
    ({"mesh.shape": (3, 1, 1)}, r"config.mesh.shape=\(3, 1, 1\).* does not divide the 8 devices"),
    # model sizes: 0 layers was accepted; the others named "config.model: BertConfig.<field>"
    ({"model.num_hidden_layers": 0}, r"^config.model.num_hidden_layers=0; expected >= 1 \(or -1\)$"),
    ({"model.num_hidden_layers": -2}, r"^config.model.num_hidden_layers=-2; expected >= 1"),
    ({"model.hidden_size": 0}, r"^config.model.hidden_size=0; expected >= 1"),
    ({"model.num_attention_heads": -3}, r"^config.model.num_attention_heads=-3; expected >= 1"),
    ({"model.intermediate_size": 0}, r"^config.model.intermediate_size=0; expected >= 1"),
    ({"model.max_position_embeddings": 0}, r"^config.model.max_position_embeddings=0; expected >= 1"),
    ({"model.embedding_size": -3}, r"^config.model.embedding_size=-3; expected >= 0"),
    ({"model.num_attention_heads": 5}, r"^config.model.num_attention_heads=5 does not divide hidden_size of "
                                       r"config.model.size='tiny'=128; expected a divisor of 128 \(e.g. 2: "),
    ({"model.num_attention_heads": 5, "model.hidden_size": 96},
     r"^config.model.num_attention_heads=5 does not divide config.model.hidden_size=96; expected a divisor"),
    ({"data.vocab_file": "A_DIR"}, r"config.data.vocab_file=.*' is a directory; expected a vocab file \(one token "
                                   r"per line"),
])
def test_pretrain_validation_names_the_field(files, tmp_path, overrides, message):
  paths = {"ONE_DOC": files / "one_doc.txt", "EMPTY": files / "empty.txt", "NOMATCH": files / "nothing_*.txt",
           "MISSING": files / "missing.txt", "NO_MASK": files / "no_mask_vocab.txt", "A_DIR": files}
  overrides = {k: str(paths[v]) if isinstance(v, str) and v in paths else v for k, v in overrides.items()}
  with pytest.raises(errors.UserError, match=message):
    resolve_pretrain(pretrain_config(files, **overrides), str(tmp_path / "work"),
                                        num_devices=8, process_count=1)


@pytest.mark.parametrize("preset", [None, "bert_paper", "lamb_pod", "budget", "albert"])
def test_every_preset_and_size_of_configs_pretrain_resolves_through_the_plan(files, preset):
  """configs/pretrain.py's header documents each preset x size (and fast, runlocal): each is a valid plan
  (no work dir, no training), so a preset field the plan refuses is caught here, not on a pod slice."""
  for size in ("tiny", "mini", "small", "medium", "base", "large"):
    for extra in ("", ",fast", ",runlocal"):
      arg = f"size={size}" + (f",preset={preset}" if preset else "") + extra
      config = _config("pretrain", arg)
      config.data.input_files, config.data.vocab_file = str(files / "corpus.txt"), str(files / "vocab.txt")
      plan = resolve_pretrain(config, None, num_devices=8, process_count=1)
      assert plan.model.num_hidden_layers >= 1, arg


def test_pretrain_validation_accepts_the_documented_tiny_run_and_sop_on_one_document(files, tmp_path):
  resolve_pretrain(pretrain_config(files), str(tmp_path / "w"), num_devices=8,
                                      process_count=1)
  one = pretrain_config(files, **{"data.input_files": str(files / "one_doc.txt"), "targets": ("mlm", "sop")})
  resolve_pretrain(one, str(tmp_path / "w"), num_devices=8, process_count=1)
  with pytest.raises(errors.UserError, match=r"need at least 4 .* x 2 processes"):
    resolve_pretrain(pretrain_config(files), str(tmp_path / "w"), num_devices=8,
                                        process_count=2)


def test_warmup_longer_than_the_run_is_a_warning_naming_both(files, tmp_path, caplog):
  c = pretrain_config(files, num_train_steps=1000, warmup_steps=10_000)
  with caplog.at_level(logging.WARNING):
    resolve_pretrain(c, str(tmp_path / "w"), num_devices=8, process_count=1)
  assert "config.warmup_steps=10000 >= config.num_train_steps=1000" in caplog.text
  assert "the whole run is warmup" in caplog.text      # the default schedule clamps the warmup to the run
  caplog.clear()
  c.optimizer.schedule = "google"                       # Google's does not: lr <= 1e-3 * 1000 / 10000
  with caplog.at_level(logging.WARNING):
    resolve_pretrain(c, str(tmp_path / "w"), num_devices=8, process_count=1)
  assert "never reaches its peak 0.001 (Google's linear warmup stops at 0.0001)" in caplog.text


def test_an_unreadable_init_checkpoint_config_is_a_user_error_in_both_plans(files, tmp_path):
  bad_config = r"config.init_checkpoint=.*ckpt.: no readable model config in .*ckpt \(Expecting property name"
  ckpt = tmp_path / "ckpt"
  ckpt.mkdir()
  (ckpt / "model_config.json").write_text("{not json", encoding="utf-8")
  (ckpt / "params.msgpack").write_bytes(b"\x80")
  with pytest.raises(errors.UserError, match=bad_config):
    resolve_pretrain(pretrain_config(files, init_checkpoint=str(ckpt)), str(tmp_path / "w"), num_devices=8,
                     process_count=1)
  with pytest.raises(errors.UserError, match=bad_config):
    resolve_finetune(finetune_config(files, init_checkpoint=str(ckpt)), str(tmp_path / "f"), num_devices=8,
                     process_count=1)


def test_document_count_is_capped_at_the_limit_and_counts_the_last_unterminated_one(tmp_path):
  big = tmp_path / "big.txt"
  big.write_text("a b\n\nc d\n\n" + "x\n" * 100_000, encoding="utf-8")
  assert checks.count_documents_upto([str(big)], 2) == 2
  assert checks.count_documents_upto([str(big)], 5) == 3


# ---- fine-tuning validation -----------------------------------------------------------------------------
def finetune_config(files, config_task="classification", **overrides):
  c = _config("finetune", f"task={config_task},runlocal")
  data = files / "cls"
  data.mkdir(exist_ok=True)
  (data / "train.tsv").write_text("label\ttext_a\n1\tthe cat\n", encoding="utf-8")
  c.data_dir, c.vocab_file = str(data), str(files / "vocab.txt")
  for key, value in overrides.items():
    c[key] = value
  return c


@pytest.mark.parametrize("overrides, message", [
    ({"task": "mrcp"}, r"config.task='mrcp' is not a task; .* did you mean 'mrpc'"),
    ({"data_dir": ""}, r"config.data_dir is empty"),
    ({"data_dir": "MISSING"}, r"config.data_dir=.*missing': no such directory"),
    ({"data_dir": "NO_TRAIN"}, r"has no training file"),
    ({"vocab_file": ""}, r"no vocab: pass --config.vocab_file"),
    ({"vocab_file": "NO_MASK"}, r"config.vocab_file=.*lacks the special token"),
    ({"do_train": False}, r"config.do_train=false .* pass --config.init_checkpoint"),
    ({"init_checkpoint": "no-such-model"}, r"config.init_checkpoint='no-such-model'"),
    ({"max_seq_length": 1024}, r"config.max_seq_length=1024 exceeds config.model.max_position_embeddings=512"),
    ({"batch_size": 12}, r"config.batch_size=12 is not divisible by 8 data shard"),
    ({"on_error": "ignore"}, r"config.on_error='ignore'; expected one of 'raise', 'skip'"),
    ({"num_train_epochs": 0.0}, r"config.num_train_epochs=0.0; expected > 0"),
    # max_query_length as runlocal's SQuAD (runlocal sets it for SQuAD only; this config is classification's)
    ({"task": "squad_v1", "max_seq_length": 26, "max_query_length": 24},
     r"config.max_seq_length=26 leaves no room for the context after "
                                                 r"config.max_query_length=24 question tokens"),
])
def test_finetune_validation_names_the_field(files, overrides, message):
  (files / "no_train").mkdir()
  (files / "no_train" / "dev.tsv").write_text("label\ttext_a\n1\tthe cat\n", encoding="utf-8")
  paths = {"MISSING": files / "missing", "NO_TRAIN": files / "no_train", "NO_MASK": files / "no_mask_vocab.txt", "A_DIR": files}
  overrides = {k: str(paths[v]) if isinstance(v, str) and v in paths else v for k, v in overrides.items()}
  config = finetune_config(files, **overrides)
  with pytest.raises(errors.UserError, match=message):
    resolve_finetune(config, str(files / "work"), num_devices=8, process_count=1)


def test_finetune_validation_accepts_a_glue_layout_with_a_task_subfolder(files):
  (files / "glue" / "MRPC").mkdir(parents=True)
  (files / "glue" / "MRPC" / "train.tsv").write_text("x\n", encoding="utf-8")
  config = finetune_config(files, config_task="mrpc", data_dir=str(files / "glue"))
  resolve_finetune(config, str(files / "work"), num_devices=8, process_count=1)


# ---- bad input: counted, reported, errors under strict ------------------------------------------------
def test_non_utf8_lines_are_counted_and_reported_naming_the_file(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes(b"good line\n\xe9t\xe9 caf\xe9\nanother\n\nsecond doc\n")
  stats = text_io.ReadStats()
  allow = text_io.Utf8Rule(allow=True)     # 1 of 6 lines is above the 1% that is refused without it
  docs = text_io.read_documents([str(path)], stats, allow)
  assert docs == [["good line", "another"], ["second doc"]]
  assert stats.bad_utf8_lines[str(path)] == 1
  assert input_warnings.input_warnings() == [f"{path}: skipped 1 of 6 lines that are not UTF-8 (first: line 2)"]
  input_warnings.set_strict(True)
  with pytest.raises(errors.UserError, match=r"latin1.txt: skipped 1 of 6 lines .*\(--strict"):
    text_io.read_documents([str(path)], utf8=allow)


def test_classification_rows_with_extra_columns_are_errors_or_counted_skips(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_text("label\ttext_a\n1\tgood\n0\tbad\tand a tab\n1\tfine\n", encoding="utf-8")
  fmt = classification.ClassificationFormat()
  with pytest.raises(common.TaskDataError, match=r"train.tsv:3: extra columns: row has 3 columns, the "
                                                 r"header has 2"):
    classification.read_classification_file(str(path), fmt)
  es = classification.read_classification_file(str(path), fmt, on_error="skip")
  assert [e.text_a for e in es] == ["good", "fine"] and es.skipped.counts == {"extra columns": 1}
  assert input_warnings.input_warnings() == [f"{path}: skipped 1 row(s): 1 x extra columns (e.g. {path}:3)"]
  input_warnings.set_strict(True)
  with pytest.raises(errors.UserError, match="--strict"):
    classification.read_classification_file(str(path), fmt, on_error="skip")
  headerless = tmp_path / "dev.tsv"
  headerless.write_text("1\tgood\n0\tbad\textra\n", encoding="utf-8")
  with pytest.raises(errors.UserError, match=r"dev.tsv:2: extra columns: row has 3 columns, the first row "
                                             r"has 2"):
    classification.read_classification_file(str(headerless), classification.ClassificationFormat(
        text_a=1, label=0, header=False))


def test_ner_tags_outside_the_scheme_need_a_labels_file(tmp_path):
  path = tmp_path / "train.txt"
  path.write_text("John B-PER\nlives O\nin O\nBerlin X-FOO\n\nAnn S-PER\n", encoding="utf-8")
  with pytest.raises(errors.UserError, match=r"train.txt:4: tag outside the BIO/BIOES scheme: tag 'X-FOO'"
                                             r".*labels.txt"):
    ner.read_conll(str(path))
  es = ner.read_conll(str(path), label_list=["O", "B-PER", "I-PER", "S-PER", "X-FOO"])   # from labels.txt
  assert [ex.labels for ex in es] == [["B-PER", "O", "O", "X-FOO"], ["S-PER"]]
  assert [ner.is_scheme_tag(t) for t in ("O", "B-PER", "E-LOC", "I-MISC", "PER", "B-", "X-FOO")] == \
         [True, True, True, True, False, False, False]


def test_squad_v1_dev_questions_without_answers_are_a_counted_warning(tmp_path):
  data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "The cat sat.", "qas": [
      {"id": "q1", "question": "Who sat?", "answers": [{"text": "The cat", "answer_start": 0}]},
      {"id": "q2", "question": "Why?", "answers": []}]}]}]}
  path = tmp_path / "dev-v1.1.json"
  path.write_text(json.dumps(data), encoding="utf-8")
  es = squad.read_squad(str(path), is_training=False, split="dev")
  assert len(es) == 2
  assert input_warnings.input_warnings() == [f"{path}: 1 of 2 questions have no answer (e.g. id q2); SQuAD v1.1 "
                                     "scores them 0 whatever is predicted (task=squad_v2 treats them as "
                                     "unanswerable)"]
  squad.read_squad(str(path), version_2_with_negative=True, is_training=False, split="dev")
  assert len(input_warnings.input_warnings()) == 1
  input_warnings.set_strict(True)
  with pytest.raises(errors.UserError, match="1 of 2 questions have no answer"):
    squad.read_squad(str(path), is_training=False, split="dev")


# ---- the command line ---------------------------------------------------------------------------------
def _run(args, timeout=120):
  return subprocess.run([sys.executable] + args, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                        env=dict(os.environ, PYTHONPATH=REPO))


_WRAPPER = ("import sys; from bert_jax import cli, errors, input_warnings\n"
            "def main(argv):\n"
            "  input_warnings.warn_input('corpus.txt: skipped 2 of 9 lines that are not UTF-8 (first: line 3)')\n"
            "  kind = argv[1] if len(argv) > 1 else ''\n"
            "  if kind == 'user': raise errors.UserError('config.batch_size=12 is not divisible by 8')\n"
            "  if kind == 'internal': raise RuntimeError('a bug')\n"
            "  if kind == 'sigterm': raise errors.Interrupted(15, 60)\n"
            "cli.run_main(main)\n")


@pytest.mark.parametrize("args, code, stderr_has, stderr_lacks", [
    ([], 0, ["warning: corpus.txt: skipped 2 of 9 lines"], ["Traceback", "error:"]),
    (["user"], 2, ["error: config.batch_size=12 is not divisible by 8\n"], ["Traceback"]),
    (["user", "--verbose"], 2, ["Traceback", "error: config.batch_size=12"], []),
    (["internal"], 1, ["Traceback", "RuntimeError: a bug"], ["error:"]),
    (["sigterm"], 143, ["interrupted: stopped by SIGTERM at step 60; checkpoint saved"], ["Traceback"]),
    (["--strict"], 2, ["error: corpus.txt: skipped 2 of 9 lines that are not UTF-8 (first: line 3) (--strict"],
     ["Traceback", "warning:"]),
    (["--no_such_flag"], 2, ["error: Unknown command line flag 'no_such_flag'"], ["Traceback"]),
])
def test_run_main_exit_codes_and_one_line_errors(args, code, stderr_has, stderr_lacks):
  got = _run(["-c", _WRAPPER] + args)
  assert got.returncode == code, got.stderr
  for s in stderr_has:
    assert s in got.stderr, got.stderr
  for s in stderr_lacks:
    assert s not in got.stderr, got.stderr


@pytest.mark.parametrize("cmd, message", [
    (["train.py", "--config=configs/pretrain.py:size=tiny,runlocal", "--workdir=W", "--config.no_such_field=1"],
     "error: --config.no_such_field: configs/pretrain.py has no field 'no_such_field'; its fields are: "
     "batch_size,"),
    (["finetune.py", "--config=configs/finetune.py:task=mrpc,runlocal", "--workdir=W", "--config.data_dir=MISSING"],
     "error: config.data_dir='MISSING': no such directory"),
])
def test_entry_points_print_one_error_line_and_exit_2(tmp_path, cmd, message):
  missing = str(tmp_path / "missing")
  cmd = [a.replace("=W", "=" + str(tmp_path / "work")).replace("=MISSING", "=" + missing) for a in cmd]
  got = _run(cmd)
  assert got.returncode == 2, got.stderr
  lines = [l for l in got.stderr.splitlines() if l.startswith("error:")]
  assert len(lines) == 1 and lines[0].startswith(message.replace("MISSING", missing)), got.stderr
  assert "Traceback" not in got.stderr, got.stderr
  assert not os.path.exists(tmp_path / "work"), "validation runs before the work dir is created"


@pytest.mark.parametrize("sub, flag, message", [
    ("import-hf", "--input", "MISSING: no config.json (not a Hugging Face model folder)"),
    ("export-hf", "--input", "'MISSING' is neither an existing directory nor a zoo model name; "
                              "`python -m bert_jax.convert zoo` lists the names"),
])
def test_converter_missing_input_is_one_error_line_and_exit_2(tmp_path, sub, flag, message):
  missing = str(tmp_path / "missing")
  got = _run(["-m", "bert_jax.convert", sub, f"{flag}={missing}", f"--output={tmp_path / 'out'}"])
  assert got.returncode == 2, got.stderr
  assert got.stderr.splitlines() == ["error: " + message.replace("MISSING", missing)], got.stderr
  verbose = _run(["-m", "bert_jax.convert", sub, f"{flag}={missing}", f"--output={tmp_path / 'out'}", "--verbose"])
  assert verbose.returncode == 2 and "Traceback" in verbose.stderr


def test_unknown_config_override_suggests_the_nearest_field():
  path = os.path.join(REPO, "configs", "pretrain.py")
  flag_values = flags.FlagValues()     # a config flag as train.py defines it, on its own FlagValues
  config_flags.DEFINE_config_file("config", None, "config", flag_values=flag_values)
  config_flag = {"config": flag_values["config"]}
  argv = ["train.py", f"--config={path}:size=tiny", "--config.data.vocab_fil=v.txt"]
  assert cli.unknown_config_field(argv, config_flag) == (
      f"--config.data.vocab_fil: {path} has no field 'data.vocab_fil'; did you mean "
      "--config.data.vocab_file?")
  argv[2] = "--config.optimizer.lr=1e-4"          # an abbreviation: it suggested optimizer.b1 and b2
  assert cli.unknown_config_field(argv, config_flag) == (
      f"--config.optimizer.lr: {path} has no field 'optimizer.lr'; did you mean --config.optimizer.learning_rate?")
  argv[2] = "--config.data.vocab_fil=v.txt"
  assert cli.unknown_config_field(argv[:2] + ["--config.data.vocab_file=v.txt"], config_flag) is None


def test_pretrain_config_takes_a_custom_width_and_depth_from_the_command_line_as_finetune_does(files, tmp_path):
  # --config.model.hidden_size=... was "has no field" for train.py (configs/finetune.py had the fields)
  path = os.path.join(REPO, "configs", "pretrain.py")
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "config", flag_values=flag_values)
  argv = ["train.py", f"--config={path}:size=tiny", "--config.model.hidden_size=64",
          "--config.model.num_hidden_layers=1", "--config.model.num_attention_heads=2",
          "--config.model.intermediate_size=96"]
  assert cli.unknown_config_field(argv, {"config": flag_values["config"]}) is None
  model = resolve_pretrain(pretrain_config(files, **{"model.hidden_size": 64, "model.num_hidden_layers": 1}),
                           str(tmp_path / "w"), num_devices=8, process_count=1).model
  assert (model.hidden_size, model.num_hidden_layers, model.num_attention_heads, model.intermediate_size) == (
      64, 1, 1, 256)                                          # BERT's rule for a custom width: H/64 heads, 4H
  tiny = resolve_pretrain(pretrain_config(files), str(tmp_path / "t"), num_devices=8, process_count=1).model
  assert (tiny.hidden_size, tiny.num_hidden_layers, tiny.num_attention_heads) == (128, 2, 2)   # -1: the size's


def test_electra_settings_without_the_electra_target_are_a_warning_naming_them(files, tmp_path, caplog):
  # they were ignored in silence: a run meant as ELECTRA trained BERT's MLM + NSP
  with caplog.at_level(logging.WARNING):
    resolve_pretrain(pretrain_config(files, **{"electra.disc_weight": 20.0}), str(tmp_path / "w"), num_devices=8,
                     process_count=1)
  assert "config.electra.disc_weight=20.0 has no effect: config.targets=('mlm', 'nsp') has no 'electra'" in caplog.text
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    resolve_pretrain(pretrain_config(files), str(tmp_path / "w"), num_devices=8, process_count=1)
  assert "has no effect" not in caplog.text


def test_the_loops_validate_before_creating_the_work_dir(files, tmp_path):
  with pytest.raises(errors.UserError, match=r"config.batch_size=12 is not divisible by 8"):
    pretrain.train_and_evaluate(pretrain_config(files, batch_size=12), str(tmp_path / "pretrain"))
  with pytest.raises(errors.UserError, match=r"config.max_seq_length=1024 exceeds"):
    loop.run(finetune_config(files, max_seq_length=1024), str(tmp_path / "finetune"))
  assert not os.path.exists(tmp_path / "pretrain") and not os.path.exists(tmp_path / "finetune")


def test_a_work_dir_that_is_or_sits_under_a_file_is_one_error_naming_workdir(files, tmp_path, monkeypatch):
  # each was a FileExistsError / NotADirectoryError traceback and exit 1 (a launcher retries that)
  (tmp_path / "a_file").write_text("x", encoding="utf-8")
  (tmp_path / "w").mkdir()
  (tmp_path / "w" / "checkpoints").write_text("x", encoding="utf-8")
  for workdir, message in [(tmp_path / "a_file", r"--workdir=.*a_file: .*a_file is a file, not a directory"),
                           (tmp_path / "a_file" / "sub", r"--workdir=.*sub: cannot be created, .*a_file is a file"),
                           (tmp_path / "w", r"--workdir=.*w: .*checkpoints is a file, not a directory")]:
    with pytest.raises(errors.UserError, match=message):
      resolve_pretrain(pretrain_config(files), str(workdir), num_devices=8, process_count=1)
  # a directory that cannot be made (read-only or virtual file system): one line too, before anything runs
  plan = resolve_pretrain(pretrain_config(files), str(tmp_path / "ok"), num_devices=8, process_count=1)

  def refuse(path):
    raise PermissionError(13, "Permission denied", path)
  monkeypatch.setattr(pretrain.fileio, "makedirs", refuse)
  with pytest.raises(errors.UserError, match=r"--workdir=.*ok: cannot create it \(Permission denied\)"):
    pretrain.run_plan(plan)
