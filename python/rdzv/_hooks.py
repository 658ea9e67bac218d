# SPDX-License-Identifier: Apache-2.0
"""rdzv._hooks: what rdzv-agent's instrumentation gives an unmodified Python worker.

rdzv-agent puts rdzv/hooks/ first on a Python worker's PYTHONPATH (rdzv-agent --python-hooks,
docs/guide/progress.md); its sitecustomize.py calls install(), which, with a progress channel
(RDZV_PROGRESS_FD, proto/WORKER.md):

- counts optimizer steps and writes "step N" after each: torch's global optimizer step hooks
  (torch >= 2.0), or on torch 1.13 each optimizer class's step() wrapped at its first
  instance; a step inside another's (an optimizer that wraps another) counts once. torch is
  not imported here: the hooks go in once the script imports it (a sys.meta_path finder), and
  a worker that never imports torch never loads it. A script that reports its own steps
  (rdzv.progress, rdzv.torch) is left to them;
- times each DDP model (DistributedDataParallel's methods wrapped once torch is loaded): at its
  first forward, unless it has a communication hook of its own by then (the script's; rdzv.torch's
  wrap()), it gets rdzv.torch's compute timer, whose hook is DDP's default all-reduce, timed, with
  a thread ("rdzv-compute") that waits for the all-reduces (its bucket tensors are kept until
  the process exits: a model's gradients' size for each timed model dropped before). While the
  process has one DDP model and it is timed, each "step N" carries "compute_ms M" (rdzvd's
  straggler verdicts); a hook the script registers after the first forward runs in the timer's
  place, and the steps are plain;
- writes "wait" while the training thread is blocked in a collective (rdzv._watch_waits);
- says "stacks" (importing rdzv does: faulthandler on the agent's signal);
- reports an uncaught exception before the interpreter prints it: "error TYPE: MESSAGE
  (FILE:LINE)", the innermost frame of the script's own files, through sys.excepthook (the one
  before it is called next, unchanged).
"""

import os
import sys

import rdzv as _rdzv

ERROR_MAX = 255  # bytes of an error line's text (proto/WORKER.md)
_steps = 0  # optimizer steps counted
_depth = 0  # optimizer steps under way (one inside another counts once)
_outer = None  # torch >= 2.0: the optimizer whose step is the outermost under way


def install():
    """Install the hooks (once); nothing outside rdzv-agent."""
    if _rdzv.progress_fd() is None or getattr(sys.excepthook, "_rdzv", False):
        return
    prev = sys.excepthook

    def excepthook(tp, value, tb):
        try:
            _rdzv._write(b"error " + error_text(tp, value, tb) + b"\n")
        except Exception:  # noqa: BLE001 -- the report must never hide the error itself
            pass
        prev(tp, value, tb)

    excepthook._rdzv = True
    sys.excepthook = excepthook
    if "torch" in sys.modules:
        _torch_loaded()
    else:
        sys.meta_path.insert(0, _TorchFinder())


class _TorchFinder:
    """Finds nothing itself: when torch is imported, its loader runs _torch_loaded() once
    torch's own code has run. Then it leaves sys.meta_path. A lookup that imports nothing
    (importlib.util.find_spec("torch"), as libraries do before they import torch) leaves it
    in place for the import that follows."""

    def __init__(self):
        self._busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._busy:
            return None
        import importlib.util
        self._busy = True  # the lookup below asks the finders again, this one included
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            try:
                run(module)
            finally:
                try:
                    del loader.exec_module  # the instance's: the class's method again
                except AttributeError:
                    pass
            _torch_loaded()

        loader.exec_module = exec_module
        return spec


def _torch_loaded():
    try:
        from torch.optim import optimizer
        if hasattr(optimizer, "register_optimizer_step_post_hook"):
            optimizer.register_optimizer_step_pre_hook(_pre)
            optimizer.register_optimizer_step_post_hook(_post)
        else:
            _count_each_class(optimizer.Optimizer)
    except Exception:  # noqa: BLE001 -- a torch of another shape: no steps, the script runs
        pass
    try:
        from torch.nn.parallel import DistributedDataParallel
        _time_each_ddp(DistributedDataParallel)
        if _rdzv._compute_ms is None:
            _rdzv._compute_ms = _compute_ms
    except Exception:  # noqa: BLE001 -- no compute time: plain "step N"
        pass


_seen = {}  # {DDP model: its compute timer, or None}, from its first forward (weak keys)
# Each timer's bucket tensors ({bucket index: the reducer's buffer}, as Python tensors), kept
# until the process exits, its shutdown included (see _first_forward).
_buckets = None
_own = set()  # the DDP models that registered a communication hook of their own (weak)
_timing = False  # a timer registers its hook: not the script's own
_UNSEEN = object()


