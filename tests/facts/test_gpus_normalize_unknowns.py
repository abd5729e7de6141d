"""The gpus normalizer keeps an unknown its source names (issue 48 item 5: text goes through it):
`lost`, a MIG mode, `levels`, `mig_enabled_any` and `virtualized` are null beside the reason where
the payload says it cannot tell, and exactly what they were for a probe's payload, which never
names such a reason (the differential and golden tests pin the live side over every recording)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.facts.normalize import gpus as normalize_gpus


def _gpu(**kw: Any) -> dict[str, Any]:
    g: dict[str, Any] = {"index": 0, "bus_id": "0000:18:00.0", "name": "NVIDIA H100 80GB HBM3", "unknown": {}}
    g.update(kw)
    return g


def _payload(gpus: list[dict[str, Any]], **unknown: str) -> dict[str, Any]:
    return {"driver_version": "550.54.15", "count": len(gpus), "gpus": gpus, "levels": None, "unknown": unknown}


# (the GPU the source sent, the field, its value without a reason, with the source's reason)
CASES = [
    ({"lost": None}, {"lost": "text cannot tell a lost GPU from a missing one"}, "lost"),
    ({"mig": {"current": None, "pending": False, "instances": []}}, {}, "mig.current"),
    ({"mig": {"current": True, "pending": None, "instances": []}}, {}, "mig.pending"),
]


@pytest.mark.parametrize(("sent", "unknown", "where"), CASES, ids=[c[2] for c in CASES])
def test_a_named_unknown_stays_null_with_its_reason(sent: dict[str, Any], unknown: dict[str, str], where: str) -> None:
    key, _, sub = where.partition(".")
    probe = normalize_gpus.normalize(_payload([_gpu(**sent)]))["list"][0]
    value = probe[key][sub] if sub else probe[key]  # type: ignore[literal-required]
    assert value is False  # a probe's payload names no reason: as before
    named = dict(sent)
    if sub:
        named[key] = {**sent[key], f"{sub}_unknown": "not in the imported text"}
    text = normalize_gpus.normalize(_payload([_gpu(**named, unknown=unknown)]))["list"][0]
    got = text[key][sub] if sub else text[key]  # type: ignore[literal-required]
    assert got is None
    assert (text[key][f"{sub}_unknown"] if sub else text["unknown"][key]) in (  # type: ignore[literal-required]
        "not in the imported text", unknown.get(key))


@pytest.mark.parametrize("key", ["mig_enabled_any", "virtualized", "levels"])
def test_a_section_value_the_source_cannot_tell_is_null_with_its_reason(key: str) -> None:
    gpus = [_gpu(mig=None, virtualization_mode=None), _gpu(index=1, mig=None, virtualization_mode=None)]
    probe = normalize_gpus.normalize(_payload(gpus))
    assert probe[key] == ([[None, None], [None, None]] if key == "levels" else False)  # type: ignore[literal-required]
    text = normalize_gpus.normalize(_payload(gpus, **{key: "not in the imported text"}))
    assert text[key] is None and text[f"{key}_unknown"] == "not in the imported text"  # type: ignore[literal-required]


def test_one_gpu_known_true_is_true_whatever_the_others() -> None:
    gpus = [_gpu(mig={"current": True, "pending": True, "instances": []}, virtualization_mode="passthrough"),
            _gpu(index=1, mig=None, virtualization_mode=None)]
    out = normalize_gpus.normalize(_payload(gpus, mig_enabled_any="x", virtualized="x"))
    assert out["mig_enabled_any"] is True and out["virtualized"] is True
