"""The history roads (docs/reliability.md "Roads in"): stored runs read back by `probe merge`,
`show`, `report`, `diff` and `rejudge`.  A stored file can be damaged, hand-edited or written by
another fleetprobe: what is not of its stored shape costs only itself (a host's section, a
finding) and is said; a file that cannot be read at all is one message; never exit 70."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.run import _prune
from orchestrator.present.outputs.slurm_drain import DRAIN_GUARD
from orchestrator.store import members
from orchestrator.store.compact import read_plain
from orchestrator.store.lock import LOCK_NAME, RunLock
from tests.support.hostile import cli_env, run_cli, strict_json
from tests.support.interrupt import terminate_at_work

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    results = tmp_path_factory.mktemp("shards")
    for part in ("1/2", "2/2"):
        got = run_cli(["run", "--shard", part, "--results", str(results), "-q"], timeout=300)
        assert got.code in (1, 4, 5), got.stderr
    a, b = sorted(p for p in results.iterdir() if p.is_dir())
    return a, b


def _load(path: Path) -> Any:
    data = path.read_bytes()  # fleet.json: schema 3's gzip members (store/members.py), their text parsed
    return members.loads(data) if members.is_members(data) else json.loads(data)


def _save(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc))


def _plain(run: Path) -> dict[str, Any]:
    """fleet.json rewritten in the plain schema-1 form, so a test can edit host records as readers see them."""
    doc = dict(read_plain(run / "fleet.json"))
    (run / "fleet.index.json").unlink(missing_ok=True)
    return doc


def _host_with(doc: dict[str, Any], section: str) -> dict[str, Any]:
    return next(h for h in doc["hosts"] if section in h.get("facts", {}))


def _facts_wrong_type(run: Path) -> None:
    doc = _plain(run)
    _host_with(doc, "gpus")["facts"]["gpus"] = 7
    _save(run / "fleet.json", doc)


def _facts_inner_wrong_type(run: Path) -> None:
    doc = _plain(run)
    h = _host_with(doc, "gpus")
    h["facts"]["gpus"]["list"][0]["index"] = "zero"
    h["facts"]["pcie"] = ["not", "a", "section"]
    _save(run / "fleet.json", doc)


def _facts_a_list(run: Path) -> None:
    doc = _plain(run)
    doc["hosts"][0]["facts"] = [1, 2]
    _save(run / "fleet.json", doc)


def _probes_wrong_type(run: Path) -> None:
    doc = _plain(run)
    doc["hosts"][0]["probes"] = [1]
    doc["hosts"][1]["probes"] = {"host": 5, "nvml": {"outcome": 3, "duration_s": "long"}}
    _save(run / "fleet.json", doc)


def _nan_duration(run: Path) -> None:
    text = json.dumps(_plain(run)).replace('"duration_s":', '"duration_s": NaN, "_was":', 1)
    (run / "fleet.json").write_text(text)


def _host_without_name(run: Path) -> None:
    doc = _plain(run)
    doc["hosts"][0]["name"] = 5
    doc["hosts"][1] = "not a record"
    _save(run / "fleet.json", doc)


def _host_without_outcome(run: Path) -> None:
    doc = _plain(run)
    del doc["hosts"][0]["outcome"]
    doc["hosts"][1]["outcome"] = 5
    _save(run / "fleet.json", doc)


def _finding_unknown_kind(run: Path) -> None:
    doc = _load(run / "findings.json")
    doc[0]["kind"] = "bogus"
    _save(run / "findings.json", doc)


def _finding_without_message(run: Path) -> None:
    doc = _load(run / "findings.json")
    del doc[0]["message"]
    doc[1]["severity"] = 3
    _save(run / "findings.json", doc)


def _schema_version_string(run: Path) -> None:
    doc = _load(run / "fleet.json")
    doc["schema_version"] = "2"
    _save(run / "fleet.json", doc)


def _run_json(field: str, value: Any) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        doc = _load(run / "run.json")
        doc[field] = value
        _save(run / "run.json", doc)
    damage.__name__ = f"run_json_{field}_{type(value).__name__}"
    return damage


def _run_json_truncated(run: Path) -> None:
    text = (run / "run.json").read_text()
    (run / "run.json").write_text(text[: len(text) // 2])


def _a_fifo(name: str) -> Callable[[Path], None]:
    """A stored file replaced by a FIFO: opened as a file, it would hold its reader for ever."""
    def damage(run: Path) -> None:
        (run / name).unlink()
        os.mkfifo(run / name)
    damage.__name__ = f"{name.replace('.', '_')}_a_fifo"
    return damage


CORRUPTIONS = [_facts_wrong_type, _facts_inner_wrong_type, _facts_a_list, _probes_wrong_type, _nan_duration,
               _host_without_name, _host_without_outcome, _finding_unknown_kind, _finding_without_message, _schema_version_string,
               _run_json("plan", "x"), _run_json("plan", {"plays": 5, "expect": {"a": 1}}),
               _run_json("plan", {"playbook": 7, "timeout": "abc"}), _run_json("plan", {"forks": 10**400}),
               _run_json("inventory", 5), _run_json("inventory", [1, {"a": 2}]), _run_json("probes", {"x": 1}),
               _run_json("probes", [1, None]), _run_json("id", "x\nscontrol update NodeName=all State=DOWN"),
               _run_json_truncated, _a_fifo("fleet.json"), _a_fifo("run.json")]


@pytest.mark.parametrize("damage", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_stored_run_costs_only_what_is_damaged(tmp_path: Path, shards: tuple[Path, Path],
                                                         damage: Callable[[Path], None]) -> None:
    a, b = (shutil.copytree(s, tmp_path / s.name) for s in shards)
    damage(b)
    results = tmp_path / "results"
    commands = {
        "merge": ["merge", str(a), str(b), "--results", str(results), "--format", "json",
                  "--slurm-drain", str(tmp_path / "drain.sh")],
        "show": ["show", str(b), "--format", "json"],
        "show-table": ["show", str(b), "--show", "gpus,pcie,nvlink,p2p,nic"],
        "report": ["report", str(b), "-o", str(tmp_path / "r.html")],
        "diff": ["diff", str(a), str(b)],
        "rejudge": ["rejudge", str(b), "--results", str(tmp_path / "rejudged"), "-q"],
    }
    for what, args in commands.items():
        got = run_cli(args, timeout=300)
        assert got.code != 70, (what, got.stderr)
        assert "Traceback" not in got.stderr and "internal error" not in got.stderr, (what, got.stderr)
        if got.code == 2:  # refused whole: one message naming the run and what to do
            assert b.name in got.stderr and len(got.stderr.strip().splitlines()) <= 3, (what, got.stderr)
            continue
        if "--format" in args:
            assert isinstance(_strict(got.stdout), dict)
    drain = tmp_path / "drain.sh"
    if drain.exists():
        guard = DRAIN_GUARD.splitlines()  # the shell function each line goes through (issue 47)
        for line in drain.read_text().splitlines():
            assert line.startswith(("#", "unless_foreign_reason scontrol update NodeName=")) or line in guard, line
    for run in (p for p in results.glob("*") if p.is_dir()):
        strict_json(run / "fleet.json")


@pytest.mark.parametrize("where", ["gone", "fifo", "huge"])
def test_parts_whose_playbook_is_not_on_this_controller_merge_and_rejudge_says_what_to_give(
        tmp_path: Path, shards: tuple[Path, Path], where: str) -> None:
    """Parts run on other controllers name a playbook path this one lacks (or that is a FIFO, or
    far too big to be one): the merge keeps every host's own judgement and says that the parts'
    playbook could not silence the fleet-wide findings over their hosts; `rejudge` of such a part,
    which needs the playbook's expectations, is one line that says to give -p, and works with it."""
    a, b = (shutil.copytree(s, tmp_path / s.name) for s in shards)
    playbook = tmp_path / "site.yml"
    if where == "fifo":
        os.mkfifo(playbook)
    elif where == "huge":
        with open(playbook, "wb") as f:
            f.truncate(64 << 20)  # sparse: costs no disk
    for run in (a, b):
        doc = _load(run / "run.json")
        doc["plan"] = {**doc["plan"], "playbook": str(playbook)}
        _save(run / "run.json", doc)
    merged = run_cli(["merge", str(a), str(b), "--results", str(tmp_path / "results"), "--format", "json"],
                     timeout=300)
    assert merged.code in (1, 4, 5) and "Traceback" not in merged.stderr, merged.stderr
    for run in (a, b):
        assert f"warning: {run.name}: its plan cannot be used here ({playbook}" in merged.stderr, merged.stderr
    hosts = {h["name"] for h in _strict(merged.stdout)["hosts"]}
    assert hosts == {h["name"] for run in (a, b) for h in _plain(run)["hosts"]}
    got = run_cli(["rejudge", str(b), "--results", str(tmp_path / "rejudged"), "-q"], timeout=300)
    assert got.code == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert f"{b.name}: the run's plan names playbook" in got.stderr and "give -p PLAYBOOK" in got.stderr, got.stderr
    got = run_cli(["rejudge", str(b), "-p", "audit", "--results", str(tmp_path / "rejudged"), "-q"], timeout=300)
    assert got.code in (1, 4, 5) and "Traceback" not in got.stderr, got.stderr


