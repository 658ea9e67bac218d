/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-agent.c: main(): options, rendezvous with rdzvd, run the local workers, exit status. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#include "../common/rdzv-auth.h"
#include "../common/rdzv-log.h"
#include "../common/rdzv-util.h"
#include "../daemon/rdzvd-daemon.h"
#include "../daemon/rdzvd-server.h"
#include "../proto/rdzv-frame.h"
#include "../proto/rdzv-msg.h"
#include "agent-client.h"
#include "agent-nccl.h"
#include "agent-reaper.h"
#include "agent-workers.h"

struct agent_opts {
    int64_t min_nodes, max_nodes;
    int64_t nproc;           /* 0 until resolved */
    const char *nproc_arg;
    const char *endpoint;
    const char *run_id;
    int64_t node_rank;       /* -1: not asked for */
    int64_t max_restarts;
    bool standalone;
    const char *log_dir;
    const char *role;
    double last_call_s;
    double grace_s;
    double connect_timeout_s;
    double heartbeat_s;
    double heartbeat_timeout_s;
    double join_timeout_s;
    bool scale_up_now;
    bool rank_hint;          /* node_rank came from the scheduler's environment */
    enum rdzv_nccl_mode nccl;
    int64_t nccl_ids;
    const char *host;        /* advertised host name */
    bool isolate_gpus;
    enum rdzv_log_level level;
    const char *token_file;  /* prove this secret to rdzvd (--token-file) */
    char **argv;             /* worker command */
};

/* JOINING: waiting for a ROUND (no workers). RUNNING: this generation's workers run. LEFT: they
 * all exited 0, LEAVE sent, waiting for the job's outcome. RESTARTING: stopping them for a new
 * generation (after EVENT restart, or after one failed here). STOPPING: stopping them for good. */
enum agent_state { AG_JOINING, AG_RUNNING, AG_LEFT, AG_RESTARTING, AG_STOPPING, AG_DONE };

struct agent {
    uv_loop_t *loop;
    struct agent_opts o;
    enum agent_state state;
    struct agent_client *client;
    struct agent_group *group;
    struct rdzvd_server *embedded; /* --standalone */
    struct rdzv_token *token;      /* --token-file */
    struct agent_nccl_root *nccl;  /* holder of this generation's NCCL bootstrap roots */
    uint64_t nccl_generation;
    uv_signal_t sigs[6];
    uv_timer_t heartbeat;
    struct rdzv_round round;   /* the current (or last) generation's assignment */
    char **devices;
    int exit_code;
    bool local_failure;        /* one of our workers failed */
    bool have_outcome;
    bool workers_gone;
    struct rdzv_event outcome;
    uint64_t stopping_gen;     /* RESTARTING: the generation being stopped */
    bool restart_pending;      /* EVENT restart for stopping_gen received: READY once stopped */
    bool pending_exit;         /* a WORKER_EXIT that could not be sent (daemon unreachable) */
    struct rdzv_worker_exit pexit;
    struct rdzv_join join;     /* what JOIN says; resume filled in on reconnects */
    char dhost[256];           /* rdzvd's host and port */
    uint16_t dport;
    char self_exe[PATH_MAX];
    char train_path[PATH_MAX];
    char *train_argv[2];
    char endpoint_buf[300];
    char run_id_buf[64];
};

static const int forwarded_signals[6] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: rdzv-agent [OPTIONS] [-- COMMAND [ARGS...]]\n"
            "Join a job's rendezvous on rdzvd and run one worker per local GPU (or --nproc).\n"
            "\n"
            "  --nnodes N|MIN:MAX        nodes in the job (default: $SLURM_NNODES or 1)\n"
            "  --nproc, --nproc-per-node N|gpu|auto\n"
            "                            workers on this node (default 1; gpu: one per visible GPU;\n"
            "                            auto: GPUs if any, else CPUs)\n"
            "  --endpoint, --rdzv-endpoint HOST:PORT\n"
            "                            rdzvd's address (port default 29400)\n"
            "  --rdzv-id ID              job id shared by all nodes (default: $SLURM_JOB_ID, then\n"
            "                            $PBS_JOBID)\n"
            "  --node-rank N             this node's rank (default: $SLURM_NODEID, then\n"
            "                            $OMPI_COMM_WORLD_RANK, else the order of arrival)\n"
            "  --max-restarts N          job-wide restarts after failures (default 0)\n"
            "  --standalone              one node: run an embedded rdzvd on a free local port\n"
            "  --token-file FILE         the secret rdzvd was started with (--token-file): agent\n"
            "                            and daemon prove it to each other (mode 0600)\n"
            "  --log-dir DIR             also write each worker's output to\n"
            "                            DIR/<run id>/attempt_<k>/<local rank>/{stdout,stderr}.log\n"
            "  --role NAME               ROLE_NAME for the workers (default 'default')\n"
            "  --last-call SEC           after MIN nodes joined, wait this long for more (default 3)\n"
            "  --grace SEC               TERM -> KILL grace when stopping workers (default 30)\n"
            "  --connect-timeout SEC     keep trying to reach rdzvd this long, at start and after\n"
            "                            losing it (workers keep running meanwhile; default 60)\n"
            "  --heartbeat-timeout SEC   a node silent this long counts as lost (default 5; the\n"
            "                            job's first agent sets it for all)\n"
            "  --join-timeout SEC        with fewer than MIN nodes, wait this long for more before\n"
            "                            failing the job (default 600)\n"
            "  --scale-up now|next       a node joining a running job below MAX: restart now to\n"
            "                            take it in, or at the next restart (default next)\n"
            "  --nccl auto|required|off  NCCL unique ids for the workers (default auto: when\n"
            "                            libnccl can be loaded on node rank 0)\n"
            "  --nccl-ids N              ids per generation, for ncclCommInitRankScalable (default 1)\n"
            "  --host NAME               how this node is named in logs (default: hostname)\n"
            "  --isolate-gpus            give each worker only its own GPU in CUDA_VISIBLE_DEVICES\n"
            "  --log-level LEVEL         error, warn, info (default), debug\n"
            "  -h, --help                show this help\n"
            "  -V, --version             show the version\n"
            "\n"
            "Without a COMMAND the built-in NCCL trainer rdzv-train runs. Every option can also be\n"
            "set as RDZV_<OPTION> in the environment (e.g. RDZV_NNODES=2, RDZV_ENDPOINT=h:29400);\n"
            "flags win. Workers get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,\n"
            "MASTER_ADDR, ...), plus RDZV_NCCL_UNIQUE_ID, RDZV_GENERATION and RDZV_ENDPOINT.\n");
}

