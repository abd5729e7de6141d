"""No string a host sends, key or value, is kept past MAX_STRING characters, however its text is
escaped: the parse finds the strings that may be too long on the text, before any object is built,
and an escape (`\\"`, `\\\\`) must not make a long string look short.  Found live and in the run's
raw files alike; a short string is never reported as cut."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.envelope import Envelope, parse_envelope
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import HostResult, ProbeResult
from orchestrator.facts.normalize import RAW_OUTPUTS, RAW_PROBE
from orchestrator.facts.normalize.budget import MAX_STRING, STRING_NOTE, bound
from orchestrator.inventory.model import Host
from orchestrator.store.rundir import read_envelope_data, write_probe_files

N = MAX_STRING + 1  # one character past what a string may hold

LONG = {
    "plain": {"hostname": "a" * N},
    "an escaped quote every thousand characters": {"hostname": ('a' * 999 + '"') * (N // 1000 + 1)},
    "only escaped quotes": {"hostname": '"' * N},
    "only backslashes": {"hostname": "\\" * N},
    "quotes and backslashes": {"hostname": '\\"' * (N // 2 + 1)},
    "newlines, each escaped": {"hostname": "\n" * N},
    "non-ASCII": {"hostname": "é" * N},
    "past the BMP, each a surrogate pair of escapes": {"hostname": "\U0001F600" * N},
    "a key": {"k" * N: 1, "x": "y"},
    "deep in a list": {"devices": [{"bdf": "0000:01:00.0", "path": ["x" * 10, 'b"' * N]}]},
}

SHORT = {
    "at the limit": {"hostname": "a" * MAX_STRING},
    "escaped quotes at the limit": {"hostname": '"' * MAX_STRING},
    "past the BMP at the limit (12 characters of text each)": {"hostname": "\U0001F600" * MAX_STRING},
    "many short strings past the limit in all": {"devices": [f"0000:{i:02x}:00.0\\\"" for i in range(20000)]},
    "a long run of numbers between strings": {"a": "x", "n": list(range(20000)), "b": "y"},
}


def _envelope_text(data: dict[str, Any]) -> bytes:
    return json.dumps({"probe": "host", "probe_version": "1", "status": "ok", "envelope_version": 1,
                       "data": data}).encode()


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    return []


def _longest(data: dict[str, Any]) -> int:
    return max(map(len, _strings(data)), default=0)


@pytest.mark.parametrize("name", sorted(LONG))
def test_a_long_string_is_cut_and_reported_however_it_is_escaped(name: str, tmp_path: Path) -> None:
    env = parse_envelope(_envelope_text(LONG[name]), "host")
    assert STRING_NOTE in env.data
    assert _longest({k: v for k, v in env.data.items() if k != STRING_NOTE}) == MAX_STRING
    assert max(env.data[STRING_NOTE]) >= N
    _, notes = bound("host", env.data)
    assert any(f"more than the {MAX_STRING} a value is judged on" in n for n in notes), notes

    # the run's raw file holds what was accepted, and reads back as it
    res = HostResult(Host("h1"), {"host": ProbeResult("host", Outcome.OK, envelope=env)})
    write_probe_files(tmp_path, res, staged=True)
    assert read_envelope_data(tmp_path, ["host"]) == {"host": env.data}

    # a raw file written by other hands, the long string in it, is cut when read back
    (tmp_path / "host.json").write_bytes(_envelope_text(LONG[name]))
    back = read_envelope_data(tmp_path, ["host"])["host"]
    assert STRING_NOTE in back and _longest({k: v for k, v in back.items() if k != STRING_NOTE}) == MAX_STRING


@pytest.mark.parametrize("name", sorted(SHORT))
def test_strings_within_the_limit_are_kept_whole_and_not_reported(name: str) -> None:
    env = parse_envelope(_envelope_text(SHORT[name]), "host")
    assert env.data == SHORT[name]


def test_raw_modes_command_outputs_read_back_whole_and_nothing_else_does(tmp_path: Path) -> None:
    """Raw mode's outputs (`lspci -vvv`, `nvidia-smi -q -x` of a big machine: hundreds of KB, within
    the output cap) are text the controller read itself; cut to 64 Ki characters on the way back from
    the raw files, a rejudge would parse half a bus.  Any other string of it is cut as anywhere."""
    lspci = "".join(f"{i >> 8:02x}:{i & 255:02x}.0 Bridge: PLX Technology, Inc. PEX 8747\n" for i in range(4000))
    xml = '<?xml version="1.0" ?>\n' + '<gpu id="00000000:18:00.0"></gpu>\n' * 3000
    assert min(len(lspci), len(xml)) > N
    env = Envelope(probe=RAW_PROBE, probe_version="text", status="ok",
                   data={RAW_OUTPUTS: {"lspci": lspci, "smi_xml": xml}, "why": "w" * N})
    res = HostResult(Host("h1"), {RAW_PROBE: ProbeResult(RAW_PROBE, Outcome.OK, envelope=env)})
    write_probe_files(tmp_path, res, staged=True)
    back = read_envelope_data(tmp_path, [RAW_PROBE])[RAW_PROBE]
    assert back[RAW_OUTPUTS] == {"lspci": lspci, "smi_xml": xml}
    assert back["why"] == "w" * MAX_STRING and back[STRING_NOTE] == [N]
    assert list(back) == [RAW_OUTPUTS, "why", STRING_NOTE]

    # a long key beside the outputs is cut as anywhere, and the outputs stay whole
    (tmp_path / f"{RAW_PROBE}.json").write_bytes(json.dumps(
        {**env.to_dict(), "data": {RAW_OUTPUTS: {"lspci": lspci}, "k" * N: 1}}).encode())
    keyed = read_envelope_data(tmp_path, [RAW_PROBE])[RAW_PROBE]
    assert keyed == {RAW_OUTPUTS: {"lspci": lspci}, "k" * MAX_STRING: 1, STRING_NOTE: [N]}

    # the same file under another probe's name: nothing of it is kept whole
    (tmp_path / "host.json").write_bytes((tmp_path / f"{RAW_PROBE}.json").read_bytes())
    other = read_envelope_data(tmp_path, ["host"])["host"]
    assert max(map(len, other[RAW_OUTPUTS].values())) == MAX_STRING
