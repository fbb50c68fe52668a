"""R2D2 loss math (Kapturowski et al., 2019), in pure TensorFlow.

Value rescaling, n-step double-Q targets and sequence priorities; nothing here knows about
networks, replay or the data pipeline.

Conventions: sequence tensors are time-major ``[T, B]`` (``[T, B, A]`` for Q-values). Entry
``t`` of ``rewards`` and ``discounts`` belongs to the transition ``x_t --a_t--> x_{t+1}``:
``rewards[t]`` is the reward after ``a_t`` and ``discounts[t] = gamma * (1 - done_{t+1})``.
"""

from __future__ import annotations

import tensorflow as tf

#: The epsilon of R2D2's value rescaling.
DEFAULT_RESCALE_EPS = 1e-3


def value_rescale(x, eps: float = DEFAULT_RESCALE_EPS) -> tf.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x: squashes large returns (paper, Section 2.3)."""
    x = tf.convert_to_tensor(x, tf.float32)
    return tf.sign(x) * (tf.sqrt(tf.abs(x) + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x, eps: float = DEFAULT_RESCALE_EPS) -> tf.Tensor:
    """The exact inverse of :func:`value_rescale` (Pohlen et al. 2018, Proposition A.2)::

        h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)
    """
    x = tf.convert_to_tensor(x, tf.float32)
    root = (tf.sqrt(1.0 + 4.0 * eps * (tf.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return tf.sign(x) * (tf.square(root) - 1.0)


def n_step_double_q_targets(q_online, q_target, rewards, discounts, n: int,
                            eps: float = DEFAULT_RESCALE_EPS) -> tf.Tensor:
    """Rescaled n-step double-Q targets for the first ``T - n`` steps of a sequence.

    For t < T - n::

        G_t = sum_{k<n} (prod_{j<k} d_{t+j}) r_{t+k}
              + (prod_{j<n} d_{t+j}) h^-1(Q_target(x_{t+n}, argmax_a Q_online(x_{t+n}, a)))
        y_t = h(G_t)

    A zero discount (an episode end) removes every later reward and the bootstrap, so nothing
    from the next episode leaks in. Targets carry no gradient.

    Args:
      q_online: float32 [T, B, A], the online network's Q-values (selects the bootstrap action).
      q_target: float32 [T, B, A], the target network's Q-values (evaluates it), in the
        rescaled space.
      rewards: float32 [T, B].
      discounts: float32 [T, B].
      n: the number of steps, 1 <= n < T.
      eps: the value-rescaling epsilon.

    Returns:
      float32 [T - n, B].
    """
    q_online = tf.convert_to_tensor(q_online, tf.float32)
    q_target = tf.convert_to_tensor(q_target, tf.float32)
    rewards = tf.convert_to_tensor(rewards, tf.float32)
    discounts = tf.convert_to_tensor(discounts, tf.float32)
    t = tf.shape(rewards)[0]
    m = t - n
    best = tf.argmax(q_online, axis=-1, output_type=tf.int32)
    bootstrap = inverse_value_rescale(
        tf.gather(q_target, best, axis=-1, batch_dims=2), eps)       # [T, B]
    returns = tf.zeros_like(rewards[:m])
    scale = tf.ones_like(rewards[:m])
    for k in range(n):
        returns += scale * rewards[k:k + m]
        scale *= discounts[k:k + m]
    returns += scale * bootstrap[n:n + m]
    return tf.stop_gradient(value_rescale(returns, eps))


def sequence_priorities(td_errors, eta: float = 0.9) -> tf.Tensor:
    """R2D2's priority of each sequence: eta * max_t |delta_t| + (1 - eta) * mean_t |delta_t|.

    Args:
      td_errors: float32 [T, B].
      eta: the mix of max and mean (0.9 in the paper).

    Returns:
      float32 [B].
    """
    abs_td = tf.abs(tf.convert_to_tensor(td_errors, tf.float32))
    return eta * tf.reduce_max(abs_td, axis=0) + (1.0 - eta) * tf.reduce_mean(abs_td, axis=0)


def epsilon_for_actor(index: int, num_actors: int, base: float = 0.4,
                      alpha: float = 7.0) -> float:
    """Ape-X / R2D2 exploration: actor i of N acts with epsilon base ** (1 + alpha * i / (N - 1)).

    Actor 0 explores most (``base``), actor N-1 least (``base ** (1 + alpha)``); a single actor
    gets ``base``.
    """
    if num_actors <= 1:
        return base
    return base ** (1.0 + alpha * index / (num_actors - 1))
