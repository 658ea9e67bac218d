/* SPDX-License-Identifier: Apache-2.0 */
/* agent-options.c: rdzv-agent's options: the table, the scheduler's defaults, the checks that
 * need every option. */
#include "agent-options.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rdzv-opt.h"
#include "../common/rdzv-util.h"

static int bad(const char *opt, const char *val, const char *what)
{
    fprintf(stderr, "rdzv-agent: invalid %s '%s': %s (see rdzv-agent --help)\n", opt, val, what);
    return -EINVAL;
}

static int parse_int(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *ret)
{
    int64_t v;

    if (rdzv_parse_i64n((const uint8_t *)val, strlen(val), &v) < 0 || v < lo || v > hi) {
        char what[80];

        snprintf(what, sizeof(what), "expected a whole number from %" PRId64 " to %" PRId64, lo,
                 hi);
        return bad(opt, val, what);
    }
    *ret = v;
    return 0;
}

/* N or MIN:MAX. */
static int nnodes_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct agent_opts *o = p->ud;
    const char *colon = strchr(val, ':');
    char lo[32];

    if (!colon) {
        if (parse_int("--nnodes", val, 1, 100000, &o->min_nodes) < 0)
            return -EINVAL;
        o->max_nodes = o->min_nodes;
        return 0;
    }
    if ((size_t)(colon - val) >= sizeof(lo))
        return bad("--nnodes", val, "expected N or MIN:MAX");
    memcpy(lo, val, (size_t)(colon - val));
    lo[colon - val] = '\0';
    if (parse_int("--nnodes", lo, 1, 100000, &o->min_nodes) < 0 ||
        parse_int("--nnodes", colon + 1, 1, 100000, &o->max_nodes) < 0)
        return -EINVAL;
    if (o->max_nodes < o->min_nodes)
        return bad("--nnodes", val, "MIN must not exceed MAX");
    return 0;
}

/* A number, gpu or auto (resolved once the GPUs are known). */
static int nproc_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct agent_opts *o = p->ud;

    if (strcmp(val, "gpu") && strcmp(val, "auto") &&
        parse_int("--nproc", val, 1, 1024, &o->nproc) < 0)
        return -EINVAL;
    o->nproc_arg = val;
    return 0;
}

static int run_id_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    if (!*val || strlen(val) > RDZV_ID_MAX)
        return rdzv_opt_bad(p, opt, val, "expected 1 to 128 characters");
    *(const char **)opt->dest = val;
    return 0;
}

static int heartbeat_timeout_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                                const char *val)
{
    char *end;
    double v = strtod(val, &end);

    if (*val == '\0' || *end != '\0' || !(v >= 0) || v > 1e7)
        return rdzv_opt_bad(p, opt, val, "expected a number of seconds");
    if (v < 0.1 || v > 3600)
        return rdzv_opt_bad(p, opt, val, "expected 0.1 to 3600 seconds");
    *(double *)opt->dest = v;
    return 0;
}

static int scale_up_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    if (strcmp(val, "now") && strcmp(val, "next"))
        return rdzv_opt_bad(p, opt, val, "expected now or next");
    *(bool *)opt->dest = strcmp(val, "now") == 0;
    return 0;
}

static int nccl_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    if (rdzv_nccl_mode_parse(val, opt->dest) < 0)
        return rdzv_opt_bad(p, opt, val, "expected auto, required or off");
    return 0;
}

#define SECS(n, d, h)                                                                              \
    {.kind = RDZV_OPT_DOUBLE, .name = n, .dest = d, .dmin = 0, .dmax = 1e7, .metavar = "SEC",     \
     .what = "expected a number of seconds", .help = h}

