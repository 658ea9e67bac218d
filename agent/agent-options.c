/* SPDX-License-Identifier: Apache-2.0 */
/* agent-options.c: rdzv-agent's options: the table, the scheduler's defaults, the checks that
 * need every option. */
#include "agent/agent-options.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "common/rdzv-opt.h"
#include "common/rdzv-util.h"
#include "agent/group/agent-redirects.h"
#include "agent/session/agent-sched.h"
#include "proto/rdzv-preflight.h"

/* How the user named opt ("--nproc_per_node"), else dflt. */
static const char *typed_or(const struct rdzv_opt *opt, const char *dflt)
{
    return opt->typed && opt->typed[0] == '-' ? opt->typed : dflt;
}

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

/* N or MIN:MAX into *lo, *hi: NULL, or what is wrong. */
static const char *nnodes_parse(const char *val, int64_t *lo, int64_t *hi)
{
    const char *colon = strchr(val, ':');
    char *end;

    errno = 0;
    *lo = strtoll(val, &end, 10);
    if (end == val || (colon ? end != colon : *end != '\0') || errno)
        return "expected N or MIN:MAX";
    *hi = *lo;
    if (colon) {
        *hi = strtoll(colon + 1, &end, 10);
        if (end == colon + 1 || *end != '\0' || errno)
            return "expected N or MIN:MAX";
    }
    if (*lo < 1 || *hi > 100000)
        return "expected whole numbers from 1 to 100000";
    if (*hi < *lo)
        return "MIN must not exceed MAX";
    return NULL;
}

static int nnodes_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct agent_opts *o = p->ud;
    const char *msg = nnodes_parse(val, &o->min_nodes, &o->max_nodes);

    return msg ? bad(typed_or(opt, "--nnodes"), val, msg) : 0;
}

/* A number, gpu, cpu or auto (resolved once the GPUs are known); an error names all four. */
static int nproc_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct agent_opts *o = p->ud;
    char what[80];
    int64_t v;

    if (strcmp(val, "gpu") && strcmp(val, "auto") && strcmp(val, "cpu")) {
        if (rdzv_parse_i64n((const uint8_t *)val, strlen(val), &v) < 0 || v < 1 ||
            v > RDZV_NPROC_MAX) {
            snprintf(what, sizeof(what), "expected a whole number from 1 to %d, gpu, cpu or auto",
                     RDZV_NPROC_MAX);
            return bad(typed_or(opt, "--nproc-per-node"), val, what);
        }
        o->nproc = v;
    }
    o->nproc_arg = val;
    return 0;
}

static int run_id_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    if (((struct agent_opts *)p->ud)->standalone && (!*val || strlen(val) > RDZV_ID_MAX))
        return 0; /* torchrun's --standalone replaces the run id anyway */
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

static int straggler_factor_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                               const char *val)
{
    char *end;
    double v = strtod(val, &end);

    if (*val == '\0' || *end != '\0' || !(v == 0 || (v > 1 && v <= RDZV_STRAGGLER_FACTOR_MAX)))
        return rdzv_opt_bad(p, opt, val, "expected 0 (off) or a factor above 1, up to 100");
    *(double *)opt->dest = v;
    return 0;
}

static int preflight_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    if (strcmp(val, "net") && strcmp(val, "off"))
        return rdzv_opt_bad(p, opt, val, "expected net or off");
    *(bool *)opt->dest = strcmp(val, "net") == 0;
    return 0;
}

static int fraction_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    char *end;
    double v = strtod(val, &end);

    if (*val == '\0' || *end != '\0' || !(v > 0 && v < 1))
        return rdzv_opt_bad(p, opt, val, "expected a fraction above 0 and below 1");
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

static int on_bad_node_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                          const char *val)
{
    if (strcmp(val, "drain") && strcmp(val, "keep"))
        return rdzv_opt_bad(p, opt, val, "expected drain or keep");
    *(bool *)opt->dest = strcmp(val, "drain") == 0;
    return 0;
}

/* --progress-timeout SEC | auto | auto:FLOOR (seconds; the floor defaults to
 * AGENT_PROGRESS_AUTO_FLOOR_S). */
static int progress_timeout_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                               const char *val)
{
    struct agent_opts *o = p->ud;
    const char *num = val;
    char *end;
    double d;

    (void)opt;
    o->progress_auto = strncmp(val, "auto", 4) == 0 && (val[4] == '\0' || val[4] == ':');
    if (o->progress_auto) {
        if (val[4] == '\0') {
            o->progress_timeout_s = AGENT_PROGRESS_AUTO_FLOOR_S;
            return 0;
        }
        num = val + 5;
    }
    d = strtod(num, &end);
    if (!*num || *end || !(d >= 0) || d > 1e7 || (o->progress_auto && d <= 0))
        return rdzv_opt_bad(p, opt, val,
                            "expected a number of seconds, auto, or auto:FLOOR (seconds)");
    o->progress_timeout_s = d;
    return 0;
}

static int nccl_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    if (rdzv_nccl_mode_parse(val, opt->dest) < 0)
        return rdzv_opt_bad(p, opt, val, "expected auto, required or off");
    return 0;
}

