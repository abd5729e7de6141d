"""Helpers for the reliability suite (tests/reliability, some of tests/cli): fake interpreters on
"the host", inventories, the real CLI.

"The host" is this machine: inventories use `ansible_connection: local` (a real `/bin/sh -c`
subprocess, same caps and deadlines as SSH) unless a test needs the real sshd.  A hostile host is
an `ansible_python_interpreter` pointing at a small script that reads the probe from stdin, as
python3 would, and answers whatever the test wants.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.store import members
from orchestrator.store.compact import read_plain
from tests.support.sshd import ROOT_DIR

ESC = "\x1b"

# Runs the CLI in-process and records its own peak RSS, so a test can bound the controller's
# memory without counting the hostile interpreter (a separate process) against it.
# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over fork and exec, so a CLI started
# from a test process that has grown (late in a full run) would report the test process's peak.
_RSS_WRAPPER = """
import os, sys
sys.path.insert(0, {root!r})
from orchestrator.cli.main import main
try:
    code = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["FLEETPROBE_TEST_RSS"], "w") as f:
        f.write(peak)
sys.exit(code)
"""


def interpreter(directory: Path, name: str, body: str, read_stdin: bool = True) -> Path:
    """An executable fake `python3` on the host: reads the probe script, then runs `body`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    head = "import sys, os, json\n" + ("sys.stdin.buffer.read()\n" if read_stdin else "")
    path.write_text(f"#!{sys.executable}\n{head}{body}\n")
    path.chmod(0o755)
    return path


def envelope(probe: str, data: dict[str, Any], status: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"envelope_version": 1, "probe": probe, "probe_version": "1.0", "status": status, "data": data,
            "errors": [], "warnings": [], "duration_s": 0.01, **extra}


def envelope_printer(directory: Path, name: str, env: dict[str, Any]) -> Path:
    """A fake interpreter that prints exactly this envelope (stored beside it as JSON)."""
    doc = directory / f"{name}.envelope.json"
    directory.mkdir(parents=True, exist_ok=True)
    doc.write_text(json.dumps(env))
    return interpreter(directory, name, f"sys.stdout.write(open({str(doc)!r}).read())")


def recorded(machine: str, probe: str) -> dict[str, Any]:
    """A real envelope recorded from a fixture machine (the demo fleet's recordings)."""
    path = ROOT_DIR / "orchestrator" / "demo" / "recordings" / machine / f"{probe}.json"
    return dict(json.loads(path.read_text()))


