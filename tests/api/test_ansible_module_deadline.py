"""The generated modules run their probe through AnsibleModule.run_command (ansible-test's
validate-modules refuses subprocess.Popen in a module) and keep `probe run`'s backstop: a probe
that outlives the module's timeout is killed and answered as timed out, never waited for."""

from __future__ import annotations

import base64
import json
import time
import types
import zlib

import pytest

from orchestrator.api.ansible_collection import module_source

basic = pytest.importorskip("ansible.module_utils.basic", reason="ansible-core not installed (the test extra)")


def _module(name: str, script: str) -> types.ModuleType:
    mod = types.ModuleType(f"fleetprobe_gpu_{name}")
    exec(compile(module_source(name), f"{name}.py", "exec"), mod.__dict__)
    mod.SOURCE = [base64.b64encode(zlib.compress(script.encode())).decode()]  # the probe, replaced
    mod.CALL_TEMPLATE = ""
    return mod


def _ansible_module(monkeypatch: pytest.MonkeyPatch) -> object:
    """A real AnsibleModule with no parameters, made as ansible-core's own unit tests make one."""
    try:
        from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+
    except ImportError:  # older cores read the parameters from _ANSIBLE_ARGS alone
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": {}}).encode())
        return basic.AnsibleModule(argument_spec={}, supports_check_mode=True)
    with patch_module_args({}):
        return basic.AnsibleModule(argument_spec={}, supports_check_mode=True)


def test_a_probe_past_the_timeout_is_killed_and_reported_timed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _module("host", "import time\ntime.sleep(60)\n")
    t0 = time.monotonic()
    envelope, answer = mod.run_probe(_ansible_module(monkeypatch), {}, 1.0)
    assert time.monotonic() - t0 < 30
    assert envelope is None and answer["timed_out"] is True and answer["exit"] is None


def test_a_probe_that_answers_in_time_returns_its_envelope(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"envelope_version": 1, "probe": "host", "status": "ok", "data": {}}
    mod = _module("host", f"import sys\nsys.stderr.write('note')\nprint({json.dumps(json.dumps(doc))})\n")
    envelope, answer = mod.run_probe(_ansible_module(monkeypatch), {}, 30.0)
    assert envelope == doc
    assert answer["timed_out"] is False and answer["exit"] == 0 and answer["stderr"] == "note"
