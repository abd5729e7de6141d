"""Usage errors in one line (issue 49, item 4), through the real command: exit 2, one line on
stderr naming the command it was given to, what was wrong and the nearest name, never the usage
(`probe run --show topo,gpu` printed twelve lines of it first); an option given to the wrong command
is refused by that command, naming the commands that take it; an inventory whose hosts sit under a
misspelt key names that key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.hostile import CliRun, run_cli


def one_line(r: CliRun, command: str = "probe") -> str:
    """The run's only stderr line, after checking it is a usage error of `command` and nothing else."""
    assert r.code == 2, (r.code, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "usage:" not in r.stderr and "Traceback" not in r.stderr and r.stdout == "", r.stderr
    assert lines[0].startswith(f"{command}: error: "), lines[0]
    return lines[0]


@pytest.mark.parametrize("argv", [
    ["run", "--show", "topo,gpu"],
    ["run", "--format", "jsn"],
    ["run", "-f", "many"],
    ["show", "--findings", "host"],
    ["diff", "a", "b", "c"],
    ["report"],  # -o is required
    ["run", "--bogus"],
])
def test_a_usage_error_is_one_line(argv: list[str]) -> None:
    line = one_line(run_cli(argv), f"probe {argv[0]}")
    assert f"(see probe {argv[0]} --help)" in line


@pytest.mark.parametrize("typo, command", [("rnu", "run"), ("shwo", "show"), ("rejduge", "rejudge"),
                                           ("playbok", "playbooks"), ("remediat", "remediate")])
def test_a_mistyped_command_gets_the_command_it_resembles(typo: str, command: str) -> None:
    line = one_line(run_cli([typo]))
    assert f"invalid choice: '{typo}'; did you mean {command}?" in line


@pytest.mark.parametrize("argv, hint", [
    (["run", "--show", "topo,gpu"], "unknown view 'gpu'; did you mean gpus?"),
    (["show", "--show", "nvlnk"], "unknown view 'nvlnk'; did you mean nvlink?"),
    (["run", "--format", "jsn"], "invalid choice: 'jsn'; did you mean json?"),
    (["show", "--findings", "check"], "invalid choice: 'check'; did you mean checks?"),
    (["run", "--host-key-policy", "acept-new"], "did you mean accept-new?"),
    (["run", "--limt", "gpu01"], "--limt (did you mean --limit?)"),
    (["rejudge", "x", "--secuirty-floor", "f"], "--secuirty-floor (did you mean --security-floor?)"),
])
def test_options_and_views_get_what_they_resemble(argv: list[str], hint: str) -> None:
    assert hint in one_line(run_cli(argv), f"probe {argv[0]}")


@pytest.mark.parametrize("argv, owners", [
    (["runs", "--playbook", "quick"], ["probe run", "probe rejudge"]),
    (["hosts", "--show", "gpus"], ["probe run", "probe show", "probe import"]),
    (["diff", "--expect", "gpu_count=8"], ["probe run", "probe rejudge"]),
    (["playbooks", "--html", "r.html"], ["probe run"]),
])
def test_an_option_on_the_wrong_command_gets_that_commands_hint(argv: list[str], owners: list[str]) -> None:
    command = f"probe {argv[0]}"
    line = one_line(run_cli(argv), command)
    assert f"{argv[1]} (an option of " in line and f"not of {command})" in line and f"(see {command} --help)" in line
    for owner in owners:
        assert owner in line.split("an option of ", 1)[1], line


@pytest.mark.parametrize("text, named", [
    ("all:\n  hots:\n    gpu01:\n    gpu02:\n", "key 'hots' (did you mean 'hosts'?)"),
    ("all:\n  host:\n    gpu01:\n", "key 'host' (did you mean 'hosts'?)"),
    ("all:\n  childern:\n    gpu:\n      hosts:\n        gpu01:\n", "key 'childern' (did you mean 'children'?)"),
    ("all:\n  children:\n    gpu:\n      hsots:\n        gpu01:\n", "group 'gpu': key 'hsots' (did you mean 'hosts'?)"),
    ("hots:\n  gpu01:\n", "top-level group 'hots' meant to be 'hosts:' under 'all:'"),
])
def test_an_inventory_key_that_is_no_section_is_named(tmp_path: Path, text: str, named: str) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text(text)
    line = one_line(run_cli(["run", "-i", str(inv), "--results", str(tmp_path / "runs")]))
    assert "the inventory has no hosts: " in line and f"{inv}:" in line and named in line, line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*/run.json"))


@pytest.mark.parametrize("argv, first_owner", [
    (["-i", "fleet.yml", "run"], "probe run"),
    (["-q", "show"], "probe run"),
    (["--format", "json", "runs"], "probe run"),
    (["-l", "gpu01", "run"], "probe run"),
])
def test_an_option_before_the_command_says_where_it_goes(argv: list[str], first_owner: str) -> None:
    line = one_line(run_cli(argv))
    assert f"{argv[0]} goes after the command: it is an option of {first_owner}" in line, line
