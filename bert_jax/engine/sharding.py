"""One device mesh with named axes, logical-to-mesh rules, and parameters created directly on the mesh.

The model names every parameter axis logically (`bert_jax.models.axes`); a rule table maps logical names to
the mesh axes ('data', 'fsdp', 'tensor'). A single CPU or GPU is a 1x1x1 mesh, so one code path serves a
laptop and a pod slice.

API (no TensorFlow):
  make_mesh(shape=(-1, 1, 1), axis_names=("data", "fsdp", "tensor"), devices=None) -> Mesh
  normalize_rules(rules) -> tuple of (logical, mesh axes) pairs (lists from configs become tuples)
  mesh_context(mesh, rules)      context manager: jax.set_mesh + nn.logical_axis_rules, so the model's
                                 nn.with_logical_constraint calls become sharding constraints
  batch_sharding(mesh, rules)    NamedSharding of a batch: leading axis over the mesh axes of the
                                 logical 'activation_batch' axis (data x fsdp by default)
  replicated(mesh)               NamedSharding(mesh, P())
  logical_shardings(boxed_tree, mesh, rules)  nn.Partitioned metadata -> NamedSharding tree
  fit_to_shape(sharding, shape)  replicate dimensions a mesh axis does not divide
  batch_shards(mesh, rules)      number of shards of the batch axis (global batch must divide)
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Optional, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from bert_jax.models import axes

DEFAULT_AXIS_NAMES = ("data", "fsdp", "tensor")


def resolve_mesh_shape(shape: Sequence[int], num_devices: int) -> tuple:
  """Replaces one -1 by the remaining devices; checks that the product equals the device count."""
  shape = [int(s) for s in shape]
  if sum(s == -1 for s in shape) > 1:
    raise ValueError(f"mesh shape {tuple(shape)}: at most one axis may be -1")
  known = math.prod(s for s in shape if s != -1)
  if any(s == 0 or s < -1 for s in shape) or num_devices % known:
    raise ValueError(f"mesh shape {tuple(shape)} does not divide the {num_devices} devices")
  shape = [num_devices // known if s == -1 else s for s in shape]
  if math.prod(shape) != num_devices:
    raise ValueError(f"mesh shape {tuple(shape)} uses {math.prod(shape)} devices but {num_devices} are "
                     "available; use -1 on one axis to take the rest")
  return tuple(shape)


def make_mesh(shape: Sequence[int] = (-1, 1, 1), axis_names: Sequence[str] = DEFAULT_AXIS_NAMES,
              devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A Mesh over `devices` (default: all global devices) with Auto axis types (GSPMD propagation).

  The device order follows the physical topology on TPUs (mesh_utils); on CPU/GPU a plain reshape.
  """
  devices = list(jax.devices() if devices is None else devices)
  axis_names = tuple(axis_names)
  if len(axis_names) != len(tuple(shape)):
    raise ValueError(f"mesh shape {tuple(shape)} and axis names {axis_names} differ in length")
  shape = resolve_mesh_shape(shape, len(devices))
  try:
    if jax.process_count() > 1 and devices[0].platform != "tpu":
      # Multi-host GPU/CPU: keep each host's devices contiguous along the leading (data) axis.
      device_array = np.asarray(sorted(devices, key=lambda d: (d.process_index, d.id))).reshape(shape)
    else:
      device_array = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
  except Exception:  # noqa: BLE001 - topology helpers are best effort; a reshape is always valid
    device_array = np.asarray(devices).reshape(shape)
  auto = (jax.sharding.AxisType.Auto,) * len(axis_names)
  return Mesh(device_array, axis_names, axis_types=auto)


def normalize_rules(rules) -> tuple:
  """((logical, mesh_axis | (mesh_axes...) | None), ...) with lists turned into tuples (hashable)."""
  out = []
  for rule in rules if rules is not None else axes.DEFAULT_RULES:
    name, target = rule
    if isinstance(target, (list, tuple)):
      target = tuple(target)
    out.append((name, target))
  return tuple(out)


def _set_mesh(mesh: Mesh):
  if hasattr(jax, "set_mesh"):
    return jax.set_mesh(mesh)
  if hasattr(jax.sharding, "use_mesh"):
    return jax.sharding.use_mesh(mesh)
  return mesh  # old JAX: `with mesh:` sets the physical mesh resource env


@contextlib.contextmanager
def mesh_context(mesh: Mesh, rules):
  """Mesh + logical rules in scope: flax's with_logical_constraint reads both at trace time."""
  with _set_mesh(mesh), nn.logical_axis_rules(normalize_rules(rules)):
    yield


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_spec(rules) -> P:
  """PartitionSpec of a batch array: its leading axis over the mesh axes of 'activation_batch'."""
  mesh_axes = nn.logical_to_mesh_axes((axes.ACT_BATCH,), normalize_rules(rules))
  return P(*mesh_axes)


def batch_sharding(mesh: Mesh, rules) -> NamedSharding:
  return NamedSharding(mesh, batch_spec(rules))


def batch_shards(mesh: Mesh, rules) -> int:
  """How many ways the batch axis is split (the global batch must be a multiple)."""
  spec = batch_spec(rules)[0]
  names = () if spec is None else (spec if isinstance(spec, tuple) else (spec,))
  return math.prod(mesh.shape[n] for n in names)


def fit_to_shape(s: NamedSharding, shape) -> NamedSharding:
  """Drops mesh axes from dimensions they do not divide (e.g. vocab 30522 over tensor=4): that dimension
  is replicated instead of failing to compile."""
  spec = list(s.spec) + [None] * (len(shape) - len(s.spec))
  for i, (dim, ax) in enumerate(zip(shape, spec)):
    if ax is None:
      continue
    names = ax if isinstance(ax, tuple) else (ax,)
    if dim % math.prod(s.mesh.shape[a] for a in names):
      spec[i] = None
  return NamedSharding(s.mesh, P(*spec))


def logical_shardings(boxed_tree, mesh: Mesh, rules):
  """A tree with nn.Partitioned / LogicallyPartitioned leaves (e.g. jax.eval_shape(model.init)) ->
  NamedSharding per (unboxed) leaf. Unannotated leaves are replicated; mesh axes that do not divide a
  dimension are dropped for that dimension (fit_to_shape)."""
  specs = nn.get_partition_spec(boxed_tree)
  shardings = nn.logical_to_mesh_sharding(specs, mesh, normalize_rules(rules))
  values = nn.unbox(boxed_tree)
  return jax.tree.map(lambda sh, x: fit_to_shape(sh, x.shape) if hasattr(x, "shape") else sh, shardings, values)


def describe(mesh: Mesh) -> str:
  return " x ".join(f"{n}={s}" for n, s in mesh.shape.items()) + f" ({mesh.devices.size} devices)"
