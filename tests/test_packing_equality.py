"""Packed rows compute exactly what one example per row computes: per-example logits, losses and gradients
(float32, <= 1e-5) for every packing encoder config (the lstm's recurrence included), no token attends across
examples on any attention path this CPU can run (einsum, XLA, Pallas flash in interpret mode), and in no family
does one example's tokens move another's outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from bert_jax.finetune.tasks import get_task
from bert_jax.input_pipeline import example_packing as ep
from bert_jax.models import BertConfig, BertModel, attention, crf, encoders, heads
from bert_jax.models.electra import ElectraDiscriminator
from bert_jax.models.encoders.lstm import LstmEncoder
from bert_jax.models.layers import example_mask

T, K, N, LABELS = 32, 4, 7, 3
TINY = dict(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# One entry per encoder config that must pack; a family registered later (the modern encoders) is added below
# when it is registered, so its packing is checked without editing this list.
ENCODERS = {
    "bert_post_ln": dict(TINY),
    "bert_pre_ln": dict(TINY, layer_norm_type="pre"),
    "albert": dict(TINY, share_layers=True, embedding_size=16),
    "lstm": dict(TINY, encoder="lstm"),
}
# The lstm's backward pass (a scan per layer and direction) compiles in ~10 s: its gradients run in the full tier,
# as do the other families' but BERT post-LN's (each a few seconds: the fast tier keeps one family's gradients).
SLOW_GRADIENTS = ("lstm", "bert_pre_ln", "albert", "modernbert")
SLOW_FORWARD = ("lstm", "modernbert")      # their forward-only checks too (the full tier runs every family)
# A family's own fields for a tiny config (modernbert: a 16-token sliding window, so with T = 32 one global and
# one sliding layer both see packed rows).
FAMILY_FIELDS = {"modernbert": dict(local_attention=16, global_attn_every_n_layers=2)}
for _name in encoders.names():
  if _name not in ENCODERS and _name != "transformer" and encoders.family(_name).packs:
    ENCODERS[_name] = dict(TINY, encoder=_name, **FAMILY_FIELDS.get(_name, {}))


def examples(seed=0, n=N):
  """n unpacked rows [n, T] of random lengths: [CLS] a [SEP] b [SEP] with token types 0 / 1, right padding."""
  rng = np.random.default_rng(seed)
  ids, mask, seg = (np.zeros((n, T), np.int32) for _ in range(3))
  for i, length in enumerate(rng.integers(4, 20, n)):
    ids[i, :length] = rng.integers(5, TINY["vocab_size"], length)
    ids[i, 0], ids[i, length - 1] = 2, 3
    mask[i, :length] = 1
    seg[i, length // 2:length] = 1
  return {"input_ids": ids, "input_mask": mask, "segment_ids": seg,
          "label_ids": rng.integers(0, LABELS, n).astype(np.int32)}


def packed(feats, seed=0):
  layout = ep.best_fit(ep.lengths_of(feats["input_mask"]), T, K, seed=seed)
  rows = ep.pack_features(feats, layout, token_keys=("input_ids", "input_mask", "segment_ids"))
  assert layout.num_rows < N    # the test packs for real
  return layout, rows


def _ce(logits, labels):
  return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], axis=-1)[..., 0]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_GRADIENTS else n
                                  for n in ENCODERS])
def test_packed_rows_give_the_same_per_example_logits_losses_and_gradients(name):
  cfg = BertConfig(**ENCODERS[name])
  feats = examples()
  layout, rows = packed(feats)
  plain = heads.BertForSequenceClassification(cfg, LABELS)
  pack = heads.BertForSequenceClassification(cfg.replace(max_examples_per_row=K), LABELS)
  params = plain.init(jax.random.key(0), feats["input_ids"], feats["input_mask"], feats["segment_ids"])["params"]

  def loss_plain(p):
    logits = plain.apply({"params": p}, feats["input_ids"], feats["input_mask"], feats["segment_ids"])["logits"]
    return jnp.sum(_ce(logits, feats["label_ids"])), logits

  def loss_packed(p):
    logits = pack.apply({"params": p}, rows["input_ids"], rows["input_mask"], rows["segment_ids"])["logits"]
    return jnp.sum(_ce(logits, rows["label_ids"]) * rows["example_weight"]), logits

  # jitted: one compile each is faster than the op-by-op backward pass of eager mode
  (l1, logits1), g1 = jax.jit(jax.value_and_grad(loss_plain, has_aux=True))(params)
  (l2, logits2), g2 = jax.jit(jax.value_and_grad(loss_packed, has_aux=True))(params)
  assert logits2.shape == (layout.num_rows, K, LABELS)
  np.testing.assert_allclose(ep.unpack_outputs({"l": logits2}, layout, False)["l"], logits1, atol=1e-5)
  np.testing.assert_allclose(l2, l1, rtol=1e-5)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g1), jax.tree_util.tree_leaves(g2)):
    np.testing.assert_allclose(b, a, atol=1e-5, err_msg=jax.tree_util.keystr(path))


NER_TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def ner_examples(seed=0, n=N):
  """examples() as NER windows: words' first sub-tokens in word_mask (later sub-tokens, [CLS], [SEP] are holes),
  valid BIO tags there (-100 elsewhere), and some windows flagged as continuing / continued sentences."""
  feats = examples(seed, n)
  rng = np.random.default_rng(seed + 100)
  word_mask = np.zeros((n, T), np.int32)
  labels = np.full((n, T), -100, np.int32)
  for i, length in enumerate(feats["input_mask"].sum(-1)):
    prev = 0
    for p in range(1, length - 1):
      if rng.random() < 0.3:            # a later sub-token of the word before
        continue
      word_mask[i, p] = 1
      tag = int(rng.choice([0, 1, 3] + ([prev + 1] if prev in (1, 3) else [prev] if prev in (2, 4) else [])))
      labels[i, p] = prev = tag
  feats.update(word_mask=word_mask, label_ids=labels, window_continues=rng.integers(0, 2, n).astype(np.int32),
               window_continued=rng.integers(0, 2, n).astype(np.int32))
  return feats


@pytest.mark.parametrize("name", ["bert_post_ln", pytest.param("lstm", marks=pytest.mark.slow)])  # lstm: ~10 s
def test_packed_rows_give_the_crf_head_the_same_per_example_loss_gradients_and_viterbi_tags(name):
  """Each example of a packed row is its own CRF chain: its log-likelihood (start / end at its own words, no
  transition to a neighbour, its own partition), the gradients of the NER loss and the decoded tags equal the
  unpacked run's."""
  cfg = BertConfig(**ENCODERS[name])
  feats = ner_examples(seed=6)
  layout = ep.best_fit(ep.lengths_of(feats["input_mask"]), T, K, seed=6)
  rows = ep.pack_features(feats, layout, ("input_ids", "input_mask", "segment_ids", "word_mask", "label_ids"),
                          pad_values={"label_ids": -100})
  assert layout.num_rows < N and rows["window_continues"].shape == (layout.num_rows, K)
  task = get_task("ner", label_list=list(NER_TAGS), crf=True)
  keys = ("input_ids", "input_mask", "segment_ids", "word_mask", "window_continues", "window_continued")
  plain, pack = (heads.BertForTokenClassificationCRF(c, NER_TAGS) for c in (cfg, cfg.replace(max_examples_per_row=K)))
  params = plain.init(jax.random.key(3), *(feats[k] for k in keys[:3]))["params"]

  def loss(model, batch, p):
    """(the task's loss: summed sentence NLL over the labelled words, (per-example log-likelihoods, tags))"""
    out = model.apply({"params": p}, *(batch[k] for k in keys[:3]), **{k: batch[k] for k in keys[3:]})
    args = (out["logits"], batch["label_ids"], batch["label_ids"] != -100)
    crf_args = (out["crf_transitions"], out["crf_start"], out["crf_end"])
    ll = (crf.packed_log_likelihood(*args, batch["input_mask"], *crf_args) if out["crf_start"].ndim == 3
          else crf.crf_log_likelihood(*args, *crf_args))
    sums = task.loss_sums(out, batch)
    return sums["task_loss_sum"] / sums["task_weight_sum"], (ll, out["crf_tags"])

  batch1 = dict(feats, example_weight=np.ones(N, np.float32))
  batch2 = dict(rows, example_weight=(rows["example_weight"].sum(-1) > 0).astype(np.float32))   # data.pack_split's
  # jitted: one compile each is faster than the op-by-op backward pass of eager mode
  (l1, (ll1, tags1)), g1 = jax.jit(jax.value_and_grad(lambda p: loss(plain, batch1, p), has_aux=True))(params)
  (l2, (ll2, tags2)), g2 = jax.jit(jax.value_and_grad(lambda p: loss(pack, batch2, p), has_aux=True))(params)
  assert ll2.shape == (layout.num_rows, K) and float(jnp.min(ll1)) > -1e3   # valid gold paths: no NEG penalty
  np.testing.assert_allclose(ep.unpack_outputs({"ll": ll2}, layout, False)["ll"], ll1, rtol=1e-5, atol=1e-5)
  got_tags = ep.unpack_outputs({"t": tags2}, layout, True)["t"]
  np.testing.assert_array_equal(got_tags * feats["word_mask"], np.asarray(tags1) * feats["word_mask"])
  assert len(np.unique(np.asarray(tags1)[feats["word_mask"] > 0])) > 1   # a path, not one tag everywhere
  np.testing.assert_allclose(l2, l1, rtol=1e-5)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g1), jax.tree_util.tree_leaves(g2)):
    np.testing.assert_allclose(b, a, atol=1e-5, err_msg=jax.tree_util.keystr(path))


