/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-train.c: main(): options (argv, then RDZV_TRAIN_<OPT> from the environment), the
 * worker environment (RANK, WORLD_SIZE, MASTER_ADDR...), exit status. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rdzv-util.h"
#include "trainer.h"

#define DEFAULT_LAYERS "784,128,128,128,784"
#define DEFAULT_STEPS 200

enum {
    OPT_LAYERS = 0x100,
    OPT_ACTIVATION,
    OPT_LOSS,
    OPT_PRECISION,
    OPT_BACKEND,
    OPT_LR,
    OPT_BETAS,
    OPT_EPS,
    OPT_DATA,
    OPT_SAMPLES,
    OPT_BATCH,
    OPT_STEPS,
    OPT_EPOCHS,
    OPT_SEED,
    OPT_LOG_EVERY,
    OPT_CKPT_DIR,
    OPT_CKPT_EVERY,
    OPT_CKPT_KEEP,
    OPT_PLOT,
    OPT_FAIL_AT_STEP,
    OPT_FAIL_RANK,
    OPT_TIMEOUT,
    OPT_BUCKET_MB,
    OPT_VERSION,
};

static const struct option long_opts[] = {
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"activation", required_argument, NULL, OPT_ACTIVATION},
    {"loss", required_argument, NULL, OPT_LOSS},
    {"precision", required_argument, NULL, OPT_PRECISION},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"lr", required_argument, NULL, OPT_LR},
    {"betas", required_argument, NULL, OPT_BETAS},
    {"eps", required_argument, NULL, OPT_EPS},
    {"data", required_argument, NULL, OPT_DATA},
    {"samples", required_argument, NULL, OPT_SAMPLES},
    {"batch-size", required_argument, NULL, OPT_BATCH},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"log-every", required_argument, NULL, OPT_LOG_EVERY},
    {"ckpt-dir", required_argument, NULL, OPT_CKPT_DIR},
    {"ckpt-every", required_argument, NULL, OPT_CKPT_EVERY},
    {"ckpt-keep", required_argument, NULL, OPT_CKPT_KEEP},
    {"plot", required_argument, NULL, OPT_PLOT},
    {"fail-at-step", required_argument, NULL, OPT_FAIL_AT_STEP},
    {"fail-rank", required_argument, NULL, OPT_FAIL_RANK},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"bucket-mb", required_argument, NULL, OPT_BUCKET_MB},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {0},
};

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: rdzv-train [OPTIONS]\n"
            "Train an MLP autoencoder data-parallel across the ranks of a job (torchrun's env\n"
            "contract: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), on GPUs with\n"
            "NCCL or on CPUs with gloo. Rank 0 prints one JSON object per line.\n"
            "\n"
            "Model and optimiser:\n"
            "  --layers W0,W1,...,WN   layer widths (default " DEFAULT_LAYERS ");\n"
            "                          W0 and WN must equal the sample size\n"
            "  --activation relu|none  between layers (default relu)\n"
            "  --loss mse|rmse         (default mse)\n"
            "  --precision fp32|bf16|fp16\n"
            "                          GEMM compute precision; fp32 master weights (default\n"
            "                          fp32; bf16/fp16 need the GPU backend)\n"
            "  --lr LR                 Adam learning rate (default 0.001)\n"
            "  --betas B1,B2           Adam betas (default 0.9,0.999)\n"
            "  --eps EPS               Adam epsilon (default 1e-8)\n"
            "  --seed N                initialisation and shuffling seed (default 0)\n"
            "\n"
            "Data:\n"
            "  --data synthetic|mnist:DIR\n"
            "                          synthetic (default): sample i = linspace(0, i, W0)\n"
            "                          normalised; mnist:DIR reads DIR/train-images-idx3-ubyte\n"
            "                          or .gz\n"
            "  --samples N             synthetic samples (default 512) / MNIST limit (all)\n"
            "  --batch-size B          GLOBAL batch, split evenly across ranks (default 64)\n"
            "  --steps N               stop after N global steps (default %d unless --epochs)\n"
            "  --epochs N              stop at the end of epoch N\n"
            "\n"
            "Runtime:\n"
            "  --backend auto|nccl|gloo\n"
            "                          auto (default): nccl if a CUDA device is present\n"
            "  --timeout SEC           rendezvous and collective timeout (default 60)\n"
            "  --bucket-mb MB          gradient all-reduce bucket size (default 4)\n"
            "  --log-every N           progress line every N steps (default 10)\n"
            "  --plot FILE.png         write the loss curve at the end (rank 0)\n"
            "  --ckpt-dir DIR          write checkpoints here (rank 0) and resume from the\n"
            "                          newest valid one at start\n"
            "  --ckpt-every N          checkpoint every N steps (default: only at the end)\n"
            "  --ckpt-keep N           checkpoints kept (default 2; 0 keeps all)\n"
            "  --fail-at-step N        fault drill: --fail-rank exits 1 at step N, on the first\n"
            "                          attempt only (TORCHELASTIC_RESTART_COUNT unset or 0)\n"
            "  --fail-rank R           (default 0)\n"
            "  -h, --help              this text\n"
            "  --version               print the version\n"
            "\n"
            "Every option can also come from RDZV_TRAIN_<OPTION> (--batch-size:\n"
            "RDZV_TRAIN_BATCH_SIZE); the command line wins.\n"
            "Environment: RANK, WORLD_SIZE (default 0 and 1), LOCAL_RANK, MASTER_ADDR and\n"
            "MASTER_PORT (the job's TCPStore; required with gloo when WORLD_SIZE > 1),\n"
            "RDZV_NCCL_UNIQUE_ID (nccl), RDZV_LOCAL_ADDR (gloo's listen address),\n"
            "TORCHELASTIC_RESTART_COUNT.\n",
            DEFAULT_STEPS);
}

