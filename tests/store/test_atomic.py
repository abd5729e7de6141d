"""atomic.write_json: streamed compact text equals json.dumps; the file appears whole or not at all."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

from orchestrator.store import atomic


def _compact(doc: object) -> str:
    return json.dumps(doc, separators=(",", ":"), default=str) + "\n"


@pytest.mark.parametrize("doc", [
    {"hosts": [{"name": f"h{i}", "facts": {"x": list(range(80))}} for i in range(100)], "findings": []},
    {"by_key": {f"k{i}": [i] * 70 for i in range(100)}, "when": datetime.date(2026, 1, 2), "text": "é\u2028\""},
    list(range(200)), [[i] * 100 for i in range(70)], {i: i for i in range(100)}, {"x": 1}, [], {}, "s", None,
])
def test_stream_equals_one_shot_compact_dumps(tmp_path: Path, doc: object) -> None:
    path = atomic.write_json(tmp_path / "out.json", doc)
    assert path.read_text(encoding="utf-8") == _compact(doc)
    assert os.stat(path).st_mode & 0o777 == 0o644


def test_indent_for_small_human_files(tmp_path: Path) -> None:
    path = atomic.write_json(tmp_path / "run.json", {"id": "r1", "state": "complete"}, indent=1)
    assert path.read_text() == '{\n "id": "r1",\n "state": "complete"\n}\n'


def test_failed_encoding_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "fleet.json"
    atomic.write_json(target, {"old": True})

    class Boom:
        def __str__(self) -> str:
            raise RuntimeError("cannot encode")

    with pytest.raises(RuntimeError):
        atomic.write_json(target, {"hosts": [{"i": i} for i in range(100)] + [{"bad": Boom()}]})
    assert json.loads(target.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.json"]


def test_write_text_rejects_bytes(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        atomic.write_text(tmp_path / "x", b"bytes")  # type: ignore[arg-type]
