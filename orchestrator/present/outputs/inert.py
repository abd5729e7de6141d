"""YAML that Ansible reads as data, never as a template: every string a run, a host or a shard
supplied is written with Ansible's `!unsafe` tag, which ansible-playbook and the yaml inventory
plugin take as a literal (no `{{ }}`, `{% %}`, lookup is ever evaluated in it, also when a
template of ours refers to it).  PyYAML's safe_dump cannot write a tag; `dump` is safe_dump's
dumper with one representer more, for `Unsafe`.

Used by the playbook of `probe remediate` (remediation.py) and the YAML inventory
(ansible_inventory.py).  The templates fleetprobe itself writes (`{{ item }}`, the task's
`when:`) stay plain strings: they are ours, and they only refer to `Unsafe` values.
"""

from __future__ import annotations

from typing import Any

import yaml


class Unsafe(str):
    """A string Ansible must not template: written as `!unsafe "..."`."""


class _Dumper(yaml.SafeDumper):
    pass


_STR = "tag:yaml.org,2002:str"


def _represent_unsafe(dumper: yaml.SafeDumper, data: Unsafe) -> yaml.ScalarNode:
    # ansible-core (2.19) types an `!unsafe` scalar as if it were plain, quoted or not: `!unsafe
    # "0000:18:00.0"` (a GPU's bus id) reads as the base-60 number 1080.0, `!unsafe "yes"` as True.
    # Such a text is a number, a boolean, a date or null to YAML: no `{` in it, nothing to template,
    # so it is written as a quoted string, which every reader keeps as the text it is.
    if dumper.resolve(yaml.ScalarNode, str(data), (True, False)) != _STR:
        return dumper.represent_scalar(_STR, str(data), style='"')
    # double-quoted: every character survives (line breaks, \u2028, controls as escapes)
    return dumper.represent_scalar("!unsafe", str(data), style='"')


_BREAKS = "\n\r\x85\u2028\u2029"  # YAML line breaks: a single-quoted scalar folds them into spaces


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data,
                                   style='"' if any(c in data for c in _BREAKS) else None)


_Dumper.add_representer(Unsafe, _represent_unsafe)
_Dumper.add_representer(str, _represent_str)


def inert(value: Any, every: bool = True) -> Any:
    """`value` with every string in it (keys excepted: callers validate them) made `Unsafe`; with
    `every=False` only the strings Ansible could template: those holding a `{` (every Jinja
    delimiter, `{{`, `{%`, `{#`, starts with one), so that the rest reads back as plain strings
    (`ansible-inventory --list` prints an unsafe value as `{"__ansible_unsafe": ...}`)."""
    if isinstance(value, str):
        return Unsafe(value) if every or "{" in value else value
    if isinstance(value, dict):
        return {k: inert(v, every) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert(v, every) for v in value]
    return value


def dump(data: Any, width: int = 120, allow_unicode: bool = False) -> str:
    """safe_dump's YAML, `Unsafe` strings tagged `!unsafe`."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=width, allow_unicode=allow_unicode,
                     default_flow_style=False)