/* The defaults, the table, the environment and argv. */
static int parse_table(struct agent_opts *o, int argc, char **argv, int *ret_first_arg)
{
    const struct rdzv_opt table[] = {
        {.kind = RDZV_OPT_CALLBACK, .name = "nnodes", .cb = nnodes_cb, .metavar = "N|MIN:MAX",
         .help = "nodes in the job (default: $SLURM_NNODES or 1)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "nproc", .alias = "nproc-per-node", .cb = nproc_cb,
         .metavar = "N|gpu|auto",
         .help = "workers on this node (default 1; gpu: one per visible GPU;\n"
                 "auto: GPUs if any, else CPUs)"},
        {.kind = RDZV_OPT_STRING, .name = "endpoint", .alias = "rdzv-endpoint",
         .dest = &o->endpoint, .metavar = "HOST:PORT",
         .help = "rdzvd's address (port default 29400)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "rdzv-id", .cb = run_id_cb, .dest = &o->run_id,
         .metavar = "ID", .env = "RDZV_ID *",
         .help = "job id shared by all nodes (default: $SLURM_JOB_ID, then\n$PBS_JOBID)"},
        {.kind = RDZV_OPT_INT, .name = "node-rank", .dest = &o->node_rank, .imin = 0,
         .imax = 99999, .metavar = "N",
         .help = "this node's rank (default: $SLURM_NODEID, then\n"
                 "$OMPI_COMM_WORLD_RANK, else the order of arrival)"},
        {.kind = RDZV_OPT_INT, .name = "max-restarts", .dest = &o->max_restarts, .imin = 0,
         .imax = 1000000, .metavar = "N", .help = "job-wide restarts after failures (default 0)"},
        {.kind = RDZV_OPT_FLAG, .name = "standalone", .dest = &o->standalone,
         .help = "one node: run an embedded rdzvd on a free local port"},
        {.kind = RDZV_OPT_STRING, .name = "token-file", .dest = &o->token_file,
         .metavar = "FILE",
         .help = "the secret rdzvd was started with (--token-file): agent\n"
                 "and daemon prove it to each other (mode 0600)"},
        {.kind = RDZV_OPT_STRING, .name = "log-dir", .dest = &o->log_dir, .metavar = "DIR",
         .help = "also write each worker's output to\n"
                 "DIR/<run id>/attempt_<k>/<local rank>/{stdout,stderr}.log"},
        {.kind = RDZV_OPT_STRING, .name = "role", .dest = &o->role, .metavar = "NAME",
         .help = "ROLE_NAME for the workers (default 'default')"},
        SECS("last-call", &o->last_call_s,
             "after MIN nodes joined, wait this long for more (default 3)"),
        SECS("grace", &o->grace_s, "TERM -> KILL grace when stopping workers (default 30)"),
        SECS("connect-timeout", &o->connect_timeout_s,
             "keep trying to reach rdzvd this long, at start and after\n"
             "losing it (workers keep running meanwhile; default 60)"),
        {.kind = RDZV_OPT_CALLBACK, .name = "heartbeat-timeout", .cb = heartbeat_timeout_cb,
         .dest = &o->heartbeat_timeout_s, .metavar = "SEC",
         .help = "a node silent this long counts as lost (default 5; the\n"
                 "job's first agent sets it for all)"},
        SECS("join-timeout", &o->join_timeout_s,
             "with fewer than MIN nodes, wait this long for more before\n"
             "failing the job (default 600)"),
        {.kind = RDZV_OPT_CALLBACK, .name = "scale-up", .cb = scale_up_cb,
         .dest = &o->scale_up_now, .metavar = "now|next",
         .help = "a node joining a running job below MAX: restart now to\n"
                 "take it in, or at the next restart (default next)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "nccl", .cb = nccl_cb, .dest = &o->nccl,
         .metavar = "auto|required|off",
         .help = "NCCL unique ids for the workers (default auto: when\n"
                 "libnccl can be loaded on node rank 0)"},
        {.kind = RDZV_OPT_INT, .name = "nccl-ids", .dest = &o->nccl_ids, .imin = 1,
         .imax = RDZV_MAX_NCCL_IDS, .metavar = "N",
         .help = "ids per generation, for ncclCommInitRankScalable (default 1)"},
        {.kind = RDZV_OPT_STRING, .name = "host", .dest = &o->host, .metavar = "NAME",
         .help = "how this node is named in logs (default: hostname)"},
        {.kind = RDZV_OPT_FLAG, .name = "isolate-gpus", .dest = &o->isolate_gpus,
         .help = "give each worker only its own GPU in CUDA_VISIBLE_DEVICES"},
        {.kind = RDZV_OPT_CALLBACK, .name = "log-level", .cb = rdzv_opt_log_level_cb,
         .dest = &o->level, .metavar = "LEVEL", .what = "expected error, warn, info or debug",
         .help = "error, warn, info (default), debug"},
        RDZV_OPT_HELP_ENTRY("show this help"),
        RDZV_OPT_VERSION_ENTRY('V', "show the version"),
        {0},
    };
    const struct rdzv_opt_prog prog = {
        .name = "rdzv-agent",
        .env_prefix = "RDZV",
        .usage = "Usage: rdzv-agent [OPTIONS] [-- COMMAND [ARGS...]]\n"
                 "Join a job's rendezvous on rdzvd and run one worker per local GPU (or "
                 "--nproc).\n\n",
        .footer = "Without a COMMAND the built-in NCCL trainer rdzv-train runs. Every option "
                  "can also be\nset as RDZV_<OPTION> in the environment (e.g. RDZV_NNODES=2, "
                  "RDZV_ENDPOINT=h:29400);\nflags win. Workers get torchrun's environment "
                  "(RANK, LOCAL_RANK, WORLD_SIZE,\nMASTER_ADDR, ...), plus RDZV_NCCL_UNIQUE_ID, "
                  "RDZV_GENERATION and RDZV_ENDPOINT.\n",
        .version = RDZV_VERSION,
        .opts = table,
        .flags = RDZV_OPT_STOP_AT_ARG,
        .help_col = 28,
        .ud = o,
    };
    const char *s;

    /* The scheduler's node count is a default that RDZV_NNODES and --nnodes override. */
    if ((s = getenv("SLURM_NNODES")) || (s = getenv("SLURM_JOB_NUM_NODES")))
        if (rdzv_opt_set(&prog, "nnodes", s) < 0)
            o->min_nodes = o->max_nodes = 0;
    return rdzv_opt_parse(&prog, argc, argv, ret_first_arg);
}

