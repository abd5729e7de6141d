"""The hostile strings every artefact writer's tests feed in (issue 45): as host names, finding ids,
subjects, run ids, reasons.  Each class has several members; `MARKER` in a string is replaced by a
path the test then checks does not exist (a lookup, a shell or a YAML tag that ran would create it).

`ansible_yaml` reads what fleetprobe writes for Ansible as Ansible would (its `!unsafe` tag kept
as the plain string), where plain safe_load refuses the tag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MARKER = "MARKER"

CLASSES: dict[str, tuple[str, ...]] = {
    "jinja": (
        "{{ lookup('pipe', 'touch MARKER') }}",
        "{{ lookup('pipe','touch MARKER') ~ 'node03' }}",
        "{% set x = lookup('pipe', 'touch MARKER') %}node04",
        "{# a comment #}{{ query('pipe', 'touch MARKER') }}",
    ),
    "yaml": (
        "&anchor node05",
        "*anchor",
        "!!python/object/apply:os.system ['touch MARKER']",
        "- hosts: all\n  tasks: [{command: touch MARKER}]",
        "key: value # comment",
    ),
    "line_breaks": ("node06\ntouch MARKER", "node07\u2028touch MARKER", "node08\u0085touch MARKER",
                    "node09\rtouch MARKER", "node10\u2029x"),
    "shell": ("; touch MARKER", "$(touch MARKER)", "`touch MARKER`", "| touch MARKER", "& touch MARKER",
              "'\"; touch MARKER; echo \"'", "node11 State=RESUME"),
    "ansible_pattern": ("all", "*", "node0*", "~node.*", "evil01,node02", "node01:&node02", "node01:!node02",
                        "!node01", "node[01:03]", "node[0]", "localhost", "ungrouped", "ALL"),
    "option": ("-x", "--x", "--run_infinitely", "-rf"),
}

ALL: tuple[str, ...] = tuple(s for members in CLASSES.values() for s in members)


def armed(text: str, marker: Path) -> str:
    """`text` with its MARKER made the absolute path the test watches."""
    return text.replace(MARKER, str(marker))


def corpus(marker: Path) -> list[str]:
    """Every hostile string, armed with `marker`."""
    return [armed(s, marker) for s in ALL]


class _AnsibleLoader(yaml.SafeLoader):
    pass


_AnsibleLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))  # type: ignore[arg-type,union-attr]


def ansible_yaml(text: str) -> Any:
    """YAML fleetprobe wrote for Ansible, its `!unsafe` strings read as the strings they are."""
    return yaml.load(text, Loader=_AnsibleLoader)
