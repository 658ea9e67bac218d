/* SPDX-License-Identifier: Apache-2.0 */
/* jobtest.h: a fake host for the job state machine (daemon/job/rdzvd-job-sm.h): fake agents that
 * record what they were sent, and a clock of its own (daemon/job/rdzvd-job-world.h): it moves only
 * when the test moves it (run_ms, jt_stall_ms, jt_advance), the machine's timers run
 * only within run_ms, in order; no clock read, no libuv timer, no sockets. Knobs let a test make
 * the host's ops fail (store_open, nccl_request), report unread input or number its stores'
 * ports from another base. For the unit tests only; each includes it once. */
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-list.h"
#include "../tap.h"
#include "daemon/job/rdzvd-job-record.h"
#include "daemon/job/rdzvd-job-journals.h"
#include "daemon/job/rdzvd-job-identity.h"
#include "daemon/job/rdzvd-job-ids.h"
#include "daemon/job/rdzvd-job-sm.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-world.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/data/rdzvd-store.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-status.h"
#include "daemon/job/rdzvd-job-status.h"
#include "daemon/server/rdzvd-server.h"

#define JT_BASE_PORT 40000
#define JT_NODES 16 /* node ids "node-<i>" below this have their secrets remembered */

/* One fake agent: what the state machine sent it. */
struct fake {
    struct rdzvd_member *m; /* bound member */
    bool closed;
    char close_reason[256];
    int njoined;
    bool spare, resumed;
    uint64_t joined_gen;
    char secret[RDZV_SECRET_HEX + 1]; /* the last JOINED's */
    char warning[RDZV_WARNING_MAX + 1]; /* the last JOINED's ("": none) */
    int nrounds;
    struct rdzv_round round; /* the last */
    int nevents;
    struct rdzv_event event; /* the last */
    bool told; /* its last JOIN was refused as its job had ended, and told that end (X1, X5) */
    int nnccl;
    uint64_t nccl_gen;
    int64_t nccl_count;
    bool nccl_store; /* the last request asked for the generation's store */
    char nccl_allow[64]; /* ... with this --allow-store-from ("": anywhere) */
    int nccl_fail;  /* nccl_request returns this (negative) when set */
    size_t unread;  /* what unread() reports */
    bool silent;    /* it does not answer its ROUNDs: its agent goes before its workers start */
    int npf;
    struct rdzv_preflight pf; /* the last PREFLIGHT */
};

struct env {
    uv_loop_t loop;
    struct rdzv_list jobs;
    struct rdzvd_job_host h;
    struct rdzvd_job_timers timers; /* h's */
    struct rdzvd_ended_jobs ended;
    int stores_open, stores_closed, stores_dropped;
    int store_fail;       /* store_open fails with this (negative) when set ... */
    bool store_fail_port; /* ... only when a port is asked for */
    uint16_t asked_port;  /* the port the last store_open asked for */
    uint16_t last_port;
    uint16_t base_port; /* store_open's n-th store gets base_port + n (0: JT_BASE_PORT) */
    char state_name[RDZVD_JOB_NAME_MAX]; /* the last store_open's ("" for none) */
    bool last_drop;                      /* the last store_close's drop */
    /* Run as store_open begins (NULL: nothing): what the host does meanwhile (a connection
     * closing begins a step of its own). */
    void (*store_opening)(struct env *e);
    int nflush;
    char secrets[JT_NODES][RDZV_SECRET_HEX + 1];
    /* With a state directory, the job table journaled there as "jobs", as a single rdzvd with
     * --state-dir keeps it (rdzvd-server.c): a later env on the same directory replays it. */
    struct rdzvd_store *table;
    struct rdzvd_store *mem_table; /* nodes' secrets without a job table, as rdzvd keeps them */
    struct rdzvd_journal *table_journal;
};

#define JT_START_MS 1000000ull /* not 0: nothing may take 0 for "never" */

/* The steps under way, one for every env of the test, as rdzvd's one host. Their time is the
 * tests' clock (jt_clock_set): what the machine reads, in a step or outside one. */