def _token_outputs(make, key, cfg, seed):
  """(unpacked, packed-then-unpacked) per-token outputs [N, T, ...] of make(config), zeros at padding."""
  feats = examples(seed=seed)
  layout, rows = packed(feats, seed=seed)
  real = feats["input_mask"][..., None] > 0
  params = make(cfg).init(jax.random.key(1), feats["input_ids"], feats["input_mask"], feats["segment_ids"])
  want = make(cfg).apply(params, feats["input_ids"], feats["input_mask"], feats["segment_ids"])[key]
  got = make(cfg.replace(max_examples_per_row=K)).apply(params, rows["input_ids"], rows["input_mask"],
                                                         rows["segment_ids"])[key]
  got = ep.unpack_outputs({key: got}, layout, token_level=True)[key]
  want, got = np.asarray(want).reshape(N, T, -1), np.asarray(got).reshape(N, T, -1)
  return np.where(real, want, 0), np.where(real, got, 0)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_FORWARD else n
                                  for n in ENCODERS])
def test_packed_rows_give_the_same_token_logits(name):
  want, got = _token_outputs(lambda c: heads.BertForTokenClassification(c, LABELS), "logits",
                             BertConfig(**ENCODERS[name]), seed=1)
  np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.slow   # one more family's compile
def test_packed_rows_give_the_same_electra_discriminator_logits():
  want, got = _token_outputs(ElectraDiscriminator, "disc_logits", BertConfig(**TINY), seed=4)
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_every_pooling_reads_each_example_of_a_packed_row_alone():
  cfg = BertConfig(**TINY)
  feats = examples(seed=2)
  layout, rows = packed(feats, seed=2)
  plain, pack = BertModel(cfg), BertModel(cfg.replace(max_examples_per_row=K))
  params = plain.init(jax.random.key(2), feats["input_ids"], feats["input_mask"], feats["segment_ids"])
  enc = plain.apply(params, feats["input_ids"], feats["input_mask"], feats["segment_ids"])
  enc_packed = pack.apply(params, rows["input_ids"], rows["input_mask"], rows["segment_ids"])
  for pooling in heads.POOLINGS:
    want = heads.pool(enc, feats["input_mask"], pooling)
    got = heads.pool(enc_packed, rows["input_mask"], pooling, K)
    np.testing.assert_allclose(ep.unpack_outputs({"v": got}, layout, False)["v"], want, atol=1e-5, err_msg=pooling)


