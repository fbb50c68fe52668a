"""The planner's arithmetic against cases worked out by hand, and `seedrl cost plan`."""

import json
import pathlib

import pytest
import yaml

from seedrl.common.config import ConfigError
from seedrl.service import cost
from seedrl.service.cost import plan as cost_plan
from seedrl.service.cli.main import main
from seedrl.service.cost import Resources

EXAMPLES = pathlib.Path(__file__).parents[3] / "examples"

PRICES = cost.parse_prices(
    {
        "version": "plan-1",
        "region": "r",
        "takenOn": "2026-11-01",
        "currency": "USD",
        "cpu": {"onDemand": 0.04, "spot": 0.01},
        "memory": {"onDemand": 0.005, "spot": 0.001},
        "tpu": {"v5e": {"onDemand": 1.2, "spot": 0.4}},
        "gpu": {},
    }
)
PRICES_YAML = yaml.safe_dump(
    {
        "version": "plan-1",
        "region": "r",
        "takenOn": "2026-11-01",
        "cpu": {"onDemand": 0.04, "spot": 0.01},
        "memory": {"onDemand": 0.005, "spot": 0.001},
    }
)
# raw: 2,000 steps/s over 2 env processes = 1,000 per vCPU; one process stepping envs and
# running the model: 500 steps/s.
BENCH = {
    "env": "ALE/Pong-v5",
    "replicas": 2,
    "envs_per_actor": 16,
    "raw_steps_per_s": 2000.0,
    "inference_only": {"steps_per_s": 900.0},
    "training": {"steps_per_s": 600.0},
    "baseline_async_vector_env": {"num_envs": 2, "steps_per_s": 300.0},
    "baseline_sync_vector_env": {"num_envs": 32, "steps_per_s": 500.0},
}
TPU_LEARNER = (
    Resources(cpu=4, memory_gib=16, accelerator="tpu", accelerator_type="v5e", accelerator_count=1),
    False,
)
ACTOR = (Resources(cpu=1, memory_gib=2), False)


def test_benchmark_rates():
    r_seed, c_inf = cost_plan.benchmark_rates(BENCH)
    assert r_seed == 1000.0
    assert c_inf == pytest.approx(1 / 500 - 1 / 1000)  # 0.001 CPU-s per step


def test_seed_against_impala_by_hand():
    throughput = cost_plan.Throughput(seed_per_cpu=1000.0, inference_cpu_s=0.001, source="t")
    assert throughput.impala_per_cpu == pytest.approx(500.0)  # 1 / (0.001 + 0.001)
    p = cost_plan.plan(
        frames=36_000_000,
        frames_per_step=4,
        replicas=10,
        learner=TPU_LEARNER,
        actor=ACTOR,
        throughput=throughput,
        prices=PRICES,
    )
    # 9,000,000 steps at 10 actors x 1 vCPU x 1,000 = 10,000 steps/s: 900 s = 0.25 h.
    assert p.seed.seconds == pytest.approx(900.0)
    assert p.seed.frames_per_s == pytest.approx(40_000.0)
    # learner 1.2 + 4 x 0.04 + 16 x 0.005 = 1.44 $/h; actor 0.04 + 2 x 0.005 = 0.05 $/h
    assert p.seed.learner_usd == pytest.approx(0.25 * 1.44)  # 0.36
    assert p.seed.actors_usd == pytest.approx(0.25 * 10 * 0.05)  # 0.125
    assert p.seed.total_usd == pytest.approx(0.485)
    # IMPALA: 500 steps/s per actor, so 20 actors for the same 10,000 steps/s.
    assert p.impala.actors == 20 and p.impala.seconds == pytest.approx(900.0)
    assert p.impala.total_usd == pytest.approx(0.36 + 0.25 * 20 * 0.05)  # 0.61
    assert p.seed_saving == pytest.approx(1 - 0.485 / 0.61)  # 0.2049
    text = cost_plan.format_plan(p)
    assert "SEED's layout is 20.5% cheaper than IMPALA's" in text


def test_a_learner_cap_and_spot_actors():
    throughput = cost_plan.Throughput(seed_per_cpu=1000.0, inference_cpu_s=0.001, source="t")
    spot_actor = (Resources(cpu=2, memory_gib=4), True)
    p = cost_plan.plan(
        frames=9_000_000,
        frames_per_step=1,
        replicas=10,
        learner=TPU_LEARNER,
        actor=spot_actor,
        throughput=throughput,
        prices=PRICES,
        learner_steps_per_s=5000.0,
    )
    # 10 actors x 2 vCPU x 1,000 = 20,000 steps/s, capped at 5,000: 1,800 s = 0.5 h.
    assert p.seed.seconds == pytest.approx(1800.0)
    # spot actor: 2 x 0.01 + 4 x 0.001 = 0.024 $/h
    assert p.seed.total_usd == pytest.approx(0.5 * 1.44 + 0.5 * 10 * 0.024)  # 0.84
    # IMPALA at 5,000 steps/s: ceil(5,000 / (2 x 500)) = 5 actors
    assert p.impala.actors == 5
    assert p.impala.total_usd == pytest.approx(0.72 + 0.5 * 5 * 0.024)  # 0.78
    assert "IMPALA's layout is" in cost_plan.format_plan(p)
    # IMPALA cheaper by (0.84 - 0.78) / 0.84
    assert f"{(0.84 - 0.78) / 0.84 * 100:.1f}%" in cost_plan.format_plan(p)