static int bad(const char *opt, const char *val, const char *what)
{
    fprintf(stderr, "rdzv-train: bad --%s '%s': %s\n", opt, val, what);
    return -EINVAL;
}

static int parse_u64_opt(const char *opt, const char *val, uint64_t min, uint64_t max,
                         uint64_t *ret)
{
    uint64_t v;

    if (rdzv_parse_u64(val, &v) < 0 || v < min || v > max) {
        char what[96];

        snprintf(what, sizeof(what), "expected a whole number from %" PRIu64 " to %" PRIu64,
                 min, max);
        return bad(opt, val, what);
    }
    *ret = v;
    return 0;
}

static int parse_float_opt(const char *opt, const char *val, double *ret)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(val, &end);
    if (errno || end == val || *end || !(v >= 0.0) || v > 1e6)
        return bad(opt, val, "expected a non-negative number");
    *ret = v;
    return 0;
}

struct parse_state {
    struct trainer_opts *o;
    bool steps_set, epochs_set;
};

static int apply(struct parse_state *ps, int id, const char *name, const char *val)
{
    struct trainer_opts *o = ps->o;
    uint64_t v = 0;
    int r = 0;

    switch (id) {
    case OPT_LAYERS:
        r = train_layout_parse(val, &o->layout);
        if (r < 0)
            return bad(name, val, "give 2 to 33 comma-separated widths, each 1..65536, e.g. "
                                  "784,128,784");
        return 0;
    case OPT_ACTIVATION:
        return train_act_parse(val, &o->act) < 0 ? bad(name, val, "use relu or none") : 0;
    case OPT_LOSS:
        return train_loss_parse(val, &o->loss) < 0 ? bad(name, val, "use mse or rmse") : 0;
    case OPT_PRECISION:
        return train_precision_parse(val, &o->precision) < 0
                   ? bad(name, val, "use fp32, bf16 or fp16")
                   : 0;
    case OPT_BACKEND:
        if (strcmp(val, "auto") == 0)
            o->backend = TRAIN_BACKEND_AUTO;
        else if (strcmp(val, "gloo") == 0)
            o->backend = TRAIN_BACKEND_GLOO;
        else if (strcmp(val, "nccl") == 0)
            o->backend = TRAIN_BACKEND_NCCL;
        else
            return bad(name, val, "use auto, nccl or gloo");
        return 0;
    case OPT_LR:
        return parse_float_opt(name, val, &o->adam.lr);
    case OPT_EPS:
        return parse_float_opt(name, val, &o->adam.eps);
    case OPT_BETAS: {
        char *end;
        double b1, b2;

        errno = 0;
        b1 = strtod(val, &end);
        if (errno || end == val || *end != ',')
            return bad(name, val, "expected B1,B2 with 0 <= B < 1, e.g. 0.9,0.999");
        b2 = strtod(end + 1, &end);
        if (errno || *end || !(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1))
            return bad(name, val, "expected B1,B2 with 0 <= B < 1, e.g. 0.9,0.999");
        o->adam.beta1 = b1;
        o->adam.beta2 = b2;
        return 0;
    }
    case OPT_DATA:
        if (strcmp(val, "synthetic") != 0 && (strncmp(val, "mnist:", 6) != 0 || !val[6]))
            return bad(name, val, "use synthetic or mnist:DIR");
        o->data = val;
        return 0;
    case OPT_SAMPLES:
        return parse_u64_opt(name, val, 1, 1u << 24, &o->samples);
    case OPT_BATCH:
        return parse_u64_opt(name, val, 1, 1u << 24, &o->batch);
    case OPT_STEPS:
        ps->steps_set = true;
        return parse_u64_opt(name, val, 0, UINT64_MAX / 2, &o->steps);
    case OPT_EPOCHS:
        ps->epochs_set = true;
        return parse_u64_opt(name, val, 0, 1u << 30, &o->epochs);
    case OPT_SEED:
        return parse_u64_opt(name, val, 0, UINT64_MAX / 2, &o->seed);
    case OPT_LOG_EVERY:
        return parse_u64_opt(name, val, 0, UINT64_MAX, &o->log_every);
    case OPT_CKPT_DIR:
        o->ckpt_dir = *val ? val : NULL;
        return 0;
    case OPT_CKPT_EVERY:
        return parse_u64_opt(name, val, 0, UINT64_MAX, &o->ckpt_every);
    case OPT_CKPT_KEEP:
        r = parse_u64_opt(name, val, 0, 1u << 20, &v);
        o->ckpt_keep = (unsigned)v;
        return r;
    case OPT_PLOT:
        o->plot = *val ? val : NULL;
        return 0;
    case OPT_FAIL_AT_STEP:
        return parse_u64_opt(name, val, 0, UINT64_MAX, &o->fail_at_step);
    case OPT_FAIL_RANK:
        r = parse_u64_opt(name, val, 0, 1u << 24, &v);
        o->fail_rank = (unsigned)v;
        return r;
    case OPT_TIMEOUT:
        r = parse_u64_opt(name, val, 1, 86400, &v);
        o->timeout_ms = v * 1000;
        return r;
    case OPT_BUCKET_MB:
        r = parse_u64_opt(name, val, 0, 4096, &v);
        o->bucket_bytes = v << 20;
        return r;
    default:
        return -EINVAL;
    }
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
    struct parse_state ps = {.o = &o};
    int c, r;

    if (train_layout_parse(DEFAULT_LAYERS, &o.layout) < 0)
        return 1;
    /* The environment first, so that the command line overrides it. */
    for (const struct option *lo = long_opts; lo->name; lo++) {
        char env[64];
        const char *val;

        if (lo->has_arg != required_argument)
            continue;
        rdzv_env_name("RDZV_TRAIN", lo->name, env, sizeof(env));
        val = getenv(env);
        if (val && *val && apply(&ps, lo->val, lo->name, val) < 0) {
            fprintf(stderr, "rdzv-train: (from the environment variable %s)\n", env);
            return 2;
        }
    }
    opterr = 0; /* our own one-line message below */
    while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == OPT_VERSION) {
#ifdef RDZV_TRAIN_HAVE_CUDA
            printf("rdzv-train %s (backends: gloo nccl)\n", RDZV_VERSION);
#else
            printf("rdzv-train %s (backends: gloo)\n", RDZV_VERSION);
#endif
            return 0;
        }
        if (c == '?') {
            fprintf(stderr, "rdzv-train: unknown option or missing value in '%s' (see "
                    "rdzv-train --help)\n", argv[optind - 1]);
            return 2;
        }
        for (const struct option *lo = long_opts; lo->name; lo++)
            if (lo->val == c && apply(&ps, c, lo->name, optarg) < 0)
                return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "rdzv-train: unexpected argument '%s' (see rdzv-train --help)\n",
                argv[optind]);
        return 2;
    }
    if (ps.epochs_set && !ps.steps_set)
        o.steps = 0;
    if (!o.steps && !o.epochs) {
        fprintf(stderr, "rdzv-train: nothing to do: give --steps N or --epochs N (> 0)\n");
        return 2;
    }
    if (read_env(&o) < 0)
        return 2;
    r = trainer_run(&o, stdout);
    return r < 0 ? 1 : 0;
}