int agent_opts_parse(struct agent_opts *o, int argc, char **argv)
{
    const char *s;
    int first_arg, r;

    memset(o, 0, sizeof(*o));
    o->node_rank = -1;
    o->last_call_s = 3;
    o->grace_s = 30;
    o->connect_timeout_s = 60;
    o->heartbeat_timeout_s = RDZV_HEARTBEAT_TIMEOUT_MS / 1000.0;
    o->join_timeout_s = RDZV_JOIN_TIMEOUT_MS / 1000.0;
    o->nccl = RDZV_NCCL_AUTO;
    o->nccl_ids = 1;
    o->level = RDZV_LOG_INFO;
    r = parse_table(o, argc, argv, &first_arg);
    if (r != 0)
        return r;
    if (first_arg < argc)
        o->argv = argv + first_arg;

    if (o->standalone) {
        if (o->max_nodes > 1) {
            fprintf(stderr, "rdzv-agent: --standalone runs one node; drop --nnodes or use "
                            "--endpoint\n");
            return -EINVAL;
        }
        o->min_nodes = o->max_nodes = 1;
        if (!o->run_id) {
            snprintf(o->run_id_buf, sizeof(o->run_id_buf), "standalone-%016" PRIx64,
                     rdzv_random_u64());
            o->run_id = o->run_id_buf;
        }
    }
    if (o->min_nodes == 0)
        o->min_nodes = o->max_nodes = 1;
    if (!o->endpoint && !o->standalone) {
        fprintf(stderr, "rdzv-agent: no rdzvd to join: pass --endpoint HOST:PORT (rdzvd's "
                        "address), or --standalone for a single node\n");
        return -EINVAL;
    }
    if (!o->run_id && !(o->run_id = getenv("SLURM_JOB_ID")) && !(o->run_id = getenv("PBS_JOBID"))) {
        fprintf(stderr, "rdzv-agent: no job id: pass --rdzv-id ID, the same on every node (Slurm "
                        "and PBS jobs get one from SLURM_JOB_ID / PBS_JOBID)\n");
        return -EINVAL;
    }
    if (o->node_rank < 0) {
        const char *src = NULL;

        if ((s = getenv("SLURM_NODEID")))
            src = "SLURM_NODEID";
        else if ((s = getenv("OMPI_COMM_WORLD_RANK")))
            src = "OMPI_COMM_WORLD_RANK";
        if (src && parse_int(src, s, 0, 99999, &o->node_rank) < 0)
            return -EINVAL;
        o->rank_hint = src != NULL; /* the scheduler's numbering: a preference */
    }
    o->heartbeat_s = o->heartbeat_timeout_s / 5;
    if (o->join_timeout_s > 86400)
        o->join_timeout_s = 86400;
    if (o->node_rank >= o->max_nodes && !o->rank_hint) {
        fprintf(stderr, "rdzv-agent: node rank %" PRId64 " is out of range for --nnodes %" PRId64
                        ":%" PRId64 " (ranks 0..%" PRId64 ")\n",
                o->node_rank, o->min_nodes, o->max_nodes, o->max_nodes - 1);
        return -EINVAL;
    }
    return 0;
}
