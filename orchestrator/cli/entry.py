"""The `probe` console command (and `python -m orchestrator`): SIGINT and SIGTERM are interrupts
from its first step, before the rest of fleetprobe is imported, which takes a third of a second
in which a signal would otherwise kill the command (status -15) or show a traceback."""

from __future__ import annotations

import sys

from orchestrator.cli import signals
from orchestrator.cli.exitcodes import ExitStatus


def main() -> int:
    try:
        signals.as_interrupts(whole_process=True)
        from orchestrator.cli.main import main as command

        return command()
    except KeyboardInterrupt:  # while the command was imported (the command handles its own)
        signals.decided(whole_process=True)
        print("probe: interrupted", file=sys.stderr)
        return ExitStatus.INTERRUPTED.value
