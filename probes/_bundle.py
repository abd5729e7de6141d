# fleetprobe probe bundle.  When a play runs several probes on a host, the controller pipes this to
# ONE `python3 -I -S -` instead of starting an interpreter (and an sshd session) per probe.  Each
# probe still runs alone: in a forked child with its own stdout and stderr pipes, its own watchdog
# (the prelude's, armed at the child's start) and a kill from here when it overruns, so a segfault
# in ctypes NVML or a hung CUDA call costs that probe only.  Children stay in our process group, so
# whatever kills the command (sshd's signal, the local transport's group kill) kills them too.
#
# What goes to stdout is written by this process only, never by a probe:
#   FPBUNDLE 1\n
#   per probe, in order: one JSON header line, then exactly `out` bytes of the probe's stdout and
#   `err` bytes of its stderr.
# so garbage from one probe cannot corrupt another's result (orchestrator/engine/bundle.py reads it).
#
# Written out by `probe bundle` (spec "document"), the same runner prints instead ONE JSON
# document at the end: the host's identity (hostname, the scheduler's node name), the bundle's
# plan, and per probe the same header with its stdout and stderr as text.  That is what srun,
# an Ansible task or a cron job on the host keeps in a file for `probe import`.
# Python 3.6+ standard library only; nothing here writes to the host.
import json
import os
import select
import signal
import sys
import time

_FPB_CHILD = []  # pid of the probe running now: killed with us on SIGTERM/SIGHUP
_FPB_CHUNK = 65536


def _fpb_write(fd, data):
    try:
        while data:
            n = os.write(fd, data)
            data = data[n:]
    except OSError:  # our stdout closed under us: the controller gave up on this host
        os._exit(1)


def _fpb_kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _fpb_reap(pid):
    # A child stuck in the kernel (a driver call in D state) dies only when that call returns:
    # wait a little, then leave it behind rather than hold up the next probe.
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    return None


def _fpb_on_signal(signum, frame):
    for pid in _FPB_CHILD:
        _fpb_kill(pid)
    os._exit(128 + signum)


def _fpb_child(item, source, deadline_s, out_w, err_w, frames_fd):
    # In the child: become what `python3 -I -S -` fed this probe alone would be.
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        os.close(frames_fd)  # a probe can never write a frame
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (null, out_w, err_w):
            if fd > 2:
                os.close(fd)
        sys.stdout = sys.__stdout__  # now the probe's own stdout pipe, as fd 1 is
        main = type(sys)("__main__")
        sys.modules["__main__"] = main
        ns = main.__dict__
        ns["__builtins__"] = __builtins__
        code = compile(source, "<stdin>", "exec")
        exec(code, ns)
        ns["fp_main"](ns["PROBE_NAME"], ns["PROBE_VERSION"], ns["collect"], item["args"], deadline_s)
    except SystemExit as e:  # as the interpreter would end: sys.exit("why") prints why, exit 1
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            sys.stderr.write("%s\n" % (e.code,))
        _fpb_flush()
        os._exit(code)
    except BaseException:
        import traceback

        traceback.print_exc()
        _fpb_flush()
        os._exit(1)
    _fpb_flush()
    os._exit(0)


def _fpb_flush():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass


