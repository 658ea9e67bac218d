/* SPDX-License-Identifier: Apache-2.0 */
/* trainer-int.h: the trainer's private struct and the functions its three files share, bottom
 * to top: trainer-state.c (the collective, the shape checks, the start and the sharing of one
 * rank's state), trainer-inplace.c (recovery in place: re-forming the collective on a new
 * generation and agreeing on the state, train/INPLACE.md) and trainer.c (data, backend,
 * checkpoints, the training loop). Each calls only the ones below it. Nothing else includes it.
 *
 * Ownership: trainer_run() owns the struct for the run. Errors: negative errno, reported on
 * stderr (terr) where said. Threads: the training thread only (the control watcher thread
 * touches only train-control.h's struct). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "train-comm.h"
#include "train-alive.h"
#include "train-control.h"
#include "train-data.h"
#include "trainer.h"

struct trainer {
    const struct trainer_opts *o; /* &oc */
    struct trainer_opts oc;       /* the options; rank, world and the store change in place */
    bool nccl;                    /* the GPU backend */
    struct train_control *ctl;    /* RDZV_CONTROL_FD's watcher, or NULL */
    struct train_alive *alive;    /* "wait" lines while blocked on the peers, or NULL */
    uint64_t generation;          /* of the current communicator */
    struct rdzv_worker_gen gen;         /* the latest generation (its strings back oc's) */
    FILE *out; /* rank 0's JSON lines */
    struct train_layout layout;
    struct train_data *data;
    struct train_math *m;
    struct train_comm *comm;
    struct train_model *model;
    uint32_t *perm, *idx;
    float *xbuf;     /* host staging for one local batch */
    float *state;    /* math memory: the resume header broadcast from rank 0 */
    uint64_t local_batch;
    int progress_fd; /* o->progress_fd, -1 once a report failed */
    uint64_t progress_last; /* the step last reported (0: none) */
    /* The step under way: the time blocked in its collectives (gradient allreduces and their
     * wait), and once it is complete, its compute time (its wall time less that), reported with
     * the step; UINT64_MAX when the last step reported was not timed (a recovery's). */
    uint64_t comm_ns, compute_ms;
    /* Position of the next step. */
    uint64_t step, epoch, offset, adam_t, perm_epoch;
    bool have_perm;
    bool state_ok; /* the state is whole: no step stopped after its update began */
    /* Rank 0's record. */
    double *curve_x, *curve_y;
    size_t curve_n, curve_cap;
};

/* ---- trainer-state.c ---- */

/* One line on stderr, "rdzv-train: rank R: ..." */
void terr(const struct trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The batch divides among the ranks, the layers fit the data. 0 or -EINVAL (reported). */
int check_shapes(struct trainer *t);
/* t->comm for the current rank, world and store (t->o). 0 or -errno (reported). */
int make_comm(struct trainer *t);
/* Rank 0's checkpoint or a fresh init, to every rank. 0 or -errno (reported). */
int start_state(struct trainer *t);
/* root's position and *with_adam, then its parameters (and Adam's moments when *with_adam), to
 * every rank. 0 or the collective's -errno (not reported). */
int share_state(struct trainer *t, unsigned root, bool *with_adam);
/* Whole numbers as 16-bit pieces in floats (exact), nw words <-> 4 * nw floats. */
void words_to_floats(const uint64_t *w, unsigned nw, float *f);
void floats_to_words(const float *f, unsigned nw, uint64_t *w);

/* ---- trainer-inplace.c ---- */

/* The state agreement of recovery in place (see the function). *src: the sending rank, or -1
 * when none held a state (then start_state() ran). 0 or -errno. */
int sync_state(struct trainer *t, bool have, int *src);
/* Wait for the next generation and re-form on it until a communicator holds (why: what
 * happened, for the messages). 0, or -errno to exit (reported). */
int recover(struct trainer *t, const char *why);