@pytest.mark.parametrize("option", ["--baseline-file", "--security-floor"])
@pytest.mark.parametrize("where", ["gone", "garbage"])
def test_rejudge_of_a_run_whose_reference_file_is_gone_says_it_in_the_runs_words(
        tmp_path: Path, shards: tuple[Path, Path], option: str, where: str) -> None:
    """A run judged against a file (--baseline-file, --security-floor) that is gone or was
    rewritten since, or that was named relative to another directory: `rejudge` of it is one line
    that names the run and the option its plan used, not an error of an option the user never
    gave, and works once the user gives the option; a bad file the user gives is the user's."""
    b = shutil.copytree(shards[1], tmp_path / shards[1].name)
    good = tmp_path / "good.json"
    if option == "--baseline-file":
        made = run_cli(["baseline", str(b), "-o", str(good)], timeout=120)
        assert made.code == 0, made.stderr
    else:
        shutil.copy(ROOT / "tests" / "fixtures" / "security" / "floor-2024.json", good)
    stored = tmp_path / "stored.json"
    if where == "garbage":
        stored.write_text("{ not json")
    doc = _load(b / "run.json")
    doc["plan"] = {**doc["plan"], option.removeprefix("--").replace("-", "_"): str(stored)}
    _save(b / "run.json", doc)
    results = str(tmp_path / "rejudged")
    got = run_cli(["rejudge", str(b), "--results", results, "-q"], timeout=300)
    assert got.code == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert got.stderr.startswith(f"probe: error: {b.name}: the run was judged against a file its plan names with "
                                 f"{option}, which cannot be used here ("), got.stderr
    assert str(stored) in got.stderr and f"give {option} FILE" in got.stderr, got.stderr
    got = run_cli(["rejudge", str(b), option, str(tmp_path / "missing.json"), "--results", results, "-q"],
                  timeout=300)
    assert got.code == 2 and got.stderr.startswith(f"probe: error: {option}: "), got.stderr
    assert "the run was judged" not in got.stderr, got.stderr
    got = run_cli(["rejudge", str(b), option, str(good), "--results", results, "-q"], timeout=300)
    assert got.code in (1, 4, 5) and "Traceback" not in got.stderr, got.stderr


