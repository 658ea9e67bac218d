/* SPDX-License-Identifier: Apache-2.0 */
/* comm-nccl.cu: the GPU collective: NCCL with a non-blocking communicator. Collectives run on
 * their own stream, ordered after the math stream's work with events, so the gradient buckets
 * are reduced while the backward pass goes on. ncclCommGetAsyncError() is polled during every
 * wait: a dead peer makes this rank abort the communicator and fail within seconds. */
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <cuda_runtime.h>
#include <nccl.h>

#include "train-cuda.h"

namespace {

struct nccl_comm {
    struct train_comm c; /* first: callers hold a pointer to it */
    ncclComm_t comm;
    cudaStream_t stream;  /* collectives */
    cudaStream_t compute; /* the math backend's */
    cudaEvent_t ev_compute, ev_comm;
    float *scratch;       /* barrier */
    uint64_t timeout_ms;
    int failed;
    bool aborted;
    int interrupted; /* set by nc_interrupt() from another thread (atomic builtins) */
};

nccl_comm *to_nccl(struct train_comm *c)
{
    return reinterpret_cast<nccl_comm *>(c);
}

uint64_t now_ms()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void nap()
{
    struct timespec ts = {0, 200 * 1000};

    nanosleep(&ts, nullptr);
}

void do_abort(nccl_comm *n)
{
    if (n->comm && !n->aborted) {
        n->aborted = true;
        ncclCommAbort(n->comm);
    }
}

int fail(nccl_comm *n, int r, const char *fmt, const char *detail)
{
    if (!n->failed) {
        snprintf(n->c.err, sizeof(n->c.err), fmt, detail);
        n->failed = r;
    }
    do_abort(n);
    return n->failed;
}

/* The communicator's state: 0 when idle and healthy, 1 while an operation is still being
 * enqueued (non-blocking mode), or the failure (communicator aborted). */
int nccl_state(nccl_comm *n)
{
    ncclResult_t st = ncclSuccess;

    if (n->failed)
        return n->failed;
    /* Every wait of this file polls here, so a new generation (recovery in place) ends the
     * collective in progress within one nap: aborted on this thread, which owns the
     * communicator (an ncclCommAbort from the watcher thread would free it under our feet). */
    if (__atomic_load_n(&n->interrupted, __ATOMIC_ACQUIRE))
        return fail(n, -ECONNABORTED, "%s", "interrupted: the agent started a new generation "
                    "(recovery in place)");
    ncclResult_t r = ncclCommGetAsyncError(n->comm, &st);
    if (r != ncclSuccess)
        return fail(n, -EIO, "ncclCommGetAsyncError: %s", ncclGetErrorString(r));
    if (st == ncclInProgress)
        return 1;
    if (st != ncclSuccess)
        return fail(n, -ECONNABORTED, "NCCL reported an error (a peer exited or the network "
                    "failed): %s", ncclGetLastError(n->comm));
    return 0;
}

/* After a non-blocking NCCL call: wait until it is enqueued (or failed, or timed out). */
int settle(nccl_comm *n, ncclResult_t r, const char *what)
{
    uint64_t start = now_ms();
    int s;

    if (r != ncclSuccess && r != ncclInProgress)
        return fail(n, -EIO, "%s failed", what);
    while ((s = nccl_state(n)) == 1) {
        if (now_ms() - start > n->timeout_ms)
            return fail(n, -ETIMEDOUT, "%s did not complete in time (is every rank running?)",
                        what);
        nap();
    }
    return s;
}

/* Wait (polling) until everything queued on the collective stream is done. */
int drain(nccl_comm *n)
{
    uint64_t start = now_ms();
    int r;

    if (cudaEventRecord(n->ev_comm, n->stream) != cudaSuccess)
        return fail(n, -EIO, "cudaEventRecord: %s", cudaGetErrorString(cudaGetLastError()));
    for (;;) {
        cudaError_t e = cudaEventQuery(n->ev_comm);

        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return fail(n, -EIO, "collective stream: %s", cudaGetErrorString(e));
        if ((r = nccl_state(n)) < 0)
            return r;
        if (now_ms() - start > n->timeout_ms)
            return fail(n, -ETIMEDOUT, "a collective did not finish in time (%s)",
                        "a peer is stuck or gone");
        nap();
    }
}

/* Collective work queued next starts after the math work queued so far. */
int after_compute(nccl_comm *n)
{
    if (cudaEventRecord(n->ev_compute, n->compute) != cudaSuccess ||
        cudaStreamWaitEvent(n->stream, n->ev_compute, 0) != cudaSuccess)
        return fail(n, -EIO, "stream ordering: %s", cudaGetErrorString(cudaGetLastError()));
    return 0;
}

int nc_broadcast(struct train_comm *c, void *buf, size_t bytes, unsigned root)
{
    nccl_comm *n = to_nccl(c);
    int r = n->failed ? n->failed : after_compute(n);

    if (r == 0)
        r = settle(n, ncclBroadcast(buf, buf, bytes, ncclUint8, (int)root, n->comm, n->stream),
                   "ncclBroadcast");
    if (r == 0)
        r = drain(n);
    return r;
}

int nc_allreduce_mean(struct train_comm *c, float *buf, size_t count)
{
    nccl_comm *n = to_nccl(c);
    int r = n->failed ? n->failed : after_compute(n);

    if (r == 0)
        r = settle(n, ncclAllReduce(buf, buf, count, ncclFloat32, ncclAvg, n->comm, n->stream),
                   "ncclAllReduce");
    return r;
}

int nc_wait(struct train_comm *c)
{
    nccl_comm *n = to_nccl(c);

    if (n->failed)
        return n->failed;
    if (cudaEventRecord(n->ev_comm, n->stream) != cudaSuccess ||
        cudaStreamWaitEvent(n->compute, n->ev_comm, 0) != cudaSuccess)
        return fail(n, -EIO, "stream ordering: %s", cudaGetErrorString(cudaGetLastError()));
    return 0;
}

int nc_poll(void *c)
{
    int r = nccl_state(to_nccl(static_cast<struct train_comm *>(c)));

    return r < 0 ? r : 0;
}

int nc_barrier(struct train_comm *c)
{
    nccl_comm *n = to_nccl(c);
    int r = nc_allreduce_mean(c, n->scratch, 1);

    return r < 0 ? r : drain(n);
}

void nc_abort(struct train_comm *c)
{
    do_abort(to_nccl(c));
}

/* From the control watcher's thread (train-control.h): the training thread's next poll aborts
 * the communicator (nccl_state). Only an atomic store here. */
void nc_interrupt(struct train_comm *c)
{
    __atomic_store_n(&to_nccl(c)->interrupted, 1, __ATOMIC_RELEASE);
}

void nc_destroy(struct train_comm *c)
{
    nccl_comm *n = to_nccl(c);

    if (n->comm && !n->aborted) {
        /* Finalize flushes outstanding work; on any trouble fall back to abort. */
        if (settle(n, ncclCommFinalize(n->comm), "ncclCommFinalize") == 0)
            ncclCommDestroy(n->comm);
        else
            do_abort(n);
    }
    cudaFree(n->scratch);
    if (n->ev_compute)
        cudaEventDestroy(n->ev_compute);
    if (n->ev_comm)
        cudaEventDestroy(n->ev_comm);
    if (n->stream)
        cudaStreamDestroy(n->stream);
    free(n);
}

int parse_id(const char *hex, ncclUniqueId *id)
{
    if (!hex || strlen(hex) != 2 * sizeof(id->internal))
        return -EINVAL;
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        int v = 0;

        for (int k = 0; k < 2; k++) {
            char ch = hex[2 * i + k];

            v <<= 4;
            if (ch >= '0' && ch <= '9')
                v |= ch - '0';
            else if (ch >= 'a' && ch <= 'f')
                v |= ch - 'a' + 10;
            else
                return -EINVAL;
        }
        id->internal[i] = (char)v;
    }
    return 0;
}

} // namespace