/* torchrun's --rdzv-backend: c10d and static; the etcd ones are gone (etcd 3.6 removed the v2
 * API they need). */
static int backend_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct agent_opts *o = p->ud;

    if (o->standalone)
        return 0; /* torchrun's --standalone means c10d whatever was given */
    if (strcmp(val, "etcd") == 0 || strcmp(val, "etcd-v2") == 0)
        return rdzv_opt_bad(p, opt, val,
                            "the etcd backends are not supported (etcd 3.6 removed the v2 API "
                            "they use): use --rdzv-backend c10d with --rdzv-endpoint HOST:PORT, "
                            "and rdzv-agent hosts rdzvd itself");
    if (strcmp(val, "c10d") == 0)
        o->backend = AGENT_BACKEND_C10D;
    else if (strcmp(val, "static") == 0)
        o->backend = AGENT_BACKEND_STATIC;
    else
        return rdzv_opt_bad(p, opt, val, "expected c10d or static");
    o->backend_given = true;
    return 0;
}

/* --pass-local-rank[=dash|underscore]: torch.distributed.launch's --local-rank=N argument. */
static int pass_local_rank_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                              const char *val)
{
    struct agent_opts *o = p->ud;
    int b = val ? agent_conf_bool(val) : 1;

    if (val && strcmp(val, "dash") == 0)
        b = 1;
    if (val && strcmp(val, "underscore") == 0) {
        o->pass_local_rank = AGENT_LOCAL_RANK_UNDERSCORE;
        return 0;
    }
    if (b < 0)
        return rdzv_opt_bad(p, opt, val, "expected dash (--local-rank=N) or underscore "
                                         "(--local_rank=N)");
    o->pass_local_rank = b ? AGENT_LOCAL_RANK_DASH : AGENT_LOCAL_RANK_NONE;
    return 0;
}

static int start_method_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                           const char *val)
{
    if (strcmp(val, "spawn") && strcmp(val, "fork") && strcmp(val, "forkserver"))
        return rdzv_opt_bad(p, opt, val, "expected spawn, fork or forkserver");
    *(const char **)opt->dest = val;
    return 0;
}

/* -r/--redirects, -t/--tee: checked now, applied per local rank once nproc is known. */
static int redirects_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                        const char *val)
{
    uint8_t masks[1024];
    const char *msg = NULL;

    if (agent_redirects_parse(val, RDZV_ARRAY_SIZE(masks), masks, &msg) < 0)
        return rdzv_opt_bad(p, opt, val, msg ? msg : "expected 0-3 or LR:N,LR:N");
    *(const char **)opt->dest = val;
    return 0;
}

static int ranks_filter_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                           const char *val)
{
    bool shown[1024];
    const char *msg = NULL;

    if (agent_ranks_filter_parse(val, RDZV_ARRAY_SIZE(shown), shown, &msg) < 0)
        return rdzv_opt_bad(p, opt, val, msg ? msg : "expected LR,LR,...");
    *(const char **)opt->dest = val;
    return 0;
}

/* SIGTERM,SIGINT,... */
static int signals_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    for (const char *s = val; *s;) {
        size_t n = strcspn(s, ",");

        if (n < 4 || strncmp(s, "SIG", 3) || strspn(s + 3, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") <
                                                  n - 3)
            return rdzv_opt_bad(p, opt, val, "expected signal names: SIGTERM,SIGUSR1,...");
        s += n + (s[n] == ',');
    }
    *(const char **)opt->dest = val;
    return 0;
}

/* torchrun's argparse keeps the last value of a repeated option and checks only that one (its
 * options are strings, or whole numbers converted at once): defer_cb keeps the value given last
 * (a whole number's form checked now), deferred_checks[] check and apply it after the parse. */
static int defer_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    int64_t v;

    if (opt->imax && rdzv_parse_i64n((const uint8_t *)val, strlen(val), &v) < 0)
        return rdzv_opt_bad(p, opt, val, "expected a whole number");
    *(const char **)opt->dest = val;
    return 0;
}

static int int_check_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                        const char *val)
{
    char name[64];

    if (opt->dest == &((struct agent_opts *)p->ud)->node_rank &&
        ((struct agent_opts *)p->ud)->standalone)
        return 0; /* torchrun's --standalone is c10d: it ignores --node-rank */
    snprintf(name, sizeof(name), "--%s", opt->name);
    return parse_int(typed_or(opt, name), val, opt->imin, opt->imax, opt->dest);
}

static const rdzv_opt_cb deferred_checks[AGENT_OPTS_DEFERRED] = {
    [D_NNODES] = nnodes_cb,         [D_NPROC] = nproc_cb,         [D_BACKEND] = backend_cb,
    [D_RUN_ID] = run_id_cb,         [D_CONF] = agent_rdzv_conf_cb, [D_REDIRECTS] = redirects_cb,
    [D_TEE] = redirects_cb,         [D_MAX_RESTARTS] = int_check_cb, [D_NODE_RANK] = int_check_cb,
    [D_MASTER_PORT] = int_check_cb, /* its range is checked where static uses it */
};

