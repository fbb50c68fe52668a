"""Compiled runs a tf.function with an input signature through one concrete function."""

import numpy as np
import pytest
import tensorflow as tf

from seedrl.learner.compiled import Compiled


def make(concrete):
    traces = []

    def double_and_sum(x, extra):
        traces.append(1)
        return x * 2.0, tf.add_n([tf.reduce_sum(x)] + [tf.reduce_sum(e) for e in extra])

    return Compiled(
        double_and_sum,
        [tf.TensorSpec([None, 3], tf.float32), [tf.TensorSpec([None], tf.float32)]],
        concrete=concrete,
    ), traces


def test_calls_trace_once_for_every_batch_size_and_match_the_python_function():
    for concrete in (True, False):
        fn, traces = make(concrete)
        for n in (1, 4, 7):
            x = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
            extra = np.ones(n, np.float32)
            doubled, total = fn(x, [extra])
            np.testing.assert_array_equal(doubled.numpy(), x * 2)
            assert float(total) == x.sum() + n
        assert len(traces) == 1, concrete
    fn, _ = make(True)
    with pytest.raises((ValueError, TypeError)):
        fn(np.zeros((1, 3), np.float32), [np.zeros(1, np.float32)] * 2)  # one tensor too many