def inventory(path: Path, hosts: dict[str, dict[str, Any]], **group_vars: Any) -> Path:
    """A YAML inventory (values JSON-quoted, which is valid YAML); local connection by default."""
    gv = {"ansible_connection": "local", **group_vars}
    lines = ["all:", "  vars:"]
    lines += [f"    {k}: {json.dumps(v)}" for k, v in gv.items()]
    lines.append("  hosts:")
    for name, hvars in hosts.items():
        lines.append(f"    {json.dumps(name)}:" + ("" if hvars else " {}"))
        lines += [f"      {k}: {json.dumps(v)}" for k, v in hvars.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class CliRun:
    code: int
    stdout: str
    stderr: str
    elapsed: float
    rss_kib: int | None  # peak RSS of the controller process, when measured

    def one_line_error(self) -> str:
        """The user's message: stderr must be short lines, none of them a traceback."""
        assert "Traceback" not in self.stderr and "Traceback" not in self.stdout, self.stderr[-2000:]
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else ""


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env["PYTHONPATH"] = str(ROOT_DIR)
    env.update(extra)
    return env


def run_cli(args: list[str], timeout: float = 60, env: dict[str, str] | None = None,
            measure_rss: Path | None = None) -> CliRun:
    """`python -m orchestrator <args>` as a user runs it; stdout/stderr captured as text."""
    env = dict(env or cli_env())
    if measure_rss is not None:
        env["FLEETPROBE_TEST_RSS"] = str(measure_rss)
        cmd = [sys.executable, "-c", _RSS_WRAPPER.format(root=str(ROOT_DIR)), *args]
    else:
        cmd = [sys.executable, "-m", "orchestrator", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env, cwd=str(ROOT_DIR),
                          stdin=subprocess.DEVNULL)
    elapsed = time.monotonic() - t0
    rss = int(measure_rss.read_text()) if measure_rss is not None and measure_rss.is_file() else None
    return CliRun(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
                  elapsed, rss)


def only_run_dir(results: Path) -> Path:
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def load_fleet(run_dir: Path) -> dict[str, Any]:
    return dict(read_plain(run_dir / "fleet.json"))


def host_record(fleet: dict[str, Any], name: str) -> dict[str, Any]:
    for rec in fleet["hosts"]:
        if rec["name"] == name:
            return dict(rec)
    raise AssertionError(f"host {name!r} not in fleet.json: {[h['name'] for h in fleet['hosts']]}")


def assert_good_host(fleet: dict[str, Any], name: str, probe: str = "host") -> None:
    """A well-behaved host beside the hostile ones came through complete and correct."""
    rec = host_record(fleet, name)
    assert rec["outcome"] == "ok", rec["reason"]
    assert rec["probes"][probe]["outcome"] == "ok"
    if probe == "host":
        assert rec["facts"]["host"]["hostname"] == os.uname().nodename
        assert rec["facts"]["host"]["kernel"] == os.uname().release


def assert_judged(fleet: dict[str, Any], name: str) -> None:
    """A healthy host of this machine (no GPUs: the GPU probes are `unsupported`) was judged in full."""
    rec = host_record(fleet, name)
    assert rec["probes"]["host"]["outcome"] == "ok", rec["probes"]
    assert all(p["outcome"] in ("ok", "unsupported") for p in rec["probes"].values()), rec["probes"]
    assert rec["facts"]["host"]["hostname"] == os.uname().nodename
    assert not rec["normalize_errors"], rec["normalize_errors"]


def tree(path: Path) -> set[str]:
    """Every path below `path`, relative, for before/after comparisons."""
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def answer_file(directory: Path, name: str, content: bytes | dict[str, Any]) -> Path:
    """A file a fake interpreter prints: raw bytes, or an envelope as JSON."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return path


def bundle_printer(directory: Path, name: str, answers: dict[str, Path],
                   heads: dict[str, dict[str, Any]] | None = None) -> Path:
    """A fake interpreter that answers a bundle (several probes, engine/bundle.py) with forged frames.

    It reads the probe names from the bundle's spec, in order, and for each writes a frame header
    (defaults of a probe that ran and exited 0, then `heads[probe]`) and the bytes of
    `answers[probe]` (nothing when absent).  A header may lie about its own sizes."""
    spec = {"answers": {p: str(f) for p, f in answers.items()}, "heads": heads or {}}
    doc = answer_file(directory, f"{name}.frames.json", spec)
    return interpreter(directory, name, (
        "import re\n"
        "src = sys.stdin.buffer.read()\n"
        f"spec = json.load(open({str(doc)!r}))\n"
        "names = [m.decode() for m in re.findall(rb'\"name\": \"(\\w+)\", \"timeout_s\"', src)]\n"
        "out = sys.stdout.buffer\n"
        "out.write(b'FPBUNDLE 1\\n')\n"
        "for n in names:\n"
        "    body = open(spec['answers'][n], 'rb').read() if n in spec['answers'] else b''\n"
        "    head = {'probe': n, 'state': 'ran', 'exit': 0, 'out': len(body), 'err': 0, 'timed_out': False,\n"
        "            'out_trunc': False, 'err_trunc': False, 'duration_s': 0.01}\n"
        "    head.update(spec['heads'].get(n, {}))\n"
        "    out.write(json.dumps(head).encode() + b'\\n' + body)\n"
        "out.flush()\n"), read_stdin=False)


def per_probe_printer(directory: Path, name: str, answers: dict[str, Path]) -> Path:
    """A fake interpreter for one probe at a time: prints the answer for the probe it is sent."""
    spec = answer_file(directory, f"{name}.answers.json", {p: str(f) for p, f in answers.items()})
    return interpreter(directory, name, (
        "src = sys.stdin.buffer.read()\n"
        f"answers = json.load(open({str(spec)!r}))\n"
        "for probe, path in answers.items():\n"
        "    if (\"PROBE_NAME = '%s'\" % probe).encode() in src or ('PROBE_NAME = \"%s\"' % probe).encode() in src:\n"
        "        sys.stdout.buffer.write(open(path, 'rb').read())\n"
        "        break\n"), read_stdin=False)


def strict_json(path: Path) -> Any:
    """A stored document parsed as strict JSON: NaN/Infinity are an error, not a value."""
    def refuse(name: str) -> None:
        raise AssertionError(f"{path.name} holds the non-JSON constant {name}")
    data = path.read_bytes()  # fleet.json is schema 3's gzip members (store/members.py): their text
    return json.loads(members.unpack(data) if members.is_members(data) else data, parse_constant=refuse)