def _strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"printed the non-JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


def test_what_a_damaged_host_record_lost_is_said_under_that_host(tmp_path: Path, shards: tuple[Path, Path]) -> None:
    b = shutil.copytree(shards[1], tmp_path / shards[1].name)
    doc = _plain(b)
    name = _host_with(doc, "gpus")["name"]
    _facts_wrong_type(b)
    got = run_cli(["show", str(b), "--format", "json"], timeout=120)
    assert got.code == 0, got.stderr
    host = next(h for h in _strict(got.stdout)["hosts"] if h["name"] == name)
    assert "gpus" not in host["facts"]
    assert any("facts.gpus" in e and "left out" in e for e in host["normalize_errors"]), host["normalize_errors"]
    others = [h for h in json.loads(got.stdout)["hosts"] if h["name"] != name and "gpus" in h["facts"]]
    assert others, "the other hosts keep their facts"


def test_a_newer_schema_is_one_message(tmp_path: Path, shards: tuple[Path, Path]) -> None:
    b = shutil.copytree(shards[1], tmp_path / shards[1].name)
    doc = _load(b / "fleet.json")
    doc["schema_version"] = members.SCHEMA_VERSION + 1  # 3 is today's (issue 51)
    _save(b / "fleet.json", doc)
    got = run_cli(["show", str(b)], timeout=120)
    assert got.code == 2 and f"schema_version is {members.SCHEMA_VERSION + 1}" in got.stderr, got.stderr


