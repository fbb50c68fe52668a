"""Kubernetes resource quantities (``500m``, ``4``, ``16Gi``, ``1e3``): the pattern the
Experiment's resource fields are validated against, and their value as a number, for pricing.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

#: An unsigned quantity: a decimal number with an exponent, a decimal suffix (n u m k M G T P E)
#: or a binary one (Ki Mi Gi Ti Pi Ei), as the API server's resource.Quantity accepts.
QUANTITY = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?"

_SIGNED = re.compile(f"[+-]?{QUANTITY}")
_NUMBER = re.compile(r"[+-]?[0-9.]*")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_GIB = 2**30


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity as a plain number: ``"500m"`` -> 0.5, ``"4Gi"`` -> 4294967296.

    Accepts numbers, a sign, decimal and binary suffixes and exponents (``"1e3"``), as the API
    server does.

    Raises:
      ValueError: for anything else.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    if not _SIGNED.fullmatch(text):
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    matched = _NUMBER.match(text)
    number = matched.group(0) if matched else ""
    base, rest = Decimal(number), text[len(number) :]
    if rest in _BINARY:
        return float(base * _BINARY[rest])
    if rest in _DECIMAL:
        return float(base * _DECIMAL[rest])
    return float(base * Decimal(10) ** int(rest[1:]))  # an exponent: e3, E-2


def cpu_cores(value: Any) -> float:
    """vCPUs of a CPU quantity (``"500m"`` -> 0.5)."""
    return parse_quantity(value)


def memory_gib(value: Any) -> float:
    """GiB of a memory quantity (``"512Mi"`` -> 0.5, ``"1G"`` -> 0.931...)."""
    return parse_quantity(value) / _GIB