/* Where each deferred check writes (0: the callback writes o itself). */
static const size_t deferred_off[AGENT_OPTS_DEFERRED] = {
    [D_RUN_ID] = offsetof(struct agent_opts, run_id),
    [D_REDIRECTS] = offsetof(struct agent_opts, redirects),
    [D_TEE] = offsetof(struct agent_opts, tee),
    [D_MAX_RESTARTS] = offsetof(struct agent_opts, max_restarts),
    [D_NODE_RANK] = offsetof(struct agent_opts, node_rank),
    [D_MASTER_PORT] = offsetof(struct agent_opts, master_port),
};

static void *deferred_dest(struct agent_opts *o, size_t k)
{
    return deferred_off[k] ? (char *)o + deferred_off[k] : NULL;
}

#define SECS(n, d, h)                                                                              \
    {.kind = RDZV_OPT_DOUBLE, .name = n, .dest = d, .dmin = 0, .dmax = 1e7, .metavar = "SEC",     \
     .what = "expected a number of seconds", .help = h}

/* The defaults, the table, the environment and argv. */
/* torchrun 1.13's own options carry RDZV_OPT_F_PREFER: a prefix argparse gives to one of them
 * ("--lo", "--t") means it here too, though rdzv's own options share it. */
static int parse_table(struct agent_opts *o, int argc, char **argv, int *ret_first_arg)
{
    const struct rdzv_opt table[] = {
        {.kind = RDZV_OPT_CALLBACK, .name = "nnodes", .flags = RDZV_OPT_F_PREFER, .cb = defer_cb,
         .dest = &o->deferred[D_NNODES],
         .typed = o->deferred_typed[D_NNODES], .metavar = "N|MIN:MAX",
         .help = "nodes in the job (default: $SLURM_NNODES, mpirun's\n"
                 "$OMPI_COMM_WORLD_SIZE, Grid Engine's $NHOSTS, or 1)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "nproc", .flags = RDZV_OPT_F_PREFER,
         .alias = "nproc-per-node", .cb = defer_cb,
         .dest = &o->deferred[D_NPROC], .typed = o->deferred_typed[D_NPROC],
         .metavar = "N|gpu|cpu|auto",
         .help = "workers on this node (default 1; gpu: one per visible GPU;\n"
                 "cpu: one per CPU; auto: GPUs if any, else CPUs)"},
        {.kind = RDZV_OPT_STRING, .name = "endpoint", .dest = &o->endpoint, .metavar = "HOST:PORT",
         .typed = o->typed[AGENT_TYPED_ENDPOINT],
         .help = "rdzvd's address, started by hand (port default 29400); the\n"
                 "replicas of a replicated rdzvd as HOST:PORT,HOST:PORT,...: the\n"
                 "agent finds the leader and follows it when it changes"},
        {.kind = RDZV_OPT_STRING, .name = "rdzv-endpoint", .flags = RDZV_OPT_F_PREFER,
         .dest = &o->rdzv_endpoint, .metavar = "HOST[:PORT]",
         .typed = o->typed[AGENT_TYPED_RDZV_ENDPOINT],
         .help = "torchrun's: with --rdzv-backend c10d rdzvd's address (default\n"
                 "localhost:29400); without a backend, static at this address"},
        {.kind = RDZV_OPT_CALLBACK, .name = "rdzv-id", .flags = RDZV_OPT_F_PREFER, .cb = defer_cb,
         .dest = &o->deferred[D_RUN_ID], .typed = o->deferred_typed[D_RUN_ID],
         .metavar = "ID", .env = "RDZV_ID *",
         .help = "job id shared by all nodes (default: $SLURM_JOB_ID, then\n"
                 "$PBS_JOBID, then Grid Engine's $JOB_ID[.$SGE_TASK_ID])"},
        {.kind = RDZV_OPT_CALLBACK, .name = "node-rank", .flags = RDZV_OPT_F_PREFER, .cb = defer_cb,
         .dest = &o->deferred[D_NODE_RANK], .typed = o->deferred_typed[D_NODE_RANK], .imin = 0,
         .imax = 99999, .metavar = "N",
         .help = "this node's rank (default: $SLURM_NODEID, then\n"
                 "$OMPI_COMM_WORLD_RANK, then its line of Grid Engine's\n"
                 "$PE_HOSTFILE, else the order of arrival)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "max-restarts", .flags = RDZV_OPT_F_PREFER,
         .cb = defer_cb,
         .dest = &o->deferred[D_MAX_RESTARTS],
         .typed = o->deferred_typed[D_MAX_RESTARTS], .imin = 0,
         .imax = 1000000, .metavar = "N", .help = "job-wide restarts after failures (default 0)"},
        {.kind = RDZV_OPT_FLAG, .name = "standalone", .flags = RDZV_OPT_F_PREFER,
         .dest = &o->standalone,
         .help = "one node: run an embedded rdzvd on a free local port"},
        {.kind = RDZV_OPT_STRING, .name = "token-file", .dest = &o->token_file,
         .metavar = "FILE",
         .help = "the secret rdzvd was started with (--token-file): agent\n"
                 "and daemon prove it to each other (mode 0600)"},
        {.kind = RDZV_OPT_STRING, .name = "replica-key-file", .dest = &o->replica_key_file,
         .metavar = "FILE",
         .help = "the replicas' own secret (rdzvd --replica-key-file), given\n"
                 "to the rdzvd replicas this agent hosts"},
        {.kind = RDZV_OPT_STRING, .name = "log-dir", .flags = RDZV_OPT_F_PREFER,
         .dest = &o->log_dir, .metavar = "DIR",
         .help = "also write each worker's output to\n"
                 "DIR/<run id>/attempt_<k>/<local rank>/{stdout,stderr}.log"},
        {.kind = RDZV_OPT_INT, .name = "metrics-port", .dest = &o->metrics_port, .imin = 0,
         .imax = 65535, .metavar = "N",
         .help = "serve the status page (/), /metrics and /status.json of\n"
                 "the rdzvd this agent runs (--standalone, or the one it\n"
                 "hosts) on port N (0: a free one; the agent logs it)"},
        {.kind = RDZV_OPT_STRING, .name = "metrics-bind", .dest = &o->metrics_bind,
         .metavar = "ADDR",
         .help = "the address for --metrics-port (default 127.0.0.1: this\n"
                 "host only; 0.0.0.0 or an address of this host lets\n"
                 "others read the page)"},
        {.kind = RDZV_OPT_STRING, .name = "role", .flags = RDZV_OPT_F_PREFER,
         .dest = &o->role, .metavar = "NAME",
         .help = "ROLE_NAME for the workers (default 'default')"},
        SECS("last-call", &o->last_call_s,
             "after MIN nodes joined, wait this long for more (default 3)"),
        SECS("grace", &o->grace_s, "TERM -> KILL grace when stopping workers (default 30)"),
        {.kind = RDZV_OPT_CALLBACK, .name = "progress-timeout", .cb = progress_timeout_cb,
         .metavar = "SEC|auto[:FLOOR]",
         .help = "fail a worker that reported progress (RDZV_PROGRESS_FD,\n"
                 "python: rdzv.progress(step)) and then made none this long,\n"
                 "as if it had crashed, after logging where it is stuck\n"
                 "(default 0: off); auto: 10 x the 99th percentile of each\n"
                 "worker's own step times after 20 steps, at least FLOOR\n"
                 "(default 60)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "recovery", .cb = rdzv_opt_either_cb,
         .dest = &o->recovery_inplace, .metavar = "restart|inplace",
         .help = "after a failure: restart every worker (default), or keep\n"
                 "the healthy ones running and start only the missing ones\n"
                 "(their workers read RDZV_CONTROL_FD, as rdzv-train does)"},
        {.kind = RDZV_OPT_FLAG, .name = "warm-workers", .dest = &o->warm_workers,
         .help = "keep per local rank a Python interpreter with torch imported\n"
                 "to start the rank's next worker in (a restart, a spare)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "python-hooks", .cb = agent_off_cb,
         .dest = &o->python_hooks_off, .metavar = "on|off",
         .help = "a Python worker's steps, waits and error from its optimizer\n"
                 "and sys.excepthook (default on; RDZV_PYTHON_HOOKS=0: off)"},
        SECS("progress-grace", &o->progress_grace_s,
             "with --progress-timeout, also fail a worker that made no\n"
             "first report this long after its start (default 0: never)"),
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
        {.kind = RDZV_OPT_INT, .name = "bad-node-failures", .dest = &o->bad_node_failures,
         .imin = 0, .imax = RDZV_BAD_NODE_FAILURES_MAX, .metavar = "N",
         .help = "put a node aside once its workers failed N times within\n"
                 "the job, when the job can form without it (a spare waits,\n"
                 "or MIN nodes remain): its agent exits 69 (default 2; 0:\n"
                 "never; the job's first agent sets it for all)"},
        {.kind = RDZV_OPT_INT, .name = "bad-node-window", .dest = &o->bad_node_window_s,
         .imin = 0, .imax = RDZV_BAD_NODE_WINDOW_MAX, .metavar = "SEC",
         .help = "only failures within the last SEC seconds count toward\n"
                 "--bad-node-failures (default 3600; 0: all within the job)"},
        {.kind = RDZV_OPT_INT, .name = "restart-backoff", .dest = &o->restart_backoff_s,
         .imin = 0, .imax = RDZV_RESTART_BACKOFF_MAX, .metavar = "SEC",
         .help = "delay restarts: none for the first, then 1 s, 2 s, 4 s ...\n"
                 "up to SEC (default 30; 0: none, as torchrun)"},
        {.kind = RDZV_OPT_STRING, .name = "health-check", .dest = &o->health_check,
         .metavar = "CMD",
         .help = "the site's node check (NHC, a script), run by /bin/sh before\n"
                 "joining, before rejoining after this node's workers failed,\n"
                 "and every --health-interval: non-zero = unhealthy (its first\n"
                 "line says why); the node is put aside, its agent exits 69"},
        {.kind = RDZV_OPT_DOUBLE, .name = "health-timeout", .dest = &o->health_timeout_s,
         .dmin = 0.1, .dmax = 3600, .metavar = "SEC", .what = "expected 0.1 to 3600 seconds",
         .help = "a --health-check running this long is killed and fails\n(default 30)"},
        {.kind = RDZV_OPT_DOUBLE, .name = "health-interval", .dest = &o->health_interval_s,
         .dmin = 0, .dmax = 86400, .metavar = "SEC", .what = "expected 0 to 86400 seconds",
         .help = "check the node this often while the job runs (default 60;\n0: only before "
                 "joining and rejoining)"},
        {.kind = RDZV_OPT_STRING, .name = "health-path", .dest = &o->health_path,
         .metavar = "DIR",
         .help = "a directory (checkpoints) that must be writable with 64 MiB\nuncounted "
                 "(--log-dir is checked too)"},
        {.kind = RDZV_OPT_STRING, .name = "health-nic", .dest = &o->health_nic,
         .metavar = "DEV[:PORT],...",
         .help = "the RDMA ports that must be ACTIVE (default: every port\nthe node has; "
                 "none on a node without RDMA)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "on-bad-node", .cb = on_bad_node_cb,
         .dest = &o->on_bad_node_drain, .metavar = "drain|keep",
         .help = "when this node is put aside, drain it in Slurm (scontrol) or\n"
                 "mark it offline in PBS (pbsnodes -o), with the reason, so the\n"
                 "next job does not get it either (default keep: nothing)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "straggler-factor", .cb = straggler_factor_cb,
         .dest = &o->straggler_factor, .metavar = "F",
         .help = "call a node a straggler when its slowest rank's compute time\n"
                 "stays at or above F times the job's median (default 1.3; 0:\n"
                 "off; the job's first agent sets it for all)"},
        {.kind = RDZV_OPT_DOUBLE, .name = "straggler-window", .dest = &o->straggler_window_s,
         .dmin = 1, .dmax = 86400, .metavar = "SEC", .what = "expected 1 to 86400 seconds",
         .help = "... for this long (default 30)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "on-straggler", .cb = rdzv_opt_either_cb,
         .dest = &o->on_straggler_aside, .metavar = "report|aside",
         .help = "report: name it (status, timeline, metrics); aside: put it\n"
                 "aside when a spare waits or the smaller job is faster, never\n"
                 "below MIN nodes (default report)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "preflight", .cb = preflight_cb,
         .dest = &o->preflight_net, .metavar = "net|off",
         .help = "net: before a generation starts, measure each new node's\n"
                 "links to two others and put aside a node whose links carry\n"
                 "less than --preflight-fraction of the job's median (default\n"
                 "off; the job's first agent sets it for all)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "preflight-fraction", .cb = fraction_cb,
         .dest = &o->preflight_fraction, .metavar = "F",
         .help = "... below this fraction of the median (default 0.25)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "scale-up", .cb = scale_up_cb,
         .dest = &o->scale_up_now, .metavar = "now|next",
         .help = "a node joining a running job below MAX: restart now to\n"
                 "take it in, or at the next restart (default next)"},
        {.kind = RDZV_OPT_FLAG, .name = "any-command", .dest = &o->any_command,
         .help = "this job's agents may run different commands (per-node\n"
                 "arguments): rdzvd does not compare them (default: an agent\n"
                 "whose command differs from the job's is refused at once)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "nccl", .cb = nccl_cb, .dest = &o->nccl,
         .metavar = "auto|required|off",
         .help = "NCCL unique ids for the workers (default auto: when\n"
                 "libnccl can be loaded on node rank 0)"},
        {.kind = RDZV_OPT_INT, .name = "nccl-ids", .dest = &o->nccl_ids, .imin = 1,
         .imax = RDZV_MAX_NCCL_IDS, .metavar = "N",
         .help = "ids per generation, for ncclCommInitRankScalable (default 1)"},
        {.kind = RDZV_OPT_STRING, .name = "host", .dest = &o->host, .metavar = "NAME",
         .help = "how this node is named in logs (default: SLURMD_NODENAME, else hostname)"},
        {.kind = RDZV_OPT_FLAG, .name = "store-front", .dest = &o->store_front,
         .help = "serve the workers' TCPStore connections here, through one\n"
                 "connection to the generation's store (a node's waits of one\n"
                 "key are one request there)"},
        {.kind = RDZV_OPT_FLAG, .name = "isolate-gpus", .dest = &o->isolate_gpus,
         .help = "give each worker only its own GPU in CUDA_VISIBLE_DEVICES"},
        {.kind = RDZV_OPT_FLAG, .name = "no-cgroup", .dest = &o->no_cgroup,
         .help = "run the workers in no cgroup of the agent's (default: one\n"
                 "below its own cgroup v2 where it may make one, killed with\n"
                 "all they started at the end of each generation); what they\n"
                 "start is then found by process group and environment only"},
        {.kind = RDZV_OPT_CALLBACK, .name = "log-level", .cb = rdzv_opt_log_level_cb,
         .dest = &o->level, .metavar = "LEVEL", .what = "expected error, warn, info or debug",
         .help = "error, warn, info (default), debug"},
        {.kind = RDZV_OPT_SECTION, .help = "torchrun and torch.distributed.launch:"},
        {.kind = RDZV_OPT_CALLBACK, .name = "rdzv-backend", .flags = RDZV_OPT_F_PREFER,
         .cb = defer_cb,
         .dest = &o->deferred[D_BACKEND], .typed = o->deferred_typed[D_BACKEND],
         .metavar = "c10d|static",
         .help = "c10d: rdzvd at --rdzv-endpoint; when nothing answers there,\n"
                 "the agent that owns the endpoint's address (or node rank 0)\n"
                 "starts it. static: node rank 0 starts it at --master-addr:\n"
                 "--master-port, world fixed at --nnodes (the default for a\n"
                 "SCRIPT without an endpoint). etcd, etcd-v2: refused"},
        {.kind = RDZV_OPT_CALLBACK, .name = "rdzv-conf", .flags = RDZV_OPT_F_PREFER, .cb = defer_cb,
         .dest = &o->deferred[D_CONF], .typed = o->deferred_typed[D_CONF], .metavar = "K=V,...",
         .help = "join_timeout, timeout, last_call_timeout, read_timeout,\n"
                 "keep_alive_interval x keep_alive_max_attempt (heartbeat),\n"
                 "is_host, replicas=1|3|5 (the rdzvd an agent hosts; default\n"
                 "3 with 3 or more nodes); close_timeout, heartbeat_timeout,\n"
                 "store_type and use_libuv mean nothing here; other keys: a\n"
                 "warning"},
        {.kind = RDZV_OPT_STRING, .name = "master-addr", .flags = RDZV_OPT_F_PREFER,
         .dest = &o->master_addr, .typed = o->typed[AGENT_TYPED_MASTER_ADDR],
         .metavar = "HOST", .help = "static: where node rank 0 hosts rdzvd (default 127.0.0.1)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "master-port", .flags = RDZV_OPT_F_PREFER,
         .cb = defer_cb, .dest = &o->deferred[D_MASTER_PORT],
         .typed = o->deferred_typed[D_MASTER_PORT], .imin = 0, .imax = INT32_MAX,
         .metavar = "PORT", .help = "static: its port (default 29500)"},
        {.kind = RDZV_OPT_STRING, .name = "local-addr", .dest = &o->local_addr, .metavar = "ADDR",
         .help = "this node's address, as --host (default: hostname)"},
        {.kind = RDZV_OPT_FLAG, .name = "module", .flags = RDZV_OPT_F_PREFER,
         .short_name = 'm', .dest = &o->module,
         .help = "the command is a Python module: $PYTHON_EXEC -u -m MOD"},
        {.kind = RDZV_OPT_FLAG, .name = "no-python", .flags = RDZV_OPT_F_PREFER,
         .dest = &o->no_python,
         .help = "execute the command directly, not with $PYTHON_EXEC -u"},
        {.kind = RDZV_OPT_FLAG, .name = "run-path", .flags = RDZV_OPT_F_PREFER,
         .dest = &o->run_path,
         .help = "run the script with runpy.run_path in $PYTHON_EXEC"},
        {.kind = RDZV_OPT_CALLBACK, .name = "redirects", .flags = RDZV_OPT_F_PREFER,
         .short_name = 'r', .cb = defer_cb,
         .dest = &o->deferred[D_REDIRECTS],
         .typed = o->deferred_typed[D_REDIRECTS], .metavar = "N|LR:N,...",
         .help = "workers' stdout (1), stderr (2), both (3) to files only"},
        {.kind = RDZV_OPT_CALLBACK, .name = "tee", .flags = RDZV_OPT_F_PREFER,
         .short_name = 't', .cb = defer_cb,
         .dest = &o->deferred[D_TEE], .typed = o->deferred_typed[D_TEE], .metavar = "N|LR:N,...",
         .help = "workers' stdout (1), stderr (2), both (3) to files too"},
        {.kind = RDZV_OPT_CALLBACK, .name = "local-ranks-filter", .cb = ranks_filter_cb,
         .dest = &o->local_ranks_filter, .metavar = "LR,...",
         .help = "show only these local ranks' output on the console"},
        {.kind = RDZV_OPT_CALLBACK, .name = "signals-to-handle", .cb = signals_cb,
         .dest = &o->signals_to_handle, .metavar = "SIG,...",
         .help = "TORCHELASTIC_SIGNALS_TO_HANDLE for the workers (the agent\n"
                 "forwards TERM, INT, HUP, QUIT, USR1, USR2 anyway)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "pass-local-rank", .cb = pass_local_rank_cb,
         .flags = RDZV_OPT_F_OPTARG, .metavar = "dash|underscore",
         .help = "torch.distributed.launch: pass each worker its local rank\n"
                 "as an argument, dash- (torch >= 2.0) or underscore-spelled (1.x)"},
        {.kind = RDZV_OPT_FLAG, .name = "use-env", .dest = &o->use_env,
         .help = "torch.distributed.launch: LOCAL_RANK only (wins over\n--pass-local-rank)"},
        SECS("shutdown-timeout", &o->grace_s, "torchrun's name for --grace"),
        {.kind = RDZV_OPT_DOUBLE, .name = "monitor-interval", .flags = RDZV_OPT_F_PREFER,
         .dest = &o->monitor_interval_s, .dmin = 0, .dmax = 1e7, .metavar = "SEC",
         .what = "expected a number of seconds",
         .help = "accepted, changes nothing: worker exits are seen at once"},
        {.kind = RDZV_OPT_CALLBACK, .name = "start-method", .flags = RDZV_OPT_F_PREFER,
         .cb = start_method_cb,
         .dest = &o->start_method, .metavar = "spawn|fork|forkserver",
         .help = "accepted, changes nothing: workers are always new processes"},
        {.kind = RDZV_OPT_STRING, .name = "event-log-handler", .dest = &o->event_log_handler,
         .metavar = "NAME", .help = "accepted, changes nothing: events go to the log"},
        {.kind = RDZV_OPT_STRING, .name = "logs-specs", .dest = &o->logs_specs,
         .metavar = "NAME", .help = "accepted, ignored (with a warning): see --log-dir"},
        {.kind = RDZV_OPT_STRING, .name = "numa-binding", .dest = &o->numa_binding,
         .metavar = "MODE", .help = "accepted, ignored (with a warning)"},
        {.kind = RDZV_OPT_FLAG, .name = "virtual-local-rank", .dest = &o->virtual_local_rank,
         .help = "accepted, ignored (with a warning)"},
        {.kind = RDZV_OPT_SECTION, .help = "General:"},
        {.kind = RDZV_OPT_FLAG, .name = "print-launch", .dest = &o->print_launch,
         .help = "print the resolved launch (nodes, nproc, backend, endpoint,\n"
                 "run id, node rank, restarts, the worker's argv) as one\n"
                 "JSON line and exit 0 without running anything"},
        RDZV_OPT_HELP_ENTRY("show this help"),
        RDZV_OPT_VERSION_ENTRY('V', "show the version"),
        {0},
    };
    const struct rdzv_opt_prog prog = {
        .name = "rdzv-agent",
        .env_prefix = "RDZV PET",
        .usage = "Usage: rdzv-agent [OPTIONS] SCRIPT [ARGS...]\n"
                 "       rdzv-agent [OPTIONS] -- COMMAND [ARGS...]\n"
                 "Join a job's rendezvous on rdzvd and run one worker per local GPU (or "
                 "--nproc).\nSCRIPT runs as torchrun runs it ($PYTHON_EXEC -u SCRIPT; -m, "
                 "--no-python); a COMMAND\nafter -- runs as given.\n\n",
        .footer = "Without a SCRIPT or COMMAND the built-in NCCL trainer rdzv-train runs.\n"
                  "Every option can also be set as RDZV_<OPTION> or torchrun's PET_<OPTION>\n"
                  "in the environment (e.g. RDZV_NNODES=2, PET_NPROC_PER_NODE=4); flags win.\n"
                  "Workers get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,\n"
                  "MASTER_ADDR, ...), plus RDZV_NCCL_UNIQUE_ID, RDZV_GENERATION and "
                  "RDZV_ENDPOINT.\n",
        .version = RDZV_VERSION,
        .opts = table,
        .flags = RDZV_OPT_STOP_AT_ARG | RDZV_OPT_ENV_ALIASES,
        .help_col = 28,
        .ud = o,
        .spelled = o->spelled,
    };
    const char *s;
    int64_t lo, hi;
    int r;

    /* The scheduler's node count is a default that RDZV_NNODES and --nnodes override: the first
     * good one of these (a bad one is left out). Under mpirun, one agent a node: its process count
     * (a Grid Engine task that mpirun started on another host has NHOSTS 1, its own). */
    static const char *const counts[] = {"SLURM_NNODES", "SLURM_JOB_NUM_NODES",
                                         "OMPI_COMM_WORLD_SIZE", "NHOSTS"};
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(counts) && !o->deferred[D_NNODES]; i++)
        if ((strcmp(counts[i], "NHOSTS") != 0 || agent_sge_job()) && (s = getenv(counts[i])) &&
            nnodes_parse(s, &lo, &hi) == NULL)
            o->deferred[D_NNODES] = s;
    r = rdzv_opt_parse(&prog, argc, argv, ret_first_arg);
    /* checked after --help-options too: the option tests read the verdict so */
    for (const struct rdzv_opt *e = table; r >= 0 && e->kind != RDZV_OPT_END; e++) {
        struct rdzv_opt real;
        size_t k;

        if (e->kind != RDZV_OPT_CALLBACK || e->cb != defer_cb)
            continue;
        k = (size_t)((const char **)e->dest - o->deferred);
        if (!o->deferred[k])
            continue;
        real = *e;
        real.dest = deferred_dest(o, k);
        if (deferred_checks[k](&prog, &real, o->deferred[k]) < 0)
            r = -EINVAL;
    }
    return r < 0 ? -EINVAL : r;
}