enum {
    OPT_NNODES = 256,
    OPT_NPROC,
    OPT_ENDPOINT,
    OPT_RDZV_ID,
    OPT_NODE_RANK,
    OPT_MAX_RESTARTS,
    OPT_STANDALONE,
    OPT_LOG_DIR,
    OPT_ROLE,
    OPT_LAST_CALL,
    OPT_GRACE,
    OPT_CONNECT_TIMEOUT,
    OPT_HEARTBEAT_TIMEOUT,
    OPT_JOIN_TIMEOUT,
    OPT_SCALE_UP,
    OPT_NCCL,
    OPT_NCCL_IDS,
    OPT_HOST,
    OPT_ISOLATE_GPUS,
    OPT_LOG_LEVEL,
    OPT_TOKEN_FILE,
};

static const struct option longopts[] = {
    {"nnodes", required_argument, NULL, OPT_NNODES},
    {"nproc", required_argument, NULL, OPT_NPROC},
    {"nproc-per-node", required_argument, NULL, OPT_NPROC},
    {"endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"rdzv-endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"rdzv-id", required_argument, NULL, OPT_RDZV_ID},
    {"node-rank", required_argument, NULL, OPT_NODE_RANK},
    {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"standalone", no_argument, NULL, OPT_STANDALONE},
    {"log-dir", required_argument, NULL, OPT_LOG_DIR},
    {"role", required_argument, NULL, OPT_ROLE},
    {"last-call", required_argument, NULL, OPT_LAST_CALL},
    {"grace", required_argument, NULL, OPT_GRACE},
    {"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},
    {"heartbeat-timeout", required_argument, NULL, OPT_HEARTBEAT_TIMEOUT},
    {"join-timeout", required_argument, NULL, OPT_JOIN_TIMEOUT},
    {"scale-up", required_argument, NULL, OPT_SCALE_UP},
    {"nccl", required_argument, NULL, OPT_NCCL},
    {"nccl-ids", required_argument, NULL, OPT_NCCL_IDS},
    {"host", required_argument, NULL, OPT_HOST},
    {"isolate-gpus", no_argument, NULL, OPT_ISOLATE_GPUS},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {0},
};

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

static int parse_secs(const char *opt, const char *val, double *ret)
{
    char *end;
    double v = strtod(val, &end);

    if (*val == '\0' || *end != '\0' || !(v >= 0) || v > 1e7)
        return bad(opt, val, "expected a number of seconds");
    *ret = v;
    return 0;
}

static int apply(struct agent_opts *o, int c, const char *val)
{
    switch (c) {
    case OPT_NNODES: {
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
    case OPT_NPROC:
        if (strcmp(val, "gpu") && strcmp(val, "auto") &&
            parse_int("--nproc", val, 1, 1024, &o->nproc) < 0)
            return -EINVAL;
        o->nproc_arg = val;
        return 0;
    case OPT_ENDPOINT:
        o->endpoint = val;
        return 0;
    case OPT_RDZV_ID:
        if (!*val || strlen(val) > RDZV_ID_MAX)
            return bad("--rdzv-id", val, "expected 1 to 128 characters");
        o->run_id = val;
        return 0;
    case OPT_NODE_RANK:
        return parse_int("--node-rank", val, 0, 99999, &o->node_rank);
    case OPT_MAX_RESTARTS:
        return parse_int("--max-restarts", val, 0, 1000000, &o->max_restarts);
    case OPT_STANDALONE:
        o->standalone = true;
        return 0;
    case OPT_LOG_DIR:
        o->log_dir = val;
        return 0;
    case OPT_ROLE:
        o->role = val;
        return 0;
    case OPT_LAST_CALL:
        return parse_secs("--last-call", val, &o->last_call_s);
    case OPT_GRACE:
        return parse_secs("--grace", val, &o->grace_s);
    case OPT_CONNECT_TIMEOUT:
        return parse_secs("--connect-timeout", val, &o->connect_timeout_s);
    case OPT_HEARTBEAT_TIMEOUT:
        if (parse_secs("--heartbeat-timeout", val, &o->heartbeat_timeout_s) < 0)
            return -EINVAL;
        if (o->heartbeat_timeout_s < 0.1 || o->heartbeat_timeout_s > 3600)
            return bad("--heartbeat-timeout", val, "expected 0.1 to 3600 seconds");
        return 0;
    case OPT_JOIN_TIMEOUT:
        return parse_secs("--join-timeout", val, &o->join_timeout_s);
    case OPT_SCALE_UP:
        if (strcmp(val, "now") && strcmp(val, "next"))
            return bad("--scale-up", val, "expected now or next");
        o->scale_up_now = strcmp(val, "now") == 0;
        return 0;
    case OPT_NCCL:
        if (rdzv_nccl_mode_parse(val, &o->nccl) < 0)
            return bad("--nccl", val, "expected auto, required or off");
        return 0;
    case OPT_NCCL_IDS:
        return parse_int("--nccl-ids", val, 1, RDZV_MAX_NCCL_IDS, &o->nccl_ids);
    case OPT_HOST:
        o->host = val;
        return 0;
    case OPT_ISOLATE_GPUS:
        o->isolate_gpus = true;
        return 0;
    case OPT_LOG_LEVEL:
        if (rdzv_log_parse_level(val, &o->level) < 0)
            return bad("--log-level", val, "expected error, warn, info or debug");
        return 0;
    case OPT_TOKEN_FILE:
        o->token_file = val;
        return 0;
    case 'h':
        usage(stdout);
        return 1;
    case 'V':
        printf("rdzv-agent %s\n", RDZV_VERSION);
        return 1;
    default:
        fprintf(stderr, "rdzv-agent: unknown option; see rdzv-agent --help\n");
        return -EINVAL;
    }
}

/* RDZV_<OPTION> for each long option (the first spelling of each), before the command line. */
static int apply_env(struct agent_opts *o)
{
    for (const struct option *lo = longopts; lo->name; lo++) {
        char name[64];
        const char *val;

        if (lo != longopts && lo[-1].val == lo->val)
            continue; /* alias: --nproc-per-node reads RDZV_NPROC */
        rdzv_env_name("RDZV", lo->name, name, sizeof(name));
        if (strcmp(name, "RDZV_RDZV_ID") == 0 && getenv("RDZV_ID"))
            val = getenv("RDZV_ID");
        else
            val = getenv(name);
        if (!val || !*val)
            continue;
        if (lo->has_arg == no_argument) {
            if (strcmp(val, "0") && strcasecmp(val, "false") && strcasecmp(val, "no"))
                (void)apply(o, lo->val, NULL);
            continue;
        }
        if (apply(o, lo->val, val) < 0) {
            fprintf(stderr, "rdzv-agent: (from the environment variable %s)\n", name);
            return -EINVAL;
        }
    }
    return 0;
}

/* Visible GPUs: CUDA_VISIBLE_DEVICES entries when set, else the driver's device list. */
static int list_gpus(char ***ret)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    char **list = NULL;
    int n = 0;

    if (cvd) {
        char *copy = strdup(cvd), *save = NULL, *tok;

        for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (!*tok)
                continue;
            list = realloc(list, sizeof(*list) * (size_t)(n + 1));
            list[n++] = strdup(tok);
        }
        free(copy);
    } else {
        uv_dirent_t ent;
        uv_fs_t req;

        if (uv_fs_scandir(NULL, &req, "/proc/driver/nvidia/gpus", 0, NULL) > 0) {
            while (uv_fs_scandir_next(&req, &ent) != UV_EOF) {
                char idx[16];

                snprintf(idx, sizeof(idx), "%d", n);
                list = realloc(list, sizeof(*list) * (size_t)(n + 1));
                list[n++] = strdup(idx);
            }
        }
        uv_fs_req_cleanup(&req);
    }
    *ret = list;
    return n;
}