def _row_of_two(first_len=9, second_len=11):
  ids = np.zeros((1, T), np.int32)
  ids[0, :first_len] = 1
  ids[0, first_len:first_len + second_len] = 2
  return jnp.asarray(ids), first_len, first_len + second_len


@pytest.mark.parametrize("impl", ["einsum", "xla"])
def test_no_token_of_a_packed_row_sees_another_example_through_the_model(impl):
  """Changing example 2's tokens leaves example 1's outputs bit for bit; the same row with packing off (BERT's
  padding mask) moves them, so the check can fail."""
  cfg = BertConfig(**TINY, attention_impl=impl)
  input_mask, a, b = _row_of_two()
  rng = np.random.default_rng(3)
  ids = jnp.asarray(rng.integers(5, 60, (1, T)), jnp.int32)
  other = ids.at[0, a:b].set(jnp.asarray(rng.integers(5, 60, b - a), jnp.int32))
  seg = jnp.zeros_like(ids)

  def first_example(c, x):
    model = heads.BertForTokenClassification(c, LABELS)
    params = model.init(jax.random.key(0), ids, input_mask, seg)
    return np.asarray(model.apply(params, x, input_mask, seg)["logits"][0, :a])

  packed_cfg = cfg.replace(max_examples_per_row=2)
  np.testing.assert_array_equal(first_example(packed_cfg, other), first_example(packed_cfg, ids))
  assert np.abs(first_example(cfg, other) - first_example(cfg, ids)).max() > 1e-6