def _index_rows(edit: Callable[[list[Any]], None]) -> Callable[[Path], None]:
    """fleet.index.json with its rows edited, still stamped as fleet.json's (so it is read)."""
    def damage(run: Path) -> None:
        doc = _load(run / "fleet.index.json")
        edit(doc["hosts"])
        _save(run / "fleet.index.json", doc)
    return damage


def _index_row_gone(run: Path) -> None:
    _index_rows(lambda rows: rows.pop(3))(run)


def _index_length_short(run: Path) -> None:
    _index_rows(lambda rows: rows[3].__setitem__(2, rows[3][2] - 1))(run)


def _index_last_row_gone(run: Path) -> None:
    _index_rows(lambda rows: rows.pop())(run)


def _index_name_null(run: Path) -> None:
    _index_rows(lambda rows: rows[3].__setitem__(0, None))(run)


def _index_names_swapped(run: Path) -> None:
    def swap(rows: list[Any]) -> None:
        rows[1][0], rows[2][0] = rows[2][0], rows[1][0]
    _index_rows(swap)(run)


def _layout_sections(edit: Callable[[list[Any]], list[Any]]) -> Callable[[Path], None]:
    """fleet.layouts.json with the first record's section spans edited, still stamped as fleet.json's."""
    def damage(run: Path) -> None:
        doc = _load(run / "fleet.layouts.json")
        doc["hosts"][0][2] = edit(doc["hosts"][0][2])
        _save(run / "fleet.layouts.json", doc)
    return damage


def _layout_names_swapped(run: Path) -> None:
    def swap(spans: list[Any]) -> list[Any]:
        spans[0][0], spans[2][0] = spans[2][0], spans[0][0]
        return spans
    _layout_sections(swap)(run)


def _layout_gpus_gone(run: Path) -> None:
    _layout_sections(lambda spans: [s for s in spans if s[0] != "gpus"])(run)


# A fleet.json that is whole beside a side file that is wrong: the side file is not believed.
WRONG_SIDE_FILES = [_index_row_gone, _index_length_short, _index_last_row_gone, _index_name_null,
                    _index_names_swapped, _layout_names_swapped, _layout_gpus_gone,
                    _a_fifo("fleet.index.json"), _a_fifo("fleet.layouts.json")]


@pytest.fixture(scope="module")
def clean_views(shards: tuple[Path, Path]) -> dict[str, str]:
    """What show (JSON and table) and merge print for the undamaged shards."""
    a, b = shards
    show = run_cli(["show", str(a), "--format", "json"], timeout=120)
    table = run_cli(["show", str(a), "--hosts", "all"], timeout=120)  # every host's row
    merged = run_cli(["merge", str(a), str(b), "--results", str(a.parent / "merged"), "--format", "json"],
                     timeout=300)
    return {"show": show.stdout, "table": table.stdout, "merge": merged.stdout}


