/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-train.c: main(): options (argv, then RDZV_TRAIN_<OPT> from the environment), the
 * worker environment (RANK, WORLD_SIZE, MASTER_ADDR...), exit status. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rdzv-opt.h"
#include "../common/rdzv-util.h"
#include "trainer.h"

#define DEFAULT_LAYERS "784,128,128,128,784"
#define DEFAULT_STEPS 200

#define STR_(x) #x
#define STR(x) STR_(x)

static int layers_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    if (train_layout_parse(val, opt->dest) < 0)
        return rdzv_opt_bad(p, opt, val, "give 2 to 33 comma-separated widths, each 1..65536, "
                                         "e.g. 784,128,784");
    return 0;
}

static int activation_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                         const char *val)
{
    return train_act_parse(val, opt->dest) < 0 ? rdzv_opt_bad(p, opt, val, "use relu or none")
                                               : 0;
}

static int loss_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    return train_loss_parse(val, opt->dest) < 0 ? rdzv_opt_bad(p, opt, val, "use mse or rmse")
                                                : 0;
}

static int precision_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                        const char *val)
{
    return train_precision_parse(val, opt->dest) < 0
               ? rdzv_opt_bad(p, opt, val, "use fp32, bf16 or fp16")
               : 0;
}

static int backend_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    enum train_backend *b = opt->dest;

    if (strcmp(val, "auto") == 0)
        *b = TRAIN_BACKEND_AUTO;
    else if (strcmp(val, "gloo") == 0)
        *b = TRAIN_BACKEND_GLOO;
    else if (strcmp(val, "nccl") == 0)
        *b = TRAIN_BACKEND_NCCL;
    else
        return rdzv_opt_bad(p, opt, val, "use auto, nccl or gloo");
    return 0;
}

static int betas_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct train_adam *adam = opt->dest;
    char *end;
    double b1, b2;

    errno = 0;
    b1 = strtod(val, &end);
    if (errno || end == val || *end != ',')
        return rdzv_opt_bad(p, opt, val, "expected B1,B2 with 0 <= B < 1, e.g. 0.9,0.999");
    b2 = strtod(end + 1, &end);
    if (errno || *end || !(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1))
        return rdzv_opt_bad(p, opt, val, "expected B1,B2 with 0 <= B < 1, e.g. 0.9,0.999");
    adam->beta1 = b1;
    adam->beta2 = b2;
    return 0;
}

static int data_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    if (strcmp(val, "synthetic") != 0 && (strncmp(val, "mnist:", 6) != 0 || !val[6]))
        return rdzv_opt_bad(p, opt, val, "use synthetic or mnist:DIR");
    *(const char **)opt->dest = val;
    return 0;
}

/* A path; an empty one means none. */
static int path_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    *(const char **)opt->dest = *val ? val : NULL;
    return 0;
}

#ifdef RDZV_TRAIN_HAVE_CUDA
#define BACKENDS "gloo nccl"
#else
#define BACKENDS "gloo"
#endif

/* Values the table parses into wider types than trainer_opts holds. */
struct wide {
    uint64_t ckpt_keep, fail_rank, timeout_s, bucket_mb;
};

#define CB(n, fn, d, mv, h) {.kind = RDZV_OPT_CALLBACK, .name = n, .cb = fn, .dest = d, \
                             .metavar = mv, .help = h}
#define UINT(n, d, lo, hi, mv, h) {.kind = RDZV_OPT_UINT, .name = n, .dest = d, .umin = lo, \
                                   .umax = hi, .metavar = mv, .help = h}

