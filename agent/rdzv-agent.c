/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-agent.c: main(): rendezvous with rdzvd, run the local workers, exit status. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#include "../common/rdzv-auth.h"
#include "../common/rdzv-log.h"
#include "../common/rdzv-util.h"
#include "../daemon/rdzvd-server.h"
#include "../proto/rdzv-frame.h"
#include "../proto/rdzv-msg.h"
#include "agent-client.h"
#include "agent-gpu.h"
#include "agent-nccl.h"
#include "agent-options.h"
#include "agent-reaper.h"
#include "agent-workers.h"

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
};

static const int forwarded_signals[6] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

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
    (void)agent_client_send_ready(a->client, &(struct rdzv_ready){.generation = gen});
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
    a->pending_exit = agent_client_send_worker_exit(a->client, w) < 0;
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
        (void)agent_client_send_leave(
            a->client, &(struct rdzv_leave){.generation = a->round.generation, .succeeded = true});
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
    (void)agent_client_send_heartbeat(a->client,
                                      &(struct rdzv_heartbeat){.generation = r->generation});
}

static void on_nccl_ids(struct agent_nccl_root *root, int err, unsigned n,
                        char (*ids)[RDZV_NCCL_HEX_LEN + 1], const char *msg, void *ud)
{
    struct agent *a = ud;
    /* ~16 KiB: from the heap, where only the n ids written are faulted in. */
    struct rdzv_nccl_id *m = malloc(sizeof(*m));

    (void)root;
    if (!m) {
        log_error("out of memory answering NCCL_REQUEST");
        return;
    }
    memset(m, 0, offsetof(struct rdzv_nccl_id, ids));
    m->generation = a->nccl_generation;
    if (err < 0) {
        if (a->o.nccl == RDZV_NCCL_REQUIRED)
            log_error("this job needs NCCL: %s", msg);
        else
            log_info("no NCCL id for the workers: %s", msg);
        m->failed = true;
        snprintf(m->error, sizeof(m->error), "%s", msg);
        rdzv_utf8_trim(m->error);
    } else {
        m->n_ids = n < RDZV_MAX_NCCL_IDS ? n : RDZV_MAX_NCCL_IDS;
        memcpy(m->ids, ids, m->n_ids * sizeof(m->ids[0]));
    }
    (void)agent_client_send_nccl_id(a->client, m);
    free(m);
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
        a->pending_exit = agent_client_send_worker_exit(a->client, &a->pexit) < 0;
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
        (void)agent_client_send_heartbeat(
            a->client, &(struct rdzv_heartbeat){.generation = a->round.generation});
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
    r = rdzvd_server_init(a->embedded, a->loop, &cfg);
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

    r = agent_opts_parse(&a.o, argc, argv);
    if (r != 0)
        return r > 0 ? 0 : 2;
    if (load_token(&a) < 0)
        return 2;
    rdzv_log_setup("rdzv-agent", a.o.level);
    signal(SIGPIPE, SIG_IGN);
    (void)gethostname(hn, sizeof(hn) - 1);
    if (!a.o.host)
        a.o.host = hn;

    ngpus = agent_gpu_list(getenv("CUDA_VISIBLE_DEVICES"), AGENT_GPU_DRIVER_DIR, &gpus);
    if (ngpus < 0) {
        fprintf(stderr, "rdzv-agent: listing GPUs: %s\n", strerror(-ngpus));
        return 1;
    }
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
        agent_gpu_list_free(gpus, ngpus);
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
    agent_gpu_list_free(gpus, ngpus);
    return a.exit_code;
}