@pytest.mark.parametrize("damage", WRONG_SIDE_FILES, ids=lambda f: f.__name__.strip("_"))
def test_a_wrong_index_or_layout_costs_no_host_and_no_fact(tmp_path: Path, shards: tuple[Path, Path],
                                                           clean_views: dict[str, str],
                                                           damage: Callable[[Path], None]) -> None:
    """The index and layouts beside fleet.json only say where to look: when they do not describe
    the records as they are, every reader reads the file whole and sees what it holds, every host
    under its own name with all its facts, as from an undamaged run."""
    a = shutil.copytree(shards[0], tmp_path / shards[0].name)
    damage(a)
    show = run_cli(["show", str(a), "--format", "json"], timeout=120)
    table = run_cli(["show", str(a), "--hosts", "all"], timeout=120)  # every host's row
    merged = run_cli(["merge", str(a), str(shards[1]), "--results", str(tmp_path / "merged"), "--format", "json"],
                     timeout=300)
    diff = run_cli(["diff", str(shards[0]), str(a)], timeout=120)
    for got in (show, table, merged, diff):
        assert got.code != 70 and "Traceback" not in got.stderr, got.stderr
    assert _strict(show.stdout)["hosts"] == _strict(clean_views["show"])["hosts"]
    assert table.stdout.replace(str(a), str(shards[0])) == clean_views["table"]  # its last line names the run
    assert [h["name"] for h in _strict(merged.stdout)["hosts"]] == \
        [h["name"] for h in _strict(clean_views["merge"])["hosts"]]
    assert diff.code == 0 and "no changes" in diff.stdout and "not in" not in diff.stdout, diff.stdout
    assert "None" not in diff.stdout + table.stdout


def _terminated(tmp_path: Path, shards: tuple[Path, Path], command: str, settle_s: float,
                at: Callable[[Path], bool] | None = None) -> tuple[int, str, Path]:
    """(exit status, stderr, results directory) of `probe merge` / `rejudge` of the shards sent
    SIGTERM `settle_s` after its handler is in place (and, with `at`, once at(results) holds)."""
    a, b = (shutil.copytree(s, tmp_path / s.name) for s in shards)
    args = ["merge", str(a), str(b)] if command == "merge" else ["rejudge", str(b)]
    results = tmp_path / "r"
    code, err = terminate_at_work([sys.executable, "-m", "orchestrator", *args, "--results", str(results)],
                                  cli_env(), str(ROOT), settle_s=settle_s, ready=None if at is None else lambda: at(results))
    assert "Traceback" not in err, err[-2000:]
    # nothing half-made is left where a later command would read it as a run
    for run in (p for p in results.glob("*") if p.is_dir() and not p.name.startswith(".")):
        assert (run / "run.json").is_file()
    return code, err, results


@pytest.mark.parametrize("command", ["merge", "rejudge"])
def test_sigterm_ends_merge_and_rejudge_with_130(tmp_path: Path, shards: tuple[Path, Path], command: str) -> None:
    """Sent while the command works (it holds the results directory's lock: it reads the runs,
    judges and writes), SIGTERM ends it with 130.  The shards are small: on a quiet machine a
    rejudge holds the lock for about 0.2 s and a merge 0.3 s, so a fixed delay after the handler
    was in place landed after the work in all five tries, and on any machine the signal can land
    after it: such a try must have finished cleanly (its own exit status, its run published whole),
    and another is made."""
    for attempt in range(5):
        code, err, results = _terminated(tmp_path / str(attempt), shards, command, settle_s=0.0,
                                         at=lambda results: (results / LOCK_NAME).exists())
        if code == 130:
            return
        assert code in (0, 1, 5), err[-2000:]  # finished before the signal: judged and exited as usual
        assert [p for p in results.glob("*/fleet.json")], "a command that finished published its run"
    raise AssertionError("SIGTERM never landed while the command worked in 5 tries")


