"""The spec sections a run's checkpoints are bound to, and how a change to them is named."""

from seedrl.common.config import parse_experiment, to_document
from seedrl.common.resume import BOUND_SECTIONS, bound_changes, bound_part


def spec(**sections):
    return to_document(parse_experiment({"metadata": {"name": "r"}, "spec": sections}).spec)


def test_env_and_agent_are_bound():
    assert BOUND_SECTIONS == ("env", "agent")
    assert set(bound_part(spec())) == {"env", "agent"}


def test_changes_are_named_by_their_leaf_paths_and_other_sections_are_free():
    base = spec()
    assert bound_changes(base, spec(actors={"replicas": 7})) == []
    assert bound_changes(base, spec(env={"id": "Acrobot-v1"})) == ["spec.env.id"]
    assert bound_changes(base, spec(agent={"network": {"hiddenSizes": [8]}})) == [
        "spec.agent.network.hiddenSizes"
    ]


def test_a_missing_section_differs_as_a_whole_unless_left_out():
    base = spec()
    assert bound_changes({"env": base["env"]}, base) == ["spec.agent"]
    assert bound_changes({"env": base["env"]}, base, sections=["env"]) == []
