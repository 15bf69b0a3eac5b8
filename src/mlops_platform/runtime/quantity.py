"""Kubernetes resource quantities (``500m``, ``1.5Gi``, ``2e3``): the one parser of the project."""

from __future__ import annotations

import re
from decimal import Decimal

#: a non-negative resource.Quantity as the API accepts it for requests and limits
PATTERN = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
_QUANTITY = re.compile(PATTERN)
_BINARY, _DECIMAL = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), ("n", "u", "m", "", "k", "M", "G", "T", "P", "E")
_SUFFIXES = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(_BINARY)},
    **{s: Decimal(10) ** (3 * i - 9) for i, s in enumerate(_DECIMAL)},
}


def parse(quantity: str | int) -> Decimal:
    """The value of a non-negative quantity ("500m" -> 0.5, "1Ki" -> 1024); ValueError when malformed."""
    text = str(quantity)
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = Decimal(match.group(1)), match.group(3) or ""
    if suffix in _SUFFIXES:
        return number * _SUFFIXES[suffix]
    return number.scaleb(int(suffix[1:]))  # e3, E-3


def is_quantity(value: str | int) -> bool:
    return _QUANTITY.match(str(value)) is not None
