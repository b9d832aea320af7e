"""The kinds of value the settings classes take, read alike everywhere: a count is any
integral number but a bool (numpy's ints too), a number any real but a bool or NaN, a list of
names any iterable but a bare str (which would be read one name per character)."""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import TypeVar

from .errors import ConfigTypeError

T = TypeVar("T")


def kind(value: object) -> str:
    """``value``'s type and repr, for an error naming it."""
    return f"{type(value).__name__} {value!r:.60}"


def as_count(value: object) -> int | None:
    """``value`` as an int when it is an integral number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def as_real(value: object) -> int | float | None:
    """``value`` when it is an int or a float (not a bool, not NaN), another real number
    (numpy's, even a subclass of float, a Fraction) as a float, else None."""
    real = isinstance(value, numbers.Real)  # (kept apart: the check would narrow ``value``)
    if isinstance(value, bool) or not real:
        return None
    if type(value) is int:
        return value
    out = float(value)  # type: ignore[arg-type]  # a Real; numpy's float64 made a plain float
    return None if out != out else out


def as_names(value: object) -> tuple[object, ...] | None:
    """``value`` as a tuple when it is an iterable other than a str or bytes (an iterator is
    read once, here), else None; what it holds is the caller's to check."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return None
    return tuple(value)


def first_not_str(values: tuple[object, ...]) -> object | None:
    """The first of ``values`` that is not a str, or None when all are."""
    return next((v for v in values if not isinstance(v, str)), None)


def checked_count(name: str, value: object, *, optional: bool = False) -> int | None:
    """Setting ``name``'s ``value`` as an int (:func:`as_count`); None when ``optional`` and
    None.

    Raises:
        ConfigTypeError: naming the setting and its value.
    """
    return _checked(name, value, as_count(value), "an int", optional)


def checked_real(name: str, value: object, *, optional: bool = False) -> int | float | None:
    """Setting ``name``'s ``value`` as a number (:func:`as_real`); None when ``optional`` and
    None.

    Raises:
        ConfigTypeError: naming the setting and its value.
    """
    return _checked(name, value, as_real(value), "a number (not NaN)", optional)


def _checked(name: str, value: object, read: T | None, expected: str, optional: bool) -> T | None:
    """``read`` (``value`` read as its kind, None when it is not of it), unless None where
    ``value`` is not an allowed None."""
    if read is None and not (optional and value is None):
        none = " or None" if optional else ""
        raise ConfigTypeError(f"{name} is {kind(value)}; expected {expected}{none}")
    return read
