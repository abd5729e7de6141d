"""The nvml and nvlink probes against NVIDIA's own Python bindings (nvidia-ml-py, module `pynvml`).

The probes were written from nvml.h and tested against compiled fakes written here; a wrong enum
value or struct layout would pass both.  This file holds them to NVIDIA's bindings instead:

* every NVML function the probes call (recorded by running their `collect` on a recording stand-in
  for libnvidia-ml, once with every symbol present and once with only the oldest variants) exists
  in pynvml, or is an older variant of one that does and that the probe tries first;
* every call passes as many arguments as pynvml's wrapper does, each of the same size (by value) or
  pointing at something of the same size, and string buffers at least as long as pynvml's;
* every enum value the probes pass or decode, every field id and versioned-struct word, equals
  pynvml's constant of that name;
* every ctypes Structure the probes declare has pynvml's field names, order, offsets and sizes.

nvidia-ml-py is pure Python (scripts/test.sh installs the `nvlibs` extra); without it the tests
skip with the install command, which CI counts as a failure.
"""

from __future__ import annotations

import ast
import ctypes
import ctypes.util
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from orchestrator.engine.payload import probe_source

NVML_NAME = re.compile(r"^nvml(Init|Shutdown|System|Device)\w*$")  # function names, not fields
# Older variants the probes fall back to on old drivers; pynvml wraps only the newer one, which
# the probe must try first (checked below).
LEGACY = {
    "nvmlInit": "nvmlInitWithFlags", "nvmlInit_v2": "nvmlInitWithFlags",
    "nvmlDeviceGetCount": "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex": "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetPciInfo": "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2": "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetNvLinkRemotePciInfo": "nvmlDeviceGetNvLinkRemotePciInfo_v2",
}
# Where the probe and pynvml declare a field with a different ctypes type of the same size and
# offset, and why the probe's is right.
TYPE_DEVIATIONS = {
    ("FabricInfoV1", "state"): "nvml.h: typedef unsigned char nvmlGpuFabricState_t (pynvml: c_uint)",
    ("FabricInfoV3", "state"): "nvml.h: typedef unsigned char nvmlGpuFabricState_t (pynvml: c_uint)",
    ("FieldValue", "value"): "the probe reads the 64-bit member of the union nvmlValue_t directly",
}
# Calls where pynvml's wrapper passes something else than nvml.h declares; the probe follows nvml.h.
SIGNATURE_DEVIATIONS = {
    "nvmlDeviceGetVirtualizationMode": "nvml.h: nvmlGpuVirtualizationMode_t * (a 4-byte enum); pynvml passes "
                                       "a c_ulonglong, which reads the same on a little-endian host",
}
STRUCTS = {  # probe class -> pynvml class
    "PciInfo": "nvmlPciInfo_t", "Memory": "c_nvmlMemory_t", "MemoryV2": "c_nvmlMemory_v2_t",
    "FabricInfoV1": "c_nvmlGpuFabricInfo_t", "FabricInfoV3": "c_nvmlGpuFabricInfo_v3_t",
    "FieldValue": "c_nvmlFieldValue_t", "ViolationTime": "c_nvmlViolationTime_t",
    "MarginTemperatureV1": "c_nvmlMarginTemperature_v1_t",
}
SCALARS = {  # probe constant -> pynvml constant
    "NVML_SUCCESS": "NVML_SUCCESS", "NVML_ERROR_INVALID_ARGUMENT": "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_NOT_SUPPORTED": "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_GPU_IS_LOST": "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    "NVLINK_SCAN_LIMIT": "NVML_NVLINK_MAX_LINKS", "FI_DEV_NVLINK_LINK_COUNT": "NVML_FI_DEV_NVLINK_LINK_COUNT",
    "FI_DEV_GET_GPU_RECOVERY_ACTION": "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",
    "MEMORY_V2_VERSION": "nvmlMemory_v2", "FABRIC_V2_VERSION": "nvmlGpuFabricInfo_v2",
    "FABRIC_V3_VERSION": "nvmlGpuFabricInfo_v3", "MARGIN_TEMPERATURE_V1_VERSION": "nvmlMarginTemperature_v1",
}


