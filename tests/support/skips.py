"""Skips that CI accepts.

Under CI=true a skipped test is a check that did not run: where its real part is missing (sshd,
gcc, chromium, ansible, Slurm: scripts/test.sh installs them) it fails instead (tests/conftest.py).
What this kind of machine cannot have or be (a GPU and NVIDIA's tools, an older interpreter's
standard library, a user other than root, privileges to mount) is said with `not_here`, and only
such a skip stays a skip in CI."""

from __future__ import annotations

from typing import NoReturn

import pytest

NOT_HERE = "not on this kind of machine: "


def not_here(reason: str) -> NoReturn:
    pytest.skip(NOT_HERE + reason)


def accepted_in_ci(reason: str) -> bool:
    return NOT_HERE in reason
