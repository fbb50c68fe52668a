"""What an Experiment costs: a price table x the resources each pod requested x the time it ran.

The operator, the local launcher, `seedrl cost` and the planner all price through these
modules (their public names are gathered here):

- :mod:`.prices`: the price table (``prices.yaml`` and its overrides), declared with the
  Experiment's ``param`` engine;
- :mod:`.records`: pod records, read from Kubernetes pods or from the pods the operator renders
  for an Experiment (a local run is priced as those pods);
- :mod:`.pricing`: :func:`compute_cost` and the operator's :func:`price_pods`;
- :mod:`.report`: the report as written (``status.cost``, ``cost.json``), its schema and the
  lines the CLI prints;
- :mod:`.plan`: `seedrl cost plan`, SEED's layout against IMPALA's.
"""

from seedrl.service.cost.prices import (
    PRICES_ENV,
    PRICES_FILE,
    PriceTable,
    Rate,
    load_prices,
    parse_prices,
)
from seedrl.service.cost.pricing import CostReport, RoleCost, compute_cost, hourly, price_pods
from seedrl.service.cost.records import (
    KEEP_GONE_RECORDS,
    ROLES,
    PodRecord,
    Resources,
    StoredRecord,
    compact_records,
    local_records,
    machine_of,
    merge_records,
    pod_record,
    record_from_dict,
    rendered_machines,
)
from seedrl.service.cost.report import (
    CostStatus,
    describe_records,
    format_cost_line,
    format_duration,
    format_report,
    status_schema,
)

__all__ = [
    "KEEP_GONE_RECORDS",
    "compact_records",
    "PRICES_ENV",
    "PRICES_FILE",
    "ROLES",
    "CostReport",
    "CostStatus",
    "PodRecord",
    "PriceTable",
    "Rate",
    "Resources",
    "RoleCost",
    "StoredRecord",
    "compute_cost",
    "describe_records",
    "format_cost_line",
    "format_duration",
    "format_report",
    "hourly",
    "load_prices",
    "local_records",
    "machine_of",
    "merge_records",
    "parse_prices",
    "pod_record",
    "price_pods",
    "record_from_dict",
    "rendered_machines",
    "status_schema",
]
