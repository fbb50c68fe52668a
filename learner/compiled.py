"""``tf.function``s with an input signature, called through their one concrete function.

A ``tf.function`` with an input signature traces one graph, but a call through the polymorphic
function still binds its arguments and looks the trace up every time: measured here, an
inference call of the CartPole MLP cost ~0.5-0.7 ms of CPU that way against ~0.3 ms through the
concrete function, and every env step of a small-model run pays that per batch.

The concrete path also skips binding arguments to the signature on every call (its flat call:
another quarter of an inference call's CPU).

A concrete function runs on the devices of the scope it was traced in, while the polymorphic
function traces once per device scope. So the concrete path is only for functions always called
in one scope (one inference device, one training device); with inference spread round-robin
over several devices, or a distributed training step, the agents keep the polymorphic call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf
from tensorflow.python.eager.polymorphic_function.concrete_function import ConcreteFunction


class Compiled:
    """A ``tf.function`` of ``fn`` with ``input_signature``, traced on its first call.

    Args:
      fn: the Python function to trace.
      input_signature: the ``tf.TensorSpec`` structure of its arguments.
      concrete: call through the concrete function (one device scope only, see the module
        docstring); False keeps the polymorphic call.
      jit_compile: passed to ``tf.function`` (XLA); None leaves TensorFlow's default.
    """

    def __init__(
        self,
        fn: Callable,
        input_signature: Sequence,
        concrete: bool = True,
        jit_compile: bool | None = None,
    ):
        # No autograph: the graphs use tf.scan and Python control flow over Python values
        # only, and converting them first doubled the tracing time (measured: the V-trace
        # training step 1.3 s of CPU against 0.67 s), which stands between the first
        # unrolls and the first update.
        self.function = tf.function(
            fn, input_signature=input_signature, jit_compile=jit_compile, autograph=False
        )
        self._concrete_wanted = concrete
        self._concrete = None

    def __call__(self, *args):
        """Runs the graph on ``args`` (nested as the input signature)."""
        if not self._concrete_wanted:
            return self.function(*args)
        concrete = self._concrete
        if concrete is None:
            # Tracing twice from two threads at once is harmless: the second trace is a cache
            # hit of the same function.
            concrete = self.function.get_concrete_function()
            self._specs = tf.nest.flatten(concrete.structured_input_signature[0])
            self._concrete = concrete
        if _CALL_FLAT is None:
            return concrete(*args)
        # The flat call skips binding the arguments to the signature again (a quarter of an
        # MLP inference call's CPU); the callers pass arrays of the signature's shapes and
        # dtypes, checked where they came off the wire.
        flat = tf.nest.flatten(args)
        if len(flat) != len(self._specs):
            raise ValueError(f"expected {len(self._specs)} tensors, got {len(flat)}")
        tensors = [tf.convert_to_tensor(x, dtype=spec.dtype) for x, spec in zip(flat, self._specs)]
        return _CALL_FLAT(concrete, tensors, concrete.captured_inputs)


#: ConcreteFunction's flat call (TensorFlow 2.x, pinned in constraints.txt); None falls back on
#: the public call.
_CALL_FLAT = getattr(ConcreteFunction, "_call_flat", None)