def _pynvml() -> ModuleType:
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        pytest.skip("nvidia-ml-py (NVIDIA's NVML bindings) is not installed: "
                    ".venv/bin/pip install -e '.[nvlibs]' (scripts/test.sh does)")
    return pynvml


def _probe(name: str) -> dict[str, Any]:
    """The probe's namespace: prelude + _nvml + probe, defined but not run (no call line)."""
    ns: dict[str, Any] = {"__name__": "fleetprobe_" + name}
    exec(compile(probe_source(name), f"<{name}>", "exec"), ns)
    return ns


# -- the probe's side: its calls, recorded --------------------------------------------------------

@dataclass(frozen=True)
class Arg:
    pointer: bool
    size: int | None  # sizeof the value, or of what it points at (an array's element); None: unknown
    value: int | None = None  # an integer passed by value, when known


def _arg_of_object(obj: Any) -> Arg:
    pointee = obj._obj if hasattr(obj, "_obj") else None  # byref(x) keeps x as _obj
    if pointee is not None:
        t = type(pointee)
        return Arg(True, ctypes.sizeof(t._type_) if issubclass(t, ctypes.Array) else ctypes.sizeof(t))
    if isinstance(obj, ctypes.Array):  # an array passed by name decays to a pointer to its first element
        return Arg(True, ctypes.sizeof(type(obj)._type_))
    if isinstance(obj, ctypes._SimpleCData):
        v = obj.value
        return Arg(False, ctypes.sizeof(type(obj)), v if isinstance(v, int) else None)
    return Arg(False, None)


def _fill(arg: Any, n: int) -> None:
    """Answer like a driver with two GPUs (so pairs are asked about), one MIG instance, one fan and
    one link: a scalar output n, a field value 1; handles non-null."""
    obj = getattr(arg, "_obj", None)
    if isinstance(obj, ctypes.c_void_p):
        obj.value = 0x1000
    elif isinstance(obj, ctypes._SimpleCData) and isinstance(obj.value, int):
        obj.value = n
    elif isinstance(obj, ctypes.Structure) and hasattr(obj, "fieldId"):
        obj.value = 1


def _record(probe: str, missing: frozenset[str]) -> dict[str, set[tuple[Arg, ...]]]:
    """Run the probe's collect on a stand-in for libnvidia-ml that records every call; the names in
    `missing` answer FUNCTION_NOT_FOUND as an old driver's library would."""
    ns = _probe(probe)
    calls: dict[str, set[tuple[Arg, ...]]] = {}
    order: list[str] = []

    class Recording(ns["Nvml"]):  # type: ignore[misc,name-defined]
        def call(self, name: str, *args: Any) -> int:
            calls.setdefault(name, set()).add(tuple(_arg_of_object(a) for a in args))
            order.append(name)
            if name in missing:
                return int(ns["NVML_ERROR_FUNCTION_NOT_FOUND"])
            for a in args:
                _fill(a, 2 if name.startswith("nvmlDeviceGetCount") else 1)
            return 0

    ns["Nvml"] = Recording
    ctx = ns["ProbeContext"]({"lib": ctypes.util.find_library("c") or "libc.so.6"}, 30.0)
    ns["collect"](ctx)
    _ORDERS[(probe, missing)] = order
    return calls


