# SPDX-License-Identifier: Apache-2.0
"""rdzv.torch: recovery in place for a PyTorch DDP script.

Under ``rdzv-agent --recovery inplace``, a failure (a worker killed, a hung one failed, a node
lost) moves the job to a new generation, but the healthy workers are not stopped: the agent tells
them the new generation on their control channel (RDZV_CONTROL_FD, proto/WORKER.md) and starts
only the missing ranks. With this module a plain DDP script takes part in a few lines::

    import rdzv.torch as rt

    job = rt.init("gloo")                   # in place of dist.init_process_group("gloo")
    model, opt = ..., ...
    pos = rt.Position()                     # step and epoch, kept with the model
    job.keep(model=model, optimizer=opt, position=pos)
    ddp = job.wrap(model)                   # DDP(model)
    while pos.step < total:
        try:
            job.check()                     # a new generation came: rt.Moved
            ... one step with ddp ...
            pos.step += 1
        except job.failures:                # a collective failed, or rt.Moved
            ddp = job.recover(ddp)          # outside rdzv: raises again

While the training thread is blocked in a collective (its innermost Python frame in
torch.distributed's collectives, or in autograd's backward, where DDP's all-reduce runs, and
unchanged for RDZV_PROGRESS_WAIT_MS), a thread says "wait" on the progress channel
(proto/WORKER.md), so that under --progress-timeout the rank that hangs is the one failed, not
the ranks blocked on it.

On a new generation the survivors drop the old process group (its sockets close, so a peer
blocked in a collective with them returns at once), join the new one on the store and ranks the
control channel names, agree who holds the newest state (the highest step, its lowest rank),
broadcast everything given to keep() to the others (a replacement receives it all: no
checkpoint is read), rebuild DDP and carry on from the same step. A replacement does the same in
keep(). Anything with state_dict()/load_state_dict() can be kept (a model, an optimizer, a
sampler's position, an RNG). Under --recovery restart, under torchrun and alone, init() is
init_process_group, keep() does nothing more, check() never raises, and recover() raises the
failure again: the script has no rdzv-specific branch.

Works with Debian's torch 1.13 and torch 2.x; gloo and NCCL. No monkey-patching of torch.
"""

import atexit
import datetime
import json
import os
import queue
import select
import socket
import threading
import time
import weakref

import torch
import torch.distributed as dist

import rdzv as _rdzv

__all__ = ["Job", "Moved", "Position", "init"]

RECOVER_TIMEOUT_S = 120.0  # how long recover() waits for the next generation


# What joining a process group raises when a peer is lost meanwhile or its store is gone: torch
# 2.x's DistError kinds are RuntimeErrors; torch 1.13's store gives up with TimeoutError.
_JOIN_FAILURES = (RuntimeError, TimeoutError, ConnectionError)


class Moved(Exception):
    """The job moved to a new generation while this rank was between steps."""


class Position:
    """A training position (step, epoch) that is kept and broadcast like a model."""

    def __init__(self, step=0, epoch=0):
        self.step, self.epoch = step, epoch

    def state_dict(self):
        return {"step": self.step, "epoch": self.epoch}

    def load_state_dict(self, d):
        self.step, self.epoch = int(d["step"]), int(d["epoch"])


