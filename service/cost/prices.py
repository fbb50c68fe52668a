"""The price table: hourly list prices per vCPU, per GiB of memory and per accelerator chip/GPU.

Declared with :func:`seedrl.common.config.param`, like the Experiment, so that its keys
(camelCase), its parsing (unknown keys refused, every problem named by its path) and its
documentation come from the dataclasses below. The packaged table is ``prices.yaml`` beside
this module, with its sources; an override (``--prices FILE``, ``$SEEDRL_PRICES``, the operator
chart's mounted ConfigMap) is merged over it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Mapping
from importlib import resources as importlib_resources
from typing import Any

from seedrl.common.config import ConfigError, load_yaml, param, parse_section, read_yaml_file

#: Environment variable naming a price-table override file.
PRICES_ENV = "SEEDRL_PRICES"
#: File name of the table inside a directory (a mounted ConfigMap).
PRICES_FILE = "prices.yaml"

_NON_EMPTY = r".*\S.*"
_NON_EMPTY_HINT = "a non-empty string"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rate:
    """Hourly price of one unit (a vCPU, a GiB, a chip or a GPU), on demand and on Spot."""

    on_demand: float = param(doc="USD per hour on demand.", ge=0.0)
    spot: float = param(doc="USD per hour on Spot capacity; at most onDemand.", ge=0.0)

    def get(self, spot: bool) -> float:
        """The rate that applies."""
        return self.spot if spot else self.on_demand


@dataclasses.dataclass(frozen=True, kw_only=True)
class PriceTable:
    """A versioned table of hourly prices for one region."""

    version: str = param(
        doc="Names the table in every report it prices.",
        pattern=_NON_EMPTY,
        pattern_hint=_NON_EMPTY_HINT,
    )
    region: str = param(
        doc="The region the prices are for.", pattern=_NON_EMPTY, pattern_hint=_NON_EMPTY_HINT
    )
    taken_on: str = param(
        doc="When the prices were looked up (a date).",
        pattern=_NON_EMPTY,
        pattern_hint=_NON_EMPTY_HINT,
    )
    currency: str = param(doc="The currency of every rate.", choices=("USD",))
    cpu: Rate = param(doc="Per vCPU a pod requests.")
    memory: Rate = param(doc="Per GiB of memory a pod requests.")
    tpu: dict[str, Rate] = param(doc="Per TPU chip, by type (v5e, ...).", factory=dict)
    gpu: dict[str, Rate] = param(
        doc="Per GPU, by GKE accelerator name (nvidia-l4, ...).", factory=dict
    )

    def accelerator_rate(self, kind: str, type_: str, spot: bool) -> float:
        """Price per chip/GPU-hour of an accelerator.

        Raises:
          KeyError: naming the accelerator when the table has no price for it.
        """
        table = self.tpu if kind == "tpu" else self.gpu
        if type_ not in table:
            raise KeyError(
                f"the price table {self.version} has no {kind} {type_!r} (known: "
                f"{', '.join(sorted(table))}); add it with --prices FILE"
            )
        return table[type_].get(spot)


def _default_document() -> dict:
    text = importlib_resources.files("seedrl.service.cost").joinpath(PRICES_FILE).read_text("utf-8")
    return load_yaml(text, "service/cost/prices.yaml")


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base.get(key), value) if key in base else value
        return out
    return override


def _spot_above_on_demand(document: Mapping[str, Any], source: str) -> list[tuple[str, str]]:
    """The rates whose Spot price exceeds the on-demand one (a rule across two fields)."""
    rates = [(f"{source}.{k}", document.get(k)) for k in ("cpu", "memory")]
    for kind in ("tpu", "gpu"):
        section = document.get(kind)
        if isinstance(section, Mapping):
            rates += [(f"{source}.{kind}.{name}", rate) for name, rate in section.items()]
    out = []
    for path, rate in rates:
        if not isinstance(rate, Mapping):
            continue
        on_demand, spot = rate.get("onDemand"), rate.get("spot")
        numbers = [
            v for v in (on_demand, spot) if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        if len(numbers) == 2 and numbers[1] > numbers[0]:
            out.append((f"{path}.spot", f"must not exceed onDemand ({on_demand:g}), got {spot:g}"))
    return out


def parse_prices(document: Any, source: str = "prices") -> PriceTable:
    """Validates a complete price-table document.

    Raises:
      ConfigError: naming each problem's field path, e.g. ``prices.gpu.nvidia-l4.spot: must
        be a number, got str 'cheap'``.
    """
    if isinstance(document, Mapping) and isinstance(
        document.get("takenOn"), (dt.date, dt.datetime)
    ):
        # YAML reads an unquoted 2026-11-29 as a date.
        document = {**document, "takenOn": document["takenOn"].isoformat()}
    problems: list[tuple[str, str]] = []
    table = parse_section(PriceTable, document, source, problems)
    if isinstance(document, Mapping):
        problems += _spot_above_on_demand(document, source)
    if problems or table is None:
        raise ConfigError(problems)
    return table


def load_prices(path: str | None = None, environ: Mapping[str, str] | None = None) -> PriceTable:
    """The price table: the packaged defaults, with an override merged over them.

    The override is ``path`` if given, else the file named by ``$SEEDRL_PRICES``; a directory
    (a mounted ConfigMap) means its ``prices.yaml``. An override must state its own
    ``version`` (it names the table in every report); any key it leaves out keeps the default.

    Raises:
      ConfigError: the override cannot be read or is invalid, with field paths.
    """
    environ = os.environ if environ is None else environ
    path = path or environ.get(PRICES_ENV) or None
    document = _default_document()
    if path is None:
        return parse_prices(document)
    if os.path.isdir(path):
        path = os.path.join(path, PRICES_FILE)
    override = read_yaml_file(path, "price table")
    if not isinstance(override, dict):
        raise ConfigError([("prices", f"{path} must hold a mapping, got {override!r}")])
    if "version" not in override:
        raise ConfigError(
            [
                (
                    "prices.version",
                    f"an override ({path}) must name its own "
                    f"version, so reports say which table priced "
                    f"them",
                )
            ]
        )
    return parse_prices(_merge(document, override))
