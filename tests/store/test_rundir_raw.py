"""RunDirectory.copy_raw_from (rejudge, merge): another run's raw data, shared by hard links where
the filesystem allows, copied where it does not, planted links left out."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from orchestrator.engine.runner import HostResult
from orchestrator.inventory.model import Host
from orchestrator.store import rundir
from orchestrator.store.rundir import RunDirectory
from orchestrator.store.runmeta import RunMeta


def _source(tmp_path: Path) -> RunDirectory:
    src = RunDirectory.create(tmp_path / "a", RunMeta(inventory=[]))
    host = src.dir / "raw" / "h1"
    host.mkdir(parents=True)
    (host / "nvml.json").write_text('{"envelope_version": 1}')
    (host / "_host.json").write_text('{"name": "h1"}')
    (tmp_path / "elsewhere").write_text("not raw data")
    os.symlink(tmp_path / "elsewhere", host / "planted.json")
    return src


def test_raw_files_are_shared_and_outlive_their_source(tmp_path: Path) -> None:
    src = _source(tmp_path)
    dst = RunDirectory.create(tmp_path / "b", RunMeta(inventory=[]))
    dst.copy_raw_from(src)
    a, b = src.dir / "raw" / "h1" / "nvml.json", dst.dir / "raw" / "h1" / "nvml.json"
    assert os.stat(a).st_ino == os.stat(b).st_ino  # one file, not a second copy of it
    assert not (dst.dir / "raw" / "h1" / "planted.json").exists()  # a planted link is not raw data
    a.unlink()  # retention removing the source run leaves the other's data whole
    assert b.read_text() == '{"envelope_version": 1}'


@pytest.mark.parametrize("refusal", [errno.EXDEV, errno.EPERM])
def test_where_links_are_refused_the_files_are_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       refusal: int) -> None:
    def refuse(src: str, dst: str) -> None:  # another filesystem, or fs.protected_hardlinks
        raise OSError(refusal, os.strerror(refusal))

    src = _source(tmp_path)
    dst = RunDirectory.create(tmp_path / "b", RunMeta(inventory=[]))
    monkeypatch.setattr(rundir.os, "link", refuse)
    dst.copy_raw_from(src)
    a, b = src.dir / "raw" / "h1" / "nvml.json", dst.dir / "raw" / "h1" / "nvml.json"
    assert os.stat(a).st_ino != os.stat(b).st_ino and b.read_text() == a.read_text()
    assert (dst.dir / "raw" / "h1" / "_host.json").read_text() == '{"name": "h1"}'


def _staged(run: RunDirectory, key: str, files: dict[str, str]) -> Path:
    d = run.stage_dir(key)
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def test_staged_probe_files_become_the_hosts_own(tmp_path: Path) -> None:
    """An import's worker writes a host's probe files before the host has its final name; stored,
    they are the host's raw files (the whole directory renamed), with its _host.json beside them,
    and nothing is left staged."""
    run = RunDirectory.create_staged(tmp_path, RunMeta())
    staged = _staged(run, "7", {"nvml.json": '{"envelope_version": 1}', "nvml.stderr": "warn"})
    run.host_finished(HostResult(Host("h1#2"), {}), origin={"via": "bundle"}, staged=staged)
    hdir = run.dir / "raw" / "h1%232"
    assert sorted(p.name for p in hdir.iterdir()) == ["_host.json", "nvml.json", "nvml.stderr"]
    assert (hdir / "nvml.stderr").read_text() == "warn"
    assert not staged.exists()
    run.drop_staged()
    assert not (run.dir / ".staged").exists()


def test_staged_files_join_a_host_that_already_has_some(tmp_path: Path) -> None:
    """Two pieces of one host's results: the second's files join the first's, a probe in both
    taking the later answer, as host_finished writes them."""
    run = RunDirectory.create_staged(tmp_path, RunMeta())
    first = _staged(run, "1", {"nvml.json": "first", "pcie.json": "pcie"})
    run.host_finished(HostResult(Host("h1"), {}), staged=first)
    second = _staged(run, "2", {"nvml.json": "second"})
    run.host_finished(HostResult(Host("h1"), {}), staged=second)
    hdir = run.dir / "raw" / "h1"
    assert {p.name: p.read_text() for p in hdir.iterdir() if p.name != "_host.json"} == {
        "nvml.json": "second", "pcie.json": "pcie"}
    assert not first.exists() and not second.exists()
