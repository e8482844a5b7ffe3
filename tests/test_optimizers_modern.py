"""StableAdamW (per-tensor update clipping, decoupled decay off norms and biases), the warmup-stable-decay
schedule with linear and 1-sqrt decay, against NumPy references of their definitions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.engine import optimizers
from bert_jax.errors import UserError


def settings(**changes):
  base = dict(name="stable_adamw", learning_rate=1e-3, schedule="constant", power=1.0, end_learning_rate=0.0,
              weight_decay=1e-5, b1=0.9, b2=0.98, eps=1e-6, clip_norm=0.0, bias_correction=True)
  return optimizers.OptimizerSettings(**{**base, **changes})


def reference_stable_adamw(params, grads_seq, lr, b1, b2, eps, wd, decays):
  """NumPy StableAdamW (Wortsman et al. 2023, Algorithm 1) with decoupled decay w *= 1 - wd * lr_t / lr."""
  p = {k: v.astype(np.float64) for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in p.items()}
  rms_seen = []
  v = {k: np.zeros_like(v) for k, v in p.items()}
  for t, g in enumerate(grads_seq, start=1):
    for k in p:
      m[k] = b1 * m[k] + (1 - b1) * g[k]
      v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
      m_hat, v_hat = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
      rms = np.sqrt(np.mean(g[k] ** 2 / np.maximum(v_hat, eps ** 2)))
      rms_seen.append(rms)
      step = lr / max(1.0, rms)
      p[k] = p[k] - step * (m_hat / (np.sqrt(v_hat) + eps) + (wd / lr * p[k] if decays[k] else 0.0))
  return p, max(rms_seen)


def test_stable_adamw_equals_the_reference_with_update_clipping_and_no_decay_on_norms_or_biases():
  rng = np.random.default_rng(0)
  params = {"dense": {"kernel": rng.normal(size=(4, 3)).astype(np.float32),
                      "bias": rng.normal(size=(3,)).astype(np.float32)},
            "attn_norm": {"scale": rng.normal(size=(3,)).astype(np.float32)}}
  # Step 3's gradient is 50x the earlier ones: v-hat lags, RMS(g^2 / v-hat) > 1, and the step is clipped.
  grads = [jax.tree.map(lambda x: rng.normal(size=x.shape).astype(np.float32) * s, params) for s in (1, 1, 50, 1)]
  tx, _ = optimizers.make_optimizer(settings(weight_decay=0.1), 4, 0)
  state, p = tx.init(params), params
  for g in grads:
    upd, state = tx.update(g, state, p)
    p = jax.tree.map(lambda a, b: a + b, p, upd)
  flat = lambda tree: {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(x)  # noqa: E731
                       for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
  fp, fg = flat(params), [flat(g) for g in grads]
  decays = {k: ("norm" not in k and "bias" not in k) for k in fp}
  assert decays == {"dense/kernel": True, "dense/bias": False, "attn_norm/scale": False}
  want, max_rms = reference_stable_adamw(fp, fg, 1e-3, 0.9, 0.98, 1e-6, 0.1, decays)
  assert max_rms > 1.5        # the spike is clipped: the test covers the division, not only Adam
  for k, got in flat(p).items():
    np.testing.assert_allclose(got, want[k], rtol=1e-5, atol=1e-7)
  # Plain AdamW with the same decay moves further on the spike: the clipping changed the result.
  adamw, _ = optimizers.make_optimizer(settings(name="adamw", weight_decay=0.0), 4, 0)
  s2, q = adamw.init(params), params
  for g in grads:
    upd, s2 = adamw.update(g, s2, q)
    q = jax.tree.map(lambda a, b: a + b, q, upd)
  assert np.abs(flat(q)["dense/bias"] - fp["dense/bias"]).sum() > np.abs(flat(p)["dense/bias"] - fp["dense/bias"]).sum()


def test_stable_adamw_decoupled_decay_is_weight_decay_times_the_schedule_fraction():
  params = {"w": jnp.ones((2, 2))}
  tx, _ = optimizers.make_optimizer(settings(weight_decay=1e-2, learning_rate=5e-4), 10, 0)
  upd, _ = tx.update({"w": jnp.zeros((2, 2))}, tx.init(params), params)
  # Zero gradient: the update is the decay alone, w * 1e-2 (not lr * 1e-2 = 5e-6 as optax.adamw's).
  np.testing.assert_allclose(np.asarray(upd["w"]), -1e-2, rtol=1e-6)


@pytest.mark.parametrize("shape", ["linear", "1-sqrt"])
def test_wsd_warms_up_holds_the_peak_then_decays_over_the_last_fraction(shape):
  opt = settings(schedule="wsd", decay_fraction=0.2, decay_shape=shape, end_learning_rate=1e-4)
  sched = optimizers.make_schedule(opt, 100, 10)
  lr = np.asarray([float(sched(t)) for t in range(101)])
  np.testing.assert_allclose(lr[:11], 1e-3 * np.arange(11) / 10, rtol=1e-6)
  np.testing.assert_allclose(lr[10:81], 1e-3, rtol=1e-6)                  # stable until step 80
  frac = (np.arange(80, 101) - 80) / 20
  frac = np.sqrt(frac) if shape == "1-sqrt" else frac
  np.testing.assert_allclose(lr[80:], 1e-3 - 9e-4 * frac, rtol=1e-5)
  assert lr[100] == pytest.approx(1e-4)


def test_wsd_bad_shape_or_fraction_is_a_user_error():
  with pytest.raises(UserError, match="decay_shape='cosine'"):
    optimizers.make_schedule(settings(schedule="wsd", decay_shape="cosine"), 10, 1)
  with pytest.raises(UserError, match="decay_fraction=1.5"):
    optimizers.make_schedule(settings(schedule="wsd", decay_fraction=1.5), 10, 1)
