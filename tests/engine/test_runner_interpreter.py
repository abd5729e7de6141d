"""How the runner starts the host's interpreter: `python3 -I -S -`, and what an unusable one gets.

Real interpreters on this machine over the local transport: the venv's Python, /usr/bin/env with
arguments, pyenv's Python 2.7 and 3.6 where installed (skipped elsewhere), a missing path.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.engine import payload as probes
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import HostResult, ProbeCall, RunOptions, probe_command, run_host
from orchestrator.inventory.model import Host
from orchestrator.transport.local import LocalTransport
from tests.support.skips import NOT_HERE

PY2_REASON = "cannot run the probe (Python 2 or older than 3.6?)"


def _find(pattern: str) -> str | None:
    found = sorted(glob.glob(os.path.expanduser(pattern)))
    return found[0] if found else None


PYTHON27 = _find("~/.pyenv/versions/2.7*/bin/python2.7") or _find("/usr/bin/python2.7")
PYTHON36 = _find("~/.pyenv/versions/3.6*/bin/python3.6") or _find("/usr/bin/python3.6")


def run(python: str, names: list[str], **vars: object) -> HostResult:
    host = Host("h01", {"ansible_connection": "local", "ansible_python_interpreter": python, **vars})
    calls = [ProbeCall(n, {}, 20.0) for n in names]
    return run_host(host, calls, RunOptions(), lambda h, o: LocalTransport(h, o), threading.Event(), {},
                    threading.Lock())


def test_the_command_is_isolated_and_without_site() -> None:
    host = Host("h01", {"ansible_python_interpreter": "/usr/bin/env python3"})
    assert probe_command(host, False) == "/usr/bin/env python3 -I -S -"
    assert probe_command(host, True) == "sudo -n -- /bin/sh -c '/usr/bin/env python3 -I -S -'"


def test_modules_in_the_login_directory_or_pythonpath_cannot_shadow_the_stdlib(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    extra = tmp_path / "pythonpath"
    for d in (home, extra):
        d.mkdir()
    # a user's stray json.py / platform.py: `python3 -` would import these instead of the stdlib
    (home / "json.py").write_text("raise SystemExit('shadowed json from the login directory')\n")
    (extra / "platform.py").write_text("raise SystemExit('shadowed platform from PYTHONPATH')\n")
    monkeypatch.chdir(home)
    monkeypatch.setenv("PYTHONPATH", str(extra))
    # the trap is real: the plain `python3 -` of before falls into it
    old = subprocess.run([sys.executable, "-"], input=probes.build_script("host", {}, 10), capture_output=True,
                         timeout=30)
    assert old.returncode != 0 and b"shadowed" in old.stderr
    res = run(sys.executable, ["host"])
    assert res.probes["host"].outcome == Outcome.OK, res.probes["host"].reason
    assert res.probes["host"].envelope is not None and res.probes["host"].envelope.data["python"]


def test_an_interpreter_given_with_its_own_arguments_still_works() -> None:
    res = run(f"/usr/bin/env {sys.executable}", ["host"])
    assert res.probes["host"].outcome == Outcome.OK, res.probes["host"].reason


def _fake_python2(directory: Path) -> Path:
    # What CPython 2.7 (and 3.0-3.3) answer to -I, byte for byte, before reading any script.
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "python2.7"
    path.write_text("#!/bin/sh\necho 'Unknown option: -I' >&2\n"
                    "echo \"usage: $0 [option] ... [-c cmd | -m mod | file | -] [arg] ...\" >&2\n"
                    "echo \"Try \\`python -h' for more information.\" >&2\nexit 2\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("names", [["host"], ["host", "pcie"]], ids=["one-probe", "two-probes"])
def test_python2_refusing_the_isolation_flag_gets_the_python_3_6_message(tmp_path: Path, names: list[str]) -> None:
    res = run(str(_fake_python2(tmp_path / "bin")), names)
    for name in names:
        p = res.probes[name]
        assert p.outcome == Outcome.FAILED and PY2_REASON in p.reason, (name, p.reason)
        assert "set ansible_python_interpreter to a Python 3.6+" in p.reason
        assert b"Unknown option: -I" in p.stderr


@pytest.mark.skipif(PYTHON27 is None, reason=NOT_HERE + "no Python 2.7")
@pytest.mark.parametrize("names", [["host"], ["host", "pcie"]], ids=["one-probe", "two-probes"])
def test_a_real_python_2_7_gets_the_python_3_6_message(names: list[str]) -> None:
    assert PYTHON27 is not None
    res = run(PYTHON27, names)
    for name in names:
        assert res.probes[name].outcome == Outcome.FAILED and PY2_REASON in res.probes[name].reason


@pytest.mark.skipif(PYTHON36 is None, reason=NOT_HERE + "no Python 3.6")
def test_the_oldest_supported_python_runs_the_probes_isolated(tmp_path: Path) -> None:
    from orchestrator.simulate.sysfs import build_machine

    assert PYTHON36 is not None
    root = build_machine("dgx-h100", tmp_path / "h100")
    for names in (["host"], ["host", "pcie"]):
        res = run(PYTHON36, names, probe_root=str(root))
        for name in names:
            assert res.probes[name].outcome == Outcome.OK, (name, res.probes[name].reason)
    assert res.probes["pcie"].envelope is not None and res.probes["pcie"].envelope.data


@pytest.mark.parametrize("names", [["host"], ["host", "pcie"]], ids=["one-probe", "two-probes"])
def test_a_missing_interpreter_is_still_detected_for_raw_mode(tmp_path: Path, names: list[str]) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    res = run(str(tmp_path / "no" / "python3"), names, probe_raw_path=str(empty))
    first = res.probes[names[0]]
    assert first.outcome == Outcome.FAILED and first.reason.startswith(f"interpreter '{tmp_path}/no/python3' not found")
    assert "raw mode" in first.reason  # the fallback was tried (nvidia-smi/lspci may be absent here)
    for name in names[1:]:
        assert res.probes[name].outcome == Outcome.SKIPPED and res.probes[name].reason.startswith("not run:")