def _time_each_ddp(cls):
    """Each DDP model gets rdzv.torch's compute timer (_ComputeTimer.time(): DDP's default
    all-reduce, timed) at its first forward, unless it has a communication hook of its own by
    then (the script's, or rdzv.torch's wrap()): DDP takes one, before the first backward. The
    class's methods are wrapped, so that nothing is kept in the model itself (it pickles as
    before). A hook the script registers after the first forward runs in the timer's place."""
    import functools
    import weakref
    global _seen, _own
    _seen, _own = weakref.WeakKeyDictionary(), weakref.WeakSet()
    forward, register, builtin = (cls.forward, cls.register_comm_hook,
                                  cls._register_builtin_comm_hook)

    @functools.wraps(forward)
    def timed_forward(self, *args, **kwargs):
        timer = _seen.get(self, _UNSEEN)
        if timer is _UNSEEN:
            timer = _seen[self] = _first_forward(self)
        if timer is not None:
            timer._forward(self, args)
        return forward(self, *args, **kwargs)

    @functools.wraps(register)
    def register_comm_hook(self, state, hook):
        timer = None if _timing else _seen.get(self)
        if timer is None:
            if not _timing:
                _own.add(self)
            return register(self, state, hook)
        check = getattr(self, "_check_comm_hook", None)
        if check is not None:
            check(hook)  # refused as DDP refuses it
        timer.delegate = functools.partial(hook, state)
        return None

    @functools.wraps(builtin)
    def register_builtin_comm_hook(self, comm_hook_type):
        timer = _seen.get(self)
        py = None
        if timer is not None:
            import torch.distributed as dist
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            py = {dist.BuiltinCommHookType.ALLREDUCE: default_hooks.allreduce_hook,
                  dist.BuiltinCommHookType.FP16_COMPRESS: default_hooks.fp16_compress_hook
                  }.get(comm_hook_type)
        if py is None:
            _own.add(self)
            return builtin(self, comm_hook_type)
        timer.delegate = functools.partial(py, self.process_group)
        return None

    cls.forward, cls.register_comm_hook = timed_forward, register_comm_hook
    cls._register_builtin_comm_hook = register_builtin_comm_hook


def _first_forward(ddp):
    """The model's compute timer, or None (its own hook, a reducer in Python, a failure)."""
    global _timing, _buckets
    if (ddp in _own or getattr(ddp, "reducer", None) is None or
            getattr(ddp, "_use_python_reducer", False) or
            getattr(ddp, "_delay_all_reduce_all_params", False)):
        return None
    try:
        import weakref
        from rdzv.torch import _ComputeTimer
        if _buckets is None:
            import ctypes
            kept = []
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))  # never freed (see below)
            _buckets = kept
        timer = _ComputeTimer()
        _timing = True
        try:
            timer.time(ddp)
        finally:
            _timing = False
        weakref.finalize(ddp, timer.close)  # its thread ends with the model
        # The timer's Python tensors outlive the model and its process group. Freed with the
        # model, a bucket's tensor would be left to its last all-reduce's work, which the
        # group's thread drops after the all-reduce, maybe later: that thread then takes the
        # GIL to free the tensor, while the training thread holds it, dropping the model (or
        # calling destroy_process_group()), and joins that thread: the worker never exits. At
        # the interpreter's shutdown, which frees the modules' globals, that thread would be
        # ended inside C++ (an abort): the list is never freed.
        _buckets.append(timer._buffers)
        hooks = getattr(ddp, "_comm_hooks", None)  # torch 2.x keeps them for its Python reducer
        if hooks:
            hooks.pop()  # and would pickle ours with the model
        return timer
    except Exception:  # noqa: BLE001 -- the model keeps DDP's own all-reduce
        return None


def _compute_ms():
    """The compute time of the steps since the last one, while the process has one DDP model
    (that ran a forward) and it is timed: the wait on another model's all-reduces would count
    as compute."""
    timers = list(_seen.values())
    if len(timers) != 1 or timers[0] is None or timers[0].delegate is not None:
        return None
    return timers[0].take()


def _pre(opt, args, kwargs):
    global _outer
    if _outer is None:
        _outer = opt


def _post(opt, args, kwargs):
    global _outer
    if opt is _outer:
        _outer = None
        _step_done()


def _count_each_class(base):
    """torch 1.13: each optimizer class's step() is wrapped at its first instance."""
    init = base.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _wrap_step(type(self))

    base.__init__ = __init__


def _wrap_step(cls):
    import functools
    step = cls.step
    if getattr(step, "_rdzv_counts", False):
        return

    @functools.wraps(step)
    def counted(*args, **kwargs):
        global _depth
        _depth += 1
        try:
            out = step(*args, **kwargs)
        finally:
            _depth -= 1
        if _depth == 0:
            _step_done()
        return out

    counted._rdzv_counts = True
    cls.step = counted


def _step_done():
    global _steps
    if _rdzv._script_reports:
        return
    _steps += 1
    _rdzv._write_step(_steps)
    if _steps == 1:
        import threading
        _rdzv._watch_waits(threading.get_ident())


def _library_file(path, roots):
    return (path.startswith("<") or "/site-packages/" in path or "/dist-packages/" in path or
            any(path.startswith(r) for r in roots))


def error_text(tp, value, tb):
    """The last line Python prints for the exception ("RuntimeError: boom", its message on one
    line), and the innermost frame in the script's own files (not the standard library's, not
    an installed package's), " (train.py:42)": at most ERROR_MAX bytes of UTF-8, no control
    character, the frame kept whole when the message is cut."""
    import sysconfig
    import traceback
    text = " ".join("".join(traceback.format_exception_only(tp, value)).split())
    roots = tuple(os.path.join(p, "") for p in {sysconfig.get_paths().get("stdlib", "/nonexistent"),
                                                 sysconfig.get_paths().get("platstdlib", "/x")})
    where = last = None
    while tb is not None:
        code = tb.tb_frame.f_code
        last = (code.co_filename, tb.tb_lineno)
        if not _library_file(code.co_filename, roots):
            where = last
        tb = tb.tb_next
    where = where or last
    tail = b""
    if where is not None:
        tail = (" (%s:%d)" % (os.path.basename(where[0]), where[1])).encode(
            "utf-8", "backslashreplace")[:96]
    body = text.encode("utf-8", "backslashreplace")
    body = bytes(b if b >= 0x20 and b != 0x7f else 0x20 for b in body)
    room = ERROR_MAX - len(tail)
    if len(body) > room:
        body = body[:room - 3].decode("utf-8", "ignore").encode("utf-8") + b"..."
    return body + tail
