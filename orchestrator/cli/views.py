"""The `--show VIEWS` option of run, show and import: names from the facts registry, checked at parse time."""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from orchestrator.facts import registry


def parse_views(value: str) -> list[str]:
    """argparse `type=`: "a, b" -> ["a", "b"]; an unknown name is a usage error (exit 2) naming the known ones."""
    known = registry.view_names()
    names = [x.strip() for x in value.split(",") if x.strip()]
    bad = [n for n in names if n not in known]
    if bad:
        close = [m for n in bad for m in difflib.get_close_matches(n, known, n=1)]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise argparse.ArgumentTypeError(f"unknown view {', '.join(map(repr, bad))}{hint} known: {', '.join(known)}")
    return names


def add_findings_view(p: Any) -> None:
    """Add `--findings hosts|checks`: the findings by host (each unhealthy host with its faults,
    the default) or by check (each finding id with its hosts)."""
    from orchestrator.present.terminal.findings import FINDINGS_VIEWS

    p.add_argument("--findings", choices=FINDINGS_VIEWS, default="hosts",
                   help="findings on the terminal by host (each unhealthy host with its faults; default) "
                        "or by check (each finding id with the hosts that have it)")


def add_show(p: Any, what: str = "per-host detail views", suffix: str = "", importable_only: bool = False) -> None:
    """Add `--show`; its help lists the views (those a text import can fill, with importable_only)."""
    p.add_argument("--show", type=parse_views, default=[], metavar="VIEWS",
                   help=f"{what}: {', '.join(registry.view_names(importable_only))}{suffix}")


def add_color(p: Any) -> None:
    """Add `--color auto|always|never` (auto: on a terminal, unless NO_COLOR is set or TERM is dumb)."""
    from orchestrator.present.terminal.colour import MODES

    p.add_argument("--color", "--colour", choices=MODES, default="auto",
                   help="colour health and severity: auto (default: on a terminal, off when piped or when "
                        "NO_COLOR is set), always, never")


HOSTS_SHOWN = ("unhealthy", "all")


def add_detail(p: Any) -> None:
    """Add `-v` and `--hosts unhealthy|all`: the default report is the answer in one screen
    (healthy hosts folded into their class line); either flag keeps the full report, a table row
    per host (one line per host when piped, for grep)."""
    p.add_argument("-v", "--verbose", action="store_true",
                   help="the full report: every host's row, every fault and note whole, what was not judged by reason")
    p.add_argument("--hosts", choices=HOSTS_SHOWN, default="unhealthy", dest="hosts_shown",
                   help="unhealthy (default: healthy hosts fold into their class line) or all (a row per host; "
                        "one line per host when piped)")


def full_report(args: argparse.Namespace) -> bool:
    """Whether the command line asked for the full report rather than the one-screen answer."""
    return bool(getattr(args, "verbose", False)) or getattr(args, "hosts_shown", None) == "all"
