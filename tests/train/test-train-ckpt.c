/* SPDX-License-Identifier: Apache-2.0 */
/* test-train-ckpt.c: checkpoint round trip, newest-valid selection, corrupt and truncated files
 * rejected, pruning, and a training run resumed from a checkpoint with other world sizes
 * ending where an uninterrupted run ends. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tap.h"
#include "train-ckpt.h"
#include "train-data.h"
#include "train-math.h"
#include "train-model.h"

static char dir[] = "/tmp/rdzv-train-ckpt-XXXXXX";

static void rm_dir(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
    ASSERT_EQ(mkdir(dir, 0700), 0);
}

static void make_ckpt(struct train_ckpt *c, const char *layers, uint64_t step)
{
    memset(c, 0, sizeof(*c));
    ASSERT_OK(train_layout_parse(layers, &c->layout));
    c->step = step;
    c->epoch = step / 3;
    c->offset = 16 * (step % 3);
    c->adam_t = step + 1;
    c->seed = 42;
    c->samples = 512;
    c->act = TRAIN_ACT_NONE;
    c->params = malloc(c->layout.nparams * sizeof(float));
    c->mom = malloc(c->layout.nparams * sizeof(float));
    c->var = malloc(c->layout.nparams * sizeof(float));
    ASSERT_TRUE(c->params && c->mom && c->var);
    for (size_t i = 0; i < c->layout.nparams; i++) {
        c->params[i] = (float)i * 0.5f + (float)step;
        c->mom[i] = -(float)i;
        c->var[i] = (float)i * 1e-3f;
    }
}

static void path_of(char *buf, size_t len, uint64_t step)
{
    snprintf(buf, len, "%s/ckpt-%012llu.bin", dir, (unsigned long long)step);
}

static void test_round_trip(void)
{
    struct train_ckpt c, r;
    char path[256];

    rm_dir();
    make_ckpt(&c, "6,5,4,6", 7);
    ASSERT_OK(train_ckpt_write(dir, &c, 0));
    path_of(path, sizeof(path), 7);
    ASSERT_OK(train_ckpt_read(path, &r));
    ASSERT_EQ(r.step, 7);
    ASSERT_EQ(r.epoch, c.epoch);
    ASSERT_EQ(r.offset, c.offset);
    ASSERT_EQ(r.adam_t, 8);
    ASSERT_EQ(r.seed, 42);
    ASSERT_EQ(r.samples, 512);
    ASSERT_EQ(r.act, TRAIN_ACT_NONE);
    ASSERT_EQ(r.layout.nlayers, 3);
    ASSERT_EQ(r.layout.nparams, c.layout.nparams);
    ASSERT_MEMEQ(r.layout.width, c.layout.width, 4 * sizeof(unsigned));
    ASSERT_MEMEQ(r.params, c.params, c.layout.nparams * sizeof(float));
    ASSERT_MEMEQ(r.mom, c.mom, c.layout.nparams * sizeof(float));
    ASSERT_MEMEQ(r.var, c.var, c.layout.nparams * sizeof(float));
    train_ckpt_release(&r);
    train_ckpt_release(&c);
}

static void flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    uint8_t b;

    ASSERT_TRUE(fd >= 0);
    ASSERT_EQ(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    ASSERT_EQ(pwrite(fd, &b, 1, at), 1);
    ASSERT_EQ(close(fd), 0);
}

static void test_newest_valid_wins_corrupt_and_truncated_rejected(void)
{
    struct train_ckpt c, r;
    char path[256], got[256];
    unsigned skipped = 99;
    struct stat st;

    rm_dir();
    ASSERT_EQ(train_ckpt_load_latest(dir, &r, got, sizeof(got), &skipped), -ENOENT);
    ASSERT_EQ(skipped, 0);
    ASSERT_EQ(train_ckpt_load_latest("/nonexistent/rdzv-ckpt", &r, NULL, 0, NULL), -ENOENT);
    for (uint64_t s = 10; s <= 30; s += 10) {
        make_ckpt(&c, "6,5,6", s);
        ASSERT_OK(train_ckpt_write(dir, &c, 0));
        train_ckpt_release(&c);
    }
    ASSERT_OK(train_ckpt_load_latest(dir, &r, got, sizeof(got), &skipped));
    ASSERT_EQ(r.step, 30);
    ASSERT_EQ(skipped, 0);
    train_ckpt_release(&r);

    /* One flipped bit in the payload of the newest: rejected, the next one is used. */
    path_of(path, sizeof(path), 30);
    flip_byte(path, 200);
    ASSERT_EQ(train_ckpt_read(path, &r), -EBADMSG);
    ASSERT_OK(train_ckpt_load_latest(dir, &r, got, sizeof(got), &skipped));
    ASSERT_EQ(r.step, 20);
    ASSERT_EQ(skipped, 1);
    train_ckpt_release(&r);

    /* Truncated (a crash mid-copy by some other tool): rejected too. */
    path_of(path, sizeof(path), 20);
    ASSERT_EQ(stat(path, &st), 0);
    ASSERT_EQ(truncate(path, st.st_size - 9), 0);
    ASSERT_EQ(train_ckpt_read(path, &r), -EBADMSG);
    ASSERT_EQ(truncate(path, 10), 0);
    ASSERT_EQ(train_ckpt_read(path, &r), -EBADMSG);
    ASSERT_OK(train_ckpt_load_latest(dir, &r, got, sizeof(got), &skipped));
    ASSERT_EQ(r.step, 10);
    ASSERT_EQ(skipped, 2);
    train_ckpt_release(&r);

    /* A damaged header field (the version) and a bad magic. */
    path_of(path, sizeof(path), 10);
    flip_byte(path, 8);
    ASSERT_EQ(train_ckpt_read(path, &r), -EBADMSG);
    flip_byte(path, 8);
    flip_byte(path, 0);
    ASSERT_EQ(train_ckpt_read(path, &r), -EBADMSG);
    ASSERT_EQ(train_ckpt_load_latest(dir, &r, got, sizeof(got), &skipped), -ENOENT);
    ASSERT_EQ(skipped, 3);
}

