# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent's instrumentation of a Python worker (rdzv-agent --python-hooks, on by default).

rdzv-agent puts this directory first on the PYTHONPATH of a worker it runs with Python. At the
interpreter's start this file: takes the directory off sys.path and off PYTHONPATH again (the
script and the processes it starts see the paths they would have had); loads the rdzv package
beside it as `rdzv` and installs rdzv._hooks (steps, "wait", stacks, the error: see there);
then runs the sitecustomize that was importable without it, if any (found on the rest of
sys.path), as Python would have. Nothing here raises: a failure leaves the worker as it was.
"""
import os
import sys


def _rdzv_hooks():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if parts and parts[0] and os.path.abspath(parts[0]) == here:
        if len(parts) > 1:
            os.environ["PYTHONPATH"] = os.pathsep.join(parts[1:])
        else:
            del os.environ["PYTHONPATH"]
    try:
        if "rdzv" not in sys.modules:  # the package beside this directory, not another copy
            sys.path.insert(0, os.path.dirname(os.path.dirname(here)))
            try:
                import rdzv
            finally:
                del sys.path[0]
        import rdzv._hooks
        rdzv._hooks.install()
    except Exception as e:  # noqa: BLE001 -- the worker runs on, uninstrumented
        sys.stderr.write("rdzv-agent's Python hooks: not installed: %s\n" % e)
    # The sitecustomize this one stands in front of (importlib.util would cost this start 15 ms:
    # its module_from_spec is importlib._bootstrap's).
    import importlib.machinery
    from importlib._bootstrap import module_from_spec
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None and spec.loader is not None:
        mod = module_from_spec(spec)
        sys.modules["sitecustomize"] = mod  # what the import of this one returns
        spec.loader.exec_module(mod)


_rdzv_hooks()
del _rdzv_hooks
