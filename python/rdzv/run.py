# SPDX-License-Identifier: Apache-2.0
"""python -m rdzv.run ARGS: rdzv-agent ARGS, as ``python -m torch.distributed.run`` is torchrun.

The agent is a C program; this module finds it and becomes it (exec: same process, signals,
exit status). It looks first beside this interpreter, in the scripts directory where ``pip
install rdzv`` put it (a venv's bin/), then on PATH. RDZV_AGENT names another one.
"""

import os
import shutil
import sys
import sysconfig

__all__ = ["agent_path", "main"]


def agent_path():
    """The rdzv-agent this interpreter's installation holds, else PATH's; None when none is."""
    env = os.environ.get("RDZV_AGENT")
    if env:
        return env
    here = []
    for scheme in (None, "posix_prefix", "posix_user"):
        try:
            d = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if d and d not in here:
            here.append(d)
    here.append(os.path.dirname(sys.executable))
    for d in here:
        p = os.path.join(d, "rdzv-agent")
        if os.access(p, os.X_OK):
            return p
    return shutil.which("rdzv-agent")


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    path = agent_path()
    if not path:
        sys.stderr.write("rdzv.run: rdzv-agent not found beside %s or on PATH: install rdzv "
                         "(pip install rdzv, or the Debian package) or set RDZV_AGENT\n"
                         % sys.executable)
        return 127
    # The agent runs Python workers with $PYTHON_EXEC, else python3 from PATH: under
    # `python -m rdzv.run` they run with this interpreter, as torchrun's do.
    os.environ.setdefault("PYTHON_EXEC", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(path, [path] + args)
    except OSError as e:
        sys.stderr.write("rdzv.run: cannot run %s: %s\n" % (path, e.strerror))
        return 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