@pytest.mark.parametrize("path", ["einsum", "xla", "pallas_flash"])
def test_no_query_of_a_packed_row_reads_another_examples_keys_on_any_cpu_runnable_kernel(path):
  t = 128                                                   # the Pallas kernel's block
  ids = np.zeros((1, t), np.int32)
  ids[0, :50], ids[0, 50:90] = 1, 2
  ids = jnp.asarray(ids)
  q, k, v = (jax.random.normal(key, (1, t, 2, 16)) for key in jax.random.split(jax.random.key(0), 3))
  k2 = k.at[:, 50:90].add(3.0)
  v2 = v.at[:, 50:90].add(3.0)

  def run(k, v):
    if path == "pallas_flash":
      with pltpu.force_tpu_interpret_mode():
        return attention.pallas_flash_attention(q, k, v, ids)
    if path == "einsum":
      return attention.einsum_attention(q, k, v, example_mask(ids))
    return jax.nn.dot_product_attention(q, k, v, mask=example_mask(ids), implementation="xla")

  base, moved = np.asarray(run(k, v)), np.asarray(run(k2, v2))
  np.testing.assert_allclose(moved[:, :50], base[:, :50], atol=1e-6)
  assert np.abs(moved[:, 50:90] - base[:, 50:90]).max() > 1e-2   # example 2 itself did change


def test_auto_and_named_cudnn_paths_never_run_on_packed_rows():
  for impl in ("auto", "cudnn", "cudnn_dropout"):
    for det in (True, False):
      choice = attention.resolve_attention("gpu", 0.1, det, "bfloat16", 64, 128, impl, unverified=frozenset(),
                                           packed=True)
      assert choice.path in attention.PACKED_PATHS, (impl, det, choice)
  assert attention.choose_attention("tpu", 0.0, True, "bfloat16", 64, 128, "pallas_flash", packed=True) == \
      "pallas_flash"


class UnstatedFamily(encoders.EncoderFamily):
  """A family that does not state `packs` (the lstm's module, whose restarts it does not vouch for)."""
  name = "unstated"
  module = LstmEncoder


@pytest.fixture
def unstated_family(monkeypatch):
  monkeypatch.setattr(encoders, "FAMILIES", dict(encoders.FAMILIES))   # the registration ends with the test
  encoders.register(UnstatedFamily)


def test_a_family_that_does_not_state_it_packs_is_refused_packed_rows_naming_those_that_do(unstated_family):
  with pytest.raises(ValueError, match="max_examples_per_row=4 .*needs encoder=.transformer. or encoder=.lstm.*"
                                       "encoder=.unstated. would run across the examples of a row"):
    BertConfig(**dict(TINY, encoder="unstated", max_examples_per_row=4))


# the families other than the transformer's (whose attention masks the tests above check on every path)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_FORWARD else n
                                  for n, fields in ENCODERS.items() if fields.get("encoder")])
def test_no_token_of_a_packed_row_moves_another_examples_outputs_in_any_family(name):
  """A row of three examples: changing the middle one leaves the first (what a forward recurrence or a left
  context would carry) and the last (a backward one) bit for bit; the same row read as one example (input_mask
  0/1) moves both, so the check can fail."""
  cfg = BertConfig(**ENCODERS[name])
  ids_of = np.zeros((1, T), np.int32)
  ids_of[0, :7], ids_of[0, 7:15], ids_of[0, 15:26] = 1, 2, 3
  rng = np.random.default_rng(5)
  ids = jnp.asarray(rng.integers(5, 60, (1, T)), jnp.int32)
  other = ids.at[0, 7:15].set(jnp.asarray(rng.integers(5, 60, 8), jnp.int32))
  seg = jnp.zeros_like(ids)
  model = heads.BertForTokenClassification(cfg, LABELS)
  params = model.init(jax.random.key(0), ids, jnp.asarray(ids_of > 0, jnp.int32), seg)

  def outside(c, x, mask):
    logits = np.asarray(heads.BertForTokenClassification(c, LABELS).apply(params, x, jnp.asarray(mask), seg)["logits"])
    return np.concatenate([logits[0, :7], logits[0, 15:26]])

  packed_cfg = cfg.replace(max_examples_per_row=3)
  np.testing.assert_array_equal(outside(packed_cfg, other, ids_of), outside(packed_cfg, ids, ids_of))
  one = (ids_of > 0).astype(np.int32)
  moved = np.abs(outside(cfg, other, one) - outside(cfg, ids, one))
  assert moved[:7].max() > 1e-6 and moved[7:].max() > 1e-6


@pytest.mark.parametrize("family", encoders.names())
def test_every_registered_family_either_packs_and_is_checked_here_or_is_refused_packed_rows(family):
  fam = encoders.family(family)
  if fam.packs:
    assert family == "transformer" or family in ENCODERS     # a packing family gets the equality tests above
  else:
    with pytest.raises(ValueError, match="max_examples_per_row"):
      BertConfig(**dict(TINY, encoder=family, max_examples_per_row=2, **FAMILY_FIELDS.get(family, {})))