/* RDZV_TRAIN_<OPTION>, then argv. Returns 0, 1 (exit 0 now) or -EINVAL (printed). */
static int parse_opts(struct trainer_opts *o, int argc, char **argv)
{
    struct wide w = {.ckpt_keep = o->ckpt_keep, .fail_rank = o->fail_rank,
                     .timeout_s = o->timeout_ms / 1000, .bucket_mb = o->bucket_bytes >> 20};
    bool steps_set = false, epochs_set = false;
    const struct rdzv_opt table[] = {
        {.kind = RDZV_OPT_SECTION, .help = "Model and optimiser:"},
        CB("layers", layers_cb, &o->layout, "W0,W1,...,WN",
           "layer widths (default " DEFAULT_LAYERS ");\nW0 and WN must equal the sample size"),
        CB("activation", activation_cb, &o->act, "relu|none", "between layers (default relu)"),
        CB("loss", loss_cb, &o->loss, "mse|rmse", "(default mse)"),
        CB("precision", precision_cb, &o->precision, "fp32|bf16|fp16",
           "GEMM compute precision; fp32 master weights (default\n"
           "fp32; bf16/fp16 need the GPU backend)"),
        {.kind = RDZV_OPT_DOUBLE, .name = "lr", .dest = &o->adam.lr, .dmin = 0, .dmax = 1e6,
         .what = "expected a non-negative number", .metavar = "LR",
         .help = "Adam learning rate (default 0.001)"},
        CB("betas", betas_cb, &o->adam, "B1,B2", "Adam betas (default 0.9,0.999)"),
        {.kind = RDZV_OPT_DOUBLE, .name = "eps", .dest = &o->adam.eps, .dmin = 0, .dmax = 1e6,
         .what = "expected a non-negative number", .metavar = "EPS",
         .help = "Adam epsilon (default 1e-8)"},
        UINT("seed", &o->seed, 0, UINT64_MAX / 2, "N",
             "initialisation and shuffling seed (default 0)"),
        {.kind = RDZV_OPT_SECTION, .help = "Data:"},
        CB("data", data_cb, &o->data, "synthetic|mnist:DIR",
           "synthetic (default): sample i = linspace(0, i, W0)\n"
           "normalised; mnist:DIR reads DIR/train-images-idx3-ubyte\nor .gz"),
        UINT("samples", &o->samples, 1, 1u << 24, "N",
             "synthetic samples (default 512) / MNIST limit (all)"),
        UINT("batch-size", &o->batch, 1, 1u << 24, "B",
             "GLOBAL batch, split evenly across ranks (default 64)"),
        {.kind = RDZV_OPT_UINT, .name = "steps", .dest = &o->steps, .umax = UINT64_MAX / 2,
         .seen = &steps_set, .metavar = "N",
         .help = "stop after N global steps (default " STR(DEFAULT_STEPS) " unless --epochs)"},
        {.kind = RDZV_OPT_UINT, .name = "epochs", .dest = &o->epochs, .umax = 1u << 30,
         .seen = &epochs_set, .metavar = "N", .help = "stop at the end of epoch N"},
        {.kind = RDZV_OPT_SECTION, .help = "Runtime:"},
        CB("backend", backend_cb, &o->backend, "auto|nccl|gloo",
           "auto (default): nccl if a CUDA device is present"),
        UINT("timeout", &w.timeout_s, 1, 86400, "SEC",
             "rendezvous and collective timeout (default 60)"),
        UINT("bucket-mb", &w.bucket_mb, 0, 4096, "MB",
             "gradient all-reduce bucket size (default 4)"),
        UINT("log-every", &o->log_every, 0, 0, "N", "progress line every N steps (default 10)"),
        CB("plot", path_cb, &o->plot, "FILE.png", "write the loss curve at the end (rank 0)"),
        CB("ckpt-dir", path_cb, &o->ckpt_dir, "DIR",
           "write checkpoints here (rank 0) and resume from the\nnewest valid one at start"),
        UINT("ckpt-every", &o->ckpt_every, 0, 0, "N",
             "checkpoint every N steps (default: only at the end)"),
        UINT("ckpt-keep", &w.ckpt_keep, 0, 1u << 20, "N",
             "checkpoints kept (default 2; 0 keeps all)"),
        UINT("fail-at-step", &o->fail_at_step, 0, 0, "N",
             "fault drill: --fail-rank exits 1 at step N, on the first\n"
             "attempt only (TORCHELASTIC_RESTART_COUNT unset or 0)"),
        UINT("fail-rank", &w.fail_rank, 0, 1u << 24, "R", "(default 0)"),
        RDZV_OPT_HELP_ENTRY("this text"),
        RDZV_OPT_VERSION_ENTRY(0, "print the version"),
        {0},
    };
    const struct rdzv_opt_prog prog = {
        .name = "rdzv-train",
        .env_prefix = "RDZV_TRAIN",
        .usage = "Usage: rdzv-train [OPTIONS]\n"
                 "Train an MLP autoencoder data-parallel across the ranks of a job (torchrun's "
                 "env\ncontract: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), on "
                 "GPUs with\nNCCL or on CPUs with gloo. Rank 0 prints one JSON object per line.\n",
        .footer = "Every option can also come from RDZV_TRAIN_<OPTION> (--batch-size:\n"
                  "RDZV_TRAIN_BATCH_SIZE); the command line wins.\n"
                  "Environment: RANK, WORLD_SIZE (default 0 and 1), LOCAL_RANK, MASTER_ADDR "
                  "and\nMASTER_PORT (the job's TCPStore; required with gloo when WORLD_SIZE > "
                  "1),\nRDZV_NCCL_UNIQUE_ID (nccl), RDZV_LOCAL_ADDR (gloo's listen address),\n"
                  "TORCHELASTIC_RESTART_COUNT.\n",
        .version = RDZV_VERSION " (backends: " BACKENDS ")",
        .opts = table,
        .style = RDZV_OPT_STYLE_BAD,
        .help_col = 26,
    };
    int first_arg, r;

    r = rdzv_opt_parse(&prog, argc, argv, &first_arg);
    if (r != 0)
        return r;
    if (first_arg < argc) {
        fprintf(stderr, "rdzv-train: unexpected argument '%s' (see rdzv-train --help)\n",
                argv[first_arg]);
        return -EINVAL;
    }
    o->ckpt_keep = (unsigned)w.ckpt_keep;
    o->fail_rank = (unsigned)w.fail_rank;
    o->timeout_ms = w.timeout_s * 1000;
    o->bucket_bytes = w.bucket_mb << 20;
    if (epochs_set && !steps_set)
        o->steps = 0;
    return 0;
}

