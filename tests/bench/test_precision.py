"""The precision benchmark's own arithmetic (bench/precision.py, issue 47 item 7): a planted fault the
verdict finds is a true positive, a host failed without one is a false alarm and is listed, a
fault the verdict misses is listed as missed; and a small real fleet (fixed seed) adds up."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.engine.test_nvml_helpers import needs_gcc

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import precision as p  # noqa: E402

LOST = p.Root("gpu.lost", "fail", "GPU1 (0000:2a:00.0)", "GPU lost", ("0000:2a:00.0",))
IDLE = p.Root("pcie.link.downgraded", "fail", "GPU0 (0000:18:00.0)", "link trained at Gen1 x16", ("0000:18:00.0",))
OUTLIER = p.Root("software.version.outlier", "warn", "driver", "driver differs from peers", ())


def test_a_found_fault_is_a_true_positive_and_a_failed_benign_host_a_listed_false_alarm() -> None:
    fleet = {"a": (("gpu.lost", 1),), "b": (("pcie.idle", 1),), "c": (), "d": (("nvlink.down", 2),),
             "e": (("gpu.lost", 1), ("nvlink.down", 5)), "f": (("sdc", 1),)}
    judged = {"a": p.Judged("failed", (LOST,)), "b": p.Judged("failed", (IDLE,)), "c": p.Judged("healthy", ()),
              "d": p.Judged("healthy", ()), "e": p.Judged("failed", (LOST,)), "f": p.Judged("degraded", (OUTLIER,))}
    s = p.score(fleet, judged)
    assert (s.tp, s.fp, s.fn, s.tn, s.invisible_only) == (2, 1, 1, 2, 1)
    sm = s.summary()
    assert sm["host_precision"] == round(2 / 3, 4) and sm["host_recall"] == round(2 / 3, 4)
    assert sm["healthy_hosts_failed"] == 1  # b: nothing planted that a probe can see, failed
    assert [(a["host"], a["id"]) for a in s.false_alarms] == [("b", "pcie.link.downgraded")]
    assert [(m["host"], m["fault"]) for m in s.missed] == [("d", "nvlink.down"), ("e", "nvlink.down")]
    assert [(w["host"], w["id"]) for w in s.warnings] == [("f", "software.version.outlier")]
    assert (s.plants["gpu.lost"].found, s.plants["gpu.lost"].device_ok) == (2, 2)
    assert sm["fault_id_precision"] == round(2 / 3, 4)  # 3 fail roots, 2 of them name a planted fault
    assert sm["fault_id_recall"] == 0.5 and sm["device_precision"] == 1.0


def test_a_root_on_another_device_is_found_but_not_device_precise() -> None:
    elsewhere = p.Root("gpu.lost", "fail", "GPU6 (0000:ba:00.0)", "GPU lost", ("0000:ba:00.0",))
    s = p.score({"a": (("gpu.lost", 1),)}, {"a": p.Judged("failed", (elsewhere,))})
    assert s.summary()["fault_id_recall"] == 1.0 and s.summary()["device_precision"] == 0.0


def test_the_fleet_draw_is_fixed_by_its_seed_and_plants_what_it_says() -> None:
    a, b = p.draw_fleet(200, 5), p.draw_fleet(200, 5)
    assert a == b and a != p.draw_fleet(200, 6)
    kinds = {p.BY_NAME[n].kind for r in a.values() for n, _ in r}
    assert kinds == {p.FAULT, p.BLIP, p.BENIGN}
    for recipe in a.values():
        positions = [pos for _, pos in recipe]
        assert len(positions) == len(set(positions))  # two items of a host never share a device


@needs_gcc
@pytest.mark.parametrize("seed", [47])
def test_a_small_real_fleet_adds_up(seed: int) -> None:
    work = p.scratch()  # memory: deleting the built machines from a disk with discard is slow
    try:
        fleet, judged, _ = p.run(60, seed, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    s = p.score(fleet, judged)
    assert s.tp + s.fp + s.fn + s.tn == 60
    failed_without = {h for h, r in fleet.items() if judged[h].health == "failed"
                      and not any(p.BY_NAME[n].kind == p.FAULT and p.BY_NAME[n].visible for n, _ in r)}
    assert failed_without <= {a["host"] for a in s.false_alarms}
    planted = sum(1 for r in fleet.values() for n, _ in r if p.BY_NAME[n].kind == p.FAULT and p.BY_NAME[n].visible)
    assert s.summary()["found"] + len(s.missed) == planted > 0
    lost = [h for h, r in fleet.items() if any(n == "gpu.lost" for n, _ in r)]
    assert lost and all(judged[h].health == "failed" for h in lost)  # a lost GPU is found on its host
    report = p.report(s, 60, seed, {"record_s": 0, "judge_s": 0, "recordings": 0}, "test")
    assert "## False alarms" in report and "None" not in report