def _env_int(name, default=0):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class Job:
    """The process group of this worker, and its control channel (see the module's text)."""

    failures = (RuntimeError, Moved)

    def __init__(self, backend=None, timeout_s=60.0):
        self.backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.generation = _env_int("RDZV_GENERATION")
        self._kept = {}
        self._have_state = False
        self._cond = threading.Condition()
        self._newest = None  # the newest generation line not applied yet (a dict)
        self._closed = False
        fd = os.environ.get("RDZV_CONTROL_FD", "")
        self._ctl = int(fd) if fd.isdigit() else None
        self._owner = threading.get_ident()  # the training thread
        if self._ctl is not None:
            # Tell the agent this rank follows the control channel (proto/WORKER.md "control"):
            # under --recovery inplace it then keeps it running to re-form; a worker that never
            # says so is restarted with its generation.
            _rdzv._write(b"control\n")
            # The lines that came while the script started (importing torch takes a second or
            # more): generation 1 may have failed meanwhile, its store is then gone.
            buf = self._take(self._pending())
            threading.Thread(target=self._watch, args=(buf,), name="rdzv-control",
                             daemon=True).start()
        _rdzv._watch_waits(self._owner)  # "wait" while it is blocked in a collective
        self._pg_sockets = {}  # the sockets the process group made: {fd: "socket:[inode]"}
        with self._cond:
            stale = self._newest is not None
        if stale:
            self._reform()  # the job moved on before this rank joined: the newest generation
            return
        try:
            self._init_process_group()
        except _JOIN_FAILURES:
            if not self.inplace:
                raise
            self._reform()  # a peer of this generation was lost meanwhile: the next one

    def _store_listens(self):
        """In place: wait until this generation's store takes a connection, or a newer generation
        is named. A store that is gone (its generation failed while this rank started) refuses
        at once, and torch's client would try it again for its whole timeout, 60 s, before this
        rank looked at the newer generation the control channel named meanwhile."""
        addr, port = os.environ.get("MASTER_ADDR"), _env_int("MASTER_PORT")
        deadline = time.monotonic() + self.timeout.total_seconds()
        while self._ctl is not None and addr and port:
            try:
                socket.create_connection((addr, port), timeout=1.0).close()
                return
            except OSError as e:
                why = e
            with self._cond:  # a new generation wakes this at once; else a retry in 0.25 s
                if self._cond.wait_for(lambda: self._newest is not None or self._closed, 0.25):
                    raise ConnectionError("rdzv.torch: generation %d's store at %s:%d is gone "
                                          "(%s); the job moved on" % (self.generation, addr,
                                                                      port, why))
            if time.monotonic() > deadline:
                raise TimeoutError("rdzv.torch: generation %d's store at %s:%d: %s" % (
                    self.generation, addr, port, why))

    def _init_process_group(self):
        """dist.init_process_group, noting the sockets it made (its store's and the backend's
        connections to the peers), which _leave() shuts down."""
        self._store_listens()
        before = _sockets()
        try:
            dist.init_process_group(self.backend, timeout=self.timeout)
        finally:
            self._pg_sockets = {fd: s for fd, s in _sockets().items() if before.get(fd) != s}

    # ---- the control channel ----

    def _pending(self):
        """The bytes already waiting on the control channel, read without blocking."""
        buf = b""
        while select.select([self._ctl], [], [], 0)[0]:
            try:
                chunk = os.read(self._ctl, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                break  # the end: _watch sees it again
            buf += chunk
        return buf

    def _take(self, buf):
        """Apply each whole line of buf; return what is left of it (a line's beginning)."""
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict) or msg.get("op") != "generation":
                continue
            with self._cond:
                gen = int(msg.get("generation", 0))
                if gen > self.generation and (self._newest is None or
                                              gen > self._newest["generation"]):
                    self._newest = msg
                    self._cond.notify_all()
        return buf

    def _watch(self, buf=b""):
        while True:
            try:
                chunk = os.read(self._ctl, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._closed = True
                    self._cond.notify_all()
                return
            buf = self._take(buf + chunk)

    def wrap(self, module, **kwargs):
        """DistributedDataParallel(module, **kwargs); recover() makes the next one the same
        way. Its communication hook (the default all-reduce, timed) gives rdzv.progress() each
        step's compute time: do not register another one."""
        from torch.nn.parallel import DistributedDataParallel
        self._ddp_kwargs = kwargs
        ddp = DistributedDataParallel(module, **kwargs)
        _ComputeTimer().attach(ddp)
        return ddp

    @property
    def inplace(self):
        """Whether this worker can recover in place (rdzv-agent --recovery inplace)."""
        return self._ctl is not None

    def check(self):
        """Raise Moved when the job moved to a newer generation than this rank's."""
        with self._cond:
            if self._newest is not None:
                raise Moved("generation %d" % self._newest["generation"])

    # ---- state ----

    def keep(self, **objs):
        """What a replacement must receive: objects with state_dict()/load_state_dict(). In
        place, a worker that joins a running job receives them now from the survivors."""
        self._kept.update(objs)
        if self.inplace:
            self._agree()
        self._have_state = True

    def _agree(self):
        """Who holds the newest state (highest step, lowest rank) broadcasts it to the others."""
        rank, world = dist.get_rank(), dist.get_world_size()
        step = -1
        pos = self._kept.get("position")
        if self._have_state:
            step = getattr(pos, "step", 0) if pos is not None else 0
        mine = torch.tensor([step, rank], dtype=torch.int64)
        if self.backend == "nccl":
            mine = mine.cuda()
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        best = max(every, key=lambda t: (int(t[0]), -int(t[1])))
        src_step, src = int(best[0]), int(best[1])
        if src_step < 0:
            return None  # nobody holds a state: every rank starts as it is (a fresh job)
        for name in sorted(self._kept):
            obj = [self._kept[name].state_dict() if rank == src else None]
            dist.broadcast_object_list(obj, src=src)
            if rank != src:
                self._kept[name].load_state_dict(obj[0])
        if rank == 0:
            print(json.dumps({"event": "reformed", "generation": self.generation, "world": world,
                              "step": src_step, "source": src}), flush=True)
        return src

    # ---- a new generation ----

    def _leave(self):
        """Drop the process group, and shut down the sockets it made, so that every peer still
        blocked in a collective with this rank fails at once. destroy_process_group() alone may
        not close them: under torch 2.x the failed collective's work (or anything else that
        outlives the group) keeps gloo's context and its connections open, and a peer waiting
        on this rank, not on the lost one, then waits until the group's timeout."""
        try:
            dist.destroy_process_group()
        except (RuntimeError, ValueError, AssertionError):
            pass
        socks, self._pg_sockets = self._pg_sockets, {}
        _shutdown_sockets(socks)

    def _join(self, msg):
        """The process group of generation msg (a control line), on its store and ranks."""
        self.generation = int(msg["generation"])
        os.environ.update({
            "RANK": str(msg["rank"]), "WORLD_SIZE": str(msg["world_size"]),
            "MASTER_ADDR": str(msg["master_addr"]), "MASTER_PORT": str(msg["master_port"]),
            "RDZV_GENERATION": str(self.generation),
            "TORCHELASTIC_RESTART_COUNT": str(msg.get("restart_count", 0)),
        })
        if "local_rank" in msg:
            os.environ["LOCAL_RANK"] = str(msg["local_rank"])
        self._init_process_group()

    def recover(self, ddp=None):
        """After a failure (or Moved): re-form on the next generation and return a new DDP of
        the model ddp wrapped (None: none is made). Outside --recovery inplace, raise the failure
        again."""
        if not self.inplace:
            raise  # noqa: PLE0704 -- the failure being handled, as if not caught
        module = getattr(ddp, "module", None)
        if ddp is not None:
            # The old DDP holds the old process group: let go of it, so that its sockets close
            # and a peer still blocked in a collective with this rank returns at once.
            for attr in ("reducer", "logger", "process_group"):
                if hasattr(ddp, attr):
                    setattr(ddp, attr, None)
        self._reform(agree=True)
        if module is None:
            return None
        return self.wrap(module, **getattr(self, "_ddp_kwargs", {}))

    def _reform(self, agree=False):
        """Leave the process group, join the next generation's (and with agree, agree on the
        state): again for each generation that fails before it is formed."""
        while True:
            self._leave()
            with self._cond:
                self._cond.wait_for(lambda: self._newest is not None or self._closed,
                                    timeout=RECOVER_TIMEOUT_S)
                msg, self._newest = self._newest, None
            if msg is None:
                raise RuntimeError("rdzv.torch: no new generation came within %.0f s (the agent "
                                   "is gone, or the job ended)" % RECOVER_TIMEOUT_S)
            try:
                self._join(msg)
                if agree:
                    self._agree()
                return
            except _JOIN_FAILURES:
                continue  # another peer lost meanwhile: the next generation follows


class _ComputeTimer:
    """A step's compute time for rdzv.progress() (proto/WORKER.md): the time since
    the last report (or the first forward), less the time the backward pass waited on its
    all-reduces: from the last bucket's all-reduce started to the last one done (the earlier
    buckets' overlap the backward's compute), per backward pass, averaged over the passes.

    No Python runs on the process group's threads, and none is released there: a thread of
    this timer ("rdzv-compute") waits for each all-reduce and completes the future DDP waits
    on, and the timer holds the Python tensor of each bucket (the reducer's own buffer) while
    it lives, which must be longer than the process group's (wrap() keeps the last timer,
    rdzv._hooks every timer's tensors). Else the backend's worker thread takes the GIL after
    the all-reduce, maybe after the training thread went on: for a Python callback on the
    all-reduce's future (Future.then), or to free a bucket's Python tensor when it holds the
    last reference. A training thread that then drops the last reference to the group (DDP's
    reducer, as the script's main() returns) holds the GIL while it joins those threads, and
    the worker never exits (torch 1.13); at the interpreter's shutdown that thread is ended
    inside C++, and the process aborts ("terminate called without an active exception", torch
    2.x)."""

    # How long the exit waits for the thread to finish the all-reduce it waits for (s).
    CLOSE_WAIT_S = 5.0

    def __init__(self):
        self.t_last = None
        self.passes = 0
        self.blocked_pass = 0.0  # the last backward's wait on its all-reduces (s)
        self.hook_t = 0.0
        self._queue = queue.SimpleQueue()  # (work, bucket, future, started); None: the end
        self._buffers = {}  # {bucket index: its buffer}
        self._thread = None
        self.delegate = None

    def attach(self, ddp):
        """Time ddp for wrap(): its forward starts the first step, this timer's take() is
        rdzv.progress()'s, and the last wrap()'s timer is closed (recover() makes a new DDP)."""
        global _timer
        ddp.register_forward_pre_hook(self._forward)
        self.time(ddp)
        if _timer is not None:
            _timer.close()  # the last DDP's: its thread ends
        _rdzv._compute_ms = self.take
        _timer = self

    def time(self, ddp):
        """Register ddp's communication hook (DDP's default all-reduce: each bucket divided by
        the world size, then summed, timed) and start the thread. rdzv-agent's hooks
        (rdzv._hooks) call it for an unmodified script's DDP; a hook the script registers
        later becomes delegate (a function of the bucket), which then runs in its place."""
        pg = getattr(ddp, "process_group", None) or dist.group.WORLD
        world = dist.get_world_size(pg)

        def hook(state, bucket):
            if self.delegate is not None:
                return self.delegate(bucket)
            now = time.monotonic()
            index = bucket.index() if hasattr(bucket, "index") else bucket.get_index()
            buf = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
            if index == 0:
                self.passes += 1
            self.hook_t = now
            self._buffers[index] = buf
            work = dist.all_reduce(buf.div_(world), group=pg, async_op=True)
            fut = torch.futures.Future(devices=[buf.device] if buf.is_cuda else None)
            self._queue.put((work, buf, fut, now))
            return fut

        self._thread = threading.Thread(target=self._wait, name="rdzv-compute", daemon=True)
        self._thread.start()
        _started.add(self)
        try:
            ddp.register_comm_hook(None, hook)
        except BaseException:
            self.close()
            raise

    def _wait(self):
        """The thread: each all-reduce in turn, its future completed with the reduced bucket
        (or the all-reduce's error, which DDP raises in the training thread)."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, buf, fut, started = item
            item = None
            try:
                work.wait()
                if buf.is_cuda:  # (NCCL: wait() only orders this thread's stream)
                    torch.cuda.current_stream(buf.device).synchronize()
            except Exception as e:  # noqa: BLE001 -- whatever failed the all-reduce
                fut.set_exception(e)
            else:
                if started == self.hook_t:  # the last bucket so far: the backward waits for it
                    self.blocked_pass = max(0.0, time.monotonic() - started)
                fut.set_result(buf)
            del work, buf, fut

    def close(self, wait_s=0.0):
        """End the thread once it finished what it waits for; wait up to wait_s for that."""
        self._queue.put(None)
        if self._thread is not None and wait_s > 0:
            self._thread.join(wait_s)

    def _forward(self, module, args):
        if self.t_last is None:
            self.t_last = time.monotonic()

    def take(self):
        now = time.monotonic()
        if self.t_last is None or self.passes == 0:
            return None
        ms = ((now - self.t_last) / self.passes - self.blocked_pass) * 1000
        self.t_last, self.passes, self.blocked_pass = now, 0, 0.0
        return max(0, int(ms))


_timer = None  # the compute timer of the newest wrap()
_started = weakref.WeakSet()  # every timer whose thread may still run (wrap()'s, the hooks')


@atexit.register
def _close_timer():
    """At exit, before the interpreter's shutdown: each timer's thread leaves the all-reduce it
    may be in (its C++ frames), so that the shutdown never ends it there."""
    for t in list(_started):
        t.close(_ComputeTimer.CLOSE_WAIT_S)


def _sockets():
    """This process's sockets: {fd: "socket:[inode]"} (Linux's /proc; {} elsewhere)."""
    out = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        try:
            link = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if link.startswith("socket:["):
            out[int(name)] = link
    return out


def _shutdown_sockets(socks):
    """shutdown(SHUT_RDWR) each connected socket of socks ({fd: "socket:[inode]"}) that this
    process still holds under that descriptor (a descriptor closed and reused since is left
    alone; a listening socket too). The
    descriptors stay open: whoever owns them closes them; their peers see the end at once."""
    import socket

    for fd, link in socks.items():
        try:
            if os.readlink("/proc/self/fd/%d" % fd) != link:
                continue
            dup = os.dup(fd)
        except OSError:
            continue
        try:
            if "socket:[%d]" % os.fstat(dup).st_ino == link:
                s = socket.socket(fileno=dup)
                dup = None
                try:
                    # Not a listening socket: gloo's listener aborts the process on an error.
                    if not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                        s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                finally:
                    s.close()
        except OSError:
            pass
        finally:
            if dup is not None:
                os.close(dup)


def init(backend=None, timeout_s=60.0):
    """dist.init_process_group(backend) from the environment rdzv-agent (or torchrun) gives,
    and, under rdzv-agent --recovery inplace, the control channel. Returns the Job."""
    return Job(backend, timeout_s)