static int parse_env_u(const char *name, unsigned dflt, unsigned max, unsigned *ret)
{
    const char *s = getenv(name);
    uint64_t v;

    if (!s || !*s) {
        *ret = dflt;
        return 0;
    }
    if (rdzv_parse_u64(s, &v) < 0 || v > max) {
        fprintf(stderr, "rdzv-train: bad %s='%s': expected a whole number up to %u\n", name, s,
                max);
        return -EINVAL;
    }
    *ret = (unsigned)v;
    return 0;
}

/* An inherited descriptor named by variable name, or -1 (unset, or not open: warned). */
static int env_fd(const char *name)
{
    const char *s = getenv(name);
    uint64_t fd;

    if (!s || !*s)
        return -1;
    if (rdzv_parse_u64(s, &fd) < 0 || fd < 3 || fd > INT32_MAX || fcntl((int)fd, F_GETFD) < 0) {
        fprintf(stderr, "rdzv-train: ignoring %s='%s': not an open descriptor\n", name, s);
        return -1;
    }
    return (int)fd;
}

static int read_env(struct trainer_opts *o)
{
    const char *s;
    unsigned port, restarts;

    if (parse_env_u("RANK", 0, 1u << 24, &o->rank) < 0 ||
        parse_env_u("WORLD_SIZE", 1, 1u << 24, &o->world) < 0 ||
        parse_env_u("LOCAL_RANK", 0, 1u << 24, &o->local_rank) < 0 ||
        parse_env_u("MASTER_PORT", 29500, 65535, &port) < 0 ||
        parse_env_u("TORCHELASTIC_RESTART_COUNT", 0, UINT32_MAX, &restarts) < 0)
        return -EINVAL;
    if (o->world == 0 || o->rank >= o->world) {
        fprintf(stderr, "rdzv-train: RANK=%u is not below WORLD_SIZE=%u\n", o->rank, o->world);
        return -EINVAL;
    }
    o->master_port = (uint16_t)port;
    o->master_addr = getenv("MASTER_ADDR");
    if (o->master_addr && !*o->master_addr)
        o->master_addr = NULL;
    s = getenv("RDZV_LOCAL_ADDR");
    o->local_addr = s && *s ? s : NULL;
    s = getenv("RDZV_NCCL_UNIQUE_ID");
    o->nccl_id = s && *s ? s : NULL;
    o->first_attempt = restarts == 0;
    /* The agent's channels: progress (written once per step) and control. */
    o->progress_fd = env_fd("RDZV_PROGRESS_FD");
    s = getenv("RDZV_PROGRESS_WAIT_MS");
    if (s && *s && rdzv_parse_u64(s, &o->progress_wait_ms) < 0) {
        fprintf(stderr, "rdzv-train: bad RDZV_PROGRESS_WAIT_MS='%s'\n", s);
        return -EINVAL;
    }
    o->control_fd = env_fd("RDZV_CONTROL_FD");
    s = getenv("RDZV_GENERATION");
    if (s && *s && rdzv_parse_u64(s, &o->generation) < 0) {
        fprintf(stderr, "rdzv-train: bad RDZV_GENERATION='%s'\n", s);
        return -EINVAL;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct trainer_opts o = {
        .act = TRAIN_ACT_RELU,
        .loss = TRAIN_LOSS_MSE,
        .precision = TRAIN_FP32,
        .backend = TRAIN_BACKEND_AUTO,
        .adam = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
        .data = "synthetic",
        .batch = 64,
        .steps = DEFAULT_STEPS,
        .log_every = 10,
        .ckpt_keep = 2,
        .timeout_ms = 60000,
        .bucket_bytes = 4u << 20,
    };
    int r;

    if (train_layout_parse(DEFAULT_LAYERS, &o.layout) < 0)
        return 1;
    r = parse_opts(&o, argc, argv);
    if (r != 0)
        return r > 0 ? 0 : 2;
    if (!o.steps && !o.epochs) {
        fprintf(stderr, "rdzv-train: nothing to do: give --steps N or --epochs N (> 0)\n");
        return 2;
    }
    if (read_env(&o) < 0)
        return 2;
    /* A write to a peer that died (gloo's writev carries no MSG_NOSIGNAL), to an agent that is
     * gone or to a closed standard output fails with EPIPE instead of killing us silently: a
     * survivor says what happened, and recovery in place survives it. */
    signal(SIGPIPE, SIG_IGN);
    r = trainer_run(&o, stdout);
    return r < 0 ? 1 : 0;
}