static int resolve_opts(struct agent *a, int argc, char **argv)
{
    struct agent_opts *o = &a->o;
    const char *s;
    int c, r;

    o->node_rank = -1;
    o->last_call_s = 3;
    o->grace_s = 30;
    o->connect_timeout_s = 60;
    o->heartbeat_timeout_s = RDZV_HEARTBEAT_TIMEOUT_MS / 1000.0;
    o->join_timeout_s = RDZV_JOIN_TIMEOUT_MS / 1000.0;
    o->nccl = RDZV_NCCL_AUTO;
    o->nccl_ids = 1;
    o->level = RDZV_LOG_INFO;
    if ((s = getenv("SLURM_NNODES")) || (s = getenv("SLURM_JOB_NUM_NODES")))
        if (apply(o, OPT_NNODES, s) < 0)
            o->min_nodes = o->max_nodes = 0;
    r = apply_env(o);
    if (r < 0)
        return r;
    while ((c = getopt_long(argc, argv, "+hV", longopts, NULL)) != -1) {
        r = apply(o, c == '?' ? 0 : c, optarg);
        if (r != 0)
            return r;
    }
    if (optind < argc)
        o->argv = argv + optind;

    if (o->standalone) {
        if (o->max_nodes > 1) {
            fprintf(stderr, "rdzv-agent: --standalone runs one node; drop --nnodes or use "
                            "--endpoint\n");
            return -EINVAL;
        }
        o->min_nodes = o->max_nodes = 1;
        if (!o->run_id) {
            snprintf(a->run_id_buf, sizeof(a->run_id_buf), "standalone-%016" PRIx64,
                     rdzv_random_u64());
            o->run_id = a->run_id_buf;
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

/* No command: the trainer, from beside this binary (installed), the build tree, or PATH. */
static int default_worker(struct agent *a)
{
    static const char *const rel[] = {"rdzv-train", "../train/rdzv-train"};
    char dir[PATH_MAX], *slash;

    snprintf(dir, sizeof(dir), "%s", a->self_exe);
    slash = strrchr(dir, '/');
    for (unsigned i = 0; slash && i < RDZV_ARRAY_SIZE(rel); i++) {
        *slash = '\0';
        snprintf(a->train_path, sizeof(a->train_path), "%.*s/%s", PATH_MAX - 32, dir, rel[i]);
        if (access(a->train_path, X_OK) == 0)
            goto found;
    }
    if (rdzv_find_in_path("rdzv-train", a->train_path, sizeof(a->train_path)) == 0)
        goto found;
    fprintf(stderr, "rdzv-agent: no worker command, and the built-in trainer rdzv-train is not "
                    "installed (it needs gloo or CUDA at build time); give a command after --, "
                    "e.g. rdzv-agent ... -- python3 train.py\n");
    return -ENOENT;
found:
    a->train_argv[0] = a->train_path;
    a->train_argv[1] = NULL;
    a->o.argv = a->train_argv;
    log_info("no command given: running the trainer %s", a->train_path);
    return 0;
}

static void agent_finish(struct agent *a);
static int agent_connect(struct agent *a);

static void send_ready(struct agent *a, uint64_t gen)
{
    log_info("workers of generation %" PRIu64 " stopped; ready for the next round", gen);
    a->state = AG_JOINING;
    a->restart_pending = false;
    (void)agent_client_send(a->client, RDZV_MSG_READY,
                            json_pack("{s:I}", "generation", (json_int_t)gen));
}

/* Tell the daemon a worker failed: it picks the job's root cause and tells every node. Kept for
 * the next connection when the daemon can't be reached now. */
static void report_failure(struct agent *a, int64_t rank, int64_t local_rank, int64_t code, int sig)
{
    struct rdzv_worker_exit *w = &a->pexit;
    struct timeval tv;

    gettimeofday(&tv, NULL);
    memset(w, 0, sizeof(*w));
    w->generation = a->round.generation;
    w->rank = rank;
    w->local_rank = local_rank;
    w->exit_code = code;
    w->signal = sig;
    w->time = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
    snprintf(w->host, sizeof(w->host), "%s", a->o.host);
    a->pending_exit =
        agent_client_send(a->client, RDZV_MSG_WORKER_EXIT, rdzv_msg_worker_exit_obj(w)) < 0;
}

static void on_group_exit(struct agent_group *g, unsigned local_rank, int64_t status, int sig,
                          void *ud)
{
    struct agent *a = ud;
    int64_t rank = a->round.rank_offset + local_rank;

    (void)g;
    if (status == 0 && sig == 0) {
        log_info("worker rank %" PRId64 " (local rank %u) exited 0", rank, local_rank);
        return;
    }
    if (sig)
        log_warn("worker rank %" PRId64 " (local rank %u) was killed by signal %d (%s)", rank,
                 local_rank, sig, strsignal(sig));
    else
        log_warn("worker rank %" PRId64 " (local rank %u) exited with code %" PRId64, rank,
                 local_rank, status);
    if (a->state != AG_RUNNING)
        return; /* stopping anyway: a consequence, not a cause */
    a->local_failure = true;
    /* Report first, then stop the rest of our workers at once (fail fast); the daemon answers
     * with a restart or the job's end. */
    report_failure(a, rank, local_rank, sig ? 128 + sig : status, sig);
    a->state = AG_RESTARTING;
    a->stopping_gen = a->round.generation;
    a->restart_pending = false;
    agent_group_stop(a->group, SIGTERM);
}

static void on_group_all_exited(struct agent_group *g, void *ud)
{
    struct agent *a = ud;

    (void)g;
    a->workers_gone = true;
    if (a->have_outcome) {
        agent_finish(a);
        return;
    }
    if (a->state == AG_RUNNING && !a->local_failure) {
        /* All ours exited 0: wait for the job's outcome (no long exit barrier: a failure
         * elsewhere arrives as an EVENT at once). */
        log_info("all %" PRId64 " local workers exited 0; waiting for the other nodes",
                 a->o.nproc);
        (void)agent_client_send(a->client, RDZV_MSG_LEAVE,
                                json_pack("{s:I, s:s}", "generation",
                                          (json_int_t)a->round.generation, "status", "succeeded"));
        a->state = AG_LEFT;
    } else if (a->state == AG_RESTARTING && a->restart_pending) {
        send_ready(a, a->stopping_gen);
    }
}

static void on_round(struct agent_client *c, const struct rdzv_round *r, void *ud)
{
    struct agent *a = ud;
    struct agent_assignment as = {
        .generation = r->generation,
        .node_rank = (unsigned)r->node_rank,
        .nnodes = (unsigned)r->nnodes,
        .rank_offset = (unsigned)r->rank_offset,
        .world_size = (unsigned)r->world_size,
        .master_addr = r->master_addr,
        .master_port = (unsigned)r->master_port,
        .nccl_id_hex = r->n_ids ? r->ids[0] : NULL,
        .restart_count = (unsigned)r->restart_count,
    };
    int e;

    (void)c;
    if (a->state != AG_JOINING) {
        log_warn("ROUND for generation %" PRIu64 " while workers still run: ignored",
                 r->generation);
        return;
    }
    a->round = *r;
    if (!a->embedded)
        rdzv_log_set_context("job=%s gen=%" PRIu64 " node=%s", a->o.run_id, r->generation,
                             a->o.host);
    log_info("generation %" PRIu64 ": node rank %" PRId64 " of %" PRId64 ", ranks %" PRId64
             "..%" PRId64 " of %" PRId64 ", store %s:%" PRId64 ", restart %" PRId64 " of %" PRId64,
             r->generation, r->node_rank, r->nnodes, r->rank_offset,
             r->rank_offset + a->o.nproc - 1, r->world_size, r->master_addr, r->master_port,
             r->restart_count, r->max_restarts);
    a->state = AG_RUNNING;
    a->workers_gone = false;
    a->local_failure = false;
    e = agent_group_start(a->group, &as);
    if (e < 0) {
        log_error_errno(e, "cannot start the workers");
        a->local_failure = true;
        a->state = AG_RESTARTING;
        a->stopping_gen = r->generation;
        report_failure(a, r->rank_offset, 0, 127, 0);
    }
    /* Tell the daemon at once that we are alive and past the start (ends its start grace). */
    (void)agent_client_send(a->client, RDZV_MSG_HEARTBEAT,
                            json_pack("{s:I}", "generation", (json_int_t)r->generation));
}

static void on_nccl_ids(struct agent_nccl_root *root, int err, unsigned n,
                        char (*ids)[RDZV_NCCL_HEX_LEN + 1], const char *msg, void *ud)
{
    struct agent *a = ud;
    json_t *arr;

    (void)root;
    if (err < 0) {
        if (a->o.nccl == RDZV_NCCL_REQUIRED)
            log_error("this job needs NCCL: %s", msg);
        else
            log_info("no NCCL id for the workers: %s", msg);
        (void)agent_client_send(a->client, RDZV_MSG_NCCL_ID,
                                json_pack("{s:I, s:s}", "generation",
                                          (json_int_t)a->nccl_generation, "error", msg));
        return;
    }
    arr = json_array();
    for (unsigned i = 0; arr && i < n; i++)
        json_array_append_new(arr, json_string(ids[i]));
    (void)agent_client_send(a->client, RDZV_MSG_NCCL_ID,
                            json_pack("{s:I, s:o}", "generation", (json_int_t)a->nccl_generation,
                                      "ids", arr));
}

static void on_nccl_request(struct agent_client *c, uint64_t gen, unsigned count, void *ud)
{
    struct agent *a = ud;
    int r;

    /* A new generation: the previous one's roots are of no use any more. */
    agent_nccl_root_stop(a->nccl, false);
    a->nccl = NULL;
    a->nccl_generation = gen;
    r = agent_nccl_root_start(a->loop, a->self_exe, count, on_nccl_ids, a, &a->nccl);
    if (r < 0) {
        char msg[128];

        snprintf(msg, sizeof(msg), "cannot start the NCCL root holder: %s", uv_strerror(r));
        on_nccl_ids(NULL, r, 0, NULL, msg, a);
    }
    (void)c;
}

/* The daemon says: stop the workers of generation e->generation, a new round follows. */
static void on_restart(struct agent *a, const struct rdzv_event *e)
{
    switch (a->state) {
    case AG_RUNNING:
        if (a->round.generation != e->generation)
            break;
        log_warn("restarting: %s", e->summary);
        a->state = AG_RESTARTING;
        a->stopping_gen = e->generation;
        a->restart_pending = true;
        agent_group_stop(a->group, SIGTERM);
        return;
    case AG_RESTARTING:
        if (a->stopping_gen != e->generation)
            break;
        if (!a->local_failure)
            log_warn("restarting: %s", e->summary);
        a->restart_pending = true;
        if (a->workers_gone)
            send_ready(a, e->generation);
        return;
    case AG_LEFT:
        if (a->round.generation != e->generation)
            break;
        log_warn("restarting (our workers had finished): %s", e->summary);
        send_ready(a, e->generation);
        return;
    case AG_JOINING:
        send_ready(a, e->generation); /* nothing runs here */
        return;
    default:
        return;
    }
    log_debug("restart of generation %" PRIu64 " ignored (state %d)", e->generation, a->state);
}

static void on_event(struct agent_client *c, const struct rdzv_event *e, void *ud)
{
    struct agent *a = ud;

    (void)c;
    if (strcmp(e->type, "restart") == 0) {
        on_restart(a, e);
        return;
    }
    a->outcome = *e;
    a->have_outcome = true;
    if (strcmp(e->type, "succeeded") == 0) {
        a->exit_code = 0;
    } else {
        a->exit_code = e->exit_code ? (int)e->exit_code : 1;
        if (!a->workers_gone && (a->state == AG_RUNNING || a->state == AG_RESTARTING)) {
            if (a->state == AG_RUNNING)
                log_warn("job failed on another node; stopping local workers");
            a->state = AG_STOPPING;
            agent_group_stop(a->group, SIGTERM);
            return;
        }
    }
    if (a->workers_gone || a->state == AG_JOINING)
        agent_finish(a);
}

/* Fatal: the daemon refused us, or could not be reached (again) in time. */
static void on_error(struct agent_client *c, const char *msg, void *ud)
{
    struct agent *a = ud;

    (void)c;
    log_error("%s", msg);
    if (a->have_outcome)
        return;
    snprintf(a->outcome.type, sizeof(a->outcome.type), "failed");
    snprintf(a->outcome.summary, sizeof(a->outcome.summary), "%s", msg);
    a->have_outcome = true;
    if (a->exit_code == 0)
        a->exit_code = 1;
    if (!a->workers_gone && a->state != AG_JOINING && a->state != AG_DONE) {
        a->state = AG_STOPPING;
        agent_group_stop(a->group, SIGTERM);
    } else {
        agent_finish(a);
    }
}

static void on_joined(struct agent_client *c, bool spare, bool resumed, void *ud)
{
    struct agent *a = ud;

    (void)c;
    if (resumed)
        log_info("reconnected to rdzvd: generation %" PRIu64 " goes on", a->round.generation);
    else if (spare)
        log_info("the job runs without this node for now: waiting as a spare");
    if (a->pending_exit) {
        a->pending_exit = agent_client_send(a->client, RDZV_MSG_WORKER_EXIT,
                                            rdzv_msg_worker_exit_obj(&a->pexit)) < 0;
    }
}

/* The connection to rdzvd broke: keep the workers, reconnect and re-register. */
static void on_lost(struct agent_client *c, const char *msg, void *ud)
{
    struct agent *a = ud;
    int r;

    log_warn("%s; workers keep running, reconnecting (for up to %.0f s)", msg,
             a->o.connect_timeout_s);
    agent_client_close(c, NULL, NULL);
    a->client = NULL;
    r = agent_connect(a);
    if (r < 0)
        on_error(NULL, "cannot reconnect to rdzvd", a);
}

static void heartbeat_cb(uv_timer_t *t)
{
    struct agent *a = t->data;

    if (a->client && a->state != AG_DONE)
        (void)agent_client_send(a->client, RDZV_MSG_HEARTBEAT,
                                json_pack("{s:I}", "generation", (json_int_t)a->round.generation));
}

static void signal_cb(uv_signal_t *h, int signum)
{
    struct agent *a = h->data;

    if (signum == SIGUSR1 || signum == SIGUSR2) {
        /* Slurm's --signal=USR1@T warns of the time limit: pass it on, keep running. */
        log_info("forwarding %s to the workers", strsignal(signum));
        if (a->group)
            agent_group_signal(a->group, signum);
        return;
    }
    log_warn("received %s: stopping the workers (grace %.0f s, then SIGKILL)", strsignal(signum),
             a->o.grace_s);
    if (!a->have_outcome) {
        snprintf(a->outcome.type, sizeof(a->outcome.type), "failed");
        snprintf(a->outcome.summary, sizeof(a->outcome.summary), "the agent received %s",
                 strsignal(signum));
        a->have_outcome = true;
        a->exit_code = 128 + signum;
    }
    if (!a->workers_gone &&
        (a->state == AG_RUNNING || a->state == AG_RESTARTING || a->state == AG_STOPPING)) {
        a->state = AG_STOPPING;
        agent_group_stop(a->group, signum);
    } else {
        agent_finish(a);
    }
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Everything is over: report and stop the loop (main() returns a->exit_code). */
static void agent_finish(struct agent *a)
{
    if (a->state == AG_DONE)
        return;
    a->state = AG_DONE;
    if (a->exit_code == 0)
        log_info("job %s succeeded", a->o.run_id);
    else
        fprintf(stderr, "rdzv-agent: job %s failed (exit code %d): %s\n", a->o.run_id,
                a->exit_code, a->outcome.summary[0] ? a->outcome.summary : "see the log above");
    uv_stop(a->loop);
}

/* (Re)connect to rdzvd and JOIN; after a loss, say which generation our workers run. */
static int agent_connect(struct agent *a)
{
    struct rdzv_resume *rs = &a->join.resume;
    bool running = a->state == AG_RUNNING || a->state == AG_LEFT || a->state == AG_RESTARTING;
    int r;

    memset(rs, 0, sizeof(*rs));
    if (running && a->round.generation) {
        rs->generation = a->round.generation;
        rs->node_rank = a->round.node_rank;
        rs->nnodes = a->round.nnodes;
        rs->rank_offset = a->round.rank_offset;
        rs->world_size = a->round.world_size;
        rs->restart_count = a->round.restart_count;
        rs->master_port = a->round.master_port;
        rs->left = a->state == AG_LEFT;
    }
    r = agent_client_start(a->loop, a->dhost, a->dport, (uint64_t)(a->o.connect_timeout_s * 1000),
                           &a->join,
                           &(struct agent_client_cbs){.on_round = on_round,
                                                      .on_nccl_request = on_nccl_request,
                                                      .on_event = on_event,
                                                      .on_error = on_error,
                                                      .on_lost = a->embedded ? NULL : on_lost,
                                                      .on_joined = on_joined},
                           a, &a->client);
    if (r == 0)
        agent_client_set_silence(a->client, (uint64_t)(a->o.heartbeat_timeout_s * 1000));
    if (r == 0 && a->token)
        agent_client_set_token(a->client, a->token);
    return r;
}

/* --token-file: read it once (the embedded daemon of --standalone needs none: loopback only). */
static int load_token(struct agent *a)
{
    char err[512];

    if (!a->o.token_file || a->o.standalone)
        return 0;
    a->token = calloc(1, sizeof(*a->token));
    if (!a->token)
        return -ENOMEM;
    if (rdzv_token_load(a->o.token_file, a->token, err, sizeof(err)) < 0) {
        fprintf(stderr, "rdzv-agent: --token-file: %s\n", err);
        free(a->token);
        a->token = NULL;
        return -EINVAL;
    }
    return 0;
}

static int start_embedded(struct agent *a)
{
    struct rdzvd_config cfg = {
        .bind = "127.0.0.1",
        .port = 0,
        .legacy = RDZV_DIALECT_V20,
        .legacy_allowed = true,
        .lim = RDZV_LIMITS_DEFAULT,
    };
    int r;

    a->embedded = calloc(1, sizeof(*a->embedded));
    if (!a->embedded)
        return -ENOMEM;
    r = rdzvd_daemon_init(a->embedded, a->loop, &cfg);
    if (r == 0)
        r = rdzvd_server_listen(a->embedded);
    if (r < 0)
        return r;
    snprintf(a->endpoint_buf, sizeof(a->endpoint_buf), "127.0.0.1:%u", a->embedded->bound_port);
    a->o.endpoint = a->endpoint_buf;
    log_info("standalone: embedded rdzvd on %s", a->o.endpoint);
    return 0;
}

int main(int argc, char **argv)
{
    struct agent a = {0};
    struct agent_group_cfg gcfg = {0};
    struct rdzv_join *jn;
    char host[256], hn[200] = "localhost";
    uint16_t port = RDZV_DEFAULT_PORT;
    uv_loop_t loop;
    char **gpus = NULL;
    int ngpus, r;

    if (argc > 1 && strcmp(argv[1], "--reaper") == 0)
        return agent_reaper_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "--nccl-root") == 0)
        return agent_nccl_root_main(argc, argv);

    r = resolve_opts(&a, argc, argv);
    if (r != 0)
        return r > 0 ? 0 : 2;
    if (load_token(&a) < 0)
        return 2;
    rdzv_log_setup("rdzv-agent", a.o.level);
    signal(SIGPIPE, SIG_IGN);
    (void)gethostname(hn, sizeof(hn) - 1);
    if (!a.o.host)
        a.o.host = hn;

    ngpus = list_gpus(&gpus);
    if (a.o.nproc_arg && strcmp(a.o.nproc_arg, "gpu") == 0) {
        if (ngpus == 0) {
            fprintf(stderr, "rdzv-agent: --nproc gpu: no GPU is visible on this node "
                            "(CUDA_VISIBLE_DEVICES and /proc/driver/nvidia); give a number\n");
            return 2;
        }
        a.o.nproc = ngpus;
    } else if (a.o.nproc_arg && strcmp(a.o.nproc_arg, "auto") == 0) {
        a.o.nproc = ngpus > 0 ? ngpus : (int64_t)sysconf(_SC_NPROCESSORS_ONLN);
    } else if (a.o.nproc == 0) {
        a.o.nproc = 1;
    }
    if (a.o.isolate_gpus) {
        if (ngpus < a.o.nproc) {
            fprintf(stderr, "rdzv-agent: --isolate-gpus: %d GPU(s) visible for %" PRId64
                            " workers\n",
                    ngpus, a.o.nproc);
            return 2;
        }
        gcfg.devices = (const char *const *)gpus;
    }

    if (uv_exepath(a.self_exe, &(size_t){sizeof(a.self_exe)}) < 0)
        snprintf(a.self_exe, sizeof(a.self_exe), "/proc/self/exe");
    if (!a.o.argv && default_worker(&a) < 0) {
        for (int i = 0; i < ngpus; i++)
            free(gpus[i]);
        free(gpus);
        return 2;
    }
    if (uv_loop_init(&loop) < 0)
        return 1;
    a.loop = &loop;
    if (a.o.standalone && (r = start_embedded(&a)) < 0) {
        log_error_errno(r, "cannot start the embedded rdzvd");
        return 1;
    }
    if (rdzv_parse_hostport(a.o.endpoint, host, sizeof(host), &port) < 0) {
        fprintf(stderr, "rdzv-agent: bad --endpoint '%s': expected HOST:PORT\n", a.o.endpoint);
        return 2;
    }

    gcfg.loop = &loop;
    gcfg.argv = a.o.argv;
    gcfg.nproc = (unsigned)a.o.nproc;
    gcfg.role = a.o.role;
    gcfg.run_id = a.o.run_id;
    gcfg.endpoint = a.o.endpoint;
    gcfg.log_dir = a.o.log_dir;
    gcfg.self_exe = a.self_exe;
    gcfg.max_restarts = (unsigned)a.o.max_restarts;
    gcfg.grace_ms = (uint64_t)(a.o.grace_s * 1000);
    gcfg.on_exit = on_group_exit;
    gcfg.on_all_exited = on_group_all_exited;
    gcfg.ud = &a;
    r = agent_group_new(&gcfg, &a.group);
    if (r < 0) {
        log_error_errno(r, "cannot set up the workers");
        return 1;
    }

    for (unsigned i = 0; i < RDZV_ARRAY_SIZE(forwarded_signals); i++) {
        uv_signal_init(&loop, &a.sigs[i]);
        a.sigs[i].data = &a;
        uv_signal_start(&a.sigs[i], signal_cb, forwarded_signals[i]);
    }
    uv_timer_init(&loop, &a.heartbeat);
    a.heartbeat.data = &a;
    uv_timer_start(&a.heartbeat, heartbeat_cb, (uint64_t)(a.o.heartbeat_s * 1000),
                   (uint64_t)(a.o.heartbeat_s * 1000));

    jn = &a.join;
    snprintf(jn->run_id, sizeof(jn->run_id), "%s", a.o.run_id);
    snprintf(jn->host, sizeof(jn->host), "%s", a.o.host);
    snprintf(jn->node_id, sizeof(jn->node_id), "%.64s:%d:%08" PRIx64, hn, (int)getpid(),
             rdzv_random_u64() & 0xffffffffu);
    jn->nproc = a.o.nproc;
    jn->node_rank = a.o.node_rank;
    jn->rank_hint = a.o.rank_hint;
    jn->min = a.o.min_nodes;
    jn->max = a.o.max_nodes;
    jn->last_call_ms = (int64_t)(a.o.last_call_s * 1000);
    jn->max_restarts = a.o.max_restarts;
    jn->nccl = a.o.nccl;
    jn->nccl_ids = a.o.nccl_ids;
    jn->heartbeat_timeout_ms = (int64_t)(a.o.heartbeat_timeout_s * 1000);
    jn->join_timeout_ms = (int64_t)(a.o.join_timeout_s * 1000);
    jn->scale_up_now = a.o.scale_up_now;
    snprintf(a.dhost, sizeof(a.dhost), "%s", host);
    a.dport = port;
    if (!a.embedded)
        rdzv_log_set_context("job=%s node=%s", a.o.run_id, a.o.host);
    log_info("joining job %s at %s as %s (%" PRId64 " workers, nodes %" PRId64 "..%" PRId64 ")",
             a.o.run_id, a.o.endpoint, jn->node_id, a.o.nproc, a.o.min_nodes, a.o.max_nodes);
    r = agent_connect(&a);
    if (r < 0) {
        log_error_errno(r, "cannot start the rdzvd client");
        return 1;
    }

    uv_run(&loop, UV_RUN_DEFAULT);

    /* Tear down: no worker is left running at this point (agent_finish runs after they exit,
     * or before any started). */
    if (a.embedded)
        rdzvd_server_stop(a.embedded);
    agent_nccl_root_stop(a.nccl, true);
    if (a.client)
        agent_client_close(a.client, NULL, NULL);
    agent_group_free(a.group, NULL, NULL);
    uv_walk(&loop, close_walk_cb, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (a.embedded) {
        rdzvd_server_done(a.embedded);
        free(a.embedded);
    }
    (void)uv_loop_close(&loop);
    if (a.token) {
        rdzv_token_wipe(a.token);
        free(a.token);
    }
    for (int i = 0; i < ngpus; i++)
        free(gpus[i]);
    free(gpus);
    return a.exit_code;
}
