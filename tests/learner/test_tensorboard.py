"""TensorBoard summaries land, readable, in a local directory or a gs:// prefix; a full disk is
counted, never raised, and summaries resume once there is room."""

import os

import pytest
import tensorflow as tf

from seedrl.common.storage import open_store, tensorboard_uri
from seedrl.learner.run_files import WriteFailures
from seedrl.learner.tensorboard import Summaries


def _read_scalars(directory):
    found = {}
    for name in os.listdir(directory):
        for record in tf.data.TFRecordDataset(os.path.join(directory, name)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                number = tf.make_ndarray(value.tensor).item()
                found.setdefault(value.tag, []).append((event.step, number))
    return found


def test_scalars_go_to_a_local_directory(tmp_path):
    summaries = Summaries(str(tmp_path / "tb"))
    summaries.write(
        100, {"return/mean": 20.5, "loss/total": 1.25, "missing": None, "nan": float("nan")}
    )
    summaries.write(200, {"return/mean": 30.0})
    summaries.close()
    scalars = _read_scalars(tmp_path / "tb")
    assert scalars["return/mean"] == [(100, 20.5), (200, 30.0)]
    assert scalars["loss/total"] == [(100, 1.25)]
    assert "missing" not in scalars and "nan" not in scalars


def test_scalars_are_copied_to_gcs(tmp_path, gcs_bucket):
    uri = f"gs://{gcs_bucket}/runs/x/tensorboard"
    summaries = Summaries(uri, sync_seconds=0)
    summaries.write(5, {"return/mean": 1.0})
    summaries.write(6, {"return/mean": 2.0})
    summaries.close()
    store = open_store(uri)
    names = store.list()
    assert names and all(n.startswith("events.out.tfevents.") for n in names)
    local = tmp_path / "copy"
    local.mkdir()
    for n in names:
        store.download_file(n, str(local / n))
    assert _read_scalars(local)["return/mean"] == [(5, 1.0), (6, 2.0)]


@pytest.mark.parametrize(
    "checkpoint_uri, run_dir, expected",
    [
        ("", "/runs/x", "/runs/x/tensorboard"),
        ("gs://b-1/p/", "/var/run/seedrl", "gs://b-1/p/tensorboard"),
        ("", None, None),
    ],
)
def test_summaries_live_beside_the_checkpoints_or_in_the_run_directory(
    checkpoint_uri, run_dir, expected
):
    assert tensorboard_uri(checkpoint_uri, run_dir) == expected


def test_a_writer_that_cannot_be_created_on_a_full_disk_is_retried_later(full_volume):
    # Issue 27, item 6: CreateSummaryFileWriter raised ResourceExhaustedError, uncaught: the
    # learner exited, and so did each restart on the same volume.
    now = [0.0]
    failures = WriteFailures()
    directory = os.path.join(full_volume.path, "tb")
    summaries = Summaries(directory, failures=failures, retry_seconds=30, clock=lambda: now[0])
    assert failures.counts == {"tensorboard": 1}
    summaries.write(100, {"return/mean": 1.0})  # not tried again before retry_seconds
    assert failures.counts == {"tensorboard": 1}
    now[0] = 30.0
    summaries.write(200, {"return/mean": 2.0})
    assert failures.counts == {"tensorboard": 2}
    full_volume.free()
    now[0] = 60.0
    summaries.write(300, {"return/mean": 3.0})
    summaries.close()
    assert failures.counts == {"tensorboard": 2}
    assert _read_scalars(directory)["return/mean"] == [(300, 3.0)]
    # The failed tries left no empty event file each.
    assert len(os.listdir(directory)) == 1


def test_a_writer_failing_mid_run_is_replaced_and_what_it_wrote_stays(full_volume):
    now = [0.0]
    failures = WriteFailures()
    directory = os.path.join(full_volume.path, "tb")
    full_volume.free()
    summaries = Summaries(directory, failures=failures, retry_seconds=30, clock=lambda: now[0])
    summaries.write(100, {"return/mean": 1.0})
    summaries.sync()
    full_volume.fill()
    # More than the event file's last page holds: the flush needs a page the disk lacks.
    summaries.write(200, {f"loss/term_{i}": float(i) for i in range(400)})
    summaries.sync()
    assert failures.counts["tensorboard"] >= 1
    full_volume.free()
    now[0] = 30.0
    summaries.write(300, {"return/mean": 3.0})
    summaries.close()
    returns = sorted(_read_scalars_tolerant(directory)["return/mean"])
    assert returns[0] == (100, 1.0) and returns[-1] == (300, 3.0)


def _read_scalars_tolerant(directory):
    """Like _read_scalars, but an event file cut short by the full disk ends where it was cut
    (as TensorBoard reads it)."""
    found = {}
    for name in sorted(os.listdir(directory)):
        try:
            for record in tf.data.TFRecordDataset(os.path.join(directory, name)):
                event = tf.compat.v1.Event.FromString(record.numpy())
                for value in event.summary.value:
                    number = tf.make_ndarray(value.tensor).item()
                    found.setdefault(value.tag, []).append((event.step, number))
        except tf.errors.DataLossError:
            pass
    return found
