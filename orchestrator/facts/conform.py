"""Facts that did not come from this controller's normalizers, checked against their types.

A stored run, a shard given to `probe merge` or a hand-edited fleet.json can hold anything; the
readers (checks, tables, the report, drift) rely on the types facts/model.py declares.  So facts
read back are checked against those same declarations before any reader sees them, and a section
that is not of its type is left out, with the first place where it differs, rather than raised
at a reader (or, worse, judged).  The live road does not need this: its facts are what the
normalizers made of a type-checked envelope.

The checkers are built from model.py's annotations, so the types have one home.  A missing key is
not a difference (a run stored by an older fleetprobe lacks the keys added since, and every reader
asks with .get); a key of the wrong type, a non-finite float (strict JSON has none) and a bool
where a number is declared are.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from orchestrator.facts import model

# value -> None when it conforms, else (path below the value, what differs)
Checker = Callable[[Any], "tuple[str, str] | None"]


def _ok(_value: Any) -> None:
    return None


_NAMES = {type(None): "null", dict: "object", list: "list", str: "string", bool: "bool", int: "integer",
          float: "number"}


def _kind_of(value: Any) -> str:
    return _NAMES.get(type(value), type(value).__name__)


# Scalars are checked by their exact type (a bool is not a number here, though Python says it is
# an int), so a union of them is one set lookup; SCALARS remembers which checker accepts which types.
SCALARS: dict[Checker, frozenset[type]] = {}


def _types(types: frozenset[type]) -> Checker:
    numbers = float in types  # a float must be finite too
    expected = " or ".join(sorted(_NAMES[t] for t in types))

    def check(value: Any) -> tuple[str, str] | None:
        if type(value) in types:
            if numbers and type(value) is float and not math.isfinite(value):
                return "", f"{value} is not a finite number"
            return None
        return "", f"{expected} expected, {_kind_of(value)} found"
    SCALARS[check] = types
    return check


def _union(options: list[Checker]) -> Checker:
    scalar = frozenset().union(*(SCALARS[o] for o in options if o in SCALARS))
    others = [o for o in options if o not in SCALARS]
    if _ok in others:
        return _ok
    if not others:
        return _types(scalar)
    if scalar == {type(None)} and len(others) == 1:
        inner = others[0]
        return lambda value: None if value is None else inner(value)
    checks = ([_types(scalar)] if scalar else []) + others

    def check(value: Any) -> tuple[str, str] | None:
        first = None
        for option in checks:
            why = option(value)
            if why is None:
                return None
            first = first or why
        return first
    return check


def _finite(values: Any) -> bool:
    """No float among these is inf or nan."""
    return all(map(math.isfinite, filter(_is_float, values)))


def _is_float(value: Any) -> bool:
    return type(value) is float


def _list_of(item: Checker) -> Checker:
    scalars = SCALARS.get(item)  # a list of scalars (most lists of a record) is checked in one pass

    def check(value: Any) -> tuple[str, str] | None:
        if not isinstance(value, list):
            return "", f"list expected, {_kind_of(value)} found"
        if scalars is not None and scalars.issuperset(map(type, value)) and (float not in scalars or _finite(value)):
            return None
        if item is not _ok:
            for i, v in enumerate(value):
                why = item(v)
                if why is not None:
                    return f"[{i}]{why[0]}", why[1]
        return None
    return check


def _dict_of(value_check: Checker) -> Checker:
    def check(value: Any) -> tuple[str, str] | None:
        if not isinstance(value, dict):
            return "", f"object expected, {_kind_of(value)} found"
        if value_check is not _ok:
            for k, v in value.items():
                why = value_check(v)
                if why is not None:
                    return f"[{str(k)[:40]!r}]{why[0]}", why[1]
        return None
    return check


def _record(cls: type) -> Checker:
    fields: dict[str, Checker] = {}
    # the scalar fields' accepted types, looked up in place: most of a record's values are scalars,
    # and a call per value was most of the time a stored record takes to check
    scalar: dict[str, frozenset[type]] = {}
    resolved = False

    def check(value: Any) -> tuple[str, str] | None:
        nonlocal resolved
        if not resolved:  # records refer to each other (and to records declared below them)
            checks = {k: _checker(v) for k, v in _annotations(cls).items()}
            fields.update({k: c for k, c in checks.items() if c is not _ok})
            scalar.update({k: SCALARS[c] for k, c in fields.items() if c in SCALARS})
            resolved = True
        if not isinstance(value, dict):
            return "", f"object expected, {_kind_of(value)} found"
        for key, v in value.items():
            types = scalar.get(key)
            if types is not None and type(v) in types and (type(v) is not float or math.isfinite(v)):
                continue
            field_check = fields.get(key)
            if field_check is not None:
                why = field_check(v)
                if why is not None:
                    return f".{key}{why[0]}", why[1]
        return None
    return check


def _annotations(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):  # a TypedDict's bases' keys are its keys too
        out.update(getattr(klass, "__annotations__", {}))
    return out


class _Ann:
    """An annotation's text evaluated into a checker: `|`, `[...]` and the names model.py uses."""

    def __init__(self, check: Checker, generic: Callable[[Any], Checker] | None = None) -> None:
        self.check = check
        self.generic = generic

    def __or__(self, other: Any) -> _Ann:
        return _Ann(_union([self.check, _as_checker(other)]))

    def __ror__(self, other: Any) -> _Ann:
        return _Ann(_union([_as_checker(other), self.check]))

    def __getitem__(self, args: Any) -> _Ann:
        assert self.generic is not None, "subscripted a type that takes no parameters"
        return _Ann(self.generic(args))