static struct rdzvd_job_steps jt_steps = {.now = {.ms = JT_START_MS}};
/* The bounds of every env's job table (its decision replayer's ud), as rdzvd's one table: the
 * defaults, which a test may make smaller before its env begins. */
static struct rdzvd_job_bounds jt_bounds = RDZVD_JOB_BOUNDS_DEFAULT;

/* Every op runs after the machine's step is done (the outbox, rdzvd-job-sm.h), never while it
 * decides: an op called inside a step fails the test at once. */
static inline void jt_not_deciding(const char *op)
{
    if (rdzvd_job_deciding(&jt_steps)) {
        fprintf(stderr, "jobtest: op %s called while the job machine decides\n", op);
        abort();
    }
}

static inline void jt_progress(struct rdzvd_member *m, const struct rdzv_heartbeat *hb);

static inline void fake_joined(void *peer, const char *run_id, int64_t waiting, bool spare,
                               bool resumed, uint64_t generation, bool inplace, const char *secret,
                               const char *warning)
{
    struct fake *f = peer;
    jt_not_deciding("joined");

    (void)run_id;
    (void)waiting;
    (void)inplace;
    snprintf(f->secret, sizeof(f->secret), "%s", secret);
    snprintf(f->warning, sizeof(f->warning), "%s", warning ? warning : "");
    f->njoined++;
    f->spare = spare;
    f->resumed = resumed;
    f->joined_gen = generation;
}

static inline void fake_round(void *peer, struct rdzv_round *rd)
{
    struct fake *f = peer;
    jt_not_deciding("round");

    f->nrounds++;
    f->round = *rd;
    /* An agent answers its ROUND at once: a HEARTBEAT naming the generation, as it starts
     * its workers (agent-session.c). Its job learns that the node ran (a step of its own). */
    if (f->m && !f->silent) {
        static struct rdzv_heartbeat hb;

        hb.generation = rd->generation;
        jt_progress(f->m, &hb); /* as rdzvd-job-wire.c takes it */
    }
}

/* f's agent says its workers made a step in the generation of its ROUND (local rank 0 reports
 * step 1). A claim: rdzvd sees the node run only past the start-up window, by its own clock. */
static inline void fake_step(struct fake *f)
{
    static struct rdzv_heartbeat hb;

    hb = (struct rdzv_heartbeat){.generation = f->round.generation, .n_progress = 1};
    hb.progress[0] = (struct rdzv_rank_progress){.local_rank = 0, .step = 1};
    jt_progress(f->m, &hb);
}

static inline void fake_event(void *peer, const struct rdzv_event *e)
{
    struct fake *f = peer;
    jt_not_deciding("event");

    f->nevents++;
    f->event = *e;
}

static inline int fake_nccl_request(void *peer, uint64_t generation, int64_t count, bool store,
                                    const char *store_allow)
{
    struct fake *f = peer;
    jt_not_deciding("nccl_request");

    if (f->nccl_fail)
        return f->nccl_fail;
    f->nnccl++;
    f->nccl_gen = generation;
    f->nccl_count = count;
    f->nccl_store = store;
    snprintf(f->nccl_allow, sizeof(f->nccl_allow), "%s", store_allow ? store_allow : "");
    return 0;
}

static inline void fake_close(void *peer, const char *reason)
{
    struct fake *f = peer;
    jt_not_deciding("close");

    f->closed = true;
    snprintf(f->close_reason, sizeof(f->close_reason), "%s", reason);
}

static inline void fake_put_aside(void *peer, const struct rdzv_event *e)
{
    fake_event(peer, e);
    fake_close(peer, e->type);
}

static inline void fake_preflight(void *peer, const struct rdzv_preflight *p)
{
    struct fake *f = peer;
    jt_not_deciding("preflight");

    f->npf++;
    f->pf = *p;
}

static inline void fake_bind(void *peer, struct rdzvd_member *m)
{
    ((struct fake *)peer)->m = m;
}

