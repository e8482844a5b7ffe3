"""MetricWriter's TensorBoard events across a crash and a resume (bert_jax/engine/metric_writer.py)."""

import glob
import os
import struct
import time

from tensorboardX.proto import event_pb2

from bert_jax.engine.metric_writer import MetricWriter


def read_events(path):
  """The Event protos of one events file (TFRecord framing: length, crc, data, crc)."""
  out, data = [], open(path, "rb").read()
  i = 0
  while i < len(data):
    (n,) = struct.unpack("<Q", data[i:i + 8])
    event = event_pb2.Event()
    event.ParseFromString(data[i + 12:i + 12 + n])
    out.append(event)
    i += 12 + n + 4
  return out


def tensorboard_points(tb_dir, tag):
  """(step, value) of `tag` as TensorBoard shows them: files in order, and a SessionLog.START at step S drops
  the points at steps >= S read before it (TensorBoard's purge of a crashed run's orphaned events)."""
  points = []
  for path in sorted(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")), key=os.path.getmtime):
    for e in read_events(path):
      if e.HasField("session_log") and e.session_log.status == event_pb2.SessionLog.START:
        points = [p for p in points if p[0] < e.step]
      for v in e.summary.value:
        if v.tag == tag:
          points.append((e.step, round(v.simple_value, 4)))
  return points


def test_a_resumed_writer_hides_the_crashed_runs_events_after_the_checkpoint(tmp_path):
  # the crashed run logged steps 5..15, its last checkpoint was step 10; the resumed run logs 15 and 20 again
  first = MetricWriter(str(tmp_path))
  for step in (5, 10, 15):
    first.write(step, {"loss": float(step)})
  first.close()
  time.sleep(1.1)            # a new second: tensorboardX names an events file by its start time in seconds
  resumed = MetricWriter(str(tmp_path), purge_step=11)
  for step in (15, 20):
    resumed.write(step, {"loss": step + 0.5})
  resumed.close()
  # without purge_step TensorBoard drew both runs' step 15: (15, 15.0) and (15, 15.5)
  assert tensorboard_points(str(tmp_path / "tensorboard"), "train/loss") == [(5, 5.0), (10, 10.0), (15, 15.5),
                                                                            (20, 20.5)]


def test_pretraining_opens_its_writer_with_the_restored_step_as_the_purge_point():
  import inspect
  from bert_jax.pretrain import loop as pretrain
  assert "MetricWriter(plan.workdir, purge_step=step + 1)" in inspect.getsource(pretrain._run_phases)