static void test_keep_prunes_old_checkpoints(void)
{
    struct train_ckpt c;
    char path[256];

    rm_dir();
    for (uint64_t s = 1; s <= 4; s++) {
        make_ckpt(&c, "3,3", s);
        ASSERT_OK(train_ckpt_write(dir, &c, 2));
        train_ckpt_release(&c);
    }
    for (uint64_t s = 1; s <= 4; s++) {
        path_of(path, sizeof(path), s);
        ASSERT_EQ(access(path, F_OK) == 0, s >= 3);
    }
}

/* A data-parallel run simulated in one process: each rank's shard through one model, the
 * gradients averaged (as the all-reduce does), one Adam step. Starts from c (params, moments,
 * position) and leaves the end state there. */
struct sim {
    struct train_math *m;
    struct train_layout L;
    struct train_data *data;
    uint64_t batch, seed;
};

static void sim_run(struct sim *s, unsigned world, uint64_t steps, struct train_ckpt *c)
{
    struct train_adam hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    uint64_t local = s->batch / world;
    size_t np = s->L.nparams;
    struct train_model *md;
    uint32_t *perm = malloc(s->data->n * sizeof(*perm)), *idx = malloc(local * sizeof(*idx));
    float *sum = malloc((np + 1) * sizeof(float));

    ASSERT_TRUE(perm && idx && sum);
    ASSERT_OK(train_model_new(s->m, &s->L, TRAIN_ACT_RELU, (int)local, &md));
    memcpy(md->params, c->params, np * sizeof(float));
    memcpy(md->mom, c->mom, np * sizeof(float));
    memcpy(md->var, c->var, np * sizeof(float));
    for (uint64_t k = 0; k < steps; k++) {
        memset(sum, 0, (np + 1) * sizeof(float));
        train_epoch_perm(s->seed, c->epoch, perm, s->data->n);
        for (unsigned r = 0; r < world; r++) {
            train_shard(perm, s->data->n, c->offset, s->batch, r, world, idx);
            train_data_gather(s->data, idx, local, md->acts[0]);
            train_model_forward(md);
            ASSERT_OK(train_model_backward(md, TRAIN_LOSS_MSE, 0, NULL, NULL));
            for (size_t i = 0; i <= np; i++)
                sum[i] += md->grads[i];
        }
        for (size_t i = 0; i <= np; i++)
            md->grads[i] = sum[i] / (float)world;
        s->m->adam(s->m, md->params, md->grads, md->mom, md->var, np, &hp, ++c->adam_t);
        c->step++;
        c->offset += s->batch;
        if (c->offset >= s->data->n) {
            c->epoch++;
            c->offset = 0;
        }
    }
    memcpy(c->params, md->params, np * sizeof(float));
    memcpy(c->mom, md->mom, np * sizeof(float));
    memcpy(c->var, md->var, np * sizeof(float));
    train_model_free(md);
    free(perm);
    free(idx);
    free(sum);
}

