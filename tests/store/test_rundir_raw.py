"""RunDirectory.copy_raw_from (rejudge, merge): another run's raw data, shared by hard links where
the filesystem allows, copied where it does not, planted links left out."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

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