def test_a_run_summary_gives_seed_rates_and_needs_a_benchmark_for_impala(tmp_path):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"env_steps_per_s": 3000.0}))
    (run / "config.yaml").write_text(
        yaml.safe_dump({"metadata": {"name": "r1"}, "spec": {"actors": {"replicas": 3}}})
    )
    (tmp_path / "bench.json").write_text(json.dumps(BENCH))
    from seedrl.common.config import parse_experiment

    exp = parse_experiment({"metadata": {"name": "other"}})
    t = cost_plan.read_throughput(str(run / "summary.json"), exp)
    assert t.seed_per_cpu == 1000.0 and t.impala_per_cpu is None  # 3,000 / 3 actors / 1 vCPU
    p = cost_plan.plan(1_000_000, 1, 2, TPU_LEARNER, ACTOR, t, PRICES)
    assert p.impala is None and "needs the model's inference cost" in cost_plan.format_plan(p)
    t = cost_plan.read_throughput(str(run / "summary.json"), exp, str(tmp_path / "bench.json"))
    assert t.inference_cpu_s == pytest.approx(0.001)


def test_bad_throughput_files_name_the_file_and_the_figure(tmp_path):
    from seedrl.common.config import parse_experiment

    exp = parse_experiment({"metadata": {"name": "x"}})
    bad = dict(BENCH, raw_steps_per_s=0)
    (tmp_path / "b.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="raw_steps_per_s: must be a number > 0"):
        cost_plan.read_throughput(str(tmp_path / "b.json"), exp)
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        cost_plan.read_throughput(str(tmp_path / "c.json"), exp)


def test_seedrl_cost_plan_prints_the_table(tmp_path, capsys):
    (tmp_path / "bench.json").write_text(json.dumps(BENCH))
    (tmp_path / "prices.yaml").write_text(PRICES_YAML)
    (tmp_path / "exp.yaml").write_text(
        yaml.safe_dump({"metadata": {"name": "pong"}, "spec": {"env": {"id": "ALE/Pong-v5"}}})
    )
    code = main(
        [
            "cost",
            "plan",
            str(tmp_path / "exp.yaml"),
            "--frames",
            "36e6",
            "--throughput",
            str(tmp_path / "bench.json"),
            "--actors",
            "10",
            "--prices",
            str(tmp_path / "prices.yaml"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    # learner (the default 4 vCPU / 16 GiB, no accelerator): 0.25 h x 0.24 $/h = 0.06
    # SEED: 0.06 + 0.125 = 0.185; IMPALA: 0.06 + 0.25 = 0.31; saving 1 - 0.185 / 0.31
    assert f"SEED's layout is {(1 - 0.185 / 0.31) * 100:.1f}% cheaper" in out
    seed_row = next(line for line in out.splitlines() if line.startswith("SEED ("))
    assert seed_row.split()[-2:] == ["0.1850", "0.0051"]  # total $, $ per 1M frames
    assert "0:15:00" in seed_row


def test_seedrl_cost_plan_without_measurements_says_what_to_pass(tmp_path, capsys):
    (tmp_path / "exp.yaml").write_text(
        yaml.safe_dump({"metadata": {"name": "nothing"}, "spec": {"env": {"id": "Acrobot-v1"}}})
    )
    code = main(
        ["cost", "plan", str(tmp_path / "exp.yaml"), "--frames", "1e6", "--runs-dir", str(tmp_path)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "--throughput" in err and "Acrobot-v1" in err and "CartPole-v1" in err


def test_the_packaged_reference_covers_every_example_env():
    from seedrl.common.config import load_experiment

    table = cost_plan.load_reference()
    for path in sorted(EXAMPLES.glob("*.yaml")):
        exp = load_experiment(str(path))
        t = cost_plan.reference_throughput(exp, table)
        assert t is not None and t.reference and t.seed_per_cpu > 0, path.name
        assert "reference figures" in t.source and table.version in t.source


def test_seedrl_cost_plan_falls_back_on_the_reference_and_says_so(tmp_path, capsys):
    pong = str(EXAMPLES / "pong-vtrace.yaml")
    code = main(["cost", "plan", pong, "--frames", "2e8", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    table = cost_plan.load_reference()
    steps, costs = table.envs["ALE/Pong-v5"]
    assert f"reference: {steps:,.0f} env steps/s per actor vCPU" in out
    assert "not on your machines" in out and table.version in out
    # Pong's network has a reference inference cost: the IMPALA comparison is made.
    assert "nature_cnn" in costs and "IMPALA (inference on the actors)" in out
    # --throughput still wins over the reference.
    (tmp_path / "bench.json").write_text(json.dumps(BENCH))
    code = main(
        ["cost", "plan", pong, "--frames", "2e8", "--throughput", str(tmp_path / "bench.json")]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "measured: 1,000 env steps/s per actor vCPU" in out and "reference" not in out


def test_a_bad_reference_table_names_the_field():
    with pytest.raises(ConfigError) as info:
        cost_plan.parse_reference(
            {
                "version": "r",
                "measuredOn": "here",
                "envs": {
                    "CartPole-v1": {"stepsPerCpu": -1, "inferenceCpuSeconds": {"mlp": "fast"}}
                },
            }
        )
    paths = [path for path, _ in info.value.problems]
    assert any(p.endswith("envs.CartPole-v1.stepsPerCpu") for p in paths)
    assert any(p.endswith("envs.CartPole-v1.inferenceCpuSeconds.mlp") for p in paths)


def test_a_plan_without_actor_cpus_is_refused():
    throughput = cost_plan.Throughput(seed_per_cpu=1000.0, inference_cpu_s=None, source="t")
    with pytest.raises(ConfigError, match="at least one actor"):
        cost_plan.plan(
            1000, 1, 2, TPU_LEARNER, (Resources(cpu=0, memory_gib=1), False), throughput, PRICES
        )