def _as_checker(ann: Any) -> Checker:
    """A checker of an evaluated annotation: an _Ann, None, a TypedDict class or a typing alias."""
    if isinstance(ann, _Ann):
        return ann.check
    if ann is None or ann is type(None):
        return _BASIC[None]
    if ann is Any:
        return _ok
    if isinstance(ann, type) and hasattr(ann, "__total__"):
        return _record_of(ann)
    if ann in _BASIC:
        return _BASIC[ann]
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Union:
        return _union([_as_checker(a) for a in args])
    if origin is list:
        return _list_of(_as_checker(args[0]))
    if origin is dict:
        return _dict_of(_as_checker(args[1]))
    raise TypeError(f"facts/conform.py does not know the annotation {ann!r}")


_BASIC: dict[Any, Checker] = {str: _types(frozenset({str})), int: _types(frozenset({int})),
                              float: _types(frozenset({int, float})), bool: _types(frozenset({bool})),
                              None: _types(frozenset({type(None)}))}


@cache
def _record_of(cls: type) -> Checker:
    return _record(cls)


def _namespace() -> dict[str, Any]:
    names: dict[str, Any] = {name: _Ann(_as_checker(v)) for name, v in vars(model).items()
                             if (isinstance(v, type) and hasattr(v, "__total__"))
                             or typing.get_origin(v) in (typing.Union, list, dict)}
    names.update({
        **{t.__name__: _Ann(_BASIC[t]) for t in (str, int, float, bool)}, "None": _Ann(_BASIC[None]), "Any": _Ann(_ok),
        "list": _Ann(_list_of(_ok), lambda a: _list_of(_as_checker(a))),
        "dict": _Ann(_dict_of(_ok), lambda a: _dict_of(_as_checker(a[1]))),
        "NotRequired": _Ann(_ok, _as_checker),
    })
    return names


def _checker(annotation: Any) -> Checker:
    if isinstance(annotation, typing.ForwardRef):
        annotation = annotation.__forward_arg__
    if isinstance(annotation, str):
        annotation = eval(annotation, _model_names())  # model.py's own annotation text
    return _as_checker(annotation)


@cache
def _model_names() -> dict[str, Any]:
    return _namespace()


def conform_facts(facts: Any) -> tuple[dict[str, Any], list[str]]:
    """`facts` with every section that is not of its declared type left out, and why, one line
    per section left out.  A section facts/model.py does not declare is left as it is."""
    if not isinstance(facts, dict):
        return {}, [f"facts: object expected, {_kind_of(facts)} found; no facts kept"]
    sections = _sections()
    kept: dict[str, Any] = {}
    problems = []
    for name, value in facts.items():
        check = sections.get(name)
        why = check(value) if check is not None else None
        if why is None:
            kept[name] = value
        else:
            problems.append(f"facts.{name}{why[0]}: {why[1]}; the {name} section is left out")
    return kept, problems


def conform_probes(probes: Any) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """A host record's probe records, each without the fields that are not of their declared type
    (facts/model.py ProbeRecord), and what was left out.  A record that is not an object at all
    is left out whole."""
    if not isinstance(probes, dict):
        return {}, [f"probes: object expected, {_kind_of(probes)} found; no probe records kept"]
    fields = _probe_fields()
    kept: dict[str, dict[str, Any]] = {}
    problems = []
    for name, rec in probes.items():
        if not isinstance(rec, dict):
            problems.append(f"probes[{str(name)[:40]!r}]: object expected, {_kind_of(rec)} found; left out")
            continue
        bad = {k: why for k, why in ((k, fields[k](v)) for k, v in rec.items() if k in fields) if why is not None}
        kept[str(name)] = {k: v for k, v in rec.items() if k not in bad} if bad else rec
        problems.extend(f"probes[{str(name)[:40]!r}].{k}{why[0]}: {why[1]}; left out" for k, why in bad.items())
    return kept, problems


@cache
def _probe_fields() -> Mapping[str, Checker]:
    return {k: _checker(v) for k, v in _annotations(model.ProbeRecord).items()}


@cache
def _sections() -> Mapping[str, Checker]:
    return {k: _checker(v) for k, v in _annotations(model.Facts).items()}