static inline size_t fake_unread(void *peer)
{
    jt_not_deciding("unread");
    return ((struct fake *)peer)->unread;
}

static inline void fake_flush(void *ud)
{
    jt_not_deciding("flush");
    ((struct env *)ud)->nflush++;
}

static inline int fake_store_open(void *ud, const char *desc, const char *state_name,
                                  uint16_t port, void **store, uint16_t *port_out)
{
    struct env *e = ud;

    (void)desc;
    if (e->store_opening)
        e->store_opening(e);
    e->asked_port = port;
    snprintf(e->state_name, sizeof(e->state_name), "%s", state_name ? state_name : "");
    if (e->store_fail && (!e->store_fail_port || port))
        return e->store_fail;
    e->stores_open++;
    e->last_port = port ? port
                        : (uint16_t)((e->base_port ? e->base_port : JT_BASE_PORT) + e->stores_open);
    *store = (void *)(uintptr_t)e->stores_open;
    *port_out = e->last_port;
    return 0;
}

static inline void fake_store_close(void *ud, void *store, bool drop)
{
    struct env *e = ud;

    (void)store;
    e->stores_closed++;
    e->stores_dropped += drop;
    e->last_drop = drop;
}

/* A record of the job table, as rdzvd writes it: to the table's hook (the journal), not written
 * once the journal failed. */
static inline int fake_record(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                              const uint8_t *val, size_t vlen)
{
    struct env *e = ud;

    jt_not_deciding("record");
    rdzvd_store_pass_change(e->h.record_table, what, key, klen, val, vlen);
    return e->table_journal && rdzvd_journal_failed(e->table_journal) ? -EIO : 0;
}

static const struct rdzvd_job_ops jt_fake_ops = {
    .joined = fake_joined,
    .round = fake_round,
    .event = fake_event,
    .nccl_request = fake_nccl_request,
    .close = fake_close,
    .put_aside = fake_put_aside,
    .preflight = fake_preflight,
    .bind = fake_bind,
    .unread = fake_unread,
    .flush = fake_flush,
    .store_open = fake_store_open,
    .store_close = fake_store_close,
    .record = fake_record,
};

/* ---- the tests' clock ---- */

static double jt_wall_base; /* the real wall clock when first asked: log lines read it too */
/* The host whose timers run_ms runs: the env set last (one at a time). */
static const struct rdzvd_job_host *jt_host;

static inline uint64_t jt_now_ms(void)
{
    return jt_steps.now.ms;
}

static inline double jt_wall_s(void)
{
    if (!jt_wall_base)
        jt_wall_base = rdzv_wall_s();
    return jt_wall_base + (double)(jt_now_ms() - JT_START_MS) / 1000;
}

/* The tests' clock, both its times, as a step takes them. */
static inline struct rdzvd_job_now jt_clock(void)
{
    return jt_steps.now;
}

/* Set the tests' clock to ms, its wall clock as far from jt_wall_base. */
static inline void jt_clock_set(uint64_t ms)
{
    jt_steps.now.ms = ms;
    jt_steps.now.wall_s = jt_wall_s();
}

/* A timer of the machine (rdzvd-job-world.h): armed, and how long until it is due (0: due). */
static inline bool jt_timer_armed(const struct rdzvd_job_timer *t)
{
    return t->due_ms != 0;
}

static inline uint64_t jt_timer_due_in(const struct rdzvd_job_timer *t)
{
    return t->due_ms > jt_now_ms() ? t->due_ms - jt_now_ms() : 0;
}

static inline int jt_step(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                          struct rdzvd_job_ready *rd);

/* What the last Ready said, once advanced: when the first timer is due (0: none armed), and
 * whether timers closed (their memory for the next REAP). */
static uint64_t jt_ready_deadline_ms;
static bool jt_ready_reap;

/* ms until the next timer is due (0: now), -1 when none is armed. */
static inline int64_t jt_next_due_in(void)
{
    uint64_t due = jt_ready_deadline_ms;

    if (!due)
        return -1;
    return due > jt_now_ms() ? (int64_t)(due - jt_now_ms()) : 0;
}