_ORDERS: dict[tuple[str, frozenset[str]], list[str]] = {}
_OLD_DRIVER = frozenset({"nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
                         "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetMemoryInfo_v2",
                         "nvmlDeviceGetNumFans", "nvmlDeviceGetGpuFabricInfoV",
                         "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                         "nvmlSystemGetCudaDriverVersion_v2"})
_NO_FIELD_VALUES = frozenset({"nvmlDeviceGetFieldValues"})  # the nvlink probe's link scan


def _probe_calls() -> dict[str, set[tuple[Arg, ...]]]:
    out: dict[str, set[tuple[Arg, ...]]] = {}
    for probe in ("nvml", "nvlink"):
        for missing in (frozenset(), _OLD_DRIVER, _NO_FIELD_VALUES):
            for name, sigs in _record(probe, missing).items():
                if not name.startswith("__"):
                    out.setdefault(name, set()).update(sigs)
    return out


def _named_in_source() -> set[str]:
    """Every NVML function name written in the probes' source (a name only reached on a path the
    recording misses still counts)."""
    names = set()
    for probe in ("nvml", "nvlink"):
        for node in ast.walk(ast.parse(probe_source(probe))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NVML_NAME.match(node.value):
                names.add(node.value)
    return names


# -- pynvml's side: what its wrappers pass to each C function -------------------------------------

def _ctype(mod: ModuleType, node: ast.expr, local: dict[str, Any]) -> Any:
    """The ctypes type an expression names (c_uint, c_nvmlMemory_t, a local array type), or None."""
    if isinstance(node, ast.Name):
        t = local.get(node.id, getattr(mod, node.id, None))
        return t if isinstance(t, type) and issubclass(t, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):  # c_ulonglong * n
        elem = _ctype(mod, node.left, local)
        return elem * 1 if elem is not None else None
    return None


Bound = dict[str, list[tuple[int, Any]]]  # local name -> (branch, what it is bound to), in order


def _assignments(body: list[ast.stmt], branch: int = 0) -> Iterator[tuple[int, ast.Assign]]:
    """Every simple assignment of a function, with the branch (if/else body) it is made in."""
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            yield branch, stmt
        for field in ("body", "orelse", "handlers", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                yield from _assignments(inner, id(inner))


def _locals(mod: ModuleType, fdef: ast.FunctionDef) -> tuple[dict[str, Any], Bound, Bound]:
    """(type names, instances' types, C functions) a wrapper assigns to local names."""
    types: dict[str, Any] = {}
    values: Bound = {}
    fns: Bound = {}
    for branch, node in _assignments(fdef.body):
        var, rhs = node.targets[0].id, node.value  # type: ignore[attr-defined]
        t = _ctype(mod, rhs, types)
        if t is not None and not isinstance(rhs, ast.Name):
            types[var] = t
        elif isinstance(rhs, ast.Call) and isinstance(rhs.func, ast.Name):
            if rhs.func.id == "_nvmlGetFunctionPointer" and isinstance(rhs.args[0], ast.Constant):
                fns.setdefault(var, []).append((branch, str(rhs.args[0].value)))
            elif rhs.func.id == "create_string_buffer":
                values.setdefault(var, []).append((branch, ctypes.c_char * 1))
            else:
                ct = _ctype(mod, rhs.func, types)
                if ct is not None:
                    values.setdefault(var, []).append((branch, ct))
    return types, values, fns


def _in_branch(values: Bound, branch: int) -> dict[str, Any]:
    """Each local's type as the branch that fetched the function sees it: its own assignment there,
    else the last one outside."""
    out = {}
    for var, bound in values.items():
        mine = [t for b, t in bound if b == branch]
        out[var] = mine[-1] if mine else bound[-1][1]
    return out


def _wrapper_arg(mod: ModuleType, node: ast.expr, types: dict[str, Any], values: dict[str, Any]) -> Arg:
    def size(t: Any) -> int:
        return ctypes.sizeof(t._type_) if issubclass(t, ctypes.Array) else ctypes.sizeof(t)

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("byref", "pointer"):
        inner = node.args[0]
        if isinstance(inner, ast.Name) and inner.id in values:
            return Arg(True, size(values[inner.id]))
        if isinstance(inner, ast.Call):
            t = _ctype(mod, inner.func, types)
            return Arg(True, size(t) if t is not None else None)
        return Arg(True, None)
    if isinstance(node, ast.Name) and node.id in values:
        t = values[node.id]
        return Arg(issubclass(t, ctypes.Array), size(t))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        t = _ctype(mod, node.func, types)
        if t is not None and issubclass(t, ctypes._SimpleCData):
            v = None
            if node.args and isinstance(node.args[0], ast.Name) and isinstance(getattr(mod, node.args[0].id, None), int):
                v = int(getattr(mod, node.args[0].id))
            return Arg(False, ctypes.sizeof(t), v)
    return Arg(False, None)


def _wrappers(mod: ModuleType) -> dict[str, set[tuple[Arg, ...]]]:
    """C function -> the argument lists pynvml's wrappers pass it."""
    out: dict[str, set[tuple[Arg, ...]]] = {}
    for fdef in ast.walk(ast.parse(inspect.getsource(mod))):
        if not isinstance(fdef, ast.FunctionDef):
            continue
        types, values, fns = _locals(mod, fdef)
        for node in ast.walk(fdef):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in fns:
                for branch, cname in fns[node.func.id]:
                    seen = _in_branch(values, branch)
                    sig = tuple(_wrapper_arg(mod, a, types, seen) for a in node.args)
                    out.setdefault(cname, set()).add(sig)
    return out


def _compatible(probe: tuple[Arg, ...], wrapper: tuple[Arg, ...]) -> bool:
    if len(probe) != len(wrapper):
        return False
    for i, (p, w) in enumerate(zip(probe, wrapper)):
        if p.size is not None and w.size is not None and (p.pointer, p.size) != (w.pointer, w.size):
            return False
        after_text = i > 0 and probe[i - 1].pointer and probe[i - 1].size == 1
        if after_text and p.value is not None and w.value is not None and p.value < w.value:
            return False  # a string buffer shorter than NVML's own bound: INSUFFICIENT_SIZE
    return True


@pytest.fixture(scope="module")
def pynvml() -> ModuleType:
    return _pynvml()


@pytest.fixture(scope="module")
def probe_calls() -> dict[str, set[tuple[Arg, ...]]]:
    return _probe_calls()


# -- the tests ----------------------------------------------------------------------------------

def test_every_nvml_function_the_probes_name_is_one_nvidia_binds(pynvml: ModuleType) -> None:
    wrapped = set(_wrappers(pynvml))
    named = _named_in_source()
    assert len(named) > 60, named  # the walk found the probes' calls
    unknown = sorted(n for n in named if n not in wrapped and LEGACY.get(n) not in wrapped)
    assert not unknown, f"not in nvidia-ml-py (a typo, or an older variant missing from LEGACY): {unknown}"


def test_the_probes_call_every_function_they_name(probe_calls: dict[str, set[tuple[Arg, ...]]]) -> None:
    """The recording reaches every call (so the signature test below covers all of them)."""
    assert sorted(_named_in_source() - set(probe_calls)) == []


def test_a_legacy_variant_is_tried_only_after_the_newer_one_nvidia_binds(
        probe_calls: dict[str, set[tuple[Arg, ...]]]) -> None:
    for (_, missing), order in _ORDERS.items():
        for old, new in LEGACY.items():
            if old in order and new in probe_calls:
                assert new in order[:order.index(old)], (old, new, missing)
    assert any("nvmlDeviceGetPciInfo" in o for o in _ORDERS.values())  # the old-driver run took the fallbacks


def test_every_call_passes_what_nvidias_wrapper_passes(pynvml: ModuleType,
                                                      probe_calls: dict[str, set[tuple[Arg, ...]]]) -> None:
    wrappers = _wrappers(pynvml)
    bad = []
    for name, sigs in sorted(probe_calls.items()):
        theirs = wrappers.get(name) or wrappers.get(LEGACY.get(name, ""), set())
        if (name in LEGACY and name not in wrappers) or name in SIGNATURE_DEVIATIONS:
            continue  # an older ABI than pynvml binds (nvmlInit: no flags), or pynvml differs from nvml.h
        for sig in sigs:
            if not any(_compatible(sig, w) for w in theirs):
                bad.append(f"{name}{list(sig)} vs nvidia-ml-py {[list(w) for w in theirs]}")
    assert not bad, "\n".join(bad)


def _fields(cls: type) -> list[tuple[str, int, int, Any]]:
    return [(f[0], getattr(cls, f[0]).offset, getattr(cls, f[0]).size, f[1]) for f in cls._fields_]  # type: ignore[attr-defined]


@pytest.mark.parametrize("ours,theirs", sorted(STRUCTS.items()))
def test_struct_layouts_match_nvidias(pynvml: ModuleType, ours: str, theirs: str) -> None:
    ns = _probe("nvml")
    mine, nvidia = ns[ours], getattr(pynvml, theirs)
    assert ctypes.sizeof(mine) == ctypes.sizeof(nvidia)
    assert [f[0] for f in _fields(mine)] == [f[0] for f in _fields(nvidia)], ours
    for (n1, off1, size1, t1), (n2, off2, size2, t2) in zip(_fields(mine), _fields(nvidia)):
        assert (n1, off1) == (n2, off2), (ours, n1, n2)
        if (ours, n1) not in TYPE_DEVIATIONS:  # there the padding after the field keeps the offsets
            assert (size1, _kind(t1)) == (size2, _kind(t2)), (ours, n1, t1, t2)


def _kind(t: Any) -> tuple[str, int]:
    if issubclass(t, ctypes.Array):
        return "array:" + _kind(t._type_)[0], t._length_
    code = getattr(t, "_type_", "?")
    # c_int64 is c_long on LP64, c_longlong elsewhere: the same kind when the size matches
    return {"l": "q", "L": "Q", "I": "I", "i": "i"}.get(code, code), ctypes.sizeof(t)


def _const(pynvml: ModuleType, name: str) -> Any:
    v = getattr(pynvml, name, None)
    return v[0] if isinstance(v, tuple) and len(v) == 1 else v  # pynvml spells one `= 0,` (a tuple)


def _decoded(ns: dict[str, Any]) -> Iterator[tuple[str, int, str]]:
    """(table, value, pynvml constant) for every value a probe table decodes or passes."""
    tables = (("NVLINK_VERSIONS", "NVML_NVLINK_VERSION_", lambda s: s.replace(".", "_")),
              ("NVLINK_DEVICE_TYPES", "NVML_NVLINK_DEVICE_TYPE_", lambda s: {"nvswitch": "switch"}.get(s, s)),
              ("ARCHITECTURES", "NVML_DEVICE_ARCH_", str), ("COMPUTE_MODES", "NVML_COMPUTEMODE_", str),
              ("VIRT_MODES", "NVML_GPU_VIRTUALIZATION_MODE_", str), ("FABRIC_STATES", "NVML_GPU_FABRIC_STATE_", str),
              ("FABRIC_HEALTH", "NVML_GPU_FABRIC_HEALTH_SUMMARY_", lambda s: s or "not_supported"),
              ("RECOVERY_ACTIONS", "NVML_GPU_RECOVERY_ACTION_", str),
              ("P2P_STATUS", "NVML_P2P_STATUS_", lambda s: {
                  "OK": "ok", "CNS": "chipset_not_supported", "GNS": "gpu_not_supported",
                  "TNS": "ioh_topology_not_supported", "DR": "disabled_by_regkey", "NS": "not_supported",
                  "U": "unknown"}[s]),
              ("TOPOLOGY_LEVELS", "NVML_TOPOLOGY_", lambda s: s))
    levels = {0: "internal", 10: "single", 20: "multiple", 30: "hostbridge", 40: "node", 50: "system"}
    for table, prefix, name in tables:
        for value, label in ns[table].items():
            label = levels[value] if table == "TOPOLOGY_LEVELS" else name(label)
            yield table, value, prefix + label.upper()
    for code, label in ns["NVML_ERRORS"].items():
        yield "NVML_ERRORS", code, "NVML_" + ("" if code == 0 else "ERROR_") + label
    for table, prefix in (("P2P_CAPS", "NVML_P2P_CAPS_INDEX_"), ("PERF_POLICIES", "NVML_PERF_POLICY_")):
        for label, value in ns[table]:
            yield table, value, prefix + label.upper()


def test_every_enum_value_the_probes_decode_is_nvidias(pynvml: ModuleType) -> None:
    ns = _probe("nvml")
    wrong = [(t, v, c, getattr(pynvml, c, "absent")) for t, v, c in _decoded(ns) if _const(pynvml, c) != v]
    assert not wrong, wrong
    for ours, theirs in SCALARS.items():
        assert ns[ours] == getattr(pynvml, theirs), ours
    nvlink = _probe("nvlink")
    for label, value in nvlink["_CAPS"]:
        assert getattr(pynvml, "NVML_NVLINK_CAP_" + label.upper()) == value
    for label, value in nvlink["_COUNTERS"]:
        assert getattr(pynvml, "NVML_NVLINK_ERROR_DL_" + label.upper()) == value


@pytest.mark.parametrize("table,prefix", [("RECOVERY_ACTIONS", "NVML_GPU_RECOVERY_ACTION_"),
                                          ("NVML_ERRORS", "NVML_ERROR_"),
                                          ("FABRIC_STATES", "NVML_GPU_FABRIC_STATE_"),
                                          ("COMPUTE_MODES", "NVML_COMPUTEMODE_"),
                                          ("VIRT_MODES", "NVML_GPU_VIRTUALIZATION_MODE_"),
                                          ("NVLINK_VERSIONS", "NVML_NVLINK_VERSION_")])
def test_the_probe_names_every_value_nvidia_defines(pynvml: ModuleType, table: str, prefix: str) -> None:
    """A value missing here reaches the controller as unknown(N), never by its name."""
    ns = _probe("nvml")
    theirs = {v for k, v in vars(pynvml).items() if k.startswith(prefix) and isinstance(v, int)
              and not k.endswith(("_COUNT", "_INVALID"))}
    assert sorted(theirs - set(ns[table])) == []


# Enum arguments the probes pass in calls: function -> (argument position, the pynvml constants
# the recorded values must be, all of them).
ENUM_ARGS = {
    "nvmlDeviceGetTotalEccErrors": (1, {"NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"}),
    "nvmlDeviceGetMemoryErrorCounter": (3, {"NVML_MEMORY_LOCATION_DEVICE_MEMORY", "NVML_MEMORY_LOCATION_SRAM"}),
    "nvmlDeviceGetTemperatureThreshold": (1, {"NVML_TEMPERATURE_THRESHOLD_SHUTDOWN",
                                              "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"}),
    "nvmlDeviceGetTemperature": (1, {"NVML_TEMPERATURE_GPU"}),
    "nvmlDeviceGetNvLinkCapability": (2, {"NVML_NVLINK_CAP_P2P_SUPPORTED", "NVML_NVLINK_CAP_SYSMEM_ACCESS",
                                          "NVML_NVLINK_CAP_P2P_ATOMICS"}),
    "nvmlDeviceGetNvLinkErrorCounter": (2, {"NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY",
                                            "NVML_NVLINK_ERROR_DL_CRC_FLIT", "NVML_NVLINK_ERROR_DL_CRC_DATA"}),
    "nvmlDeviceGetP2PStatus": (2, {"NVML_P2P_CAPS_INDEX_READ", "NVML_P2P_CAPS_INDEX_WRITE",
                                   "NVML_P2P_CAPS_INDEX_NVLINK", "NVML_P2P_CAPS_INDEX_ATOMICS"}),
}


@pytest.mark.parametrize("fn", sorted(ENUM_ARGS))
def test_enum_arguments_are_nvidias_values(pynvml: ModuleType, probe_calls: dict[str, set[tuple[Arg, ...]]],
                                           fn: str) -> None:
    pos, names = ENUM_ARGS[fn]
    expected = {_const(pynvml, n) for n in names}
    passed = {sig[pos].value for sig in probe_calls[fn]}
    assert passed == expected, fn
