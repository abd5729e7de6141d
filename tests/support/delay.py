"""bench/ scripts loaded for tests (bench/ is a folder of scripts, not a package): the delay proxy
(bench/delayproxy.py, compiled from bench/delayproxy.c), the fan-out benchmark."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def bench_module(stem: str) -> ModuleType:
    """bench/<stem>.py loaded once as module `bench_<stem>`."""
    name = f"bench_{stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def delayproxy() -> ModuleType:
    return bench_module("delayproxy")
