# SPDX-License-Identifier: Apache-2.0
"""rdzv.standby: the warm standby of ``rdzv-agent --warm-workers`` (not for scripts to import).

The agent starts one per local rank, with the interpreter and options of the workers::

    $PYTHON_EXEC -u -c 'from rdzv.standby import main; main()'

with a socket on descriptor 3, and the environment of the generation that runs. It lowers its
priority (nice 10) when it may take it back later, imports torch (PRELOAD) and waits. When the
rank starts again (a restart, or a spare placed), the agent sends it on the socket, in one
message, the descriptors of the new worker (stdout, stderr, the progress and control channels)
and, separated by NUL bytes::

    rdzv-standby 1, path|module, the working directory, the target descriptors ("1,2,3,4"),
    N, the N arguments from the script (or module) on, M, the M variables of the environment

then closes its end. The standby puts each descriptor in place, closes 3 and 4 when they are not
given (a fresh worker has neither then), writes out what it printed while waiting (torch's import
warnings), takes the working directory, the environment (os.environ replaced as a whole), its
priority back, and runs the script as ``python -u SCRIPT ARGS`` would: in the interpreter's own
``__main__``, with the same sys.argv, sys.path[0], __file__ and __loader__; a module as ``python
-u -m MODULE`` would (runpy). An uncaught exception is printed through sys.excepthook without the
standby's own frames, and the exit status is the interpreter's. The process stays the one the
agent started (its pid, process group, parent): the agent sees it as any worker. EOF with no
message (the agent gone or done with it): it exits 0.
"""

import os
import sys

PROTO = b"rdzv-standby 1"
SOCK_FD = 3
NICE = 10
# What a DDP script's start imports: torch, and under torch 2.x torch._dynamo, which
# DistributedDataParallel imports when it wraps a model (900 modules, sympy among them: 0.8-1.2 s
# a process on an idle machine).
PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo")
CAP_SYS_NICE = 23


