"""The probe catalog and how a probe becomes one script piped to `python3 -` on a host.

A probe file defines PROBE_NAME, PROBE_VERSION, PROBE_DESCRIPTION, PASSIVE and collect(ctx).  A
line `# requires: _libname` pulls in a shared probe library (probes/_libname.py) before it.  The
controller concatenates prelude + libraries + probe + one call line with the arguments embedded.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

PROBES_DIR = Path(__file__).resolve().parents[2] / "probes"
_REQUIRES = re.compile(r"^#\s*requires:\s*(.+)$", re.MULTILINE)


@cache  # where the probes live does not change while we run; build_script asks twice per host
def probes_dir() -> Path:
    """The shipped probes: beside the package in a checkout, or installed as `orchestrator.probes`."""
    if (PROBES_DIR / "_prelude.py").is_file():
        return PROBES_DIR
    import importlib.resources  # the repository's probes/, installed under the package's name

    return Path(str(importlib.resources.files("orchestrator.probes")))


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    version: str
    description: str
    passive: bool  # True: reads only, never disturbs running work (safe for the nightly audit)
    path: Path
    requires: tuple[str, ...]


class UnknownProbe(KeyError):
    pass


def _constant(tree: ast.Module, name: str) -> Any:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError(f"probe file does not define {name}")


@cache
def catalog() -> dict[str, ProbeSpec]:
    specs: dict[str, ProbeSpec] = {}
    for path in sorted(probes_dir().glob("*.py")):
        if path.name.startswith("_"):
            continue
        source = path.read_text()
        tree = ast.parse(source)
        requires = tuple(r.strip() for m in _REQUIRES.findall(source) for r in m.split(","))
        spec = ProbeSpec(
            name=_constant(tree, "PROBE_NAME"),
            version=_constant(tree, "PROBE_VERSION"),
            description=_constant(tree, "PROBE_DESCRIPTION"),
            passive=bool(_constant(tree, "PASSIVE")),
            path=path,
            requires=requires,
        )
        specs[spec.name] = spec
    return specs


def get(name: str) -> ProbeSpec:
    try:
        return catalog()[name]
    except KeyError:
        known = ", ".join(sorted(catalog()))
        raise UnknownProbe(f"unknown probe {name!r}; known probes: {known}") from None


@cache
def _source(path: Path) -> str:
    return path.read_text()


def build_script(name: str, args: dict[str, Any] | None = None, deadline_s: float = 60.0,
                 announce: bool = False) -> bytes:
    """The exact bytes piped to the host's interpreter for one probe run.  announce: the probe writes
    START_MARK on stdout as it starts, before its envelope (the runner's own transports)."""
    spec = get(name)
    base = probes_dir()
    libs = [_source(base / f"{lib}.py") for lib in spec.requires]
    return compose(_source(spec.path), args, deadline_s, libs, announce)


@cache  # the same text for every host: a 500-host run decodes it once
def probe_source(name: str) -> str:
    """Prelude + libraries + probe, without the call line: what a bundle child runs before it calls
    fp_main itself (line numbers match build_script's, so tracebacks read the same)."""
    spec = get(name)
    base = probes_dir()
    libs = tuple(_source(base / f"{lib}.py") for lib in spec.requires)
    return _head(_source(base / "_prelude.py"), libs, _source(spec.path)).decode("utf-8")


def bundle_runner_source() -> str:
    """probes/_bundle.py: the code that runs several probes in one interpreter on the host."""
    return _source(probes_dir() / "_bundle.py")


def compose(probe_source: str, args: dict[str, Any] | None, deadline_s: float, libs: list[str] | None = None,
            announce: bool = False) -> bytes:
    """Prelude + libraries + probe + the call line.  Tests use it to run probes of their own."""
    head = _head(_source(probes_dir() / "_prelude.py"), tuple(libs or ()), probe_source)
    return head + call_line(args, deadline_s, announce).encode("utf-8")


# The line that runs a probe after its code.  The Ansible modules of `probe ansible-collection` carry
# this template and fill it on the host, where their arguments are known (api/ansible_collection.py).
CALL_TEMPLATE = "\n\nfp_main(PROBE_NAME, PROBE_VERSION, collect, json.loads({args}), {deadline})\n"
# The runner's own call: the probe announces its start (START_MARK) so that its timeout counts from
# there, on the host (transport/base.py: CommandClock; docs/performance.md, "Timeouts under latency").
ANNOUNCED_CALL_TEMPLATE = "\n\nfp_main(PROBE_NAME, PROBE_VERSION, collect, json.loads({args}), {deadline}, True)\n"
# The prelude's _FP_START_MARK (tests/engine/test_prelude.py holds the two together).
START_MARK = b"FPSTART 1\n"


def call_line(args: dict[str, Any] | None, deadline_s: float, announce: bool = False) -> str:
    # Arguments travel as a JSON string literal: no inventory value is ever spliced into code.
    arg_json = json.dumps(args or {}, sort_keys=True)
    template = ANNOUNCED_CALL_TEMPLATE if announce else CALL_TEMPLATE
    return template.format(args=repr(arg_json), deadline=repr(float(deadline_s)))


@lru_cache(maxsize=128)
def _head(prelude: str, libs: tuple[str, ...], probe_source: str) -> bytes:
    # The ~20 KB of code before the call line is the same for every host running this probe: join
    # and encode it once (the sources are the cached strings of _source, so hashing them is free).
    return "\n".join([prelude, *libs, probe_source]).encode("utf-8")
