/* SPDX-License-Identifier: Apache-2.0 */
/* trainer-state.c: the trainer's state below both the training loop (trainer.c) and recovery in
 * place (trainer-inplace.c): the collective of the current rank and world, the shape checks, the
 * start (rank 0's checkpoint or a fresh init) and the sharing of one rank's state with all. It
 * calls neither of them. */
#include "trainer-int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train-ckpt.h"
#include "train-comm.h"
#include "train-data.h"
#ifdef RDZV_TRAIN_HAVE_CUDA
#include "train-cuda.h"
#endif

void terr(const struct trainer *t, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "rdzv-train: rank %u: ", t->o->rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* s as the body of a JSON string (quotes, backslashes and control characters escaped). */
static void json_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;

        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
}

/* Whole numbers travel as 16-bit pieces in floats (exact): one buffer type everywhere. */
void words_to_floats(const uint64_t *w, unsigned nw, float *f)
{
    for (unsigned i = 0; i < 4 * nw; i++)
        f[i] = (uint16_t)(w[i / 4] >> (16 * (i % 4)));
}

void floats_to_words(const float *f, unsigned nw, uint64_t *w)
{
    for (unsigned i = 0; i < nw; i++)
        w[i] = 0;
    for (unsigned i = 0; i < 4 * nw; i++)
        w[i / 4] |= (uint64_t)(uint16_t)lrintf(f[i]) << (16 * (i % 4));
}

int check_shapes(struct trainer *t)
{
    const struct trainer_opts *o = t->o;
    const struct train_layout *L = &o->layout;

    if (L->width[0] != t->data->dim || L->width[L->nlayers] != t->data->dim) {
        terr(t, "--layers must start and end with the sample size %zu for this autoencoder "
             "(got %u ... %u)", t->data->dim, L->width[0], L->width[L->nlayers]);
        return -EINVAL;
    }
    if (o->batch == 0 || o->batch % o->world != 0) {
        terr(t, "--batch-size %" PRIu64 " (global) must be a positive multiple of the world "
             "size %u: each rank takes batch/world samples", o->batch, o->world);
        return -EINVAL;
    }
    if (o->batch / o->world > (1u << 20)) {
        terr(t, "--batch-size %" PRIu64 " is too large", o->batch);
        return -EINVAL;
    }
    return 0;
}

/* The collective of the current rank and world (t->o): at the start, and again for each
 * generation of an in-place recovery. */
int make_comm(struct trainer *t)
{
    const struct trainer_opts *o = t->o;
    char err[512] = "";
    int r;

#ifdef RDZV_TRAIN_HAVE_CUDA
    if (t->nccl) {
        if (o->world == 1 && !o->nccl_id)
            return train_comm_single_new(&t->comm);
        if (!o->nccl_id) {
            terr(t, "RDZV_NCCL_UNIQUE_ID is not set: WORLD_SIZE=%u with --backend nccl needs "
                 "the NCCL id rdzv-agent gives its workers (run under rdzv-agent, or use "
                 "--backend gloo)", o->world);
            return -EINVAL;
        }
        struct train_nccl_opts no = {.rank = o->rank, .world = o->world,
                                     .unique_id_hex = o->nccl_id, .timeout_ms = o->timeout_ms};
        r = train_comm_nccl_new(&no, t->m, &t->comm, err, sizeof(err));
        if (r < 0)
            terr(t, "NCCL: %s", err);
        return r;
    }
#endif
    if (o->world == 1)
        return train_comm_single_new(&t->comm);
    if (!o->master_addr || !*o->master_addr) {
        terr(t, "MASTER_ADDR is not set: WORLD_SIZE=%u needs the job's store (run under "
             "rdzv-agent or torchrun, or set MASTER_ADDR and MASTER_PORT)", o->world);
        return -EINVAL;
    }
    struct train_gloo_opts go = {.rank = o->rank, .world = o->world,
                                 .master_addr = o->master_addr, .master_port = o->master_port,
                                 .local_addr = o->local_addr, .timeout_ms = o->timeout_ms,
                                 .cancel_fd = train_control_cancel_fd(t->ctl)};
    r = train_comm_gloo_new(&go, &t->comm, err, sizeof(err));
    if (r < 0)
        terr(t, "%s", err);
    return r;
}

/* root's position (step, epoch, offset, Adam's t) and *with_adam to every rank, then its
 * parameters, and Adam's moments when *with_adam (a resumed or running job). */
