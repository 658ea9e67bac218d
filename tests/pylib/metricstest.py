# SPDX-License-Identifier: Apache-2.0
# metricstest.py: start rdzvd with its HTTP status server (--metrics-port) and fetch its pages.

import os
import tempfile
import time
import urllib.request


def daemon_with_metrics(testcase, *args):
    """testcase.daemon(...) with --metrics-port 0; returns (daemon, the HTTP port)."""
    pfile = os.path.join(tempfile.mkdtemp(prefix="rdzv-mport-"), "p")
    d = testcase.daemon("--metrics-port", "0", "--metrics-port-file", pfile, *args)
    deadline = time.monotonic() + 5
    while not os.path.exists(pfile) and time.monotonic() < deadline:
        time.sleep(0.02)
    with open(pfile) as f:
        return d, int(f.read())


def http_get(port, path, timeout=10):
    """The body of GET path (str); fails on any status but 200."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        assert r.status == 200, (path, r.status)
        return r.read().decode()