/* One pass, as a turn of rdzvd's loop: every timer due now is stepped (TICK), in order (those
 * it arms due now too), then what the timers closed meanwhile held is freed (REAP). */
static inline void jt_run_pass(void)
{
    struct rdzvd_job_input tick = {.kind = RDZVD_IN_TICK, .u.until = jt_now_ms()};
    struct rdzvd_job_ready rd;

    do
        jt_step(jt_host, &tick, &rd);
    while (rd.ticked);
    jt_step(jt_host, &(struct rdzvd_job_input){.kind = RDZVD_IN_REAP}, &rd);
}

/* Move the clock ms forward, nothing run (what the next pass finds due then fires). */
static inline void jt_advance(uint64_t ms)
{
    jt_clock_set(jt_now_ms() + ms);
}

static inline void env_init(struct env *e, int state_dirfd)
{
    jt_clock_set(jt_now_ms()); /* its wall clock too */
    memset(e, 0, sizeof(*e));
    ASSERT_OK(uv_loop_init(&e->loop));
    rdzv_list_init(&e->jobs);
    rdzvd_job_timers_init(&e->timers);
    rdzvd_ended_jobs_init(&e->ended, 0, 0);
    e->h.timers = &e->timers;
    jt_host = &e->h;
    e->h.ops = &jt_fake_ops;
    e->h.ud = e;
    e->h.steps = &jt_steps;
    e->h.state_dirfd = state_dirfd;
    e->h.jobs = &e->jobs;
    if (state_dirfd >= 0) {
        static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;

        ASSERT_OK(rdzvd_store_new(&lim, NULL, &e->table));
        rdzvd_store_set_decision_fn(e->table, rdzvd_decision_apply, &jt_bounds); /* as rdzvd's */
        ASSERT_OK(rdzvd_journal_open(NULL, state_dirfd, "(test)", "jobs", RDZVD_FSYNC_NO,
                                     e->table, &e->table_journal));
        e->h.record_table = e->table;
        e->h.record_journal = e->table_journal; /* as rdzvd does */
        e->h.secret_table = e->table;
        rdzvd_job_host_keep_records(&e->h); /* as rdzvd does */
    } else {
        static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;

        ASSERT_OK(rdzvd_store_new(&lim, NULL, &e->mem_table));
        rdzvd_store_set_decision_fn(e->mem_table, rdzvd_decision_apply, &jt_bounds); /* bounds */
        e->h.secret_table = e->mem_table;
    }
}

#include "jobinput.h"

/* Drop every job, let the loop close their handles, and check nothing is left behind. */
static inline void env_done(struct env *e)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_DROP_ALL};
    struct rdzvd_job_ready rd;

    jt_step(&e->h, &in, &rd);
    ASSERT_TRUE(rdzv_list_empty(&e->jobs));
    jt_run_pass(); /* the timers closed: their memory freed */
    ASSERT_TRUE(jt_ready_deadline_ms == 0);
    ASSERT_FALSE(jt_ready_reap);
    ASSERT_OK(uv_run(&e->loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&e->loop));
    rdzvd_ended_jobs_free(&e->ended);
    rdzvd_journal_close(e->table_journal, false);
    e->table_journal = NULL;
    e->table = rdzvd_store_free(e->table);
    e->mem_table = rdzvd_store_free(e->mem_table);
}

/* Delete the job table's journal from state_dirfd (a test that leaves its directory clean). */
static inline void env_forget_table(int state_dirfd)
{
    ASSERT_OK(rdzvd_journal_unlink(state_dirfd, "jobs"));
}

/* rdzvd stalled for ms (SIGSTOP, a starved machine): the clock moves on, and nothing runs; the
 * next pass finds the time it missed. */
static inline void jt_stall_ms(struct env *e, uint64_t ms)
{
    (void)e;
    jt_advance(ms);
}

