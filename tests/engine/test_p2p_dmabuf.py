"""DMA-BUF support per GPU (issue 18): the CUDA session reads CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
(124) from the compiled fake libcuda; a driver older than the attribute answers INVALID_VALUE and
the GPU's support is unknown.  With `gdr: true` and no peer-memory module, GPUs that all support
DMA-BUF on a 5.12+ kernel pass, a GPU without it fails, unknown support stays unknown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.facts.normalize.p2p import normalize
from orchestrator.verdict.checks import nic
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.expectations import Expectations
from tests.engine.test_p2p import libdir, run_probe  # noqa: F401  (libdir: the session fixture)


def _dmabuf(libdir: Path, machine: str) -> dict[str, Any] | None:  # noqa: F811
    env, _ = run_probe(libdir, machine)
    return normalize(env["data"])["dmabuf"]


def _gdr_view(dmabuf: dict[str, Any] | None, kernel: str = "5.15.0-1042-nvidia") -> HostView:
    facts = {"nic": {"devices": [{"name": "mlx5_0", "ports": []}], "gdr": {"peermem_loaded": False, "module": None}},
             "gpus": {"list": [{"index": 0, "bus_id": "0000:18:00.0"}]}, "host": {"kernel": kernel},
             "p2p": {"dmabuf": dmabuf}}
    return HostView(name="h", facts=facts, outcomes={"nic": "ok", "p2p": "ok"}, expect=Expectations(gdr=True))


def test_dmabuf_attribute_per_gpu(libdir: Path) -> None:  # noqa: F811
    healthy = _dmabuf(libdir, "dgx-h100")
    assert healthy is not None and len(healthy) == 8 and set(healthy.values()) == {True}
    odd = _dmabuf(libdir, "dgx-h100--no-dmabuf")
    assert odd is not None and odd["0000:18:00.0"] is False and sum(1 for v in odd.values() if v) == 7
    old = _dmabuf(libdir, "dgx-h100--old-driver")  # CUDA 8.0: no such attribute
    assert old is not None and set(old.values()) == {None}


def test_gdr_through_dmabuf(libdir: Path) -> None:  # noqa: F811
    assert list(nic.gdr_unavailable(_gdr_view(_dmabuf(libdir, "dgx-h100")))) == []
    [f] = nic.gdr_unavailable(_gdr_view(_dmabuf(libdir, "dgx-h100--no-dmabuf")))
    assert (f.severity.value, f.kind.value) == ("fail", "fault") and "0000:18:00.0" in f.message
    [u] = nic.gdr_unavailable(_gdr_view(_dmabuf(libdir, "dgx-h100--old-driver")))
    assert u.kind.value == "unknown"
    [k] = nic.gdr_unavailable(_gdr_view(_dmabuf(libdir, "dgx-h100"), kernel="4.18.0-513.el8"))
    assert k.severity.value == "fail"  # the kernel cannot do DMA-BUF whatever the GPUs say