int share_state(struct trainer *t, unsigned root, bool *with_adam)
{
    struct train_model *md = t->model;
    struct train_math *m = t->m;
    size_t bytes = t->layout.nparams * sizeof(float);
    uint64_t words[5] = {t->step, t->epoch, t->offset, t->adam_t, *with_adam};
    float fl[20];
    int r;

    words_to_floats(words, 5, fl);
    r = m->upload(m, t->state, fl, sizeof(fl));
    if (r == 0)
        r = t->comm->broadcast(t->comm, t->state, sizeof(fl), root);
    if (r == 0)
        r = m->download(m, fl, t->state, sizeof(fl));
    if (r < 0)
        return r;
    floats_to_words(fl, 5, words);
    t->step = words[0];
    t->epoch = words[1];
    t->offset = words[2];
    t->adam_t = words[3];
    *with_adam = words[4] != 0;
    r = t->comm->broadcast(t->comm, md->params, bytes, root);
    if (r == 0 && *with_adam)
        r = t->comm->broadcast(t->comm, md->mom, bytes, root);
    if (r == 0 && *with_adam)
        r = t->comm->broadcast(t->comm, md->var, bytes, root);
    return r;
}

/* Rank 0 picks the start (fresh init or the newest checkpoint) and broadcasts it, so every
 * rank starts identical even when the checkpoint directory is not shared between nodes. */
int start_state(struct trainer *t)
{
    const struct trainer_opts *o = t->o;
    struct train_model *md = t->model;
    struct train_math *m = t->m;
    size_t np = t->layout.nparams, bytes = np * sizeof(float);
    struct train_ckpt ck = {0};
    char path[4096] = "";
    uint64_t pos[4] = {0};
    bool resumed = false;
    float *host = NULL;
    int r = 0;

    if (o->rank == 0) {
        host = calloc(np ? np : 1, sizeof(float));
        if (!host)
            return -ENOMEM;
        if (o->ckpt_dir) {
            unsigned skipped = 0;

            r = train_ckpt_load_latest(o->ckpt_dir, &ck, path, sizeof(path), &skipped);
            if (skipped)
                terr(t, "skipped %u invalid checkpoint file%s in %s", skipped,
                     skipped == 1 ? "" : "s", o->ckpt_dir);
            if (r == 0) {
                char want[512], got[512];

                train_layout_format(&t->layout, want, sizeof(want));
                train_layout_format(&ck.layout, got, sizeof(got));
                if (strcmp(want, got) != 0 || ck.act != o->act) {
                    terr(t, "checkpoint %s is for --layers %s --activation %s, not %s %s: use "
                         "another --ckpt-dir", path, got, train_act_name(ck.act), want,
                         train_act_name(o->act));
                    r = -EINVAL;
                    goto out;
                }
                resumed = true;
            } else if (r != -ENOENT) {
                terr(t, "cannot read checkpoints in %s: %s", o->ckpt_dir, strerror(-r));
                goto out;
            }
            r = 0;
        }
        if (resumed) {
            r = m->upload(m, md->params, ck.params, bytes);
            if (r == 0)
                r = m->upload(m, md->mom, ck.mom, bytes);
            if (r == 0)
                r = m->upload(m, md->var, ck.var, bytes);
            pos[0] = ck.step;
            pos[1] = ck.epoch;
            pos[2] = ck.offset;
            pos[3] = ck.adam_t;
        } else {
            train_layout_init_params(&t->layout, o->seed, host);
            r = m->upload(m, md->params, host, bytes);
        }
        if (r < 0)
            goto out;
    }
    if (o->rank == 0) {
        t->step = pos[0];
        t->epoch = pos[1];
        t->offset = pos[2];
        t->adam_t = pos[3];
    }
    r = share_state(t, 0, &resumed);
    if (r < 0)
        goto out_comm;
    if (t->offset >= t->data->n) {
        t->epoch++;
        t->offset = 0;
    }
    if (o->rank == 0 && resumed) {
        fprintf(t->out, "{\"event\":\"resumed\",\"step\":%" PRIu64 ",\"epoch\":%" PRIu64
                ",\"offset\":%" PRIu64 ",\"world\":%u,\"checkpoint\":\"", t->step, t->epoch,
                t->offset, o->world);
        json_str(t->out, path);
        fputs("\"}\n", t->out);
        fflush(t->out);
    }
    goto out;

out_comm:
    terr(t, "sending the initial model to every rank failed: %s",
         t->comm->err[0] ? t->comm->err : strerror(-r));
out:
    train_ckpt_release(&ck);
    free(host);
    return r;
}