/* Run the next ms milliseconds of the tests' clock: each of the state machine's timers due in
 * them fires at its time, in order, and nothing else moves the clock (no real time passes for
 * the job). */
static inline void run_ms(struct env *e, uint64_t ms)
{
    uint64_t end = jt_now_ms() + ms;

    (void)e;
    for (;;) {
        int64_t due;

        jt_run_pass(); /* the timers due now, and what they set off */
        if (jt_now_ms() >= end)
            break;
        due = jt_next_due_in(); /* ms to the next timer; -1: none */
        jt_advance(due < 0 || jt_now_ms() + (uint64_t)due > end ? end - jt_now_ms()
                   : due == 0                                  ? 1
                                                               : (uint64_t)due);
    }
}

static inline struct rdzv_join join_of(int i, int64_t min, int64_t max, int64_t max_restarts)
{
    struct rdzv_join jn = {
        .nproc = 2,
        .node_rank = -1,
        .min = min,
        .max = max,
        .last_call_ms = 60000,
        .max_restarts = max_restarts,
        .nccl = RDZV_NCCL_OFF,
        .nccl_ids = 1,
        .heartbeat_timeout_ms = 60000,
        .join_timeout_ms = 600000,
    };

    snprintf(jn.run_id, sizeof(jn.run_id), "job");
    snprintf(jn.node_id, sizeof(jn.node_id), "node-%d", i);
    snprintf(jn.host, sizeof(jn.host), "host%d", i);
    return jn;
}

/* A resume of node i of a 2-node generation gen (2 workers per node). */
static inline struct rdzv_join resume_of(int i, uint64_t gen, int64_t restarts,
                                         int64_t max_restarts)
{
    struct rdzv_join jn = join_of(i, 2, 2, max_restarts);

    jn.resume = (struct rdzv_resume){.generation = gen,
                                     .node_rank = i,
                                     .nnodes = 2,
                                     .rank_offset = 2 * i,
                                     .world_size = 4,
                                     .restart_count = restarts,
                                     .master_port = 41000};
    return jn;
}

/* The secrets an earlier rdzvd on the same --state-dir gave nodes node-0 .. node-<JT_NODES - 1>
 * of run_id (their agents hold them when they come back): random, their hashes admitted into
 * the job table as rdzvd-job-join.c does at a node's first JOIN. */
static inline void jt_remember_secrets(struct env *e, const char *run_id)
{
    struct rdzvd_job_record rec = {.generation = 0};

    snprintf(rec.run_id, sizeof(rec.run_id), "%s", run_id);
    for (unsigned i = 0; i < JT_NODES; i++) {
        ASSERT_OK(rdzvd_member_secret_new(e->secrets[i]));
        snprintf(rec.admitted.node_id, sizeof(rec.admitted.node_id), "node-%u", i);
        ASSERT_OK(rdzvd_member_secret_hash(e->secrets[i], rec.admitted.hash));
        ASSERT_OK(rdzvd_job_decide(e->h.secret_table, RDZVD_DECIDE_ADMITTED, &rec));
    }
}

/* JOIN as an agent does: the secret it was given last, if any. err may be NULL. */
static inline int join_err(struct env *e, struct fake *f, const struct rdzv_join *jn0, char *err,
                           size_t errlen)
{
    struct rdzv_join jn = *jn0;
    char buf[512];
    struct rdzvd_member *m = (struct rdzvd_member *)1;
    unsigned i;
    int r;

    if (!err) {
        err = buf;
        errlen = sizeof(buf);
    }
    err[0] = '\0';
    if (sscanf(jn.node_id, "node-%u", &i) != 1 || i >= JT_NODES)
        i = JT_NODES;
    if (!jn.secret[0] && i < JT_NODES)
        snprintf(jn.secret, sizeof(jn.secret), "%s", e->secrets[i]);
    {
        struct rdzvd_job_input in = {.kind = RDZVD_IN_JOIN, .peer = f, .u.join = &jn};
        struct rdzvd_job_ready rd;

        r = jt_step(&e->h, &in, &rd);
        jt_err(err, errlen, &rd);
        m = rd.member;
        f->told = rd.told.type[0] != '\0';
        if (f->told) { /* its job ended: the agent is told as an EVENT, as rdzvd does */
            ASSERT_EQ(r, -EBUSY);
            f->event = rd.told;
            f->nevents++;
        }
    }
    if (r == 0) {
        ASSERT_TRUE(f->m == m);
        if (i < JT_NODES && f->secret[0])
            snprintf(e->secrets[i], sizeof(e->secrets[i]), "%s", f->secret);
    } else {
        ASSERT_NULL(m);
        ASSERT_TRUE(err[0] != '\0'); /* every refusal says why */
    }
    return r;
}

