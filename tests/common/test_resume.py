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


def _without(document, *path):
    """A deep copy of a spec document without the field at ``path``: what a seedrl from
    before that field existed wrote."""
    import copy

    out = copy.deepcopy(document)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


def test_a_field_added_since_the_old_document_reads_as_its_default():
    # A run (config.yaml, checkpoint, the operator's applied record) from before
    # spec.agent.vtrace.epochs existed resumes under this version: nothing bound changed.
    base = spec()
    old = _without(base, "agent", "vtrace", "epochs")
    assert "epochs" not in old["agent"]["vtrace"]
    assert bound_changes(old, base) == []
    # ... unless the new document sets it away from the default.
    assert bound_changes(old, spec(agent={"vtrace": {"epochs": 2}})) == ["spec.agent.vtrace.epochs"]


def test_a_field_this_version_no_longer_reads_still_differs():
    base = spec()
    old = {**base, "agent": {**base["agent"], "retiredField": 1}}
    assert bound_changes(old, base) == ["spec.agent.retiredField"]
