# fleetprobe probe prelude.  The controller prepends this to every probe before piping it to
# `python3 -` on the host, so probes share one envelope implementation without a file on the host.
# Python 3.6+ standard library only; nothing here writes to the host.
import json
import os
import sys
import threading
import time

ENVELOPE_VERSION = 1
# What a probe run by fleetprobe's own runner writes first (fp_main(..., announce=True)): "started
# here, now".  The controller counts the probe's timeout from it, the watchdog below from the same
# moment, so a slow link or a busy controller never eats into the probe's time.  The runner strips
# it (orchestrator/engine/payload.py: START_MARK); other engines never ask for it.
_FP_START_MARK = b"FPSTART 1\n"
_FP_T0 = time.time()
_FP_LOCK = threading.Lock()
_FP_DONE = []


class Unsupported(Exception):
    """Raised by a probe when the host cannot answer it at all (no library, no driver)."""


class ProbeContext(object):
    def __init__(self, args, deadline_s):
        self.args = args
        self.deadline_s = deadline_s
        self.warnings = []
        self.errors = []
        self.partial = {}  # what a probe has so far; reported if the deadline fires
        self.out_fd = None  # the real stdout (fp_main sets it): a coordinated step watches it

    def remaining(self):
        return self.deadline_s - (time.time() - _FP_T0)

    def warn(self, msg):
        self.warnings.append(str(msg))

    def error(self, msg):
        self.errors.append(str(msg))

    def say(self, obj):
        """One line for the controller ahead of the envelope (`FPSAY <json>`): what a coordinated
        multi-host step hands to the other hosts (rank 0's ncclUniqueId).  Lone probes only: a
        bundle frames its children's stdout, and this line would break the frame."""
        if self.out_fd is None:
            return
        payload = ("FPSAY " + json.dumps(obj, sort_keys=True) + "\n").encode("utf-8")
        with _FP_LOCK:
            while payload:
                payload = payload[os.write(self.out_fd, payload):]

    def exit_with_controller(self, on_gone=None):
        """Leave as soon as the controller is gone: our stdout's reader closed (POLLERR/POLLHUP on
        the pipe: the SSH channel closed, the local transport was killed).  A coordinated step
        starts this so an interrupted qualification leaves nothing running; `on_gone` runs first
        (the fabric probe kills its tools)."""
        if self.out_fd is None:
            return
        import select
        try:
            poller = select.poll()
            poller.register(self.out_fd, 0)
        except (OSError, ValueError, AttributeError):
            return

        def watch():
            while True:
                try:
                    events = poller.poll(200)
                except OSError:
                    events = []
                if any(ev & (select.POLLERR | select.POLLHUP) for _, ev in events):
                    if on_gone is not None:
                        on_gone()
                    os._exit(5)

        t = threading.Thread(target=watch)
        t.daemon = True
        t.start()

    def read_text(self, path, default=None):
        """File contents stripped, or `default` when absent; PermissionError propagates."""
        try:
            with open(path, "r", errors="replace") as f:
                return f.read().strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return default
        except OSError as e:
            if isinstance(e, PermissionError):
                raise
            return default


def needs_root(reason="needs root"):
    """The marker a probe stores where a field exists but is unreadable without privilege."""
    return {"unknown": reason}


def _fp_emit(out_fd, name, version, status, data, ctx, extra_errors=()):
    with _FP_LOCK:
        if _FP_DONE:
            return
        _FP_DONE.append(True)
        env = {
            "envelope_version": ENVELOPE_VERSION,
            "probe": name,
            "probe_version": version,
            "status": status,
            "data": data,
            "errors": list(ctx.errors) + list(extra_errors),
            "warnings": list(ctx.warnings),
            "duration_s": round(time.time() - _FP_T0, 4),
        }
        try:
            text = json.dumps(env, default=str, sort_keys=True)
        except (TypeError, ValueError) as e:
            env["data"] = {}
            env["status"] = "error"
            env["errors"].append("probe data not serialisable: %s" % e)
            text = json.dumps(env, default=str)
        payload = (text + "\n").encode("utf-8", "replace")
        while payload:
            n = os.write(out_fd, payload)
            payload = payload[n:]


def fp_main(name, version, collect, args, deadline_s, announce=False):
    # Keep library noise (NVML, CUDA, warnings) off the envelope: fd 1 becomes stderr for the
    # probe's lifetime and the envelope goes to a private duplicate of the real stdout.
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if announce:
        payload = _FP_START_MARK
        while payload:
            payload = payload[os.write(out_fd, payload):]
    ctx = ProbeContext(args, deadline_s)
    ctx.out_fd = out_fd

    def on_deadline():
        _fp_emit(out_fd, name, version, "error", ctx.partial, ctx,
                 ["probe deadline of %.1fs exceeded; partial data only" % deadline_s])
        os._exit(3)

    timer = threading.Timer(max(0.1, deadline_s), on_deadline)
    timer.daemon = True
    timer.start()
    try:
        data = collect(ctx)
        status = "error" if ctx.errors and not data else "ok"
        _fp_emit(out_fd, name, version, status, data, ctx)
    except Unsupported as e:
        _fp_emit(out_fd, name, version, "unsupported", ctx.partial, ctx, [str(e)])
    except Exception as e:  # a probe bug must still produce an envelope
        _fp_emit(out_fd, name, version, "error", ctx.partial, ctx,
                 ["%s: %s" % (type(e).__name__, e)])
    finally:
        timer.cancel()
    sys.stderr.flush()
    os._exit(0)
