# SPDX-License-Identifier: Apache-2.0
"""Test-only shim, installed in the Debian 13 test root by tests/torch2/make-root.sh.

Debian 13's python3-torch (2.6) is built without libuv but makes every TCPStore with
use_libuv=True by default; the c10d rendezvous backend and the agent-store path ignore
USE_LIBUV, so torchrun and rdzv-agent jobs fail there with "use_libuv was requested but PyTorch
was build without libuv support". Once torch.distributed is imported, TCPStore is replaced by a
subclass that always passes use_libuv=False (the store the other code paths make is the same
TCPStore client and server, without libuv's event loop). Nothing else changes; pip's torch has
libuv and needs none of this.
"""
import importlib.abc
import sys

_TARGET = "torch.distributed"


def _patch(dist):
    base = getattr(dist, "TCPStore", None)
    if base is None or getattr(base, "_rdzv_test_shim", False):
        return

    class TCPStore(base):
        _rdzv_test_shim = True

        def __init__(self, *args, **kwargs):
            kwargs["use_libuv"] = False
            super().__init__(*args, **kwargs)

    TCPStore.__name__ = TCPStore.__qualname__ = "TCPStore"
    for name, mod in list(sys.modules.items()):
        if (name == _TARGET or name.startswith(_TARGET + ".")) and \
                getattr(mod, "TCPStore", None) is base:
            mod.TCPStore = TCPStore


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


sys.meta_path.insert(0, _Finder())
