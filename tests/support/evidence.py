"""Where the published command outputs live: copies inside the repository (provenance in SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

EVIDENCE = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"


def evidence(name: str) -> Path:
    return EVIDENCE / name