@pytest.mark.parametrize("command", ["merge", "rejudge"])
def test_sigterm_at_the_edges_of_a_command_never_kills_it_or_shows_a_traceback(
        tmp_path: Path, shards: tuple[Path, Path], command: str) -> None:
    """The moment the handler is in place (the options not read yet) SIGTERM is an interrupt like
    any other; once the run is published it may still end the command with 130, or the command
    ends as it would have, but it never dies of the signal (a negative status: the interpreter
    shutting down had put the default handler back) and never shows a traceback."""
    code, err, _ = _terminated(tmp_path / "start", shards, command, settle_s=0.0)
    assert code == 130 and "probe: interrupted" in err, (code, err[-2000:])
    for attempt in range(3):
        code, err, _ = _terminated(tmp_path / f"end{attempt}", shards, command, settle_s=0.0,
                                   at=lambda results: any(results.glob("[!.]*/fleet.json")))
        assert code in (0, 1, 5, 130), (code, err[-2000:])


def test_rejudge_holds_the_lock_from_its_first_read(tmp_path: Path, shards: tuple[Path, Path]) -> None:
    results = tmp_path / "results"
    results.mkdir()
    source = shutil.copytree(shards[0], results / shards[0].name)
    with RunLock(results):
        got = run_cli(["rejudge", str(source), "--results", str(results)], timeout=120)
    assert got.code == 75, got.stderr
    assert sorted(p.name for p in results.iterdir() if p.is_dir()) == [source.name]


