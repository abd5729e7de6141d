"""Compile a fake driver library (fake libnvidia-ml / libcuda) once per content, with gcc."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path


class BuildError(RuntimeError):
    pass


def build_shared_library(source: Path, header_name: str, header_text: str, soname: str, dest_dir: Path,
                         tag: str, flags: list[str]) -> Path:
    """`source` compiled with the generated `header_name` beside it into `dest_dir/<tag>-<hash>/<soname>`.

    Cached by the hash of source, header and flags; built in a temporary folder renamed into place,
    so concurrent test workers never load a half-written library.
    """
    key = hashlib.sha256("\0".join([source.read_text(), header_text, *flags]).encode()).hexdigest()[:16]
    out_dir = Path(dest_dir) / f"{tag}-{key}"
    lib = out_dir / soname
    if lib.is_file():
        return lib
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise BuildError(f"building the fake {soname} needs gcc (apt-get install gcc)")
    tmp = Path(dest_dir) / f".{tag}-{key}.{os.getpid()}.tmp"  # two test processes may build at once
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / header_name).write_text(header_text)
    proc = subprocess.run([gcc, *flags, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-I", str(tmp),
                           "-o", str(tmp / soname), str(source)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"gcc failed for {tag}:\n{proc.stderr[-3000:]}")
    try:
        tmp.rename(out_dir)
    except OSError:  # a concurrent build won the race; its result is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return lib
