"""The real `ansible-inventory` (ansible-core is in the `test` extra): the one beside this
Python first (the project's venv), else $FLEETPROBE_ANSIBLE_INVENTORY, else PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def ansible_inventory_bin() -> str | None:
    beside = Path(sys.executable).parent / "ansible-inventory"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return os.environ.get("FLEETPROBE_ANSIBLE_INVENTORY") or shutil.which("ansible-inventory")


ANSIBLE_INVENTORY = ansible_inventory_bin()
SKIP_REASON = ("ansible-inventory not found beside this Python, in $FLEETPROBE_ANSIBLE_INVENTORY or on PATH: "
               "install the test extra (pip install -e '.[test]', which brings ansible-core)")


def ansible_list(source: Path, cwd: Path | None = None) -> dict[str, Any]:
    """`ansible-inventory -i SOURCE --list` as JSON; a source Ansible cannot parse is an error
    (ANSIBLE_INVENTORY_UNPARSED_FAILED), not an empty inventory with a warning."""
    assert ANSIBLE_INVENTORY, SKIP_REASON
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1", "ANSIBLE_LOCAL_TEMP": str(cwd or source.parent),
           "ANSIBLE_HOME": str(cwd or source.parent), "ANSIBLE_NOCOLOR": "1"}
    out = subprocess.run([ANSIBLE_INVENTORY, "-i", str(source), "--list"], capture_output=True, text=True,
                         timeout=120, env=env, cwd=cwd or source.parent)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)