static inline int join(struct env *e, struct fake *f, const struct rdzv_join *jn)
{
    return join_err(e, f, jn, NULL, 0);
}

/* JOIN jn from f while the job table's journal in state directory path cannot grow (a file size
 * limit: its write fails, EFBIG): join's result. */
static inline int jt_join_journal_full(struct env *e, const char *path, struct fake *f,
                                       const struct rdzv_join *jn)
{
    struct rlimit old, lim;
    struct stat st;
    char file[96];
    int r;

    snprintf(file, sizeof(file), "%s/jobs.journal", path);
    ASSERT_OK(stat(file, &st));
    signal(SIGXFSZ, SIG_IGN);
    ASSERT_OK(getrlimit(RLIMIT_FSIZE, &old));
    lim = old;
    lim.rlim_cur = (rlim_t)st.st_size; /* not one byte more */
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &lim));
    r = join(e, f, jn);
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &old));
    signal(SIGXFSZ, SIG_DFL);
    return r;
}

/* Nodes 0 and 1 join job "job" of 2 in e (state directory path), their secrets on disk already,
 * node 1 while the journal cannot grow: FORMED, the only new record, is not written. */
static inline void jt_join_formed_unwritten(struct env *e, const char *path, struct fake f[2])
{
    struct rdzv_join jn = join_of(0, 2, 2, 3);

    jt_remember_secrets(e, "job");
    ASSERT_OK(join(e, &f[0], &jn));
    jn = join_of(1, 2, 2, 3);
    ASSERT_OK(jt_join_journal_full(e, path, &f[1], &jn));
}

/* READY from every fake still connected, for generation gen. */
static inline void all_ready(struct fake *fs, int n, uint64_t gen)
{
    for (int i = 0; i < n; i++)
        if (fs[i].m && !fs[i].closed)
            jt_ready(fs[i].m, gen);
}

static inline bool event_is(const struct fake *f, const char *type)
{
    return strcmp(f->event.type, type) == 0;
}

/* f's agent reports its local rank 0 failed, with the rank of the ROUND it got: a report of the
 * node's own rank, which rdzvd takes. */
static inline void jt_worker_exit(struct fake *f, struct rdzv_worker_exit *w)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_WORKER_EXIT, .member = f->m, .u.worker_exit = w};
    struct rdzvd_job_ready rd;

    w->local_rank = 0;
    w->rank = f->round.rank_offset;
    ASSERT_OK(jt_step(&f->m->job->host, &in, &rd));
}

static inline int jt_state_dir(char *path, size_t len)
{
    int fd;

    snprintf(path, len, "/tmp/rdzv-test-job-sm-XXXXXX");
    ASSERT_NOT_NULL(mkdtemp(path));
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_TRUE(fd >= 0);
    return fd;
}

/* The record of job "job" (--nnodes 2, --max-restarts 3) running generation gen, restart 1, on
 * store port 41000, with the settings of a JOIN with a 30 ms heartbeat timeout: the rebuild
 * window is 3.06 s from rdzvd's start, 60 ms from the first agent back. */
