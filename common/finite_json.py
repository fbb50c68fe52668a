"""JSON that is valid JSON: no ``NaN`` or ``Infinity`` tokens, ever.

Python's ``json`` writes non-finite floats as ``NaN``/``Infinity`` by default, which strict
readers (browsers, ``jq``, Go's ``encoding/json``, the Kubernetes API) refuse. Everything the
project writes as JSON (status, summary, metrics log, checkpoint metadata, cost reports) goes
through :func:`dumps` or :func:`dump`: a non-finite number becomes ``null`` (the value is
unknown), and anything else that slipped through would raise rather than write an invalid file.
"""

from __future__ import annotations

import json
import math
from typing import Any, TextIO


def finite(value: Any) -> Any:
    """A copy of plain data with every non-finite float replaced by None (numpy scalars and
    arrays become Python numbers and lists)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy scalar or array
        return finite(value.tolist())
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`finite` data, refusing NaN/Infinity (``allow_nan=False``)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def dump(value: Any, fh: TextIO, **kwargs: Any) -> None:
    """``json.dump`` of :func:`finite` data into an open text file."""
    json.dump(finite(value), fh, allow_nan=False, **kwargs)
