"""Which host names an artefact others run may name: a generated playbook's `hosts:`, its vars'
keys, a Slurm `scontrol ... NodeName=` line, an Ansible inventory's host keys.

A name comes from a host (a bundle document's node name), a stored run or a shard: untrusted.
Ansible reads every `hosts:` entry as a pattern (`all`, `*`, globs, `~regex`, `a,b`, `a:&b`,
`!a`, subscripts `a[0]`, ranges `a[01:09]`), templates `{{ }}` in it, and targets the machine
that runs ansible-playbook for the implicit `localhost`; Slurm reads `a,b` and `a[1-4]` as
several nodes and the shell reads the rest.  So one grammar that is a single literal name to
both, and nothing else: a letter or digit, then letters, digits, `.`, `_`, `-`; not a name
Ansible gives a meaning of its own.  A name outside it is refused (left out, and said), never
escaped into something that may still name another host.

Pure: a name in, the reason it is refused (or None) out.
"""

from __future__ import annotations

import re

MAX_NAME = 253  # characters: a DNS name's limit; a host name is rarely a quarter of it
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Ansible's implicit groups (patterns of every host) and its implicit localhost (the controller)
_RESERVED = {"all": "Ansible's group of every host", "ungrouped": "an Ansible group of many hosts",
             "localhost": "Ansible's implicit localhost, the machine that runs ansible-playbook",
             "127.0.0.1": "Ansible's implicit localhost, the machine that runs ansible-playbook"}


def name_problem(name: str) -> str | None:
    """Why `name` may not be written as one target host; None when it may."""
    if not name:
        return "an empty name"
    if len(name) > MAX_NAME:
        return f"longer than {MAX_NAME} characters"
    if not _NAME.fullmatch(name):
        return ("not one literal host name (only letters, digits, '.', '_', '-', starting with a letter or digit: "
                "Ansible would read a pattern or template, Slurm a list, the shell a command)")
    reserved = _RESERVED.get(name.lower())
    return f"the name of {reserved}" if reserved else None


def shown(name: str, limit: int = 80) -> str:
    """The name as a message may show it: quoted, escaped (repr), cut to `limit` characters."""
    text = repr(name[:limit])
    return text if len(name) <= limit else f"{text}... ({len(name)} characters)"