def _can_renice(base):
    """Whether this process may go back to nice value base after raising it: CAP_SYS_NICE, or
    RLIMIT_NICE (setpriority(2))."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:") and int(line.split()[1], 16) >> CAP_SYS_NICE & 1:
                    return True
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
        return soft == resource.RLIM_INFINITY or 20 - soft <= base
    except (OSError, ValueError, ImportError, AttributeError):
        return False


def _renice(value):
    """Every thread of this process to nice value (Linux's nice is per thread)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), value)
        except OSError:
            pass


def _receive(fd):
    """The agent's message and the descriptors with it; (None, []) at EOF without one."""
    import socket
    s = socket.socket(fileno=fd)
    data, fds = [], []
    try:
        while True:
            msg, got, _, _ = socket.recv_fds(s, 1 << 16, 8)
            fds += got
            if not msg:
                break
            data.append(msg)
    finally:
        s.close()
    return (b"".join(data) or None), fds


def _parse(msg):
    f = msg.split(b"\0")
    if f[0] != PROTO or f[1] not in (b"path", b"module"):
        raise ValueError("not a standby message")
    targets = [int(t) for t in f[3].split(b",")]
    n = int(f[4])
    argv = [os.fsdecode(a) for a in f[5:5 + n]]
    m = int(f[5 + n])
    env = f[6 + n:6 + n + m]
    return f[1] == b"module", os.fsdecode(f[2]), targets, argv, env


def _strip(tb):
    """The traceback from the script's first frame on: this module's frames left out."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def _run_path(script):
    """``python -u SCRIPT``: the source compiled and run in the interpreter's own __main__."""
    import importlib.machinery
    import runpy
    path = os.path.abspath(script)
    if sys.path[:1] == [""]:  # -c put the working directory first; a script puts its own
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    if not os.path.isfile(path) or path.endswith((".pyc", ".zip")):
        runpy.run_path(path, run_name="__main__")  # a directory, a zip file, bytecode
        return
    main = sys.modules["__main__"]
    g = main.__dict__
    builtins = g.get("__builtins__")
    g.clear()
    g.update(__name__="__main__", __doc__=None, __package__=None, __spec__=None,
             __loader__=importlib.machinery.SourceFileLoader("__main__", path),
             __builtins__=builtins, __file__=path, __cached__=None, __annotations__={})
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    exec(code, g)


def _run_module(name):
    """``python -u -m MODULE``: runpy, as the interpreter does it."""
    import runpy
    if sys.path[:1] == [""]:
        sys.path[0] = os.getcwd()
    sys.argv[0] = "-m"
    run = getattr(runpy, "_run_module_as_main", None)
    if run is not None:
        run(name, True)
    else:
        runpy.run_module(name, run_name="__main__", alter_sys=True)


def _take(msg, fds, held, reserved, base, niced):
    module, cwd, targets, argv, env = _parse(msg)
    if len(targets) != len(fds):
        raise ValueError("descriptors missing")
    for fd, target in zip(fds, targets):
        os.dup2(fd, target)
        os.close(fd)
    for fd in reserved:
        if fd not in targets:
            os.close(fd)
    for src, dst in zip(held, (1, 2)):
        os.lseek(src, 0, os.SEEK_SET)
        while True:
            b = os.read(src, 1 << 16)
            if not b:
                break
            while b:
                b = b[os.write(dst, b):]
        os.close(src)
    os.chdir(cwd)
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition(b"=")
        os.environb[k] = v
    if niced:
        _renice(base)
    # The script's own import of rdzv must find the new environment (its progress channel).
    for name in [n for n in sys.modules if n == "rdzv" or n.startswith("rdzv.")]:
        del sys.modules[name]
    _hooks_again()
    sys.argv[:] = argv
    return module


def _hooks_again():
    """rdzv-agent's Python hooks (--python-hooks): their sitecustomize ran at this interpreter's
    start, without a progress channel, so it installed nothing. Installed now, as at a fresh
    worker's start: the hooks' directory, first on the worker's PYTHONPATH, is taken off it, and
    the rdzv package beside it installs rdzv._hooks."""
    parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    here = os.path.abspath(parts[0]) if parts[0] else ""
    if not here or not os.path.isfile(os.path.join(here, "sitecustomize.py")) or \
            not os.path.isfile(os.path.join(os.path.dirname(here), "_hooks.py")):
        return
    if len(parts) > 1:
        os.environ["PYTHONPATH"] = os.pathsep.join(parts[1:])
    else:
        del os.environ["PYTHONPATH"]
    sys.path.insert(0, os.path.dirname(os.path.dirname(here)))
    try:
        import rdzv._hooks
        rdzv._hooks.install()
    except Exception as e:  # noqa: BLE001 -- the worker runs on, uninstrumented
        sys.stderr.write("rdzv-agent's Python hooks: not installed: %s\n" % e)
    finally:
        del sys.path[0]


def main():
    """Wait for a rank, then run its script (see the module's documentation)."""
    import fcntl
    sock = fcntl.fcntl(SOCK_FD, fcntl.F_DUPFD_CLOEXEC, 5)  # not inherited by the script's children
    null = os.open(os.devnull, os.O_RDWR)  # close-on-exec
    reserved = (3, 4)  # the progress and control channels' places: nothing imported takes them
    for fd in reserved:
        if fd != null:
            os.dup2(null, fd, inheritable=False)
    if null not in reserved:
        os.close(null)
    held = [os.memfd_create("rdzv-standby-stdout"), os.memfd_create("rdzv-standby-stderr")]
    os.dup2(held[0], 1)  # the agent's stderr until now: not held open any longer
    os.dup2(held[1], 2)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    niced = _can_renice(base)
    if niced:
        os.setpriority(os.PRIO_PROCESS, 0, min(base + NICE, 19))
    import importlib
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001: the script says what is missing, as a fresh start
            pass
    msg, fds = _receive(sock)
    if msg is None:
        os._exit(0)
    try:
        module = _take(msg, fds, held, reserved, base, niced)
    except (OSError, ValueError, IndexError) as e:  # to the worker's stderr once in place
        os.write(2, b"rdzv.standby: cannot take the rank: %s\n" % str(e).encode())
        os._exit(70)
    target = sys.argv[0]
    try:
        if module:
            _run_module(target)
        else:
            _run_path(target)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001: printed as the interpreter prints it
        tb = _strip(e.__traceback__)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):  # the interpreter ends by SIGINT then
            import atexit
            import signal
            atexit._run_exitfuncs()
            sys.stdout.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(1) from None
