# SPDX-License-Identifier: Apache-2.0
# rdzvtest.py: shared helpers for rdzvd's integration tests: start/stop the daemon on a free
# port, a raw-socket TCPStore client that speaks each opcode numbering, bounded-time reads.
#
# Standard library only. Every wait here has a timeout; every process started is killed on
# exit (also when a test fails).

import atexit
import multiprocessing
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

SOURCE_ROOT = os.environ.get(
    "RDZV_SOURCE_ROOT",
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD_ROOT = os.environ.get("RDZV_BUILD_ROOT", os.path.join(SOURCE_ROOT, "build"))
RDZVD = os.environ.get("RDZVD") or os.path.join(BUILD_ROOT, "daemon", "rdzvd")
RDZVCTL = os.environ.get("RDZVCTL") or os.path.join(BUILD_ROOT, "ctl", "rdzvctl")
# The interpreter whose PyTorch the tests use: Debian's (1.13) unless RDZV_TEST_PYTHON names
# another (tests/gpu/gpu-check.sh runs the torchrun and DDP tests with PyTorch 2.x that way).
SYS_PYTHON = os.environ.get("RDZV_TEST_PYTHON", "/usr/bin/python3")
HOST = "127.0.0.1"

# Default time budgets (seconds).
T_START = 10.0   # daemon writes its port file
T_REPLY = 5.0    # a reply that must come
T_QUIET = 0.3    # how long "nothing arrives" is watched
T_STOP = 5.0     # daemon exits after SIGTERM

VALIDATE_MAGIC = 0x3C85F7CE
VALIDATE_BYTES = b"\x00\xce\xf7\x85\x3c"

# Opcode numbering per dialect (proto/TCPSTORE.md section 2). Written out here, independently of
# proto/rdzv-proto.c, so the tests check the daemon's tables instead of sharing them.
OPS_MODERN = {
    "VALIDATE": 0, "SET": 1, "COMPARE_SET": 2, "GET": 3, "ADD": 4, "CHECK": 5, "WAIT": 6,
    "GETNUMKEYS": 7, "DELETE_KEY": 8, "APPEND": 9, "MULTI_GET": 10, "MULTI_SET": 11,
    "CANCEL_WAIT": 12, "PING": 13, "QUEUE_PUSH": 14, "QUEUE_POP": 15, "QUEUE_LEN": 16,
    "LIST": 17,
}
OPS_V20 = {
    "SET": 0, "COMPARE_SET": 1, "GET": 2, "ADD": 3, "CHECK": 4, "WAIT": 5, "GETNUMKEYS": 6,
    "WATCH_KEY": 7, "DELETE_KEY": 8,
}
OPS_V21 = {
    "SET": 0, "COMPARE_SET": 1, "GET": 2, "ADD": 3, "CHECK": 4, "WAIT": 5, "GETNUMKEYS": 6,
    "DELETE_KEY": 7, "APPEND": 8, "MULTI_GET": 9, "MULTI_SET": 10, "CANCEL_WAIT": 11,
}
# rdzv's store fronts (agent/front/): opened by VALIDATE with FRONT_MAGIC; every reply framed.
FRONT_MAGIC = 0x467A6472
FRONT_VALIDATE_BYTES = b"\x00rdzF"
OPS_FRONT = dict({k: v for k, v in OPS_MODERN.items() if k not in ("WAIT", "CANCEL_WAIT")},
                 TAG_WAIT=18, TAG_CANCEL=19)
FRAME_REPLY, FRAME_WOKEN = 0, 1
DIALECTS = {"modern": OPS_MODERN, "2.0": OPS_V20, "2.1": OPS_V21, "front": OPS_FRONT}

CHECK_READY, CHECK_NOT_READY = 0, 1
WAIT_STOP_WAITING, WAIT_CANCELED = 0, 1


# ---------------------------------------------------------------------------------------------
# Encoding


def asan_build(build=None):
    """Whether the build under test (default RDZV_BUILD_ROOT) was made with AddressSanitizer
    (meson's build options)."""
    import json
    try:
        with open(os.path.join(build or BUILD_ROOT, "meson-info", "intro-buildoptions.json")) as f:
            opts = json.load(f)
    except (OSError, ValueError):
        return False
    return any(o.get("name") == "b_sanitize" and "address" in str(o.get("value")) for o in opts)


def u8(v):
    return struct.pack("<B", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def i64(v):
    return struct.pack("<q", v)


def s(b):
    """A length-prefixed string: u64 LE length + bytes."""
    if isinstance(b, str):
        b = b.encode()
    return u64(len(b)) + b


def keys(ks):
    """u64 count + count x string (CHECK, WAIT, MULTI_GET)."""
    return u64(len(ks)) + b"".join(s(k) for k in ks)


def enc(dialect, op, *parts):
    """One request: the op's byte in dialect + the already-encoded parts."""
    return u8(DIALECTS[dialect][op]) + b"".join(parts)


# ---------------------------------------------------------------------------------------------
# Process bookkeeping: whatever a test starts is killed at exit, whatever happens.

_live_procs = []
_exit_hooks = []


def track(proc, group=False):
    _live_procs.append((proc, group))
    return proc


def netns_bridge(sw, hosts, net):
    """Network namespaces as hosts (root): sw holds a bridge, br0; host i (hosts[i]) is joined to
    it by a veth pair, p<i>h in the host and p<i>s on the bridge, at net + str(i + 1) (/24).
    The caller deletes the namespaces (ip netns del)."""
    def ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)
    ip("netns", "add", sw)
    ip("-n", sw, "link", "add", "br0", "type", "bridge")
    ip("-n", sw, "link", "set", "br0", "up")
    for i, h in enumerate(hosts):
        ip("netns", "add", h)
        ip("link", "add", "p%dh" % i, "netns", h, "type", "veth", "peer", "name", "p%ds" % i,
           "netns", sw)
        ip("-n", h, "addr", "add", "%s%d/24" % (net, i + 1), "dev", "p%dh" % i)
        ip("-n", h, "link", "set", "p%dh" % i, "up")
        ip("-n", h, "link", "set", "lo", "up")
        ip("-n", sw, "link", "set", "p%ds" % i, "master", "br0")
        ip("-n", sw, "link", "set", "p%ds" % i, "up")


def netns_nodes(test, tag, n, net):
    """n nodes as network namespaces on one bridge (netns_bridge): <tag>-sw and <tag>-h<i>, at
    net + str(i + 1). Skips test where they cannot be made: they need root and iproute2's ip and
    tc (CI runs as root). They are deleted when test ends, also when meson times it out.
    Returns (sw, hosts)."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        test.skipTest("needs root and iproute2 (ip netns, tc): network namespaces as nodes")
    sw = tag + "-sw"
    hosts = ["%s-h%d" % (tag, i) for i in range(n)]

    def delete():
        for ns in hosts + [sw]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
    test.addCleanup(delete)
    on_exit(delete)
    netns_bridge(sw, hosts, net)
    return sw, hosts


def netns_shape(sw, hosts, i, qdisc, instead=None):
    """Node i's link (netns_nodes), both ways: its own end and the bridge's, with tc's qdisc.
    Where the kernel lacks the qdisc (netem is a module some kernels do not have), `instead` if
    given."""
    for ns, dev in ((hosts[i], "p%dh" % i), (sw, "p%ds" % i)):
        tc = ["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root"]
        r = subprocess.run(tc + qdisc, capture_output=True, text=True, timeout=10)
        if r.returncode and instead and "unknown" in r.stderr:
            print("tc: %s; %s instead" % (r.stderr.strip(), instead[0]), flush=True)
            r = subprocess.run(tc + instead, capture_output=True, text=True, timeout=10)
        if r.returncode:
            raise AssertionError("tc: " + r.stderr)


def on_exit(fn, *args):
    """Run fn(*args) when this test program ends, however it ends (also on SIGTERM from
    meson's timeout)."""
    _exit_hooks.append((fn, args))


def kill_proc(proc, group=False):
    if proc.poll() is not None:
        return
    try:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


@atexit.register
def _kill_all():
    for proc, group in _live_procs:
        kill_proc(proc, group)
    for fn, args in _exit_hooks:
        try:
            fn(*args)
        except Exception:
            pass


def _on_signal(signum, frame):
    _kill_all()
    os._exit(128 + signum)


signal.signal(signal.SIGTERM, _on_signal)
signal.signal(signal.SIGINT, _on_signal)


def ephemeral_ports():
    """The range connect() takes its local ports from (Linux's ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def fixed_port():
    """A free port for a server the test does not start with port 0 (torchrun's store, a
    TCPStore of the workers'), below the ephemeral range, as a deployment's fixed port is. A
    port the kernel gave for a moment (bind to port 0) may be some connection's local port by
    the time the server binds it, on a machine busy with other tests ("Address already in
    use")."""
    lo, _ = ephemeral_ports()
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(1024, lo - 1)
        try:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("0.0.0.0", p))
            return p
        except OSError:
            continue
    raise AssertionError("no free port below %d" % lo)


def die_with_parent(sig=signal.SIGKILL):
    """A Popen preexec_fn: if this test program dies (even by SIGKILL), the child gets sig."""
    def preexec():
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG
        except Exception:
            pass
    return preexec


# ---------------------------------------------------------------------------------------------
# The daemon



def _churn(port, n, opened, stop):
    """Keep n connections to port open, reopening each as soon as the peer closes it."""
    def one():
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect((HOST, port))
        except BlockingIOError:
            pass
        with opened.get_lock():
            opened.value += 1
        return c
    socks = [one() for _ in range(n)]
    while not stop.is_set():
        r, _, _ = select.select(socks, [], [], 0.05)
        for c in r:
            try:
                c.recv(4096)
            except OSError:
                pass
            c.close()
            socks[socks.index(c)] = one()


class ConnectionHog:
    """procs processes, each keeping n connections to port open and reopening each one as soon
    as rdzvd closes it, as fast as it can: a client without the token on the rendezvous port, or
    anyone who can reach the status page or a replica's link port. opened() counts them all."""

    def __init__(self, port, procs=6, n=200):
        ctx = multiprocessing.get_context("fork")
        self._opened = ctx.Value("q", 0)
        self._stop = ctx.Event()
        self.procs = [ctx.Process(target=_churn, args=(port, n, self._opened, self._stop),
                                  daemon=True) for _ in range(procs)]
        for p in self.procs:
            p.start()

    def opened(self):
        return self._opened.value

    def stop(self):
        self._stop.set()
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()

def proc_wchar(pid):
    """Bytes process pid has passed to write(2) and its kin so far (/proc/PID/io): what it wrote
    to files and sockets, whether or not a file kept it (compaction may shrink a journal)."""
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise AssertionError("no wchar in /proc/%d/io" % pid)


GDB_FRAME_RE = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(.*?\)(?: from (\S+))?")


def native_stacks(pid, frames=16):
    """Where each thread of process pid is, for a failure's message: gdb's backtraces (each
    frame's function, and its library when gdb knows no name) when gdb is installed, else
    each thread's kernel wait channel (/proc)."""
    gdb = shutil.which("gdb")
    out = ""
    if gdb:
        try:
            out = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex",
                                  "thread apply all bt %d" % frames], capture_output=True,
                                 text=True, timeout=60).stdout
        except subprocess.TimeoutExpired:
            out = ""
    lines = []
    for ln in out.splitlines():
        if ln.startswith("Thread "):
            lines.append(ln.split(" (", 1)[0] + ":")
        m = GDB_FRAME_RE.match(ln)
        if m:
            name, lib = m.group(1), m.group(2)
            lines.append("  " + (name if name != "??" or not lib else
                                 "?? (%s)" % os.path.basename(lib)))
    if lines:
        return "(gdb)\n" + "\n".join(lines)
    try:
        tids = sorted(os.listdir("/proc/%d/task" % pid), key=int)
    except OSError:
        return "(process %d is gone)" % pid
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                comm = f.read().strip()
            with open("/proc/%d/task/%s/wchan" % (pid, tid)) as f:
                wchan = f.read().strip()
        except OSError:
            continue
        lines.append("  thread %s (%s): %s" % (tid, comm, wchan))
    return "(/proc)\n" + "\n".join(lines)


class Daemon:
    """One rdzvd on 127.0.0.1 with a free port. stderr (the log) goes to a file that tests can
    search; stdout to another. Use as a context manager or call stop()/kill()."""

    LOG_RE = re.compile(r"^\S+ rdzvd\[(error|warn|info|debug|trace)\]: (.*)$")

    def __init__(self, *args, log_level="info", start_timeout=T_START):
        self.dir = tempfile.TemporaryDirectory(prefix="rdzvtest-")
        self.port_file = os.path.join(self.dir.name, "port")
        self.log_path = os.path.join(self.dir.name, "rdzvd.log")
        self.out_path = os.path.join(self.dir.name, "rdzvd.out")
        self.args = list(args)
        if not os.access(RDZVD, os.X_OK):
            raise AssertionError("rdzvd binary not found at %s (build first or set RDZVD)"
                                 % RDZVD)
        # RDZVTEST_RDZVD_ARGS: options every rdzvd of a test gets first (the suite runs some
        # tests again with "--accept-thread on"); the test's own come after and win.
        extra = os.environ.get("RDZVTEST_RDZVD_ARGS", "").split()
        cmd = [RDZVD, "--port", "0", "--port-file", self.port_file, "--bind", HOST,
               "-l", log_level] + extra + self.args
        self._final_log = None
        self._log = open(self.log_path, "wb")
        self._out = open(self.out_path, "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RDZVD_")}
        self.proc = track(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._out,
                                           stderr=self._log, env=env,
                                           preexec_fn=die_with_parent()))
        self.port = None
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("rdzvd exited with %s before listening; log:\n%s"
                                     % (self.proc.returncode, self.log()))
            try:
                with open(self.port_file) as f:
                    txt = f.read()
                if txt.endswith("\n"):
                    self.port = int(txt)
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.01)
        if self.port is None:
            kill_proc(self.proc)
            raise AssertionError("rdzvd wrote no port file within %.0fs; log:\n%s"
                                 % (start_timeout, self.log()))
        if not 0 < self.port < 65536:
            kill_proc(self.proc)
            raise AssertionError("bad port in port file: %r" % self.port)

    @property
    def pid(self):
        return self.proc.pid

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is None:
            self.stop()
        else:
            self.kill()
        return False

    def log(self):
        if self._final_log is not None:
            return self._final_log
        self._log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def log_lines(self, since=0):
        return self.log()[since:].splitlines()

    def mark(self):
        """A position in the log; pass it as since= to only look at later lines."""
        return len(self.log())

    def find_log(self, pattern, since=0, levels=None):
        rx = re.compile(pattern)
        for line in self.log_lines(since):
            m = self.LOG_RE.match(line)
            if not m:
                continue
            if levels and m.group(1) not in levels:
                continue
            if rx.search(m.group(2)):
                return line
        return None

    def wait_log(self, pattern, since=0, levels=None, timeout=T_REPLY):
        """Wait until a log line (at one of levels) matches pattern; return it or fail."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.find_log(pattern, since, levels)
            if line is not None:
                return line
            if time.monotonic() >= deadline:
                raise AssertionError("no rdzvd log line%s matching %r within %.1fs; log since "
                                     "mark:\n%s" % (" at " + "/".join(levels) if levels else "",
                                                     pattern, timeout,
                                                     "\n".join(self.log_lines(since))))
            time.sleep(0.02)

    def rss_kb(self):
        return self.status_kb("VmRSS")

    def status_kb(self, field):
        """A field of /proc/PID/status in KiB (VmRSS, VmHWM...)."""
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise AssertionError("no %s for rdzvd pid %d" % (field, self.pid))

    def connect(self, dialect="modern", validate=None, timeout=T_REPLY):
        return Client(self.port, dialect=dialect, validate=validate, timeout=timeout)

    def stop(self, allow_errors=(), timeout=T_STOP):
        """SIGTERM; rdzvd must exit 0 within timeout and must not have logged at error level
        (except lines matching one of allow_errors)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_proc(self.proc)
            self._close_files()
            raise AssertionError("rdzvd did not exit within %.0fs of SIGTERM; log:\n%s"
                                 % (timeout, self.log()))
        log = self.log()
        self._close_files()
        if rc != 0:
            raise AssertionError("rdzvd exited with %d after SIGTERM; log:\n%s" % (rc, log))
        bad = []
        for line in log.splitlines():
            m = self.LOG_RE.match(line)
            if m and m.group(1) == "error" and not any(re.search(p, m.group(2))
                                                       for p in allow_errors):
                bad.append(line)
        if bad:
            raise AssertionError("rdzvd logged unexpected errors:\n" + "\n".join(bad))
        return log

    def kill(self):
        kill_proc(self.proc)
        self._close_files()

    def _close_files(self):
        if self._final_log is None:
            self._final_log = self.log()
        for f in (self._log, self._out):
            if not f.closed:
                f.close()
        self.dir.cleanup()


