"""The price table: the packaged one, overrides merged over it, and bad ones refused by path."""

import pytest

from seedrl.common.config import ConfigError
from seedrl.service import cost


def test_the_packaged_table_prices_every_documented_accelerator():
    prices = cost.load_prices(environ={})
    assert prices.region == "us-central1" and prices.currency == "USD"
    assert prices.taken_on and prices.version
    assert set(prices.tpu) >= {"v4", "v5e", "v5p", "v6e"}
    assert set(prices.gpu) >= {
        "nvidia-tesla-t4",
        "nvidia-l4",
        "nvidia-tesla-a100",
        "nvidia-a100-80gb",
        "nvidia-h100-80gb",
    }
    for rate in [prices.cpu, prices.memory, *prices.tpu.values(), *prices.gpu.values()]:
        assert 0 < rate.spot < rate.on_demand


def test_an_override_file_replaces_only_what_it_names(tmp_path):
    (tmp_path / "p.yaml").write_text(
        "version: mine-1\ntakenOn: 2026-12-01\n"
        "gpu:\n  nvidia-l4: {spot: 0.1}\n"
        "tpu:\n  v7: {onDemand: 9, spot: 3}\n"
    )
    default = cost.load_prices(environ={})
    prices = cost.load_prices(str(tmp_path / "p.yaml"), environ={})
    assert prices.version == "mine-1" and prices.taken_on == "2026-12-01"  # a YAML date
    assert prices.gpu["nvidia-l4"].spot == 0.1
    assert prices.gpu["nvidia-l4"].on_demand == default.gpu["nvidia-l4"].on_demand
    assert prices.tpu["v7"].on_demand == 9 and prices.tpu["v5e"] == default.tpu["v5e"]


def test_the_override_comes_from_the_environment_or_a_mounted_config_map(tmp_path):
    mount = tmp_path / "configmap"
    mount.mkdir()
    (mount / "prices.yaml").write_text("version: cm-7\ncpu: {onDemand: 0.05, spot: 0.02}\n")
    assert cost.load_prices(str(mount), environ={}).version == "cm-7"
    assert cost.load_prices(environ={"SEEDRL_PRICES": str(mount)}).cpu.spot == 0.02


def problems_of(tmp_path, text):
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        cost.load_prices(str(tmp_path / "bad.yaml"), environ={})
    return dict(err.value.problems)


def test_bad_overrides_name_each_field_path(tmp_path):
    problems = problems_of(
        tmp_path,
        "version: x\ncpus: {}\ngpu:\n  nvidia-l4: {spot: cheap}\n"
        "  nvidia-t4: {onDemand: 0.1, spot: 0.3}\n"
        "memory: {onDemand: -1, spot: 0, perMonth: 3}\n"
        "currency: EUR\n",
    )
    assert "unknown field" in problems["prices.cpus"]
    assert problems["prices.gpu.nvidia-l4.spot"] == "must be a number, got str 'cheap'"
    assert problems["prices.gpu.nvidia-t4.spot"] == "must not exceed onDemand (0.1), got 0.3"
    assert problems["prices.memory.onDemand"] == "must be >= 0, got -1"
    assert "unknown field" in problems["prices.memory.perMonth"]
    assert problems["prices.currency"] == "must be one of USD; got 'EUR'"


def test_a_missing_version_or_rate_and_bad_yaml_are_refused(tmp_path):
    problems = problems_of(tmp_path, "version: x\ngpu:\n  nvidia-new: {onDemand: 0.1}\n")
    assert problems["prices.gpu.nvidia-new.spot"] == "required field is missing"
    assert (
        "own version" in problems_of(tmp_path, "cpu: {onDemand: 1, spot: 0.5}\n")["prices.version"]
    )
    assert "not valid YAML" in next(iter(problems_of(tmp_path, "version: [\n").values()))
    with pytest.raises(ConfigError, match="cannot read"):
        cost.load_prices(str(tmp_path / "missing.yaml"), environ={})


def test_a_price_file_bomb_is_refused_in_one_line(tmp_path):
    laughs = "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10) if i else 'x'}]\n" for i in range(10)
    )
    path = tmp_path / "prices.yaml"
    path.write_text(laughs + "version: *l9\n")
    with pytest.raises(ConfigError, match="aliases expand the document") as e:
        cost.load_prices(str(path), environ={})
    assert "\n" not in str(e.value)
    with open(path, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    with pytest.raises(ConfigError, match="refused unread"):
        cost.load_prices(str(path), environ={})
