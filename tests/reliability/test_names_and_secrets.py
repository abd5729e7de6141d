"""Host names become paths injectively (two names never share raw/), and secrets under any of
the names an operator gives them stay out of the run files (which only their owner can read)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

from orchestrator.store.rundir import safe_component
from tests.support.hostile import host_record, inventory, load_fleet, only_run_dir, run_cli
from tests.support.skips import not_here

# pairs that used to share one raw/ directory: above U+00FF every character was "_", and names
# were cut at 200 characters
COLLIDING = ["gpu-α", "gpu-β", "gpu-_", "节点-1", "节点-2", "a" * 250 + "1", "a" * 250 + "2", "%41", "A", ""]


def test_the_path_encoding_is_injective_and_safe() -> None:
    names = [*COLLIDING, ".", "..", ".hidden", "a/b", "a%2Fb", "x" * 199, "x" * 200, "x" * 201, "\udc80", "\ufffd"]
    encoded = [safe_component(n) for n in names]
    assert len(set(encoded)) == len(names), encoded
    for e in encoded:
        assert e and "/" not in e and not e.startswith(".") and len(e.encode()) <= 200, e


def test_hosts_whose_names_differ_only_above_latin1_or_past_200_chars_keep_their_own_facts(tmp_path: Path) -> None:
    names = [n for n in COLLIDING if n]
    inv = inventory(tmp_path / "inv.yml", {n: {} for n in names})
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)])
    assert res.code == 0, res.stderr
    run_dir = only_run_dir(results)
    assert len(list((run_dir / "raw").iterdir())) == len(names)
    again = run_cli(["rejudge", run_dir.name, "--results", str(results)])
    assert again.code == 0, again.stderr
    newest = sorted(p for p in results.iterdir() if p.is_dir())[-1]
    fleet = load_fleet(newest)
    assert sorted(h["name"] for h in fleet["hosts"]) == sorted(names)  # rejudge lost none
    for n in names:
        assert host_record(fleet, n)["outcome"] == "ok"


SECRETS = {
    "api_key": "key-Axolotl-1", "ipmi_pw": "ipmi-Bison-2", "bmc_pwd": "bmc-Civet-3", "private_key": "pk-Dingo-4",
    "redfish_user": "rf-Eland-5", "db_passwd": "pw-Fossa-6", "pw": "pw-Gecko-7",
}
NESTED = {"bmc": {"address": "10.0.0.9", "password": "nest-Hyena-8", "user": "nest-Ibex-9"},
          "probe_args": {"host": {"token": "nest-Jackal-10"}}, "vault": [{"secret": "nest-Kudu-11"}]}


def test_secrets_under_every_common_name_and_nested_never_reach_the_run_files(tmp_path: Path) -> None:
    inv = inventory(tmp_path / "inv.yml", {"good01": {**SECRETS, **NESTED, "probe_note": "kept-Lynx-12"}})
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)])
    assert res.code == 0, res.stderr
    run_dir = only_run_dir(results)
    blob = b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file()) + (res.stdout + res.stderr).encode()
    values = [*SECRETS.values(), "nest-Hyena-8", "nest-Ibex-9", "nest-Jackal-10", "nest-Kudu-11"]
    leaked = [v for v in values if v.encode() in blob]
    assert leaked == []
    stored = json.loads((run_dir / "raw" / "good01" / "_host.json").read_text())["vars"]
    assert stored["probe_note"] == "kept-Lynx-12" and stored["bmc"]["address"] == "10.0.0.9"
    assert stored["bmc"]["password"] == "<redacted>" and stored["api_key"] == "<redacted>"


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "fleetprobe-test", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        not_here(f"cannot mount a tmpfs ({proc.stderr.strip() or 'mount failed'}); needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_rejudge_on_a_full_disk_exits_73_and_leaves_no_half_copied_run(tmp_path: Path) -> None:
    pad = {f"probe_pad{i}": "x" * 60_000 for i in range(8)}  # ~480 KB of raw/ to copy
    inv = inventory(tmp_path / "inv.yml", {"good01": pad, "good02": {}})
    results = tmp_path / "results"
    assert run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)]).code == 0
    source = only_run_dir(results)
    with _tmpfs(tmp_path / "full", "256k") as full:
        res = run_cli(["rejudge", str(source), "--results", str(full)])
        assert res.code == 73, (res.code, res.stderr)
        assert "No space left on device" in res.one_line_error()
        assert [p.name for p in full.iterdir()] == [".fleetprobe.lock"]  # no run, no staging left
    assert sorted(p.name for p in results.iterdir() if p.is_dir()) == [source.name]