static inline struct rdzvd_job_record jt_running_record(uint64_t gen)
{
    struct rdzvd_job_record rec = {.min = 2, .max = 2, .max_restarts = 3, .generation = gen,
                                   .restart_count = 1, .running = true, .nnodes = 2,
                                   .world_size = 4, .store_port = 41000, .has_settings = true};
    struct rdzv_join jn = join_of(0, 2, 2, 3);

    snprintf(rec.run_id, sizeof(rec.run_id), "job");
    jn.heartbeat_timeout_ms = 30;
    rdzvd_job_settings_of_join(&jn, &rec.settings);
    return rec;
}

/* Leave rec in the job table journaled in state directory fd, as an earlier rdzvd on that
 * directory would have (the journal replayed, rec put, the journal closed). */
static inline void jt_record_save(int fd, const struct rdzvd_job_record *rec)
{
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *t = NULL;
    struct rdzvd_journal *j = NULL;

    ASSERT_OK(rdzvd_store_new(&lim, NULL, &t));
    rdzvd_store_set_decision_fn(t, rdzvd_decision_apply, &jt_bounds);
    ASSERT_OK(rdzvd_journal_open(NULL, fd, "(test)", "jobs", RDZVD_FSYNC_NO, t, &j));
    ASSERT_OK(rdzvd_job_record_put(t, rec));
    rdzvd_journal_close(j, false);
    rdzvd_store_free(t);
}

static inline void jt_state_dir_done(int fd, const char *path)
{
    char cmd[512];

    close(fd);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    ASSERT_EQ(system(cmd), 0);
}

/* The status of e's one job: *st filled (rdzv_status_free it), its job returned. */
static inline const struct rdzv_status_job *status_of(struct env *e, struct rdzv_status *st)
{
    struct rdzvd_server_info info = {.start_ms = rdzv_now_ms()};

    ASSERT_OK(rdzvd_status_fill(&info, &e->jobs, &jt_steps.counts, NULL, NULL, jt_clock(), st));
    ASSERT_EQ(st->n_jobs, 1);
    return &st->jobs[0];
}

static inline void join_n(struct env *e, struct fake *f, int n, struct rdzv_join jn)
{
    for (int i = 0; i < n; i++) {
        snprintf(jn.node_id, sizeof(jn.node_id), "node-%d", i);
        snprintf(jn.host, sizeof(jn.host), "host%d", i);
        ASSERT_OK(join(e, &f[i], &jn));
    }
}

static inline void fill_id(char id[RDZV_NCCL_HEX_LEN + 1], char c)
{
    memset(id, c, RDZV_NCCL_HEX_LEN);
    id[RDZV_NCCL_HEX_LEN] = '\0';
}

static inline int njobs(struct env *e)
{
    struct rdzvd_server_info info = {.start_ms = rdzv_now_ms()};
    struct rdzv_status st;
    int n;

    ASSERT_OK(
        rdzvd_status_fill(&info, &e->jobs, &jt_steps.counts, &e->ended, NULL, jt_clock(), &st));
    n = (int)st.n_jobs;
    rdzv_status_free(&st);
    return n;
}

static inline const struct rdzv_status_node *node_of(const struct rdzv_status_job *sj,
                                                     const char *host)
{
    for (size_t i = 0; i < sj->n_nodes; i++)
        if (strcmp(sj->nodes[i].host, host) == 0)
            return &sj->nodes[i];
    return NULL;
}

/* ADMITTED holds the hash of node_id's secret (where e keeps nodes' secrets). */
static inline bool admitted(struct env *e, const char *node_id)
{
    char hash[RDZVD_SECRET_HASH_HEX + 1];

    return rdzvd_job_secret_hash_get(e->h.secret_table, "job", node_id, hash) == 0;
}

/* f heard nevents events and nrounds ROUNDs in all, and is still connected. */
static inline void assert_heard(const struct fake *f, int nevents, int nrounds)
{
    ASSERT_EQ(f->nevents, nevents);
    ASSERT_EQ(f->nrounds, nrounds);
    ASSERT_FALSE(f->closed);
    ASSERT_NOT_NULL(f->m);
}
