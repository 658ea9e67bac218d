# SPDX-License-Identifier: Apache-2.0
"""rdzv: report training progress to rdzv-agent (issue 14).

rdzv-agent gives each worker a progress channel: an inherited pipe whose descriptor is in
RDZV_PROGRESS_FD. A worker that reports its step after each step lets the agent tell a hung
worker from a slow one (``rdzv-agent --progress-timeout SEC``) and show each rank's last step.
The lines follow proto/WORKER.md (the C codec is proto/rdzv-worker.h).

The one line for a PyTorch training script, after each optimizer step::

    import rdzv; rdzv.progress(step)

Outside rdzv-agent (no RDZV_PROGRESS_FD), or if the agent is gone, progress() does nothing, so
the script runs unchanged under torchrun or alone. Pure Python, no dependency: works with any
Python 3 (Debian's torch 1.13 and torch 2.x alike). Not thread-safe across a fork: call it from
the training loop.
"""

import os

__all__ = ["progress", "progress_fd"]

_UNSET = object()
_fd = _UNSET


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
    global _fd
    step = int(step)
    if step < 0:
        raise ValueError("rdzv.progress: step must be >= 0, not %d" % step)
    fd = progress_fd()
    if fd is None:
        return
    try:
        os.write(fd, b"step %d\n" % step)
    except BlockingIOError:
        pass
    except OSError:
        _fd = None
