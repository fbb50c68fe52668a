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


def n_step_double_q_targets(
    q_online, q_target, rewards, discounts, n: int, eps: float = DEFAULT_RESCALE_EPS
) -> tf.Tensor:
    """Rescaled n-step double-Q targets of every transition of a sequence.

    A sequence of T observations x_0..x_{T-1} has T - 1 transitions. Transition t looks
    ``m = min(n, T - 1 - t)`` steps ahead: n steps where the sequence has them, fewer for its
    last ones (as SEED RL does), so that every transition gets a target::

        G_t = sum_{k<m} (prod_{j<k} d_{t+j}) r_{t+k}
              + (prod_{j<m} d_{t+j}) h^-1(Q_target(x_{t+m}, argmax_a Q_online(x_{t+m}, a)))
        y_t = h(G_t)

    A zero discount (an episode end) removes every later reward and the bootstrap, so nothing
    from the next episode leaks in. Targets carry no gradient.

    Args:
      q_online: float32 [T, B, A], the online network's Q-values (selects the bootstrap action).
      q_target: float32 [T, B, A], the target network's Q-values (evaluates it), in the
        rescaled space.
      rewards: float32 [T - 1, B], entry t the reward of transition t.
      discounts: float32 [T - 1, B], entry t is gamma * (1 - done_{t+1}).
      n: the number of steps, n >= 1.
      eps: the value-rescaling epsilon.

    Returns:
      float32 [T - 1, B].
    """
    q_online = tf.convert_to_tensor(q_online, tf.float32)
    q_target = tf.convert_to_tensor(q_target, tf.float32)
    rewards = tf.convert_to_tensor(rewards, tf.float32)
    discounts = tf.convert_to_tensor(discounts, tf.float32)
    m = tf.shape(rewards)[0]
    best = tf.argmax(q_online, axis=-1, output_type=tf.int32)
    bootstrap = inverse_value_rescale(
        tf.gather(q_target, best, axis=-1, batch_dims=2), eps
    )  # [T, B]
    # Past the end, rewards are 0 and discounts 1, and the bootstrap stays at the last
    # observation's: transition t then sums its m real steps and bootstraps from x_{t+m}.
    pad = n - 1
    rewards = tf.concat([rewards, tf.zeros([pad, tf.shape(rewards)[1]])], 0)
    discounts = tf.concat([discounts, tf.ones([pad, tf.shape(discounts)[1]])], 0)
    bootstrap = tf.concat([bootstrap[1:]] + [bootstrap[-1:]] * pad, 0)  # [T - 1 + pad]
    returns = tf.zeros_like(rewards[:m])
    scale = tf.ones_like(rewards[:m])
    for k in range(n):
        returns += scale * rewards[k : k + m]
        scale *= discounts[k : k + m]
    returns += scale * bootstrap[pad : pad + m]
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


def epsilon_for_env(index: int, num_envs: int, base: float = 0.4, alpha: float = 7.0) -> float:
    """Ape-X / R2D2 exploration over N envs: env i explores with epsilon
    ``base ** (1 + alpha * i / (N - 1))``, SEED RL's ``0.4 ** linspace(1, 8, N)``.

    Env 0 explores most (``base``), env N-1 least (``base ** (1 + alpha)``); a single env
    gets ``base``.
    """
    if num_envs <= 1:
        return base
    return base ** (1.0 + alpha * index / (num_envs - 1))
