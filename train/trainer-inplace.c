/* SPDX-License-Identifier: Apache-2.0 */
/* trainer-inplace.c: recovery in place (train/INPLACE.md): on a new generation from
 * the agent's control channel, leave the old collective, form the new one with the new rank and
 * world size, and agree on the state, a fresh replacement receiving it by broadcast. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rdzv-util.h"
#include "trainer-int.h"

/* In-place recovery (RDZV_CONTROL_FD): every rank tells whether it holds a training state and
 * at which step; the lowest rank with the highest step sends its state to all (a replacement
 * started fresh receives the model, Adam's moments and the position by broadcast, never from a
 * checkpoint). When no rank holds one (a fresh job, or every worker started again) the start is
 * the usual one: rank 0's checkpoint or a fresh init. *src: the rank that sent, or -1. */
int sync_state(struct trainer *t, bool have, int *src)
{
    const struct trainer_opts *o = t->o;
    struct train_math *m = t->m;
    size_t n = (size_t)o->world * 8;
    uint64_t best = 0, w[2];
    float *dev = NULL, *host = calloc(n, sizeof(float));
    bool with_adam = true;
    int r;

    *src = -1;
    if (!host)
        return -ENOMEM;
    r = m->alloc(m, n * sizeof(float), (void **)&dev);
    if (r < 0)
        goto out;
    /* A gather through the mean: each rank fills its own slot, the others are zero. */
    w[0] = have;
    w[1] = t->step;
    words_to_floats(w, 2, host + (size_t)o->rank * 8);
    r = m->upload(m, dev, host, n * sizeof(float));
    if (r == 0)
        r = t->comm->allreduce_mean(t->comm, dev, n);
    if (r == 0)
        r = t->comm->wait(t->comm);
    if (r == 0)
        r = m->sync(m, t->comm->poll, t->comm, o->timeout_ms);
    if (r == 0)
        r = m->download(m, host, dev, n * sizeof(float));
    if (r < 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        host[i] *= (float)o->world;
    for (unsigned k = 0; k < o->world; k++) {
        floats_to_words(host + (size_t)k * 8, 2, w);
        if (w[0] && (*src < 0 || w[1] > best)) {
            *src = (int)k;
            best = w[1];
        }
    }
    if (*src < 0)
        r = start_state(t);
    else
        r = share_state(t, (unsigned)*src, &with_adam);
out:
    if (dev)
        m->free(m, dev);
    free(host);
    return r;
}

/* The per-rank buffers for the current world size: the model's (sized for the local batch) and
 * the batch's. A model made again keeps the parameters and Adam's moments (through host
 * memory). */
static int resize_batch(struct trainer *t)
{
    const struct trainer_opts *o = t->o;
    uint64_t lb = o->batch / o->world;
    size_t bytes = t->layout.nparams * sizeof(float);
    struct train_model *nm = NULL, *md = t->model;
    float *host = NULL, **from[3], **to[3];
    int r;

    if (lb == t->local_batch)
        return 0;
    r = train_model_new(t->m, &t->layout, o->act, (int)lb, &nm);
    if (r < 0)
        return r;
    host = malloc(bytes ? bytes : 1);
    if (!host) {
        r = -ENOMEM;
        goto out;
    }
    from[0] = &md->params, from[1] = &md->mom, from[2] = &md->var;
    to[0] = &nm->params, to[1] = &nm->mom, to[2] = &nm->var;
    for (unsigned i = 0; i < 3 && r == 0; i++) {
        r = t->m->download(t->m, host, *from[i], bytes);
        if (r == 0)
            r = t->m->upload(t->m, *to[i], host, bytes);
    }
    free(host);
    if (r < 0)
        goto out;
    free(t->idx);
    free(t->xbuf);
    t->idx = malloc(lb * sizeof(*t->idx));
    t->xbuf = malloc(lb * t->data->dim * sizeof(float));
    if (!t->idx || !t->xbuf) {
        r = -ENOMEM;
        goto out;
    }
    t->local_batch = lb;
    t->model = nm;
    nm = md;
out:
    train_model_free(nm);
    return r;
}

/* In-place recovery: the step in progress failed (why) or the agent told a new generation.
 * Wait for the new generation, leave the old communicator, form the new one on the new store
 * with the new rank and world, and agree on the state (sync_state). Returns 0; -EAGAIN when the
 * new communicator failed too (wait for the next generation); another negative errno to exit. */
static int reform(struct trainer *t, const char *why)
{
    struct trainer_opts *oc = &t->oc;
    uint64_t t0 = rdzv_now_ns();
    struct rdzv_worker_gen g;
    int src = -1, r;

    r = train_control_wait(t->ctl, t->generation, oc->timeout_ms, &g);
    if (r < 0) {
        terr(t, "%s, and no new generation came from the agent (%s); exiting", why,
             r == -EPIPE ? "its control channel closed" : "timed out");
        return r;
    }
    train_control_set_comm(t->ctl, NULL);
    if (t->comm) {
        t->comm->abort(t->comm);
        t->comm = train_comm_free(t->comm);
    }
    t->gen = g;
    t->generation = g.generation;
    oc->rank = g.rank;
    oc->world = g.world;
    oc->local_rank = g.local_rank;
    oc->master_addr = t->gen.master_addr;
    oc->master_port = g.master_port;
    oc->nccl_id = t->gen.nccl_id[0] ? t->gen.nccl_id : NULL;
    oc->first_attempt = false;
    r = check_shapes(t);
    if (r == 0)
        r = resize_batch(t);
    if (r < 0)
        return r;
    r = make_comm(t);
    if (r < 0)
        return -EAGAIN;
    train_control_set_comm(t->ctl, t->comm);
    r = sync_state(t, t->state_ok, &src);
    if (r < 0) {
        terr(t, "generation %" PRIu64 ": agreeing on the state failed: %s", t->generation,
             t->comm->err[0] ? t->comm->err : strerror(-r));
        return -EAGAIN;
    }
    t->state_ok = true;
    if (oc->rank == 0) {
        fprintf(t->out,
                "{\"event\":\"reformed\",\"generation\":%" PRIu64 ",\"world\":%u,"
                "\"step\":%" PRIu64 ",\"source\":%d,\"time_s\":%.3f}\n",
                t->generation, oc->world, t->step, src, (double)(rdzv_now_ns() - t0) / 1e9);
        fflush(t->out);
    }
    return 0;
}

/* reform() until a communicator holds, or a reason to exit. */
int recover(struct trainer *t, const char *why)
{
    int r;

    train_alive_block(t->alive); /* waiting for the next generation and the others */
    r = reform(t, why);
    while (r == -EAGAIN)
        r = reform(t, "re-forming the collective failed");
    train_alive_unblock(t->alive);
    return r;
}
