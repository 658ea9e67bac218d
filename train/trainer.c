/* SPDX-License-Identifier: Apache-2.0 */
/* trainer.c: the training loop, shared by every backend. */
#include "trainer-int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/rdzv-util.h"
#include "../proto/rdzv-worker.h"
#include "train-ckpt.h"
#include "train-comm.h"
#include "train-control.h"
#include "train-data.h"
#include "train-plot.h"
#ifdef RDZV_TRAIN_HAVE_CUDA
#include "train-cuda.h"
#endif

#define SYNTHETIC_DEFAULT_SAMPLES 512

static int load_data(struct trainer *t)
{
    const struct trainer_opts *o = t->o;
    unsigned dim = o->layout.width[0];
    int r;

    if (strcmp(o->data, "synthetic") == 0) {
        r = train_data_synthetic(o->samples ? o->samples : SYNTHETIC_DEFAULT_SAMPLES, dim,
                                 &t->data);
        if (r < 0)
            terr(t, "cannot make %" PRIu64 " synthetic samples: %s", o->samples, strerror(-r));
        return r;
    }
    if (strncmp(o->data, "mnist:", 6) != 0) {
        terr(t, "unknown --data '%s': use 'synthetic' or 'mnist:DIR'", o->data);
        return -EINVAL;
    }
    r = train_data_mnist(o->data + 6, o->samples, &t->data);
    if (r == -ENOENT)
        terr(t, "no MNIST images in '%s': put train-images-idx3-ubyte (or .gz) from "
             "http://yann.lecun.com/exdb/mnist/ there, or use --data synthetic", o->data + 6);
    else if (r == -EBADMSG)
        terr(t, "'%s/train-images-idx3-ubyte[.gz]' is not an MNIST (IDX3) image file",
             o->data + 6);
    else if (r < 0)
        terr(t, "cannot read MNIST from '%s': %s", o->data + 6, strerror(-r));
    return r;
}

static int make_backend(struct trainer *t)
{
    const struct trainer_opts *o = t->o;
    enum train_backend be = o->backend;
    int r;

#ifdef RDZV_TRAIN_HAVE_CUDA
    char err[512] = "";
    int ndev = be == TRAIN_BACKEND_GLOO ? 0 : train_cuda_device_count(err, sizeof(err));

    if (be == TRAIN_BACKEND_AUTO)
        be = ndev > 0 ? TRAIN_BACKEND_NCCL : TRAIN_BACKEND_GLOO;
    if (be == TRAIN_BACKEND_NCCL) {
        if (ndev <= 0) {
            fprintf(stderr, "rdzv-train: --backend nccl needs a CUDA device: %s\n",
                    ndev < 0 ? err : "no CUDA device found");
            return -ENODEV;
        }
        r = train_math_cuda_new((int)(o->local_rank % (unsigned)ndev), o->precision, &t->m,
                                err, sizeof(err));
        if (r < 0) {
            terr(t, "CUDA backend: %s", err);
            return r;
        }
        t->nccl = true;
        return make_comm(t);
    }
#else
    if (be == TRAIN_BACKEND_NCCL) {
        fprintf(stderr, "rdzv-train: --backend nccl needs a CUDA device: this rdzv-train was "
                "built without the CUDA/NCCL backend (nvcc was not found at build time)\n");
        return -ENODEV;
    }
#endif
    r = train_math_cpu_new(o->precision, &t->m);
    if (r == -ENOTSUP) {
        terr(t, "--precision %s needs the GPU (nccl) backend; the CPU backend computes in fp32 "
             "(use --precision fp32)", train_precision_name(o->precision));
        return r;
    }
    if (r < 0)
        return r;
    return make_comm(t);
}

static int write_ckpt(struct trainer *t)
{
    const struct trainer_opts *o = t->o;
    struct train_model *md = t->model;
    size_t bytes = t->layout.nparams * sizeof(float);
    struct train_ckpt ck = {
        .step = t->step, .epoch = t->epoch, .offset = t->offset, .adam_t = t->adam_t,
        .seed = o->seed, .samples = t->data->n, .layout = t->layout, .act = o->act,
    };
    int r = -ENOMEM;

    ck.params = malloc(bytes ? bytes : 1);
    ck.mom = malloc(bytes ? bytes : 1);
    ck.var = malloc(bytes ? bytes : 1);
    if (!ck.params || !ck.mom || !ck.var)
        goto out;
    r = t->m->download(t->m, ck.params, md->params, bytes);
    if (r == 0)
        r = t->m->download(t->m, ck.mom, md->mom, bytes);
    if (r == 0)
        r = t->m->download(t->m, ck.var, md->var, bytes);
    if (r == 0)
        r = train_ckpt_write(o->ckpt_dir, &ck, o->ckpt_keep);
out:
    if (r < 0)
        terr(t, "writing a checkpoint to %s failed: %s", o->ckpt_dir, strerror(-r));
    train_ckpt_release(&ck);
    return r;
}

