"""The Grafana dashboards: generated, checked in up to date, well formed. (Every query is run
against a real Prometheus in tests/e2e/test_observability.py.)"""

import json

from seedrl.service.generate import dashboards
from support.charts import OPERATOR_CHART


def test_checked_in_dashboards_are_up_to_date():
    for name, text in dashboards.render_all().items():
        path = OPERATOR_CHART / "dashboards" / name
        assert path.read_text() == text, f"{path} is stale: run `make dashboards`"


def test_every_panel_is_filtered_by_the_experiment_variable_and_laid_out_on_the_grid():
    for uid in dashboards.DASHBOARDS:
        board = dashboards.build(uid)
        names = [v["name"] for v in board["templating"]["list"]]
        assert names == ["datasource", "experiment"]
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        for panel in board["panels"]:
            pos = panel["gridPos"]
            assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24
            for target in panel.get("targets", []):
                assert 'experiment=~"$experiment"' in target["expr"], (panel["title"], target)
                assert target["datasource"]["uid"] == "${datasource}"
        json.dumps(board)  # plain JSON


def test_the_in_depth_dashboard_covers_every_area_the_issue_names():
    rows = [
        p["title"] for p in dashboards.build("seedrl-experiment")["panels"] if p["type"] == "row"
    ]
    assert rows == [
        "Throughput",
        "Inference",
        "Learning",
        "Losses",
        "Actors",
        "Queue and replay",
        "Checkpoints",
        "Cost",
    ]
