# SPDX-License-Identifier: Apache-2.0
"""rdzv: report training progress to rdzv-agent.

rdzv-agent gives each worker a progress channel: an inherited pipe whose descriptor is in
RDZV_PROGRESS_FD. A worker that reports its step after each step lets the agent tell a hung
worker from a slow one (``rdzv-agent --progress-timeout SEC``) and show each rank's last step.
The lines follow proto/WORKER.md (the C codec is proto/rdzv-worker.h).

The one line for a PyTorch training script, after each optimizer step::

    import rdzv; rdzv.progress(step)

Importing the module also lets the agent see where a hung worker is stuck: when the
agent names a file and a signal (RDZV_STACKS_FILE, RDZV_STACKS_SIGNAL: a real-time signal, never
SIGUSR1/SIGUSR2, which Slurm uses), ``faulthandler`` dumps every thread's stack into that file on
that signal, and the agent is told so ("stacks" on the progress channel). Before it kills a worker
that made no progress for --progress-timeout, the agent asks for the dump, logs it, and names the
innermost frame of the main thread in the job's root cause.

Outside rdzv-agent (no RDZV_PROGRESS_FD), or if the agent is gone, progress() does nothing, so
the script runs unchanged under torchrun or alone. Pure Python, no dependency: works with any
Python 3 (Debian's torch 1.13 and torch 2.x alike). Not thread-safe across a fork: call it from
the training loop.
"""

import os

__all__ = ["progress", "progress_fd", "slow"]

_UNSET = object()
_fd = _UNSET
_stacks_file = None  # kept open: faulthandler writes into it from its signal handler
_stacks_signum = None  # the signal it is registered on


def progress_fd():
    """The progress channel's descriptor (int), or None outside rdzv-agent."""
    global _fd
    if _fd is _UNSET:
        _fd = None
        s = os.environ.get("RDZV_PROGRESS_FD", "")
        if s.isdigit() and int(s) > 2:
            try:
                os.fstat(int(s))
                _fd = int(s)
            except OSError:
                pass
    return _fd


def progress(step):
    """Report that training step ``step`` (a whole number >= 0) is done.

    One write of ``b"step N\\n"`` (atomic on the pipe); never blocks for long, never raises
    for a closed channel: after an error the channel is dropped and later calls do nothing.
    """
    global _script_reports
    step = int(step)
    if step < 0:
        raise ValueError("rdzv.progress: step must be >= 0, not %d" % step)
    _script_reports = True
    _write_step(step)


def _write_step(step):
    """"step N", with the compute time of the steps since the last one when it is known."""
    ms = _compute_ms() if _compute_ms is not None else None
    if ms is None:
        _write(b"step %d\n" % step)
    else:
        _write(b"step %d compute_ms %d\n" % (step, min(max(int(ms), 0), COMPUTE_MS_MAX)))


# The most a step's compute time may be (proto/WORKER.md), in ms.
COMPUTE_MS_MAX = 3600000
# Set by rdzv.torch's wrap(), or by rdzv-agent's hooks (rdzv._hooks) once torch is loaded: the
# compute time (ms) of the steps since the last report, or None.
_compute_ms = None
# The script reports its own steps (it called progress()): rdzv-agent's hooks (rdzv._hooks,
# which count optimizer steps in a script that does not) then write none.
_script_reports = False


def _write(line):
    """One line on the channel, in one write; dropped (the channel too, on an error) quietly."""
    global _fd
    fd = progress_fd()
    if fd is None:
        return
    try:
        os.write(fd, line)
    except BlockingIOError:
        pass
    except OSError:
        _fd = None


def slow(seconds):
    """Say that the step under way may take up to ``seconds`` (an evaluation, a checkpoint), so
    that the agent's --progress-timeout (``auto`` included) does not take it for a hang; the
    next progress() ends it. Rounded up to whole seconds, 1 to a week. Does nothing outside
    rdzv-agent."""
    n = int(-(-float(seconds) // 1))
    _write(b"slow %d\n" % min(max(n, 1), 604800))


# A training thread whose innermost Python frame is in one of these is blocked on its peers:
# torch.distributed's collectives, or autograd's backward, where DDP's all-reduce runs.
_COLLECTIVE_FILES = ("torch/distributed/distributed_c10d.py", "torch/autograd/__init__.py",
                     "torch/autograd/graph.py")
_waits = False  # the "wait" thread runs


def _watch_waits(owner):
    """Say "wait" every RDZV_PROGRESS_WAIT_MS while the thread owner (the training thread) has
    been blocked that long in a collective (its innermost Python frame in _COLLECTIVE_FILES,
    unchanged), from a daemon thread started once per process (rdzv.torch's Job and
    rdzv-agent's hooks share it). Nothing without the variable (no --progress-timeout)."""
    global _waits
    ms = os.environ.get("RDZV_PROGRESS_WAIT_MS", "")
    if _waits or not ms.isdigit() or int(ms) <= 0 or progress_fd() is None:
        return
    _waits = True
    import threading
    threading.Thread(target=_alive, args=(owner, int(ms) / 1000), name="rdzv-alive",
                     daemon=True).start()


def _alive(owner, period):
    import sys
    import time
    last = None
    while True:
        time.sleep(period)
        frame = sys._current_frames().get(owner)
        if frame is None:
            return
        here = (id(frame), frame.f_lasti, frame.f_code.co_filename)
        if here[2].endswith(_COLLECTIVE_FILES) and here == last:
            _write(b"wait\n")
        last = here
        del frame


def _register_stacks():
    """Dump every thread's stack into RDZV_STACKS_FILE on RDZV_STACKS_SIGNAL, and say so."""
    global _stacks_file, _stacks_signum
    path = os.environ.get("RDZV_STACKS_FILE", "")
    sig = os.environ.get("RDZV_STACKS_SIGNAL", "")
    fd = progress_fd()
    if not path or not sig.isdigit() or fd is None or _stacks_file is not None:
        return
    try:
        import faulthandler
        import signal
        signum = int(sig)
        if signum in (signal.SIGUSR1, signal.SIGUSR2) or not (
                signal.SIGRTMIN <= signum <= signal.SIGRTMAX):
            return
        f = open(path, "a")
        faulthandler.register(signum, file=f, all_threads=True, chain=False)
        _stacks_file, _stacks_signum = f, signum
        os.write(fd, b"stacks\n")
    except (OSError, ValueError, RuntimeError, ImportError):
        pass


def _exiting():
    """At exit (atexit, before the interpreter's shutdown, which resets signal handlers and may
    take longer than the progress timeout): say "done", so that the agent stops watching this
    worker; and ignore the stacks signal, whose default action would end the process."""
    _write(b"done\n")
    if _stacks_signum is None:
        return
    try:
        import faulthandler
        import signal
        faulthandler.unregister(_stacks_signum)
        signal.signal(_stacks_signum, signal.SIG_IGN)
    except (OSError, ValueError, RuntimeError, ImportError):
        pass


_register_stacks()
if progress_fd() is not None:
    import atexit
    atexit.register(_exiting)
