"""The probe prelude: one envelope on stdout whatever the probe does, and a deadline it keeps."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time

from orchestrator.engine import payload as probes
from orchestrator.engine.envelope import EnvelopeError, parse_envelope

HEADER = 'PROBE_NAME = "t"\nPROBE_VERSION = "0"\nPROBE_DESCRIPTION = "test"\nPASSIVE = True\n'


def run_probe(body: str, args: dict | None = None, deadline: float = 10.0, timeout: float = 30.0):
    script = probes.compose(HEADER + body, args, deadline)
    return subprocess.run([sys.executable, "-"], input=script, capture_output=True, timeout=timeout)


def test_ok_envelope_with_args_and_warnings() -> None:
    r = run_probe("def collect(ctx):\n    ctx.warn('w1')\n    return {'echo': ctx.args['x']}\n", {"x": [1, "two"]})
    env = parse_envelope(r.stdout, "t")
    assert env.status == "ok" and env.data == {"echo": [1, "two"]} and env.warnings == ["w1"]


def test_library_noise_on_stdout_does_not_corrupt_the_envelope() -> None:
    body = ("import os, sys\n"
            "def collect(ctx):\n"
            "    print('noise from print')\n"
            "    os.write(1, b'noise from C-level write\\n')\n"
            "    sys.stdout.write('more noise')\n"
            "    return {'fine': True}\n")
    r = run_probe(body)
    env = parse_envelope(r.stdout, "t")
    assert env.data == {"fine": True}
    assert b"noise from print" in r.stderr and b"C-level" in r.stderr


def test_exception_becomes_error_envelope_with_partial_data() -> None:
    r = run_probe("def collect(ctx):\n    ctx.partial['got'] = 1\n    raise RuntimeError('boom')\n")
    env = parse_envelope(r.stdout, "t")
    assert env.status == "error" and env.data == {"got": 1}
    assert env.errors == ["RuntimeError: boom"]


def test_unsupported() -> None:
    r = run_probe("def collect(ctx):\n    raise Unsupported('no libnvidia-ml.so.1')\n")
    env = parse_envelope(r.stdout, "t")
    assert env.status == "unsupported" and "libnvidia-ml" in env.errors[0]


def test_deadline_fires_and_reports_partial_data() -> None:
    body = "import time\ndef collect(ctx):\n    ctx.partial['step'] = 'before sleep'\n    time.sleep(60)\n    return {}\n"
    t0 = time.monotonic()
    r = run_probe(body, deadline=1.0)
    assert time.monotonic() - t0 < 20  # generous: the watchdog ends it long before the 60 s sleep
    env = parse_envelope(r.stdout, "t")
    assert env.status == "error" and env.data == {"step": "before sleep"}
    assert "deadline" in env.errors[0]


def test_unserialisable_data_still_gives_an_envelope() -> None:
    r = run_probe("def collect(ctx):\n    return {'x': float('nan'), 'y': {1, 2}}\n")
    doc = json.loads(r.stdout)
    assert doc["status"] in ("ok", "error") and doc["probe"] == "t"


def test_envelope_parser_rejects_garbage_with_one_line_reasons() -> None:
    cases = [b"", b"not json", b'{"envelope_version": 1}', b"[1,2]", b'{"a":1}\n{"b":2}',
             json.dumps({"envelope_version": 1, "probe": "t", "probe_version": "0", "status": "ok",
                         "data": [], "errors": [], "warnings": [], "duration_s": 0}).encode(),
             json.dumps({"envelope_version": 1, "probe": "other", "probe_version": "0", "status": "ok",
                         "data": {}, "duration_s": 0}).encode(),
             json.dumps({"envelope_version": 1, "probe": "t", "probe_version": "0", "status": "ok",
                         "data": {}, "duration_s": -5}).encode()]
    for raw in cases:
        try:
            parse_envelope(raw, "t")
        except EnvelopeError as e:
            assert "\n" not in str(e) and str(e)
        else:
            raise AssertionError(f"accepted {raw!r}")


def test_an_announced_probe_writes_the_start_mark_first_then_its_one_envelope() -> None:
    prelude = ast.parse((probes.probes_dir() / "_prelude.py").read_text())
    marks = [ast.literal_eval(n.value) for n in prelude.body if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "_FP_START_MARK" for t in n.targets)]
    assert marks == [probes.START_MARK]  # the runner strips what the prelude writes
    body = "import os\ndef collect(ctx):\n    os.write(1, b'noise')\n    return {'n': 1}\n"
    script = probes.compose(HEADER + body, {}, 10.0, announce=True)
    r = subprocess.run([sys.executable, "-I", "-S", "-"], input=script, capture_output=True, timeout=30)
    assert r.stdout.startswith(probes.START_MARK)
    env = parse_envelope(r.stdout[len(probes.START_MARK):], "t")
    assert env.status == "ok" and env.data == {"n": 1}
    # other engines (the Ansible modules, `probe bundle`, the benchmark's peers) never get the mark
    assert not run_probe(body).stdout.startswith(probes.START_MARK)