def _fpb_run_one(item, source, timeout_s, deadline_s, caps, frames_fd):
    """Run one probe in a child; returns (header, stdout bytes, stderr bytes)."""
    max_out, max_err = caps
    t0 = time.monotonic()
    fds = []
    try:
        out_r, out_w = os.pipe()
        fds += [out_r, out_w]
        err_r, err_w = os.pipe()
        fds += [err_r, err_w]
        pid = os.fork()
    except OSError as e:  # out of processes or descriptors: this probe cannot start, the next may
        for fd in fds:
            os.close(fd)
        head = {"probe": item["name"], "state": "ran", "exit": 1, "timed_out": False, "out_trunc": False,
                "err_trunc": False, "duration_s": round(time.monotonic() - t0, 4)}
        return head, b"", ("cannot start the probe on the host: %s\n" % e).encode("utf-8", "replace")
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _fpb_child(item, source, deadline_s, out_w, err_w, frames_fd)
    _FPB_CHILD.append(pid)
    os.close(out_w)
    os.close(err_w)
    out, err = bytearray(), bytearray()
    out_trunc = err_trunc = timed_out = False
    status = None
    poller = select.poll()
    poller.register(out_r, select.POLLIN)
    poller.register(err_r, select.POLLIN)
    poller.register(frames_fd, 0)  # POLLHUP/POLLERR only: the controller went away
    open_fds = {out_r, err_r}
    end = t0 + timeout_s
    gone = False
    while open_fds or status is None:
        left = end - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                if not open_fds:
                    break
        # outputs closed but the child has not exited yet: poll its status every 10 ms
        wait_ms = int(min(left, 0.01 if not open_fds else left) * 1000) + 1
        events = poller.poll(wait_ms)
        for fd, _ in events:
            if fd == frames_fd:
                gone = True
                continue
            data = os.read(fd, _FPB_CHUNK)
            if not data:
                poller.unregister(fd)
                open_fds.discard(fd)
            elif fd == out_r:
                if len(out) + len(data) > max_out:
                    out_trunc = True  # past the cap the output is unusable: stop the probe
                    break
                out += data
            elif not err_trunc:
                room = max_err - len(err)
                if len(data) > room:
                    err += data[:room]
                    err_trunc = True  # keep draining: chatter must not stop the probe
                else:
                    err += data
        if gone:
            _fpb_kill(pid)
            os._exit(1)
        if out_trunc:
            break
    if status is None:
        _fpb_kill(pid)
        status = _fpb_reap(pid)
    _FPB_CHILD.remove(pid)
    os.close(out_r)
    os.close(err_r)
    if timed_out or out_trunc or status is None:
        code = None
    elif os.WIFSIGNALED(status):
        code = -os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
    head = {"probe": item["name"], "state": "ran", "exit": code, "timed_out": timed_out,
            "out_trunc": out_trunc, "err_trunc": err_trunc, "duration_s": round(time.monotonic() - t0, 4)}
    # the controller discards truncated output unread: do not ship it
    return head, (b"" if out_trunc else bytes(out)), bytes(err)


def fp_bundle(spec, sources):
    frames_fd = os.dup(1)
    os.dup2(2, 1)  # anything of ours that prints goes to stderr, never into the frames
    sys.stdout = sys.stderr
    signal.signal(signal.SIGTERM, _fpb_on_signal)
    signal.signal(signal.SIGHUP, _fpb_on_signal)
    t0 = time.monotonic()
    for name in spec["preload"]:
        # what several probes import is loaded once, before the forks; a module this Python lacks
        # is left for the probe that needs it to report
        try:
            __import__(name)
        except Exception:
            pass
    caps = (spec["max_output"], spec["max_stderr"])
    document = spec.get("document")
    answers = []
    if document is None:
        _fpb_write(frames_fd, b"FPBUNDLE 1\n")
    for item, source in zip(spec["probes"], sources):
        left = spec["budget_s"] - (time.monotonic() - t0)
        if left <= 0:
            head, out, err = {"probe": item["name"], "state": "not_started"}, b"", b""
        else:
            timeout_s = min(item["timeout_s"], left)
            deadline_s = max(1.0, timeout_s - spec["margin_s"])
            head, out, err = _fpb_run_one(item, source, timeout_s, deadline_s, caps, frames_fd)
        head["out"] = len(out)
        head["err"] = len(err)
        if document is not None:
            answers.append(_fpb_answer(head, out, err))
            continue
        line = json.dumps(head, sort_keys=True).encode("ascii") + b"\n"
        _fpb_write(frames_fd, line + out + err)
    if document is not None:
        doc = {"fleetprobe_bundle": 1, "identity": _fpb_identity(), "for_host": document.get("for_host"),
               "plan": document.get("plan"), "calls": spec["probes"], "probes": answers,
               "duration_s": round(time.monotonic() - t0, 4)}
        _fpb_write(frames_fd, json.dumps(doc).encode("ascii") + b"\n")
    os._exit(0)


# Scheduler variables naming where a task ran.  Only these fixed names are read: the rest of the
# environment (tokens, keys) never leaves the host.
_FPB_SCHEDULER_VARS = {"SLURMD_NODENAME": "node_name", "SLURM_JOB_ID": "job_id", "SLURM_STEP_ID": "step_id",
                       "SLURM_PROCID": "task_id", "SLURM_CLUSTER_NAME": "cluster"}


def _fpb_identity():
    ident = {"hostname": os.uname()[1]}
    for var, key in sorted(_FPB_SCHEDULER_VARS.items()):
        if os.environ.get(var):
            ident[key] = os.environ[var]
    if "job_id" in ident:
        ident["scheduler"] = "slurm"
    return ident


def _fpb_text(data):
    # the envelope is JSON (UTF-8); anything else travels byte for byte, as base64
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        import base64

        return {"base64": base64.b64encode(data).decode("ascii")}


def _fpb_answer(head, out, err):
    answer = dict(head)
    answer["stdout"] = _fpb_text(out)
    answer["stderr"] = _fpb_text(err)
    return answer
