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
# The driver call a probe is in (fp_watched): a call that does not return within its share of the
# deadline is a wedged driver, not a slow host.  The watcher answers for the probe with what it has
# and the call's name and subject (nvmlDeviceGetHandleByIndex on GPU 3), instead of letting the
# deadline turn the whole probe into a timeout.
_FP_CALL_SHARE = 0.25  # of the probe's deadline a single driver call may take
_FP_CALL_MIN_S = 1.0
_FP_WATCH = {"call": None, "thread": None, "answer": None}


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


def fp_watched(name, subject, fn, *args):
    """fn(*args), a call into a driver library (NVML, CUDA) that may never return when the driver
    is wedged; `name` and `subject` ("GPU 3") say which, should it hang."""
    if _FP_WATCH["answer"] is None:  # not under fp_main (a test importing the helpers): just call
        return fn(*args)
    _FP_WATCH["call"] = (name, subject, time.time())
    if _FP_WATCH["thread"] is None:
        t = threading.Thread(target=_fp_watch_loop, name="fp-call-watch")
        t.daemon = True
        _FP_WATCH["thread"] = t
        t.start()
    try:
        return fn(*args)
    finally:
        _FP_WATCH["call"] = None


def _fp_watch_loop():
    while True:
        time.sleep(0.05)
        call = _FP_WATCH["call"]
        answer = _FP_WATCH["answer"]
        if call is None or answer is None:
            continue
        name, subject, since = call
        limit = answer["limit"]
        # fire before the probe's own deadline would (a call begun late gets what is left)
        left = answer["deadline_at"] - since - 0.5
        waited = time.time() - since
        if waited >= min(limit, max(0.1, left)) and _FP_WATCH["call"] is call:
            answer["fire"]({"call": name, "subject": subject, "waited_s": round(waited, 1),
                            "limit_s": round(limit, 1)})
            return


def fp_is_digits(text):
    """Whether a text the host gave is a whole number: ASCII digits only (str.isdigit also takes
    superscripts and other digits that int() refuses)."""
    return bool(text) and all("0" <= c <= "9" for c in text)


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

    def on_hung_call(hung):
        # The probe still answers: what it gathered so far and the call that hung, status ok so the
        # controller judges it (gpu.driver.unresponsive) rather than calling the host slow.
        data = ctx.partial if isinstance(ctx.partial, dict) else {}
        data.setdefault("unresponsive", []).append(hung)
        _fp_emit(out_fd, name, version, "ok", data, ctx,
                 ["%s%s did not return within %.1fs (its share of the %.1fs deadline): the driver does not answer; "
                  "answered without it" % (hung["call"], " on " + hung["subject"] if hung["subject"] else "",
                                           hung["waited_s"], deadline_s)])
        # The hung thread may sit in the kernel (state D) and keep the process from exiting: close
        # our ends of the pipes first, so the controller sees the answer end now.
        for fd in (out_fd, 0, 1, 2):
            try:
                os.close(fd)
            except OSError:
                pass
        os._exit(0)

    _FP_WATCH["answer"] = {"limit": max(_FP_CALL_MIN_S, deadline_s * _FP_CALL_SHARE),
                           "deadline_at": _FP_T0 + deadline_s, "fire": on_hung_call}
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