static int grads_ready(void *ud, size_t first, size_t count)
{
    struct trainer *t = ud;
    uint64_t t0 = rdzv_now_ns();
    int r;

    train_alive_block(t->alive);
    r = t->comm->allreduce_mean(t->comm, t->model->grads + first, count);
    train_alive_unblock(t->alive);
    t->comm_ns += rdzv_now_ns() - t0;
    return r;
}

static bool done(const struct trainer *t)
{
    const struct trainer_opts *o = t->o;

    return (o->steps && t->step >= o->steps) || (o->epochs && t->epoch >= o->epochs);
}

static int curve_add(struct trainer *t, double x, double y)
{
    if (t->curve_n == t->curve_cap) {
        size_t cap = t->curve_cap ? 2 * t->curve_cap : 256;
        double *nx = realloc(t->curve_x, cap * sizeof(double));

        if (!nx)
            return -ENOMEM;
        t->curve_x = nx;
        double *ny = realloc(t->curve_y, cap * sizeof(double));
        if (!ny)
            return -ENOMEM;
        t->curve_y = ny;
        t->curve_cap = cap;
    }
    t->curve_x[t->curve_n] = x;
    t->curve_y[t->curve_n++] = y;
    return 0;
}

/* One global step: this rank's shard forward and backward, gradients averaged across ranks
 * (in buckets, as the backward pass produces them), one Adam update. *ret_loss is the loss
 * averaged over ranks. */
static int train_step(struct trainer *t, float *ret_loss)
{
    const struct trainer_opts *o = t->o;
    struct train_model *md = t->model;
    struct train_math *m = t->m;
    size_t np = t->layout.nparams;
    uint64_t t0 = rdzv_now_ns(), tw;
    int r;

    t->comm_ns = 0;
    t->compute_ms = UINT64_MAX;
    if (!t->have_perm || t->perm_epoch != t->epoch) {
        train_epoch_perm(o->seed, t->epoch, t->perm, t->data->n);
        t->perm_epoch = t->epoch;
        t->have_perm = true;
    }
    train_shard(t->perm, t->data->n, t->offset, o->batch, o->rank, o->world, t->idx);
    train_data_gather(t->data, t->idx, t->local_batch, t->xbuf);
    r = m->upload(m, md->acts[0], t->xbuf, t->local_batch * t->data->dim * sizeof(float));
    if (r < 0)
        return r;
    train_model_forward(md);
    r = train_model_backward(md, o->loss, o->bucket_bytes / sizeof(float), grads_ready, t);
    if (r == 0) {
        tw = rdzv_now_ns();
        train_alive_block(t->alive); /* the gradients of every rank */
        r = t->comm->wait(t->comm);
        train_alive_unblock(t->alive);
        t->comm_ns += rdzv_now_ns() - tw;
    }
    if (r < 0)
        return r;
    t->adam_t++;
    t->state_ok = false; /* until the step is complete: a failure now leaves this state torn */
    m->adam(m, md->params, md->grads, md->mom, md->var, np, &o->adam, t->adam_t);
    train_alive_block(t->alive);
    r = m->sync(m, t->comm->poll, t->comm, o->timeout_ms);
    train_alive_unblock(t->alive);
    if (r == 0)
        r = m->download(m, ret_loss, md->grads + np, sizeof(float));
    if (r < 0)
        return r;
    tw = rdzv_now_ns() - t0;
    t->compute_ms = (tw > t->comm_ns ? tw - t->comm_ns : 0) / 1000000;
    t->step++;
    t->state_ok = true;
    t->offset += o->batch;
    if (t->offset >= t->data->n) {
        t->epoch++;
        t->offset = 0;
    }
    return 0;
}

/* One line on the progress channel, in one write; after an error other than EAGAIN/EINTR (the
 * agent is gone) the channel is dropped. */
static void progress_write(struct trainer *t, const struct rdzv_progress_line *pl)
{
    char line[RDZV_PROGRESS_LINE_MAX + 2];
    int n = rdzv_progress_format(pl, line, sizeof(line));

    if (n > 0 && write(t->progress_fd, line, (size_t)n) < 0 && errno != EAGAIN &&
        errno != EINTR) {
        terr(t, "progress channel (RDZV_PROGRESS_FD=%d): %s; no more reports", t->progress_fd,
             strerror(errno));
        t->progress_fd = -1;
    }
}

/* A line of kind with no number ("control"), when the channel is there. */
static void progress_say(struct trainer *t, enum rdzv_progress_kind kind)
{
    if (t->progress_fd >= 0)
        progress_write(t, &(struct rdzv_progress_line){.kind = kind});
}

