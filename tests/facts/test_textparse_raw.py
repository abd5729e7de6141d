"""Raw mode's controller half: the standard commands run as real subprocesses (stand-in
`nvidia-smi`/`lspci` scripts on PATH that print evidence files), their stdout parsed here.
The SSH half (running RAW_COMMANDS on a host without Python) is the transport's."""

from __future__ import annotations

import shlex
import stat
import subprocess
from pathlib import Path

from orchestrator.facts.textparse import RAW_COMMANDS, facts_from_raw_outputs, read_path
from tests.facts.test_textparse_common import FIXTURES
from tests.support.evidence import evidence


def stand_ins(bindir: Path, nvidia: dict[str, Path], lspci: dict[str, Path]) -> None:
    """Shell scripts that answer like the real tools for the argument strings raw mode uses."""
    def script(name: str, table: dict[str, Path]) -> None:
        cases = "\n".join(f'  "{args}") cat {shlex.quote(str(p))} ;;' for args, p in table.items())
        body = f'#!/bin/sh\ncase "$*" in\n{cases}\n  *) echo "{name}: unsupported $*" >&2; exit 2 ;;\nesac\n'
        f = bindir / name
        f.write_text(body)
        f.chmod(f.stat().st_mode | stat.S_IEXEC)

    script("nvidia-smi", nvidia)
    script("lspci", lspci)


def run_raw(bindir: Path, path: str | None = None) -> dict[str, bytes | None]:
    env = {"PATH": path if path is not None else f"{bindir}:/usr/bin:/bin", "LC_ALL": "C"}
    out: dict[str, bytes | None] = {}
    for kind, cmd in RAW_COMMANDS.items():
        try:
            r = subprocess.run(shlex.split(cmd), capture_output=True, timeout=10, env=env)
            out[kind] = r.stdout if r.returncode == 0 else None
        except (FileNotFoundError, subprocess.TimeoutExpired):
            out[kind] = None
    return out


def test_raw_mode_end_to_end_with_stand_in_commands(tmp_path: Path):
    stand_ins(tmp_path, {
        "topo -m": evidence("topo_h100_6gpu_visible_2nic_01.txt"),
        "nvlink -s": FIXTURES / "nvlink_s_no_header_two_inactive.txt",
        # `-q -x` deliberately absent: the stand-in fails like an old nvidia-smi would
    }, {
        "-tvnn": FIXTURES / "lspci_tvnn_two_roots_switch_emptyslot.txt",
        "-vvvnn": FIXTURES / "lspci_vvvnn_switch_gpu_nic_acs.txt",
    })
    outputs = run_raw(tmp_path)
    assert outputs["smi_query_xml"] is None and outputs["topo_matrix"]
    res = facts_from_raw_outputs(outputs)
    assert res["mode"] == "raw"
    assert res["missing"] == ["nvidia-smi -q -x: no output (command missing, failed or timed out)"]
    assert res["errors"] == []
    facts = res["facts"]
    assert sorted(facts) == ["gpus", "nvlink", "pcie", "topology"]
    assert facts["gpus"]["count"] == 6
    assert facts["nvlink"]["gpus"][0]["inactive"] == [1, 3]
    assert {d["bdf"] for d in facts["pcie"]["downgraded"]} == {"0000:c1:00.0", "0000:c3:00.0"}
    assert facts["topology"]["devices"][6]["label"] == "mlx5_0"
    assert res["outcomes"] == {"nvml": "ok", "nvlink": "ok", "pcie": "ok"}
    for section in facts.values():
        assert section["origin"] == "text" and section["confidence"] == "low"


def test_raw_mode_with_no_tools_at_all(tmp_path: Path):
    """A host with neither tool: every command is reported missing, no facts are invented."""
    outputs = run_raw(tmp_path, path=str(tmp_path))
    assert outputs == dict.fromkeys(RAW_COMMANDS)
    res = facts_from_raw_outputs(outputs)
    assert res["facts"] == {} and res["outcomes"] == {} and len(res["missing"]) == len(RAW_COMMANDS)


def test_empty_stdout_is_not_a_missing_command():
    res = facts_from_raw_outputs({"nvlink_status": b"", "topo_matrix": read_path(FIXTURES / "h200_real_topo_m.txt").encode()})
    assert res["missing"] == [] and "nvidia-smi nvlink -s: ran but printed nothing" in res["notes"]
    assert "nvlink" not in res["facts"] and res["facts"]["gpus"]["count"] == 1