extern "C" int train_comm_nccl_new(const struct train_nccl_opts *o, struct train_math *m,
                                   struct train_comm **ret, char *err, size_t errlen)
{
    nccl_comm *n = static_cast<nccl_comm *>(calloc(1, sizeof(nccl_comm)));
    ncclUniqueId id;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t nr;
    int r;

    if (!n)
        return -ENOMEM;
    n->c.name = "nccl";
    n->c.rank = o->rank;
    n->c.world = o->world;
    n->c.broadcast = nc_broadcast;
    n->c.allreduce_mean = nc_allreduce_mean;
    n->c.wait = nc_wait;
    n->c.poll = nc_poll;
    n->c.barrier = nc_barrier;
    n->c.abort = nc_abort;
    n->c.interrupt = nc_interrupt;
    n->c.destroy = nc_destroy;
    n->timeout_ms = o->timeout_ms;
    n->compute = static_cast<cudaStream_t>(train_math_cuda_stream(m));

    if (parse_id(o->unique_id_hex, &id) < 0) {
        snprintf(err, errlen, "RDZV_NCCL_UNIQUE_ID must be %zu lower-case hex digits (an "
                 "ncclUniqueId)", 2 * sizeof(id.internal));
        r = -EINVAL;
        goto out_free;
    }
    if (cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&n->ev_compute, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&n->ev_comm, cudaEventDisableTiming) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void **>(&n->scratch), sizeof(float)) != cudaSuccess) {
        snprintf(err, errlen, "CUDA set-up: %s", cudaGetErrorString(cudaGetLastError()));
        r = -EIO;
        goto out_free;
    }
    cfg.blocking = 0;
    nr = ncclCommInitRankConfig(&n->comm, (int)o->world, id, (int)o->rank, &cfg);
    if (nr != ncclSuccess && nr != ncclInProgress) {
        snprintf(err, errlen, "ncclCommInitRankConfig (rank %u of %u): %s", o->rank, o->world,
                 ncclGetErrorString(nr));
        n->comm = nullptr;
        r = -EIO;
        goto out_free;
    }
    r = settle(n, ncclSuccess, "ncclCommInitRankConfig");
    if (r < 0) {
        snprintf(err, errlen, "rank %u of %u: %s", o->rank, o->world, n->c.err);
        goto out_free;
    }
    *ret = &n->c;
    return 0;

out_free:
    nc_destroy(&n->c);
    return r;
}