class DaemonTestCase(unittest.TestCase):
    """A test case with helpers; self.daemon(...) starts rdzvd and registers its cleanup:
    a clean SIGTERM stop if the test passed so far, a kill otherwise."""

    def daemon(self, *args, **kw):
        d = Daemon(*args, **kw)
        self.addCleanup(self._cleanup_daemon, d)
        return d

    def daemon_without_quarantine(self, *args, **kw):
        """self.daemon(...) for tests that measure RSS: in an AddressSanitizer build freed
        memory waits in ASan's quarantine (256 MB) instead of being reused, and would count as
        growth. No effect on a plain build."""
        asan = os.environ.get("ASAN_OPTIONS", "")
        os.environ["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "quarantine_size_mb=0"
        try:
            return self.daemon(*args, **kw)
        finally:
            if asan:
                os.environ["ASAN_OPTIONS"] = asan
            else:
                del os.environ["ASAN_OPTIONS"]

    def _cleanup_daemon(self, d):
        if d.proc.poll() is None and d._final_log is None:
            d.stop()
        else:
            d.kill()

    def client(self, d, *args, **kw):
        c = d.connect(*args, **kw)
        self.addCleanup(c.close)
        return c


# ---------------------------------------------------------------------------------------------
# Raw client



def wait_until(cond, what, timeout=T_REPLY, poll=0.05):
    """Wait until cond() is true, or fail after timeout seconds with what: a string, or a
    function that gives one (the logs that explain)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= deadline:
            raise AssertionError("%s (waited %.0f s)" % (what() if callable(what) else what,
                                                         timeout))
        time.sleep(poll)


def shut(*socks, close=True):
    """Shut each socket down both ways (a relay's other thread then sees its end), and close
    it unless close is False; a socket already gone is skipped."""
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if close:
            sock.close()


def read_until_closed(sock, timeout=T_REPLY):
    """Everything sock receives until the peer closes it (EOF or reset); AssertionError when it
    is still open after timeout seconds."""
    deadline = time.monotonic() + timeout
    got = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("rdzvd did not close the connection within %.1fs (got %r)"
                                 % (timeout, got[:64]))
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return got
        if not chunk:
            return got
        got += chunk


def skip_without_ipv6(case):
    """Skip the test case when this machine has no IPv6 loopback."""
    try:
        with socket.socket(socket.AF_INET6) as t:
            t.bind(("::1", 0))
    except OSError as e:
        case.skipTest("no IPv6 loopback: %s" % e)

class Client:
    """A raw TCPStore connection. dialect picks the opcode numbering; a modern connection
    sends VALIDATE first unless validate=False."""

    def __init__(self, port, dialect="modern", validate=None, timeout=T_REPLY, nodelay=True,
                 source=None):
        """source: local address to connect from (e.g. 127.0.0.2, for address allowlists)."""
        self.dialect = dialect
        self.timeout = timeout
        self.sock = socket.create_connection((HOST, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.local_addr = self.sock.getsockname()[0]
        if nodelay:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local_port = self.sock.getsockname()[1]
        if validate is None:
            validate = dialect in ("modern", "front")
        if validate:
            self.send(FRONT_VALIDATE_BYTES if dialect == "front" else VALIDATE_BYTES)

    @property
    def peer_tag(self):
        """How rdzvd names this connection in its log."""
        return r"\(%s:%d\)" % (re.escape(self.local_addr), self.local_port)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
        return False

    # -- raw I/O --

    def send(self, data):
        self.sock.settimeout(self.timeout)
        self.sock.sendall(data)

    def req(self, op, *parts):
        self.send(enc(self.dialect, op, *parts))

    def recv_exact(self, n, timeout=None):
        """Exactly n bytes within timeout, or AssertionError."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out after %.1fs waiting for %d reply bytes (got %r)"
                                     % (timeout, n, buf[:64]))
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(buf))
            except socket.timeout:
                continue
            except ConnectionResetError:
                raise AssertionError("connection reset while waiting for %d reply bytes "
                                     "(got %r)" % (n, buf[:64]))
            if not chunk:
                raise AssertionError("connection closed while waiting for %d reply bytes "
                                     "(got %r)" % (n, buf[:64]))
            buf += chunk
        return buf

    def expect_nothing(self, timeout=T_QUIET):
        """Assert that no byte arrives (and the connection stays open) for timeout seconds."""
        r, _, _ = select.select([self.sock], [], [], timeout)
        if r:
            self.sock.settimeout(0.5)
            try:
                data = self.sock.recv(4096)
            except (ConnectionResetError, socket.timeout):
                data = None
            if data == b"" or data is None:
                raise AssertionError("connection closed where nothing was expected")
            raise AssertionError("unexpected bytes from rdzvd: %r" % data[:64])

    def assert_closed(self, timeout=T_REPLY):
        """Assert the server closes the connection (EOF or reset) within timeout, sending at most
        reply bytes for requests made before; returns whatever arrived before the close."""
        return read_until_closed(self.sock, timeout)

    def is_open(self):
        """True if the connection is neither closed nor has unexpected data pending."""
        r, _, _ = select.select([self.sock], [], [], 0)
        return not r

    # -- typed replies --

    def r_u8(self, timeout=None):
        return self.recv_exact(1, timeout)[0]

    def r_u32(self, timeout=None):
        return struct.unpack("<I", self.recv_exact(4, timeout))[0]

    def r_u64(self, timeout=None):
        return struct.unpack("<Q", self.recv_exact(8, timeout))[0]

    def r_i64(self, timeout=None):
        return struct.unpack("<q", self.recv_exact(8, timeout))[0]

    def r_str(self, timeout=None):
        n = self.r_u64(timeout)
        if n > 64 << 20:
            raise AssertionError("absurd string length in reply: %d" % n)
        return self.recv_exact(n, timeout) if n else b""

    # -- operations (send + read the reply, if any) --

    def ping(self, nonce=0x12345678):
        self.req("PING", u32(nonce))
        got = self.r_u32()
        if got != nonce:
            raise AssertionError("PING nonce %#x came back as %#x" % (nonce, got))
        return got

    def sync(self):
        """Round trip that proves no stray reply bytes preceded it."""
        if self.dialect == "modern":
            self.ping(0xA5C3_0F1E)
        else:
            self.num_keys()

    def set(self, k, v):
        self.req("SET", s(k), s(v))

    def get(self, k):
        self.req("GET", s(k))
        return self.r_str()

    def add(self, k, delta):
        self.req("ADD", s(k), i64(delta))
        return self.r_i64()

    def compare_set(self, k, expected, desired):
        self.req("COMPARE_SET", s(k), s(expected), s(desired))
        return self.r_str()

    def check(self, ks):
        self.req("CHECK", keys(ks))
        return self.r_u8()

    def wait_send(self, ks):
        self.req("WAIT", keys(ks))

    def wait(self, ks, timeout=None):
        self.wait_send(ks)
        return self.r_u8(timeout)

    def num_keys(self):
        self.req("GETNUMKEYS")
        return self.r_i64()

    def delete(self, k):
        self.req("DELETE_KEY", s(k))
        return self.r_i64()

    def append(self, k, v):
        self.req("APPEND", s(k), s(v))

    def multi_get(self, ks):
        self.req("MULTI_GET", keys(ks))
        return [self.r_str() for _ in ks]

    def multi_set(self, kvs):
        self.req("MULTI_SET", u64(len(kvs)) + b"".join(s(k) + s(v) for k, v in kvs))

    def cancel_wait(self):
        self.req("CANCEL_WAIT")
        return self.r_u8()

    def queue_push(self, k, v):
        self.req("QUEUE_PUSH", s(k), s(v))

    def queue_pop(self, k):
        self.req("QUEUE_POP", s(k))
        n = self.r_i64()
        return n, (self.r_str() if n > 0 else None)

    def queue_len(self, k):
        self.req("QUEUE_LEN", s(k))
        return self.r_i64()

    def list(self):
        self.req("LIST")
        n = self.r_i64()
        return [self.r_str() for _ in range(n)]


def fresh_client_works(testcase, d, dialect="modern"):
    """A new connection can SET and GET (the daemon is still serving)."""
    with d.connect(dialect) as c:
        key = b"alive/%d" % c.local_port
        c.set(key, b"yes")
        testcase.assertEqual(c.get(key), b"yes")
        testcase.assertEqual(c.delete(key), 1)


def skip_without_torch():
    """Exit 77 (meson: skipped) when torch can't be imported by this interpreter."""
    try:
        import torch  # noqa: F401
        import torch.distributed  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        print("SKIP: torch not importable (%s: %s)" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(77)
    if not torch.distributed.is_available():
        print("SKIP: torch.distributed not available", file=sys.stderr)
        sys.exit(77)
    print("torch %s, Python %s (%s)" % (torch.__version__, sys.version.split()[0],
                                        sys.executable), file=sys.stderr, flush=True)


def torch_major():
    """The major version of the torch this interpreter imports (1 or 2); 0 without torch."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.__version__.split(".")[0])


def main():
    """unittest.main with verbose output; exit code 1 on any failure."""
    unittest.main(verbosity=2)
