"""The Grafana dashboards, generated from code into the operator chart.

``python -m seedrl.service.generate.dashboards --write`` writes
``helm/seedrl-operator/dashboards/*.json``; the chart turns each into a ConfigMap labelled for
Grafana's dashboard sidecar. Two dashboards:

- **seedrl / Experiments**: every Experiment at a glance (phase, throughput, learning, cost);
- **seedrl / Experiment**: one Experiment in depth (throughput, inference batching and latency,
  learning curves, losses, actors, queue and replay, checkpoints, cost).

Both have a ``datasource`` variable (any Prometheus) and an ``experiment`` variable filled from
the metrics. Every query is tested against a real Prometheus scraping real runs
(``tests/service/generate/test_dashboards.py``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from seedrl.service import generate as generated

#: Where the dashboards are checked in, relative to the repository root.
DASHBOARD_DIR = "helm/seedrl-operator/dashboards"
EXP = 'experiment=~"$experiment"'
RATE = "$__rate_interval"


@dataclass
class Panel:
    """One time-series (or stat) panel: a title, its queries and their legends."""

    title: str
    queries: list[tuple[str, str]]
    unit: str = "short"
    description: str = ""
    kind: str = "timeseries"
    width: int = 12
    height: int = 8


@dataclass
class Row:
    """A titled row of panels."""

    title: str
    panels: list[Panel] = field(default_factory=list)


def _quantile(q: float, metric: str, by: str = "") -> str:
    group = f"le{', ' + by if by else ''}"
    return f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{EXP}}}[{RATE}])))"


def overview_rows() -> list[Row]:
    """The all-Experiments dashboard."""
    return [
        Row(
            "Experiments",
            [
                Panel(
                    "Experiments by phase",
                    [("count by (phase) (seedrl_experiment_phase{%s} == 1)" % EXP, "{{phase}}")],
                    kind="stat",
                    width=6,
                    description="From the operator (or seedrl train).",
                ),
                Panel(
                    "Env frames per second",
                    [
                        (
                            f"sum by (experiment) (rate(seedrl_learner_env_frames_total"
                            f"{{{EXP}}}[{RATE}]))",
                            "{{experiment}}",
                        )
                    ],
                    width=9,
                ),
                Panel(
                    "Mean return",
                    [
                        (
                            f"max by (experiment) (seedrl_learner_mean_return{{{EXP}}})",
                            "{{experiment}}",
                        )
                    ],
                    width=9,
                    description="Mean of the last returnWindow training episodes.",
                ),
                Panel(
                    "Cost so far (USD)",
                    [
                        (
                            'max by (experiment) (seedrl_experiment_cost_usd{%s, role="total"})'
                            % EXP,
                            "{{experiment}}",
                        )
                    ],
                    unit="currencyUSD",
                    width=8,
                ),
                Panel(
                    "USD per million frames",
                    [
                        (
                            f"max by (experiment) (seedrl_experiment_cost_usd_per_million_frames"
                            f"{{{EXP}}})",
                            "{{experiment}}",
                        )
                    ],
                    unit="currencyUSD",
                    width=8,
                ),
                Panel(
                    "Connected actor streams",
                    [
                        (
                            f"sum by (experiment) (seedrl_learner_connected_actors{{{EXP}}})",
                            "{{experiment}}",
                        )
                    ],
                    width=8,
                ),
            ],
        )
    ]


def experiment_rows() -> list[Row]:
    """The one-Experiment dashboard."""
    return [
        Row(
            "Throughput",
            [
                Panel(
                    "Env frames per second",
                    [
                        (
                            f"sum(rate(seedrl_learner_env_frames_total{{{EXP}}}[{RATE}]))",
                            "frames/s",
                        ),
                        (
                            f"sum(seedrl_learner_env_frames_per_second{{{EXP}}})",
                            "learner's 10 s average",
                        ),
                    ],
                    width=8,
                ),
                Panel(
                    "Learner steps per second",
                    [(f"sum(rate(seedrl_learner_steps_total{{{EXP}}}[{RATE}]))", "steps/s")],
                    width=8,
                ),
                Panel(
                    "Env frames",
                    [(f"sum(seedrl_learner_env_frames_total{{{EXP}}})", "frames")],
                    width=8,
                ),
            ],
        ),
        Row(
            "Inference",
            [
                Panel(
                    "Inference batch size (env steps)",
                    [
                        (_quantile(0.5, "seedrl_learner_inference_batch_size"), "p50"),
                        (
                            f"sum(rate(seedrl_learner_inference_batch_size_sum{{{EXP}}}[{RATE}]))"
                            " / "
                            f"sum(rate(seedrl_learner_inference_batch_size_count{{{EXP}}}[{RATE}]))",
                            "mean",
                        ),
                    ],
                ),
                Panel(
                    "Inference latency",
                    [
                        (_quantile(0.5, "seedrl_learner_inference_latency_seconds"), "p50"),
                        (_quantile(0.99, "seedrl_learner_inference_latency_seconds"), "p99"),
                    ],
                    unit="s",
                ),
            ],
        ),
        Row(
            "Learning",
            [
                Panel(
                    "Mean return",
                    [
                        (f"max(seedrl_learner_mean_return{{{EXP}}})", "last returnWindow episodes"),
                        (
                            f"max(seedrl_learner_eval_mean_return{{{EXP}}})",
                            "evaluation actors, last returnWindow episodes",
                        ),
                        (
                            _quantile(0.5, "seedrl_learner_episode_return", "kind"),
                            "median, {{kind}}",
                        ),
                    ],
                ),
                Panel(
                    "Episode length (steps)",
                    [
                        (
                            f"sum by (kind) (rate(seedrl_learner_episode_length_steps_sum{{{EXP}}}"
                            f"[{RATE}])) / "
                            "sum by (kind) (rate(seedrl_learner_episode_length_steps_count"
                            f"{{{EXP}}}[{RATE}]))",
                            "mean, {{kind}}",
                        )
                    ],
                ),
                Panel(
                    "Episodes per second",
                    [
                        (
                            f"sum by (kind) (rate(seedrl_learner_episodes_total{{{EXP}}}[{RATE}]))",
                            "{{kind}}",
                        )
                    ],
                ),
                Panel(
                    "Policy lag (updates)",
                    [(f"max(seedrl_learner_policy_lag_updates{{{EXP}}})", "mean of last batch")],
                    description="On-policy agents that measure it (PPO).",
                ),
            ],
        ),
        Row(
            "Losses",
            [
                Panel(
                    "Loss terms", [(f"max by (term) (seedrl_learner_loss{{{EXP}}})", "{{term}}")]
                ),
                Panel(
                    "Training statistics",
                    [(f"max by (stat) (seedrl_learner_train_stat{{{EXP}}})", "{{stat}}")],
                ),
            ],
        ),
        Row(
            "Actors",
            [
                Panel(
                    "Connected actor streams",
                    [
                        (f"sum(seedrl_learner_connected_actors{{{EXP}}})", "learner's view"),
                        (f"sum(seedrl_actor_connected_streams{{{EXP}}})", "actors' view"),
                    ],
                    width=8,
                ),
                Panel(
                    "Env step time per batch",
                    [
                        (_quantile(0.5, "seedrl_actor_env_step_seconds"), "p50"),
                        (_quantile(0.99, "seedrl_actor_env_step_seconds"), "p99"),
                    ],
                    unit="s",
                    width=8,
                ),
                Panel(
                    "Round trip to the learner",
                    [
                        (_quantile(0.5, "seedrl_actor_round_trip_seconds"), "p50"),
                        (_quantile(0.99, "seedrl_actor_round_trip_seconds"), "p99"),
                    ],
                    unit="s",
                    width=8,
                ),
                Panel(
                    "Reconnects and env restarts",
                    [
                        (
                            f"sum(increase(seedrl_actor_reconnects_total{{{EXP}}}[1h]))",
                            "reconnects (1h)",
                        ),
                        (
                            f"sum(increase(seedrl_actor_env_restarts_total{{{EXP}}}[1h]))",
                            "env restarts (1h)",
                        ),
                    ],
                ),
                Panel(
                    "Envs per actor message", [(f"avg(seedrl_actor_batch_size{{{EXP}}})", "envs")]
                ),
            ],
        ),
        Row(
            "Queue and replay",
            [
                Panel(
                    "Unrolls waiting for training",
                    [(f"sum(seedrl_learner_queued_unrolls{{{EXP}}})", "unrolls")],
                ),
                Panel(
                    "Replay size (sequences)",
                    [(f"sum(seedrl_learner_replay_sequences{{{EXP}}})", "sequences")],
                    description="Replay agents (R2D2).",
                ),
            ],
        ),
        Row(
            "Checkpoints",
            [
                Panel(
                    "Checkpoint age",
                    [
                        (f"max(seedrl_learner_checkpoint_age_seconds{{{EXP}}})", "age"),
                        (
                            f"3 * max(seedrl_learner_checkpoint_interval_seconds{{{EXP}}})",
                            "alert threshold",
                        ),
                    ],
                    unit="s",
                    width=8,
                ),
                Panel(
                    "Checkpoint duration",
                    [(f"max(seedrl_learner_checkpoint_duration_seconds{{{EXP}}})", "last")],
                    unit="s",
                    width=8,
                ),
                Panel(
                    "Checkpoint failures",
                    [(f"sum(seedrl_learner_checkpoint_failures_total{{{EXP}}})", "failures")],
                    width=8,
                ),
            ],
        ),
        Row(
            "Cost",
            [
                Panel(
                    "Cost so far by role (USD)",
                    [(f"max by (role) (seedrl_experiment_cost_usd{{{EXP}}})", "{{role}}")],
                    unit="currencyUSD",
                ),
                Panel(
                    "USD per million frames",
                    [(f"max(seedrl_experiment_cost_usd_per_million_frames{{{EXP}}})", "USD")],
                    unit="currencyUSD",
                ),
            ],
        ),
    ]


DASHBOARDS = {
    "seedrl-overview": ("seedrl / Experiments", overview_rows, True),
    "seedrl-experiment": ("seedrl / Experiment", experiment_rows, False),
}


def _templating(multi: bool) -> dict:
    return {
        "list": [
            {
                "name": "datasource",
                "label": "Prometheus",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "hide": 0,
            },
            {
                "name": "experiment",
                "label": "Experiment",
                "type": "query",
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": {
                    "query": "label_values(seedrl_learner_env_steps_total, experiment)",
                    "refId": "experiment",
                },
                "definition": "label_values(seedrl_learner_env_steps_total, experiment)",
                "refresh": 2,
                "sort": 1,
                "multi": multi,
                "includeAll": multi,
                "allValue": ".+" if multi else None,
                "current": {},
                "hide": 0,
            },
        ]
    }


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}
        if panel.kind == "timeseries"
        else {},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "expr": expr,
                "legendFormat": legend,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
            }
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def build(uid: str) -> dict:
    """The dashboard JSON model of ``uid`` (a key of :data:`DASHBOARDS`)."""
    title, rows, multi = DASHBOARDS[uid]
    panels, y, next_id = [], 0, 1
    for row in rows():
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id, y, x, row_height = next_id + 1, y + 1, 0, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y, row_height = 0, y + row_height, 0
            panels.append(_panel_json(panel, next_id, x, y))
            next_id, x, row_height = next_id + 1, x + panel.width, max(row_height, panel.height)
        y += row_height
    return {
        "uid": uid,
        "title": title,
        "tags": ["seedrl"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"},
        "templating": _templating(multi),
        "annotations": {"list": []},
        "panels": panels,
    }


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` of every query of a dashboard."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def render_all() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {
        f"{uid}.json": json.dumps(build(uid), indent=1, sort_keys=True) + "\n" for uid in DASHBOARDS
    }


def outputs() -> dict[str, str]:
    """Each dashboard file (relative to the repository root) and its JSON text."""
    return {f"{DASHBOARD_DIR}/{name}": text for name, text in render_all().items()}


def main(argv: list[str] | None = None) -> int:
    """``python -m seedrl.service.generate.dashboards [--write | --check] [--root DIR]``."""
    return generated.main(
        "python -m seedrl.service.generate.dashboards", __doc__.splitlines()[0], outputs, argv
    )


if __name__ == "__main__":
    sys.exit(main())