/* addr is an IPv4 or IPv6 address (what a listener binds), not a name? */
static bool is_ip_address(const char *addr)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, addr, buf) == 1 || inet_pton(AF_INET6, addr, buf) == 1;
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
    o->bad_node_failures = AGENT_BAD_NODE_FAILURES;
    o->bad_node_window_s = AGENT_BAD_NODE_WINDOW_S;
    o->restart_backoff_s = AGENT_RESTART_BACKOFF_S;
    o->straggler_factor = AGENT_STRAGGLER_FACTOR;
    o->straggler_window_s = AGENT_STRAGGLER_WINDOW_S;
    o->preflight_fraction = RDZV_PF_FRACTION_DEFAULT;
    o->health_timeout_s = AGENT_HEALTH_TIMEOUT_S;
    o->health_interval_s = AGENT_HEALTH_INTERVAL_S;
    o->nccl = RDZV_NCCL_AUTO;
    o->nccl_ids = 1;
    o->level = RDZV_LOG_INFO;
    o->is_host = -1;
    o->master_port = -1;
    o->metrics_port = -1;
    r = parse_table(o, argc, argv, &first_arg);
    if (r != 0)
        return r;
    if (first_arg < argc) {
        o->argv = argv + first_arg;
        /* torchrun's argparse drops the line's first "--" when it comes right after the script
         * (`torchrun train.py -- x`: the script gets x), unless a "--" before the script was
         * that first one. */
        if (first_arg + 1 < argc && strcmp(argv[first_arg + 1], "--") == 0 &&
            !(first_arg > 1 && strcmp(argv[first_arg - 1], "--") == 0))
            memmove(&argv[first_arg + 1], &argv[first_arg + 2],
                    (size_t)(argc - first_arg - 1) * sizeof(*argv)); /* the NULL too */
    }
    if (agent_opts_torchrun(o, argc, argv, first_arg) < 0)
        return -EINVAL;

    if (o->standalone) {
        /* a scheduler's node count is no demand: one node, as asked */
        if (o->max_nodes > 1 && o->deferred_typed[D_NNODES][0]) {
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
    if (!o->standalone && agent_opts_port_is_zero(o->endpoint)) {
        if (o->max_nodes > 1) {
            fprintf(stderr, "rdzv-agent: endpoint '%s': port 0 (a free port, as torchrun) serves "
                            "one node; with --nnodes %" PRId64 " give the port the other nodes "
                            "connect to\n",
                    o->endpoint, o->max_nodes);
            return -EINVAL;
        }
        o->free_port = true;
        o->may_host = o->must_host = false; /* the embedded rdzvd is the host */
    }
    if (!o->endpoint && !o->standalone) {
        fprintf(stderr, "rdzv-agent: no rdzvd to join: pass --endpoint HOST:PORT (rdzvd's "
                        "address), --master-addr/--master-port (static), or --standalone for a "
                        "single node\n");
        return -EINVAL;
    }
    if (!o->run_id && !(o->run_id = agent_sched_job_id())) {
        fprintf(stderr, "rdzv-agent: no job id: pass --rdzv-id ID, the same on every node (Slurm, "
                        "PBS and Grid Engine jobs get one from SLURM_JOB_ID / PBS_JOBID / "
                        "JOB_ID)\n");
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
        if (!src && agent_sge_job() && (s = getenv("PE_HOSTFILE")) && *s &&
            agent_sge_node_rank(s, &o->node_rank) == 0)
            src = "PE_HOSTFILE";
        o->rank_hint = src != NULL; /* the scheduler's numbering: a preference */
    }
    if (o->backend == AGENT_BACKEND_STATIC) {
        o->min_nodes = o->max_nodes; /* torchrun's static world: fixed */
        if (o->is_host < 0)
            o->must_host = o->may_host = o->node_rank == 0;
        else
            o->must_host = o->is_host == 1;
    }
    if (!o->replicas)
        o->replicas = o->backend == AGENT_BACKEND_C10D && o->max_nodes >= 3 ? 3 : 1;
    o->heartbeat_s = o->heartbeat_timeout_s / 5;
    if (o->health_interval_s > 0 && o->health_interval_s < 0.1) {
        fprintf(stderr, "rdzv-agent: invalid --health-interval '%g': expected 0 (off) or 0.1 to "
                        "86400 seconds (see rdzv-agent --help)\n",
                o->health_interval_s);
        return -EINVAL;
    }
    if (o->join_timeout_s > 86400)
        o->join_timeout_s = 86400;
    if (o->metrics_bind && !is_ip_address(o->metrics_bind)) {
        fprintf(stderr, "rdzv-agent: invalid --metrics-bind '%s': give an IP address of this "
                        "host (127.0.0.1, the default, serves this host only; 0.0.0.0 every "
                        "interface)\n", o->metrics_bind);
        return -EINVAL;
    }
    if (o->bad_node_window_s > 0 && o->bad_node_failures > RDZV_BAD_NODE_WINDOWED_MAX) {
        fprintf(stderr, "rdzv-agent: --bad-node-failures %" PRId64 " with --bad-node-window: "
                        "rdzvd keeps %d failures per node; give at most %d, or "
                        "--bad-node-window 0 (every failure within the job counts)\n",
                o->bad_node_failures, RDZV_BAD_NODE_WINDOWED_MAX, RDZV_BAD_NODE_WINDOWED_MAX);
        return -EINVAL;
    }
    if (o->node_rank >= o->max_nodes && !o->rank_hint) {
        fprintf(stderr, "rdzv-agent: node rank %" PRId64 " is out of range for --nnodes %" PRId64
                        ":%" PRId64 " (ranks 0..%" PRId64 ")\n",
                o->node_rank, o->min_nodes, o->max_nodes, o->max_nodes - 1);
        return -EINVAL;
    }
    agent_opts_name_flags(o);
    return 0;
}
