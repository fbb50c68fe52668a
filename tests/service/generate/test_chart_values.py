"""The experiment chart's generated values.yaml and values.schema.json
(service/generate/chart_values.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import yaml

from seedrl.common import config
from seedrl.service.generate import chart_values

ROOT = Path(__file__).resolve().parents[3]


def _drop_nulls(node):
    if isinstance(node, dict):
        return {k: _drop_nulls(v) for k, v in node.items() if v is not None}
    return node


def test_a_stale_file_is_reported_and_rewritten_under_the_root_given(tmp_path, capsys):
    chart = tmp_path / chart_values.CHART_DIR
    shutil.copytree(ROOT / chart_values.CHART_DIR, chart)
    (chart / "values.yaml").write_text(
        (chart / "values.yaml").read_text().replace("replicas: 2", "replicas: 3")
    )
    root = ["--root", str(tmp_path)]
    assert chart_values.main(["--check", *root]) == 1
    err = capsys.readouterr().err
    assert "out of date: " in err and "values.yaml" in err and "--write" in err
    assert chart_values.main(["--write", *root]) == 0
    assert chart_values.main(["--check", *root]) == 0
    assert (chart / "values.yaml").read_text() == chart_values.values_yaml()


def test_values_hold_every_spec_default_with_its_doc():
    text = chart_values.values_yaml()
    values = yaml.safe_load(text)
    lines = text.splitlines()
    assert values["name"] == "" and values["labels"] == {} and values["annotations"] == {}
    # Null defaults are comments (helm would drop the key anyway), as are the defaults that
    # depend on another field (the agent's LSTM and optimizer): a value there would pin the
    # default of one agent for all. Everything else is there, and reads back as the defaults.
    expected = _drop_nulls(config.to_document(config.Spec()))
    for path, _ in config.dependent_default_fields(config.Experiment):
        section = expected
        for key in path[1:-1]:
            section = section[key]
        del section[path[-1]]
    # The two fields the cluster owns once the Experiment exists are comments too: the chart
    # renders them only when a values file sets them.
    del expected["actors"]["replicas"], expected["suspend"]
    assert values["spec"] == expected
    assert (
        config.parse_experiment({"metadata": {"name": "x"}, "spec": values["spec"]}).spec
        == config.Spec()
    )
    assert "      # lstmSize: null" in lines and "      # learningRate: null" in lines
    assert "  # suspend: false" in lines
    replicas = lines.index("    # replicas: 2")
    assert lines[replicas - 1] == (
        "    # scale subresource (kubectl scale, HorizontalPodAutoscalers) counts them in an int32."
    )
    assert "# maxEpisodeSteps: null" in text
    assert max(len(line) for line in text.splitlines()) <= chart_values.WIDTH


def test_schema_accepts_the_defaults_and_rejects_what_parse_experiment_rejects():
    schema = chart_values.values_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    assert not list(validator.iter_errors(yaml.safe_load(chart_values.values_yaml())))
    bad = {
        "name": "-x",
        "spec": {
            "actors": {"replicas": 0, "envsPerActor": 5000},
            "learner": {"accelerator": {"kind": "fpga"}},
        },
    }
    paths = {"/".join(map(str, e.path)) for e in validator.iter_errors(bad)}
    assert paths == {
        "name",
        "spec/actors/replicas",
        "spec/actors/envsPerActor",
        "spec/learner/accelerator/kind",
    }
    assert json.loads(json.dumps(schema)) == schema  # plain JSON, as helm reads it
