"""bench/delayproxy.py (the benchmark's delay proxy, compiled from bench/delayproxy.c) loaded for tests:
bench/ is a folder of scripts, not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def delayproxy() -> ModuleType:
    name = "bench_delayproxy"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / "delayproxy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
