"""The network the learner builds for the agent (``spec.agent.network``), and the bounds on
its sizes.
"""

from __future__ import annotations

import dataclasses

from seedrl.common.config.fields import param


#: Networks the learner knows how to build; ``spec.agent.network.name`` must be one of these.
NETWORKS = ("mlp", "nature_cnn", "impala_resnet", "football_smm")
#: ``auto`` resolves to one of the other two for the learner's device (seedrl.common.precision).
PRECISIONS = ("auto", "float32", "bfloat16")
#: Network sizes (``spec.agent.network``): well above any published RL network's, low enough
#: that a typo cannot make the learner allocate absurd memory. An 8192-wide dense layer after
#: another is 256 MiB of float32 weights (three times that with Adam's slots); a 4096-unit LSTM
#: after one, 770 MiB; a 512-channel residual stack, 45 MiB of weights but 84x84x512
#: activations per frame.
MAX_LAYER_WIDTH = 8192
MAX_HIDDEN_LAYERS = 16
MAX_LSTM_SIZE = 4096
MAX_CONV_CHANNELS = 512
MAX_CONV_STACKS = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class NetworkConfig:
    """The network the learner builds for the agent (``spec.agent.network``)."""

    name: str = param(
        "mlp", "Network architecture, one of: " + ", ".join(NETWORKS) + ".", choices=NETWORKS
    )
    hidden_sizes: list[int] = param(
        doc=f"Widths of the hidden layers of the MLP torso, input side first: 1 to "
        f"{MAX_HIDDEN_LAYERS} layers of at most {MAX_LAYER_WIDTH} units.",
        factory=lambda: [64, 64],
        ge=1,
        le=MAX_LAYER_WIDTH,
        min_items=1,
        max_items=MAX_HIDDEN_LAYERS,
    )
    activation: str = param(
        "tanh", "Activation of the hidden layers of the MLP.", choices=("relu", "tanh")
    )
    dense_size: int = param(
        256,
        f"Width of the dense layer after a conv torso (the Nature DQN used 512, IMPALA 256), "
        f"at most {MAX_LAYER_WIDTH}.",
        ge=1,
        le=MAX_LAYER_WIDTH,
    )
    resnet_channels: list[int] = param(
        doc=f"Channels of each residual stack of impala_resnet / football_smm; empty keeps the "
        f"network's own ([16, 32, 32] and [16, 32, 32, 32]). At most {MAX_CONV_STACKS} stacks "
        f"of at most {MAX_CONV_CHANNELS} channels.",
        factory=list,
        ge=1,
        le=MAX_CONV_CHANNELS,
        max_items=MAX_CONV_STACKS,
    )
    lstm_size: int = param(
        0,
        f"Units of an LSTM core after the torso, at most {MAX_LSTM_SIZE}; 0 for a feed-forward "
        f"network. The learner keeps each environment's LSTM state. Left out (or null): 512 "
        f"for r2d2, the paper's recurrent core (without one, burn-in does nothing and R2D2 is "
        f"an n-step double DQN), 0 for vtrace and ppo.",
        ge=0,
        le=MAX_LSTM_SIZE,
        default_by=("spec.agent.name", {"r2d2": 512}),
    )
    action_reward_inputs: bool = param(
        True,
        "With an LSTM core: it also reads the previous action (one-hot, or the "
        "normalised continuous action) and the reward that followed it, clipped to "
        "[-1, 1], as in SEED RL's networks and the R2D2 paper; both are zero on an "
        "episode's first step. Feed-forward networks ignore it.",
    )
    initial_std: float = param(
        1.0,
        "Initial standard deviation of a Gaussian policy (continuous actions), in the "
        "normalised action space [-1, 1] (its log is a trained variable). BatchPPO starts "
        "at 0.35; 1.0 explores the whole action range at first. Discrete actions ignore it.",
        gt=0.0,
    )
    precision: str = param(
        "auto",
        "Arithmetic of the torso: auto, float32, or bfloat16 (mixed precision: variables, "
        "the LSTM core, the heads and the losses stay float32). auto picks bfloat16 where "
        "the learner's device computes it natively (a TPU, an NVIDIA GPU of compute "
        "capability 8.0 or more, a CPU with AVX512_BF16 or AMX) and float32 elsewhere and for "
        "the mlp torso (dispatch-bound: bfloat16 only adds casts there); the "
        "learner logs its choice and seedrl validate says what it picks on the machine it "
        "runs on. bfloat16 trained the Nature CNN 1.7x as fast on a CPU with AVX512_BF16; "
        "where it is emulated it ran ~10x slower (the learner warns).",
        choices=PRECISIONS,
    )
