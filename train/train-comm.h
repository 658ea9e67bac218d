/* SPDX-License-Identifier: Apache-2.0 */
/* train-comm.h: the collective between the ranks of a job (gloo on CPU, NCCL on GPU, or none
 * for a single process). Buffers are in the math backend's memory (train-math.h). */
#pragma once
#include <stddef.h>
#include <stdint.h>

struct train_comm {
    const char *name;
    unsigned rank, world;
    /* Synchronous broadcast of n bytes from root to every rank. Returns 0 or a negative errno
     * (err says why). */
    int (*broadcast)(struct train_comm *c, void *buf, size_t n, unsigned root);
    /* buf[0..n) = the mean over ranks of buf[0..n). Ordered after the math work queued before
     * the call; may return before it is done (see wait). Returns 0 or a negative errno. */
    int (*allreduce_mean)(struct train_comm *c, float *buf, size_t n);
    /* Math work queued after this call sees the results of every allreduce_mean before it. */
    int (*wait)(struct train_comm *c);
    /* Returns 0 while the collective is healthy, else a negative errno (a peer died, a
     * timeout): a train_poll_fn for train_math.sync(). */
    int (*poll)(void *c);
    /* Every rank has reached this point. */
    int (*barrier)(struct train_comm *c);
    /* Give up on pending collectives so that the process can exit (no further calls). */
    void (*abort)(struct train_comm *c);
    /* NULL, or: called from another thread (train-control.h's watcher, under its mutex) to make
     * a collective blocked on a dead peer fail now. NCCL: an atomic flag that the training
     * thread's polling waits see within one nap, which then ncclCommAbort the communicator on
     * that thread (every NCCL wait here is a poll loop; an abort from the watcher would free the
     * communicator while the training thread polls it). The training thread then sees errors
     * and destroys the communicator. gloo: every pair is failed with an exception (gloo wakes
     * the pending sends and receives with it); a dead peer's closed sockets alone do not free a
     * rank waiting on a live peer that waits elsewhere in the broken ring. */
    void (*interrupt)(struct train_comm *c);
    void (*destroy)(struct train_comm *c);
    char err[512]; /* one line: what failed, for the exit message */
};

static inline struct train_comm *train_comm_free(struct train_comm *c)
{
    if (c)
        c->destroy(c);
    return NULL;
}

/* A world of one: every collective is a no-op. */
int train_comm_single_new(struct train_comm **ret);

/* Options for the gloo collective. */
struct train_gloo_opts {
    unsigned rank, world;
    const char *master_addr; /* the job's TCPStore */
    uint16_t master_port;
    const char *local_addr;  /* address to listen on; NULL: the one that routes to master */
    uint64_t timeout_ms;     /* store waits, connection set-up, and each collective */
    int cancel_fd;           /* -1, or readable: abandon the store (a new generation came) */
};

/* gloo over TCP, rendezvousing through the TCPStore at master_addr:master_port (keys under
 * "rdzv-train/<attempt>/"). Buffers are host memory. Returns 0, -ENOTSUP when this build has no
 * gloo, or a negative errno with *err_out filled (one line). */
int train_comm_gloo_new(const struct train_gloo_opts *o, struct train_comm **ret, char *err_out,
                        size_t errlen);

/* The address of the local interface that routes to host:port (UDP connect + getsockname).
 * Returns 0 or a negative errno. */
int train_local_addr_for(const char *host, uint16_t port, char *buf, size_t len);
