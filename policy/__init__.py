"""``seedrl.policy``: load a trained policy and act with it, outside any run.

    policy = seedrl.policy.load("runs/cartpole-vtrace")     # or a checkpoint dir, gs://...
    action, state = policy.act(observation)                 # state=None at episode starts

The implementation is the learner's (:mod:`seedrl.learner.policy`); this name is the public one.
"""

from seedrl.learner.policy import Policy, PolicyError, load

__all__ = ["Policy", "PolicyError", "load"]
