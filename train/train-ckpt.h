/* SPDX-License-Identifier: Apache-2.0 */
/* train-ckpt.h: checkpoints: model, Adam state and data position in one self-checking file,
 * written atomically. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "train-model.h"

#define TRAIN_CKPT_MAGIC "RDZVCKPT"
#define TRAIN_CKPT_VERSION 1u

/* What a checkpoint holds. The arrays are host memory, layout.nparams floats each. */
struct train_ckpt {
    uint64_t step;    /* global steps completed */
    uint64_t epoch;   /* epoch of the next step */
    uint64_t offset;  /* position of the next step in that epoch's sample order */
    uint64_t adam_t;  /* Adam's step count */
    uint64_t seed;    /* --seed it was trained with */
    uint64_t samples; /* size of the data set it was trained on */
    struct train_layout layout;
    enum train_act act;
    float *params, *mom, *var;
};

/*
 * Write c as DIR/ckpt-<step>.bin: into a temporary file in DIR, fsync, rename over the final
 * name, fsync DIR. Then delete all but the newest keep checkpoints (keep 0: delete none).
 * Creates DIR (one level) if missing. Returns 0 or a negative errno; on failure no partial
 * ckpt-*.bin is left behind.
 */
int train_ckpt_write(const char *dir, const struct train_ckpt *c, unsigned keep);

/* Read and verify one checkpoint file (magic, version, sizes, checksum). On success *ret owns
 * freshly allocated arrays (release with train_ckpt_release()). Returns 0, -EBADMSG for a
 * corrupt or truncated file, -ENOMEM, or the errno of open/read. */
int train_ckpt_read(const char *path, struct train_ckpt *ret);

/* The newest valid checkpoint in dir, newest first by step; invalid files are skipped and
 * counted in *ret_skipped. path_out gets its file name. Returns 0, -ENOENT when there is no
 * valid one (or no dir), or another negative errno. */
int train_ckpt_load_latest(const char *dir, struct train_ckpt *ret, char *path_out, size_t len,
                           unsigned *ret_skipped);

/* Free the arrays read by train_ckpt_read(); the struct becomes empty. */
void train_ckpt_release(struct train_ckpt *c);