def test_keep_prunes_only_under_the_lock(tmp_path: Path, shards: tuple[Path, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    results.mkdir()
    for s in shards:
        shutil.copytree(s, results / s.name)
    with RunLock(results):  # a rejudge or merge reading the old run holds it
        _prune(results, (1, None), ())
    assert len([p for p in results.iterdir() if p.is_dir()]) == 2
    assert "nothing pruned" in capsys.readouterr().err
    _prune(results, (1, None), ())
    assert len([p for p in results.iterdir() if p.is_dir()]) == 1


def test_rejudge_and_a_pruning_run_side_by_side_never_break(tmp_path: Path, shards: tuple[Path, Path]) -> None:
    results = tmp_path / "results"
    results.mkdir()
    source = shutil.copytree(shards[0], results / shards[0].name)
    codes: dict[str, list[int]] = {"run": [], "rejudge": []}
    errors: list[str] = []

    def keep_running() -> None:
        for _ in range(3):
            got = run_cli(["run", "--results", str(results), "--keep", "1", "-q"], timeout=300)
            codes["run"].append(got.code)
            errors.append(got.stderr)

    runner = threading.Thread(target=keep_running)
    runner.start()
    for _ in range(3):
        if not source.exists():
            break
        got = run_cli(["rejudge", str(source), "--results", str(results), "-q"], timeout=300)
        codes["rejudge"].append(got.code)
        errors.append(got.stderr)
    runner.join()
    assert all(c in (1, 4, 5, 75) for c in codes["run"]), codes
    assert all(c in (1, 2, 4, 5, 75) for c in codes["rejudge"]), codes
    assert not any("Traceback" in e or "internal error" in e for e in errors), errors


def _rejudged(tmp_path: Path, run: Path, *more: str) -> tuple[dict[str, Any], list[str]]:
    """`probe rejudge RUN --format json`: the fleet it prints and its warning lines."""
    got = run_cli(["rejudge", str(run), "--results", str(tmp_path / "rejudged"), "--format", "json", *more],
                  timeout=300)
    assert got.code in (1, 4, 5) and "Traceback" not in got.stderr, got.stderr
    return _strict(got.stdout), [line for line in got.stderr.splitlines() if line.startswith("warning:")]


def _run_with_unreachable(shards: tuple[Path, Path]) -> Path:
    return next(s for s in shards if any(h["outcome"] == "unreachable" for h in _plain_copy(s)["hosts"]))


def _plain_copy(run: Path) -> dict[str, Any]:
    return dict(read_plain(run / "fleet.json"))


def _gone(hdir: Path) -> None:
    shutil.rmtree(hdir)


def _a_file(hdir: Path) -> None:
    shutil.rmtree(hdir)
    hdir.write_text("not a directory")


def _no_host_file(hdir: Path) -> None:
    (hdir / "_host.json").unlink()


def _host_file_a_directory(hdir: Path) -> None:
    (hdir / "_host.json").unlink()
    (hdir / "_host.json").mkdir()


@pytest.mark.parametrize("damage", [_gone, _a_file, _no_host_file, _host_file_a_directory],
                         ids=lambda f: f.__name__.strip("_"))
def test_rejudge_names_a_host_of_the_run_whose_raw_files_are_gone(
        tmp_path: Path, shards: tuple[Path, Path], damage: Callable[[Path], None]) -> None:
    """A host the run had (run.json hosts_order) whose raw directory or _host.json is gone or is
    not what it should be: one warning names it, says it is left out and what would bring it
    back; every other host is judged as before, the unreachable one still unreachable."""
    run = shutil.copytree(_run_with_unreachable(shards), tmp_path / "run")
    before = {h["name"]: h["outcome"] for h in _plain_copy(run)["hosts"]}
    lost = next(n for n, outcome in before.items() if outcome == "ok")
    damage(run / "raw" / lost)
    fleet, warnings = _rejudged(tmp_path, run)
    assert len(warnings) == 1, warnings
    assert f"host {lost}: raw/{lost}" in warnings[0] and "that host is left out" in warnings[0], warnings
    assert "restore" in warnings[0], warnings
    after = {h["name"]: h["outcome"] for h in fleet["hosts"]}
    assert len(fleet["hosts"]) == len(before) - 1
    assert after == {n: o for n, o in before.items() if n != lost}  # unreachable stays unreachable


def test_rejudge_of_a_killed_run_counts_the_hosts_it_never_finished_in_one_line(
        tmp_path: Path, shards: tuple[Path, Path]) -> None:
    """A SIGKILLed run never wrote the hosts it had not finished: not damage, one line counts them."""
    run = shutil.copytree(shards[0], tmp_path / "run")
    names = _load(run / "run.json")["hosts_order"]
    for name in names[:2]:
        shutil.rmtree(run / "raw" / name)
    for name in ("fleet.json", "fleet.index.json", "findings.json"):
        (run / name).unlink(missing_ok=True)
    doc = _load(run / "run.json")
    doc["state"] = "running"
    _save(run / "run.json", doc)
    fleet, warnings = _rejudged(tmp_path, run)
    assert warnings == [f"warning: run: 2 of the run's {len(names)} host(s) had not finished when it stopped "
                        "(run.json state running); they have no results to judge and are left out"], warnings
    assert [h["name"] for h in fleet["hosts"]] == names[2:]


@pytest.mark.parametrize("how", ["backup copy", "renamed"])
def test_rejudge_reads_each_host_once_when_two_raw_directories_name_it(
        tmp_path: Path, shards: tuple[Path, Path], how: str) -> None:
    """Two raw directories naming one host (a backup copy beside the original; another host's
    _host.json edited to name it): the host is judged once, from the directory the run writes
    for that name, and the other directory is named in one warning."""
    run = shutil.copytree(shards[0], tmp_path / "run")
    stored = _plain_copy(run)
    faulty = {f["host"] for f in stored["findings"]}
    host = next(h["name"] for h in stored["hosts"] if h["name"] not in faulty and h["outcome"] == "ok")
    other = next(h["name"] for h in stored["hosts"] if h["name"] in faulty and h["outcome"] == "ok")
    if how == "backup copy":
        extra = f"backup-{host}"  # sorts before the original: the name, not the order, picks it
        shutil.copytree(run / "raw" / host, run / "raw" / extra)
    else:
        extra = other
        meta = _load(run / "raw" / other / "_host.json")
        meta["name"] = host
        _save(run / "raw" / other / "_host.json", meta)
    fleet, warnings = _rejudged(tmp_path, run)
    names = [h["name"] for h in fleet["hosts"]]
    assert names.count(host) == 1, names
    assert not [f for f in fleet["findings"] if f["host"] == host], "judged from its own directory"
    skipped = [w for w in warnings if f"raw/{extra}: its _host.json names host {host}" in w]
    assert len(skipped) == 1 and f"raw/{host} holds" in skipped[0], warnings
    if how == "backup copy":
        assert len(warnings) == 1 and len(names) == len(stored["hosts"]), warnings
    else:  # the host whose directory was taken over is left out, and said
        assert other not in names and len(names) == len(stored["hosts"]) - 1
        assert any(w.startswith(f"warning: run: host {other}: raw/{other}/_host.json names host {host}")
                   for w in warnings), warnings


@pytest.mark.parametrize("bad", ["unknown key", "not a mapping", "bad value"])
def test_one_hosts_unusable_stored_probe_expect_costs_only_its_expectations(
        tmp_path: Path, shards: tuple[Path, Path], bad: str) -> None:
    """A stored probe_expect this fleetprobe cannot read (a key of another version, a hand edit):
    that host is judged without what cannot be used (the rest of it, the playbook's and --expect
    still apply), one warning names the host and what was wrong, its record says the same; every
    other host is judged.  A whole rejudge refused for one host's expectations was the old way."""
    run = shutil.copytree(shards[0], tmp_path / "run")
    stored = _plain_copy(run)
    host = next(h["name"] for h in stored["hosts"] if h.get("expect"))
    meta = _load(run / "raw" / host / "_host.json")
    expect = meta["vars"]["probe_expect"]
    meta["vars"]["probe_expect"] = {"unknown key": {**expect, "gpu_count_min": 8}, "not a mapping": "str",
                                    "bad value": {**expect, "gpu_count": "eight"}}[bad]
    _save(run / "raw" / host / "_host.json", meta)
    for more in ((), ("-p", "audit", "--expect", "nic_count=99")):
        fleet, warnings = _rejudged(tmp_path / "_".join(more), run, *more)
        assert len(warnings) == 1 and warnings[0].startswith(f"warning: run: host {host}: its stored probe_expect "
                                                             "cannot be used whole ("), warnings
        assert "correct probe_expect" in warnings[0], warnings
        assert len(fleet["hosts"]) == len(stored["hosts"])
        record = next(h for h in fleet["hosts"] if h["name"] == host)
        assert [e for e in record["normalize_errors"] if e.startswith("its stored probe_expect cannot be used")]
        before = next(h for h in stored["hosts"] if h["name"] == host)["expect"]
        lost = {"unknown key": set(), "not a mapping": set(expect), "bad value": {"gpu_count"}}[bad]
        judged = {k: v for k, v in before.items() if k not in lost}
        assert record["expect"] == ({**judged, "nic_count": 99} if more else judged), record["expect"]
        # an id that a lost key would have judged says that, not that nothing was asked for
        reasons = list(record["not_judged"].values())
        unset = lost - set(record["expect"])
        assert not [r for r in reasons if r.startswith("no expectation") and unset & set(r.split())], reasons
        assert bool(unset) == any("stored expectation" in r and "cannot be used here" in r for r in reasons), reasons


def test_one_hosts_unusable_stored_probe_expect_does_not_cost_a_merge_its_parts_playbook(
        tmp_path: Path, shards: tuple[Path, Path]) -> None:
    """The plays' overrides a merge reads from each part's plan do not depend on one host's own
    expectations: a stored probe_expect it cannot read leaves the part's playbook in force, with no
    warning that the plan cannot be used."""
    a, b = (shutil.copytree(s, tmp_path / s.name) for s in shards)
    host = next(h["name"] for h in _plain_copy(a)["hosts"] if h.get("expect"))
    meta = _load(a / "raw" / host / "_host.json")
    meta["vars"]["probe_expect"] = {**meta["vars"]["probe_expect"], "gpu_count_min": 8}
    _save(a / "raw" / host / "_host.json", meta)
    merged = run_cli(["merge", str(a), str(b), "--results", str(tmp_path / "merged"), "-q"], timeout=300)
    assert merged.code in (1, 4, 5) and "Traceback" not in merged.stderr, merged.stderr
    assert "cannot be used here" not in merged.stderr, merged.stderr