static void sim_start(struct sim *s, struct train_ckpt *c)
{
    size_t np = s->L.nparams;

    memset(c, 0, sizeof(*c));
    c->layout = s->L;
    c->act = TRAIN_ACT_RELU;
    c->seed = s->seed;
    c->samples = s->data->n;
    c->params = calloc(np, sizeof(float));
    c->mom = calloc(np, sizeof(float));
    c->var = calloc(np, sizeof(float));
    ASSERT_TRUE(c->params && c->mom && c->var);
    train_layout_init_params(&s->L, s->seed, c->params);
}

static void test_resume_with_another_world_size(void)
{
    struct sim s = {.batch = 8, .seed = 3};
    struct train_ckpt ref, run, back;
    char path[256];

    rm_dir();
    ASSERT_OK(train_math_cpu_new(TRAIN_FP32, &s.m));
    ASSERT_OK(train_layout_parse("8,6,8", &s.L));
    ASSERT_OK(train_data_synthetic(36, 8, &s.data)); /* 5 steps an epoch, the last one padded */

    /* Uninterrupted: world 1, 13 steps. */
    sim_start(&s, &ref);
    sim_run(&s, 1, 13, &ref);

    /* World 2 for 6 steps, checkpoint, resume the file with world 4 for 7 more. */
    sim_start(&s, &run);
    sim_run(&s, 2, 6, &run);
    ASSERT_EQ(run.epoch, 1);
    ASSERT_EQ(run.offset, 8);
    ASSERT_OK(train_ckpt_write(dir, &run, 2));
    path_of(path, sizeof(path), 6);
    ASSERT_OK(train_ckpt_read(path, &back));
    train_ckpt_release(&run);
    sim_run(&s, 4, 7, &back);

    ASSERT_EQ(back.step, ref.step);
    ASSERT_EQ(back.epoch, ref.epoch);
    ASSERT_EQ(back.offset, ref.offset);
    ASSERT_EQ(back.adam_t, ref.adam_t);
    for (size_t i = 0; i < s.L.nparams; i++) {
        if (!(fabsf(back.params[i] - ref.params[i]) <= 1e-5f)) {
            snprintf(tap_note, sizeof(tap_note), "param %zu: resumed %.8g, reference %.8g", i,
                     back.params[i], ref.params[i]);
            ASSERT_TRUE(fabsf(back.params[i] - ref.params[i]) <= 1e-5f);
        }
    }
    train_ckpt_release(&back);
    train_ckpt_release(&ref);
    train_data_free(s.data);
    train_math_free(s.m);
}

int main(void)
{
    ASSERT_NOT_NULL(mkdtemp(dir));
    TEST(test_round_trip);
    TEST(test_newest_valid_wins_corrupt_and_truncated_rejected);
    TEST(test_keep_prunes_old_checkpoints);
    TEST(test_resume_with_another_world_size);
    {
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ASSERT_EQ(system(cmd), 0);
    }
    return tap_done();
}
