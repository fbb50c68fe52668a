from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class EnvSpec(_message.Message):
    __slots__ = ("env_id", "observation_dtype", "observation_shape", "action_dtype", "action_shape", "num_actions", "action_low", "action_high")
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_DTYPE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_SHAPE_FIELD_NUMBER: _ClassVar[int]
    ACTION_DTYPE_FIELD_NUMBER: _ClassVar[int]
    ACTION_SHAPE_FIELD_NUMBER: _ClassVar[int]
    NUM_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    ACTION_LOW_FIELD_NUMBER: _ClassVar[int]
    ACTION_HIGH_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    observation_dtype: str
    observation_shape: _containers.RepeatedScalarFieldContainer[int]
    action_dtype: str
    action_shape: _containers.RepeatedScalarFieldContainer[int]
    num_actions: int
    action_low: _containers.RepeatedScalarFieldContainer[float]
    action_high: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, env_id: _Optional[str] = ..., observation_dtype: _Optional[str] = ..., observation_shape: _Optional[_Iterable[int]] = ..., action_dtype: _Optional[str] = ..., action_shape: _Optional[_Iterable[int]] = ..., num_actions: _Optional[int] = ..., action_low: _Optional[_Iterable[float]] = ..., action_high: _Optional[_Iterable[float]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("protocol_version", "experiment", "actor_id", "num_envs", "env_spec", "actor_index", "first_env")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVS_FIELD_NUMBER: _ClassVar[int]
    ENV_SPEC_FIELD_NUMBER: _ClassVar[int]
    ACTOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENV_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    experiment: str
    actor_id: str
    num_envs: int
    env_spec: EnvSpec
    actor_index: int
    first_env: int
    def __init__(self, protocol_version: _Optional[int] = ..., experiment: _Optional[str] = ..., actor_id: _Optional[str] = ..., num_envs: _Optional[int] = ..., env_spec: _Optional[_Union[EnvSpec, _Mapping]] = ..., actor_index: _Optional[int] = ..., first_env: _Optional[int] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("protocol_version", "run_id", "actor_index")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    run_id: str
    actor_index: int
    def __init__(self, protocol_version: _Optional[int] = ..., run_id: _Optional[str] = ..., actor_index: _Optional[int] = ...) -> None: ...

class IndexRequest(_message.Message):
    __slots__ = ("experiment", "actor_id")
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    experiment: str
    actor_id: str
    def __init__(self, experiment: _Optional[str] = ..., actor_id: _Optional[str] = ...) -> None: ...

class IndexGrant(_message.Message):
    __slots__ = ("actor_index",)
    ACTOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    actor_index: int
    def __init__(self, actor_index: _Optional[int] = ...) -> None: ...

class Episode(_message.Message):
    __slots__ = ("env_id", "episode_return", "length")
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RETURN_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    env_id: int
    episode_return: float
    length: int
    def __init__(self, env_id: _Optional[int] = ..., episode_return: _Optional[float] = ..., length: _Optional[int] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("env_ids", "observations", "rewards", "terminated", "truncated", "episodes", "final_env_ids", "final_observations", "env_restarts")
    ENV_IDS_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    FINAL_ENV_IDS_FIELD_NUMBER: _ClassVar[int]
    FINAL_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    ENV_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    env_ids: _containers.RepeatedScalarFieldContainer[int]
    observations: Tensor
    rewards: _containers.RepeatedScalarFieldContainer[float]
    terminated: _containers.RepeatedScalarFieldContainer[bool]
    truncated: _containers.RepeatedScalarFieldContainer[bool]
    episodes: _containers.RepeatedCompositeFieldContainer[Episode]
    final_env_ids: _containers.RepeatedScalarFieldContainer[int]
    final_observations: Tensor
    env_restarts: int
    def __init__(self, env_ids: _Optional[_Iterable[int]] = ..., observations: _Optional[_Union[Tensor, _Mapping]] = ..., rewards: _Optional[_Iterable[float]] = ..., terminated: _Optional[_Iterable[bool]] = ..., truncated: _Optional[_Iterable[bool]] = ..., episodes: _Optional[_Iterable[_Union[Episode, _Mapping]]] = ..., final_env_ids: _Optional[_Iterable[int]] = ..., final_observations: _Optional[_Union[Tensor, _Mapping]] = ..., env_restarts: _Optional[int] = ...) -> None: ...

class Actions(_message.Message):
    __slots__ = ("env_ids", "actions")
    ENV_IDS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    env_ids: _containers.RepeatedScalarFieldContainer[int]
    actions: Tensor
    def __init__(self, env_ids: _Optional[_Iterable[int]] = ..., actions: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class ActorMessage(_message.Message):
    __slots__ = ("hello", "step")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    step: Step
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., step: _Optional[_Union[Step, _Mapping]] = ...) -> None: ...

class LearnerMessage(_message.Message):
    __slots__ = ("welcome", "actions", "finished")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    actions: Actions
    finished: bool
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., actions: _Optional[_Union[Actions, _Mapping]] = ..., finished: _Optional[bool] = ...) -> None: ...
