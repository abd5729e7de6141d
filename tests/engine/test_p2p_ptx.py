"""The PTX embedded in probes/p2p.py must be what nvcc makes of probes/p2p_kernel.cu.

Pinned generation: `nvcc -ptx -arch=compute_75 -O3 probes/p2p_kernel.cu -o -`, comments and blank
lines dropped, header rewritten to `.version 6.0` / `.target sm_50` (why: see p2p_kernel.cu).
Run this file directly (`python tests/engine/test_p2p_ptx.py`) to print the fresh text for the probe.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.skips import not_here

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "probes" / "p2p_kernel.cu"
PROBE = ROOT / "probes" / "p2p.py"
NVCC_FLAGS = ["-ptx", "-arch=compute_75", "-O3"]
HEADER = {".version": ".version 6.0", ".target": ".target sm_50"}


def embed_form(ptx: str) -> str:
    """nvcc's PTX as the probe embeds it: no comments, no blank lines, the portable header."""
    out = []
    for line in ptx.splitlines():
        line = re.sub(r"//.*", "", line).rstrip()
        if not line.strip():
            continue
        directive = line.split(" ", 1)[0]
        out.append(HEADER.get(directive, line))
    return "\n".join(out) + "\n"


def embedded() -> str:
    for node in ast.parse(PROBE.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_PTX" for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise AssertionError("probes/p2p.py defines no _PTX")


def regenerate(nvcc: str) -> str:
    proc = subprocess.run([nvcc, *NVCC_FLAGS, str(KERNEL), "-o", "-"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return embed_form(proc.stdout)


def test_embedded_ptx_has_the_portable_header_and_both_kernels() -> None:
    text = embedded()
    assert text.splitlines()[:3] == [".version 6.0", ".target sm_50", ".address_size 64"]
    assert ".visible .entry fp_spin(" in text and ".visible .entry fp_copy(" in text
    assert "//" not in text


def test_embedded_ptx_is_what_nvcc_makes_of_the_kernel_source() -> None:
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if not nvcc:
        not_here("no CUDA toolkit (nvcc): staleness cannot be checked")
    assert embedded() == regenerate(nvcc), (
        "probes/p2p.py _PTX is stale: run `python tests/engine/test_p2p_ptx.py` and paste its output into _PTX")


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_embedded_ptx_assembles_for_current_gpus(arch: str, tmp_path: Path) -> None:
    ptxas = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if Path("/usr/local/cuda/bin/ptxas").exists() else None)
    if not ptxas:
        not_here("no CUDA toolkit (ptxas)")
    src = tmp_path / "k.ptx"
    src.write_text(embedded())
    proc = subprocess.run([ptxas, f"-arch={arch}", str(src), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


if __name__ == "__main__":
    tool = shutil.which("nvcc")
    if not tool:
        sys.exit("nvcc not found")
    sys.stdout.write(regenerate(tool))