/* Tell the agent (RDZV_PROGRESS_FD) that step t->step is done, with its compute time when it
 * was timed ("step N compute_ms M"): one write of one line, atomic on the pipe. A failed write
 * (agent gone, pipe full) is not the training's problem: after an error other than EAGAIN/EINTR the
 * channel is dropped. */
static void progress_report(struct trainer *t)
{
    struct rdzv_progress_line pl = {.kind = RDZV_PROGRESS_STEP, .step = t->step,
                                    .has_compute = t->compute_ms <= RDZV_COMPUTE_MS_MAX,
                                    .compute_ms = (uint32_t)t->compute_ms};

    if (t->progress_fd < 0 || t->step == t->progress_last)
        return;
    t->progress_last = t->step;
    progress_write(t, &pl);
}

/* Wall-clock seconds (CLOCK_REALTIME), for the "t" of each step line: comparable across
 * processes and with a harness's own time.time(), unlike rdzv_now_ns(). */
static double wall_seconds(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int run_loop(struct trainer *t, FILE *out)
{
    const struct trainer_opts *o = t->o;
    uint64_t t0 = rdzv_now_ns(), last_ns = t0, last_step = t->step, start_step = t->step;
    double first_loss = NAN, loss_d = NAN;
    int r;

    while (!done(t)) {
        float loss;

        if (t->ctl && train_control_pending(t->ctl, t->generation)) {
            r = recover(t, "a new generation came");
            if (r < 0)
                return r;
            continue;
        }
        if (o->fail_at_step && t->step + 1 == o->fail_at_step && o->rank == o->fail_rank &&
            o->first_attempt) {
            fprintf(stderr, "rdzv-train: rank %u: failing at step %" PRIu64
                    " (--fail-at-step drill, first attempt)\n", o->rank, o->fail_at_step);
            fflush(NULL);
            _exit(1);
        }
        r = train_step(t, &loss);
        if (r < 0 && t->ctl) {
            char why[640];

            snprintf(why, sizeof(why), "step %" PRIu64 " failed: %s", t->step + 1,
                     t->comm->err[0] ? t->comm->err : t->m->err[0] ? t->m->err : strerror(-r));
            terr(t, "%s; waiting for the next generation (recovery in place)", why);
            r = recover(t, why);
            if (r < 0)
                return r;
            t->compute_ms = UINT64_MAX;
            /* The state agreed on may be a step this rank had not finished (a collective that
             * completed elsewhere before the peer died): it is at that step now. */
            progress_report(t);
            continue;
        }
        if (r < 0) {
            terr(t, "step %" PRIu64 " failed: %s; exiting", t->step + 1,
                 t->comm->err[0] ? t->comm->err : t->m->err[0] ? t->m->err : strerror(-r));
            t->comm->abort(t->comm);
            return r;
        }
        progress_report(t);
        loss_d = loss;
        if (t->step == start_step + 1)
            first_loss = loss_d;
        if (o->rank != 0)
            continue;
        if (o->plot && curve_add(t, (double)t->step, loss_d) < 0)
            return -ENOMEM;
        if ((o->log_every && t->step % o->log_every == 0) || done(t)) {
            uint64_t now = rdzv_now_ns();
            double dt = (double)(now - last_ns) / 1e9;
            double sps = dt > 0 ? (double)((t->step - last_step) * o->batch) / dt : 0.0;

            fprintf(out, "{\"step\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"loss\":%.6g,"
                    "\"samples_per_s\":%.1f,\"world\":%u,\"backend\":\"%s/%s\",\"t\":%.6f}\n",
                    t->step, t->epoch, loss_d, sps, o->world, t->m->name, t->comm->name,
                    wall_seconds());
            if (fflush(out) != 0 && errno == EPIPE) {
                terr(t, "standard output closed (a reader such as head stopped reading); "
                     "exiting");
                t->comm->abort(t->comm);
                return -EPIPE;
            }
            last_ns = now;
            last_step = t->step;
        }
        if (o->ckpt_dir && o->ckpt_every && t->step % o->ckpt_every == 0) {
            r = write_ckpt(t);
            if (r < 0)
                return r;
        }
    }
    if (o->rank == 0) {
        double secs = (double)(rdzv_now_ns() - t0) / 1e9;
        uint64_t steps = t->step - start_step;

        if (o->ckpt_dir && (!o->ckpt_every || t->step % o->ckpt_every != 0) && steps > 0) {
            r = write_ckpt(t);
            if (r < 0)
                return r;
        }
        fprintf(out, "{\"event\":\"done\",\"steps\":%" PRIu64 ",\"step\":%" PRIu64
                ",\"epoch\":%" PRIu64, steps, t->step, t->epoch);
        if (steps > 0)
            fprintf(out, ",\"first_loss\":%.6g,\"final_loss\":%.6g", first_loss, loss_d);
        else
            fprintf(out, ",\"first_loss\":null,\"final_loss\":null");
        fprintf(out, ",\"time_s\":%.3f,\"samples_per_s\":%.1f,\"world\":%u,\"backend\":"
                "\"%s/%s\"}\n", secs, secs > 0 ? (double)(steps * o->batch) / secs : 0.0,
                o->world, t->m->name, t->comm->name);
        fflush(out);
        if (o->plot && t->curve_n > 0) {
            r = train_plot_png(o->plot, t->curve_x, t->curve_y, t->curve_n);
            if (r < 0) {
                terr(t, "writing the loss plot %s failed: %s", o->plot, strerror(-r));
                return r;
            }
        }
    }
    /* No rank leaves (and closes its connections) while another still needs it. */
    train_alive_block(t->alive);
    r = t->comm->barrier(t->comm);
    train_alive_unblock(t->alive);
    if (r < 0)
        terr(t, "final barrier failed: %s", t->comm->err[0] ? t->comm->err : strerror(-r));
    return r;
}

int trainer_run(const struct trainer_opts *o, FILE *out)
{
    struct trainer t = {.oc = *o, .out = out, .layout = o->layout, .progress_fd = o->progress_fd};
    bool first_failed;
    int src = -1, r;

    t.o = &t.oc;
    o = t.o;
    t.generation = o->generation;
    if (o->progress_fd >= 0 && o->progress_wait_ms) {
        r = train_alive_new(o->progress_fd, o->progress_wait_ms, &t.alive);
        if (r < 0) {
            terr(&t, "cannot start the progress thread: %s", strerror(-r));
            return r;
        }
    }
    if (o->control_fd >= 0) {
        r = train_control_start(o->control_fd, o->generation, &t.ctl);
        if (r < 0) {
            terr(&t, "cannot watch the control channel: %s", strerror(-r));
            return r;
        }
        progress_say(&t, RDZV_PROGRESS_CONTROL); /* a new generation there re-forms this rank */
    }

    r = load_data(&t);
    if (r < 0)
        return r;
    r = check_shapes(&t);
    if (r < 0)
        goto out;
    t.local_batch = o->batch / o->world;
    r = make_backend(&t);
    /* A replacement (recovery in place) whose generation moved on before it joined: its first
     * collective fails, and it waits for the next generation like the survivors do. */
    first_failed = r < 0 && t.ctl && t.m && !t.comm;
    if (r < 0 && !first_failed)
        goto out;
    r = train_model_new(t.m, &t.layout, o->act, (int)t.local_batch, &t.model);
    if (r == 0)
        r = t.m->alloc(t.m, 20 * sizeof(float), (void **)&t.state);
    if (r < 0) {
        terr(&t, "cannot allocate the model (%zu parameters, batch %" PRIu64 "): %s",
             t.layout.nparams, t.local_batch, t.m->err[0] ? t.m->err : strerror(-r));
        goto out;
    }
    t.perm = malloc(t.data->n * sizeof(*t.perm));
    t.idx = malloc(t.local_batch * sizeof(*t.idx));
    t.xbuf = malloc(t.local_batch * t.data->dim * sizeof(float));
    if (!t.perm || !t.idx || !t.xbuf) {
        r = -ENOMEM;
        terr(&t, "out of memory");
        goto out;
    }
    if (t.ctl && !first_failed)
        train_control_set_comm(t.ctl, t.comm);
    if (first_failed) {
        r = recover(&t, "forming the first collective failed");
        src = -1;
    } else {
        r = t.ctl ? sync_state(&t, false, &src) : start_state(&t);
        if (r < 0 && t.ctl)
            r = recover(&t, "agreeing on the first state failed");
    }
    if (r < 0)
        goto out;
    if (t.ctl && src >= 0 && o->rank == 0) {
        /* A replacement rank 0 (recovery in place): the state came from survivor src. */
        fprintf(out,
                "{\"event\":\"reformed\",\"generation\":%" PRIu64 ",\"world\":%u,\"step\":%" PRIu64
                ",\"source\":%d,\"replacement\":true}\n",
                t.generation, o->world, t.step, src);
        fflush(out);
    }
    t.state_ok = true;
    r = run_loop(&t, out);
out:
    if (t.ctl)
        train_control_set_comm(t.ctl, NULL);
    train_control_free(t.ctl);
    train_alive_free(t.alive);
    free(t.curve_x);
    free(t.curve_y);
    free(t.perm);
    free(t.idx);
    free(t.xbuf);
    if (t.m && t.state)
        t.m->free(t.m, t.state);
    train_model_free(t.model);
    train_comm_free(t.comm);
    train_math_free(t.m);
    train_data_free(t.data);
    return r;
}
