/* SPDX-License-Identifier: Apache-2.0 */
/* jobexplore.h: the model that test-job-explore.c explores: a small job on the fake host of
 * jobtest.h, its nodes' agents (what each knows and did), the abstract events that drive it
 * (each only where enabled), and the abstract key of a state. Events are applied to a model
 * replayed from a fresh host (model_begin); the test checks its invariants around each. For
 * test-job-explore.c and test-job-sim.c (through jobcheck.h), each including it once. */
#pragma once
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>

#include "jobtest.h"
#include "daemon/job/rdzvd-job-impl.h"

#ifndef NODES /* the simulator sets more */
#define NODES 4
#endif
#ifndef STRANGER /* the node that joins once the job formed, naming node-0's host */
#define STRANGER (NODES - 1)
#endif
#define MAX_DEPTH 24
#define HB_MS 1000
#define LAST_CALL_MS 300
#define JOIN_TIMEOUT_MS 800
#define RDZVD_RESTARTS_MAX 2 /* rdzvd restarts in one sequence */

enum ev_kind {
    EV_JOIN,       /* a node's first JOIN, or its agent back after its connection closed */
    EV_GONE,       /* its connection closes (rdzvd_member_closed) */
    EV_BLIP,       /* rdzvd stalled reading it, then its connection closes: the member is kept */
    EV_EXIT_START, /* its worker exits 1 at start-up */
    EV_EXIT_LATE,  /* its worker exits 1 after it made progress */
    EV_EXIT_KILL,  /* its worker is killed by SIGKILL from outside */
    EV_UNHEALTHY,
    EV_CANCEL, /* its agent got SIGTERM from outside */
    EV_LEAVE,  /* LEAVE succeeded */
    EV_NODE_KINDS,
    EV_ALL_FAIL = EV_NODE_KINDS, /* every node of the generation reports a start-up failure */
    EV_READY,                    /* READY from every agent told to restart */
    EV_TIMER,                    /* time passes to the next timer of the job or an away member */
    EV_OP_CANCEL,                /* the operator's CANCEL_JOB */
    EV_RESTART,                  /* rdzvd restarts on its state directory */
    EV_ABANDON,                  /* --abandon-after: the job waiting in its record ends */
    EV_KINDS,
};
/* An event is one byte: a node's kind and node, or a job-wide kind. */
#define NODE_EV(kind, i) ((kind) * NODES + (i))
#define JOB_EV(kind) (EV_NODE_KINDS * NODES + (kind) - EV_NODE_KINDS)
#define N_CODES JOB_EV(EV_KINDS)

static const char *const kind_names[EV_KINDS] = {
    "JOIN", "disconnects", "blips (rdzvd stalled, then its connection closed)",
    "worker exits 1 at start-up", "worker exits 1 after progress",
    "worker killed by SIGKILL from outside", "UNHEALTHY", "CANCEL (SIGTERM)", "LEAVE succeeded",
    "every running node fails at start-up, one report after another",
    "READY from every agent told to restart", "time passes to the next timer",
    "the operator's CANCEL_JOB", "rdzvd restarts on its state directory",
    "--abandon-after runs out for the job waiting in its record"};

/* Room for what each invariant of the test found in a step. */
enum { I1, I2, I3, I4, I5, N_INV };

enum agent_st { A_OUT, A_IN, A_LOST, A_DONE };

/* One node's agent: the fake the state machine holds as its peer (first: the peer is the agent),
 * and what the agent knows and did. */
struct agent {
    struct fake f;
    enum agent_st st;
    int noutcome, nsucceeded, naside;
    uint64_t resume;  /* the generation it resumes on a reconnect (its ROUND's), 0: none */
    uint64_t acked;   /* the restart generation it answered with READY */
    bool workers;     /* its workers of f.round run */
    bool left;        /* it sent LEAVE for them */
    bool ranked;      /* it got a ROUND: it held a node rank in a formed generation */
    bool evidence;    /* its own UNHEALTHY or worker failure was reported */
    bool host_proof;  /* ... while it held a node rank: its host is suspect */
    bool unran;       /* it went placed, within the start-up window (steps or not) */
    bool late; /* joined after a generation formed in this rdzvd, not yet seen running (P7d) */
    bool cancel_sent; /* its agent was signalled */
    uint64_t born_ms; /* when its agent started (JOIN age_ms), 0: not said (the explorer) */
    uint64_t incarnation; /* of the rdzvd that last JOINED it, echoed by a resume (1.18) */
    uint64_t ran_incarnation; /* of the rdzvd that sent its last ROUND: a plain JOIN's (1.20) */
};

struct variant {
    const char *name;
    int64_t min, max, bad_node_failures, max_restarts;
    bool state_dir;
    int depth;         /* the default */
    bool scale_up_now; /* JOIN scale_up_now (--scale-up now) */
    bool silent_spare; /* node-2's agent never answers its ROUNDs: placed, it never runs */
};

struct model {
    struct env e;
    const struct variant *v;
    struct agent *a; /* g_agents: one model lives at a time */
    bool op_cancelled, abandoned, ended_seen, verbose;
    bool checking; /* check the record after this step (a replay's earlier steps were) */
    bool recorded; /* the job has a record (state_key found it) */
    int restarts;             /* rdzvd restarts so far */
    int refused;              /* this step's JOIN was refused with this (negative errno) ... */
    char refused_err[512];    /* ... saying this */
    size_t refused_promised;  /* ... when the job's promised node ids filled this (ids_promised) */
    char label[256];          /* what the last event did, when verbose */
    char bad[N_INV][512];     /* the last step's violations, "" for none */
    const char *check[N_INV]; /* ... and the checks that found them (their formats) */
};

static struct agent g_agents[NODES];
/* The host's bounds: --keep-ended's hour and 16 jobs kept, no --max-jobs (the simulator's are
 * smaller). */
static struct {
    uint64_t keep_ended_ms, keep_ended_max, max_jobs;
} g_host = {3600 * 1000, 16, 0};
static int g_fd = -1;      /* the state directory */
static bool g_freed_ended; /* a job that ended was freed in this step */
/* When the run's agents started (the simulator's new run; 0: the first): a job made before
 * them, freed, is the last run's, not theirs. */
static uint64_t g_run_start_ms;
static uint64_t g_incarnation; /* the rdzvd's now: the one that sends a ROUND */

static bool this_run(const struct rdzvd_job *j)
{
    return j->created_ms >= g_run_start_ms;
}

static void say(struct model *md, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct model *md, const char *fmt, ...)
{
    size_t used = strlen(md->label);
    va_list ap;

    if (!md->verbose || used >= sizeof(md->label) - 1)
        return;
    va_start(ap, fmt);
    vsnprintf(md->label + used, sizeof(md->label) - used, fmt, ap);
    va_end(ap);
}

/* ---- the agents, as the state machine reaches them ---- */

static bool is_outcome(const char *type)
{
    return !strcmp(type, "succeeded") || !strcmp(type, "failed") || !strcmp(type, "cancelled");
}

static void x_round(void *peer, struct rdzv_round *rd)
{
    struct agent *a = peer;

    fake_round(peer, rd);
    a->resume = rd->generation;
    a->ran_incarnation = g_incarnation;
    a->workers = a->ranked = true;
    a->left = false;
}

static void x_event(void *peer, const struct rdzv_event *e)
{
    struct agent *a = peer;

    fake_event(peer, e);
    a->workers = false; /* a restart stops them; any other event ends the agent */
    a->noutcome += is_outcome(e->type);
    /* A success told as the job's (every worker exited 0), not as "this node ran nothing". */
    a->nsucceeded += !strcmp(e->type, "succeeded") && !strstr(e->summary, "ran nothing");
    a->naside += !strcmp(e->type, "put_aside");
}

static void x_put_aside(void *peer, const struct rdzv_event *e)
{
    x_event(peer, e);
    fake_close(peer, e->type);
}

static const struct rdzvd_job_ops x_ops = {
    .joined = fake_joined,         .round = x_round,          .event = x_event,
    .nccl_request = fake_nccl_request, .close = fake_close,   .put_aside = x_put_aside,
    .bind = fake_bind,             .unread = fake_unread,     .flush = fake_flush,
    .store_open = fake_store_open, .store_close = fake_store_close,
};

/* A job that ended is freed with its last member: kept for status as rdzvd keeps it, and noted,
 * so that a job that ended and went within one step is seen to have ended. */
static void x_keep_ended(struct rdzvd_ended_jobs *ended, const struct rdzvd_job *j)
{
    g_freed_ended |= this_run(j) && !strcmp(j->run_id, "job"); /* not another job's */
    rdzvd_ended_jobs_add(ended, j);
}

/* As rdzvd's host: ended jobs kept (--keep-ended's default hour), and read back from the job
 * table after a restart. */
static void host_setup(struct env *e)
{
    static uint64_t incarnations;

    e->h.ops = &x_ops;
    e->h.incarnation = g_incarnation = ++incarnations; /* each rdzvd, a restarted one too */
    rdzvd_ended_jobs_free(&e->ended);
    rdzvd_ended_jobs_init(&e->ended, g_host.keep_ended_ms, g_host.keep_ended_max);
    e->h.ended = &e->ended;
    e->h.max_jobs = g_host.max_jobs;
    e->h.keep_ended = x_keep_ended;
    e->h.keep_end = rdzvd_ended_jobs_add_recorded;
}

static int host_of(int i)
{
    return i == STRANGER ? 0 : i; /* the stranger names node-0's host */
}

static const struct rdzvd_job *the_job(struct model *md)
{
    return rdzvd_job_view(&md->e.jobs, "job");
}

static struct rdzvd_member *member_of(const struct rdzvd_job *j, int i)
{
    char id[24];

    snprintf(id, sizeof(id), "node-%d", i);
    return j ? rdzvd_member_index_find(&j->by_id, id) : NULL;
}

/* The bytes of j's node ids that promise a return: its members' and those of the generation it
 * was rebuilt from (rdzvd-job-records.c keeps them when it makes room); 0 with no job. */
static size_t ids_promised(const struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    size_t n = 0;

    if (!j)
        return 0;
    for_each_member(j, m, pos, tmp)
        n += strlen(m->join.node_id) + 1;
    for (int64_t k = 0; j->rebuilt_nodes && k < j->round.nnodes; k++)
        if (!rdzvd_member_index_find(&j->by_id, j->rebuilt_nodes[k].node_id))
            n += strlen(j->rebuilt_nodes[k].node_id) + 1;
    return n;
}

/* The job's record (state-dir variant): 0 with *rec filled, else -ENOENT. */
static int record_of(struct model *md, struct rdzvd_job_record *rec)
{
    memset(rec, 0, sizeof(*rec));
    return md->e.table ? rdzvd_job_record_get(md->e.table, "job", rec) : -ENOENT;
}

static bool startup_window(const struct rdzvd_job *j)
{
    return j->formed_ms &&
           jt_now_ms() - j->formed_ms < (uint64_t)rdzvd_job_startup_fail_ms(&jt_steps);
}

/* Node i's workers run the job's current generation, and the job counts their reports. */
static bool runs_now(struct model *md, int i)
{
    const struct rdzvd_job *j = the_job(md);
    struct agent *a = &md->a[i];
    struct rdzvd_member *m = member_of(j, i);

    return a->st == A_IN && a->workers && !a->left && j && j->state == JOB_RUNNING && m &&
           m->node_rank >= 0 && a->f.round.generation == j->generation;
}

/* ---- the events ---- */

/* A JOIN, as the agent makes it: a resume while its workers run (or stop, or left), else plain. */
static void ev_join(struct model *md, int i)
{
    struct agent *a = &md->a[i];
    struct rdzv_join jn = join_of(i, md->v->min, md->v->max, md->v->max_restarts);
    const struct rdzv_round *rd = &a->f.round;
    const struct rdzvd_job *j0;
    char err[512];
    int r;

    snprintf(jn.host, sizeof(jn.host), "host%d", host_of(i));
    jn.last_call_ms = LAST_CALL_MS;
    jn.heartbeat_timeout_ms = HB_MS;
    jn.join_timeout_ms = JOIN_TIMEOUT_MS;
    jn.bad_node_failures = md->v->bad_node_failures;
    jn.scale_up_now = md->v->scale_up_now;
    if (a->born_ms)
        jn.age_ms = (int64_t)(jt_now_ms() - a->born_ms) + 1;
    if (a->st == A_LOST && a->resume) {
        jn.resume = (struct rdzv_resume){
            .generation = rd->generation, .node_rank = rd->node_rank, .nnodes = rd->nnodes,
            .rank_offset = rd->rank_offset, .world_size = rd->world_size,
            .restart_count = rd->restart_count, .master_port = rd->master_port, .left = a->left,
            .incarnation = a->incarnation};
        say(md, " (resumes generation %" PRIu64 "%s)", rd->generation, a->left ? ", left" : "");
    } else { /* its workers ran one (then stopped), as the agent says: 0 when none ran */
        jn.ran_incarnation = a->ran_incarnation;
    }
    a->f.m = NULL;
    a->f.closed = false;
    j0 = the_job(md); /* a generation formed in this rdzvd (or rebuilt) without it: P7d */
    a->late = j0 && (j0->formed_ms || j0->rebuilt);
    r = join_err(&md->e, &a->f, &jn, err, sizeof(err));
    a->late |= !j0 && the_job(md) && the_job(md)->rebuilt; /* rebuilt by this JOIN */
    say(md, ": %s%s%s", r ? "refused (" : a->f.spare ? "a spare" : "joined", r ? err : "",
        r ? ")" : "");
    a->st = r ? A_DONE : A_IN; /* refused: its agent exits */
    if (!r)
        a->incarnation = md->e.h.incarnation;
    md->refused = r;
    md->refused_promised = ids_promised(the_job(md));
    snprintf(md->refused_err, sizeof(md->refused_err), "%s", r ? err : "");
}

static void ev_exit(struct model *md, int i, int kind)
{
    struct rdzv_worker_exit w = {.generation = md->a[i].f.round.generation, .exit_code = 1};
    struct agent *a = &md->a[i];

    if (kind == EV_EXIT_KILL) {
        w.exit_code = 128 + SIGKILL;
        w.signal = SIGKILL;
    } else {
        a->evidence = true;
        a->host_proof |= a->ranked;
    }
    if (kind == EV_EXIT_LATE) {
        struct rdzv_heartbeat hb = {.generation = w.generation, .n_progress = 1};

        hb.progress[0] = (struct rdzv_rank_progress){.local_rank = 0, .step = 10};
        jt_progress(a->f.m, &hb);
    }
    jt_worker_exit(&a->f, &w);
}

static void ev_all_fail(struct model *md)
{
    bool runs[NODES];

    for (int i = 0; i < NODES; i++)
        runs[i] = runs_now(md, i);
    for (int i = 0; i < NODES; i++) {
        struct rdzv_worker_exit w = {.generation = md->a[i].f.round.generation, .exit_code = 1};

        if (!runs[i] || md->a[i].st != A_IN || !md->a[i].f.m)
            continue;
        md->a[i].evidence = md->a[i].host_proof = true;
        jt_worker_exit(&md->a[i].f, &w);
    }
}

static void ev_ready(struct model *md)
{
    for (int i = 0; i < NODES; i++) {
        struct agent *a = &md->a[i];

        if (a->st != A_IN || !a->f.m || a->f.closed || !event_is(&a->f, "restart") ||
            a->acked == a->f.event.generation)
            continue;
        a->acked = a->f.event.generation;
        a->resume = 0; /* its workers stopped: it JOINs afresh on a reconnect */
        jt_ready(a->f.m, a->f.event.generation);
    }
}

/* The timer due first, of the job or of a member whose agent is away (the connected agents
 * heartbeat, so theirs never fire). */
static bool next_timer(struct model *md, char *what, size_t len)
{
    static const char *const names[] = {"last call", "join timeout", "NCCL timeout",
                                        "rebuild window", "restart backoff"};
    uint64_t best = UINT64_MAX;
    struct rdzv_list *jpos, *jtmp, *pos, *tmp;
    struct rdzvd_member *m;

    rdzv_list_for_each_safe(jpos, jtmp, &md->e.jobs)
    {
        const struct rdzvd_job *j = rdzv_container_of(jpos, struct rdzvd_job, node);

        if (j->timer_armed && jt_timer_due_in(&j->timer) < best) {
            best = jt_timer_due_in(&j->timer);
            snprintf(what, len, "%s", names[j->timer_kind]);
        }
        for_each_member(j, m, pos, tmp) if (!m->peer && jt_timer_armed(&m->hb_timer) &&
                                            jt_timer_due_in(&m->hb_timer) < best)
        {
            best = jt_timer_due_in(&m->hb_timer);
            snprintf(what, len, "the heartbeat deadline of %s, away", m->join.node_id);
        }
    }
    return best != UINT64_MAX;
}

static void ev_timer(struct model *md)
{
    char what[192] = "";

    next_timer(md, what, sizeof(what));
    say(md, ": %s", what);
    for (int k = 0; k < 200; k++) {
        int64_t due;

        for (int i = 0; i < NODES; i++)
            if (md->a[i].st == A_IN && md->a[i].f.m)
                jt_heartbeat(md->a[i].f.m);
        if ((due = jt_next_due_in()) < 0)
            return;
        /* Up to the timer, or a heartbeat timeout less 1 ms, the agents heartbeating again. */
        jt_advance(due < HB_MS ? (uint64_t)due : HB_MS - 1);
        jt_run_pass();
        if (due < HB_MS)
            return;
    }
}

static void ev_restart(struct model *md)
{
    char secrets[JT_NODES][RDZV_SECRET_HEX + 1];

    memcpy(secrets, md->e.secrets, sizeof(secrets));
    env_done(&md->e);
    env_init(&md->e, g_fd);
    host_setup(&md->e);
    memcpy(md->e.secrets, secrets, sizeof(secrets));
    for (int i = 0; i < NODES; i++) {
        md->a[i].f.m = NULL; /* untied by the shutdown: its agent reconnects */
        if (md->a[i].st == A_IN)
            md->a[i].st = A_LOST;
    }
    jt_rebuild(&md->e.h);
    md->restarts++;
}

/* ---- what may happen now ---- */

static uint64_t enabled(struct model *md)
{
    const struct rdzvd_job *j = the_job(md);
    uint64_t mask = 0;
    int nrun = 0;
    char what[192];

#define EN(code) (mask |= 1ull << (code))
    if (md->ended_seen && !j) {
        /* The job is over and gone: its agents that ran come back (P6: each is told how it
         * ended), across an rdzvd restart too. */
        for (int i = 0; i < NODES; i++)
            if (md->a[i].st == A_LOST && md->a[i].resume)
                EN(NODE_EV(EV_JOIN, i));
        if (mask && md->v->state_dir && md->restarts < RDZVD_RESTARTS_MAX)
            EN(JOB_EV(EV_RESTART));
        return mask;
    }
    for (int i = 0; i < NODES; i++) {
        struct agent *a = &md->a[i];

        /* Nodes 0..2 first join in this order; the stranger once the job formed. */
        if (a->st == A_LOST ||
            (a->st == A_OUT && (i == STRANGER ? j && j->generation > 0 : !i || md->a[i - 1].st)))
            EN(NODE_EV(EV_JOIN, i));
        if (a->st != A_IN)
            continue;
        EN(NODE_EV(EV_GONE, i));
        EN(NODE_EV(EV_BLIP, i));
        EN(NODE_EV(EV_UNHEALTHY, i));
        if (!a->cancel_sent)
            EN(NODE_EV(EV_CANCEL, i));
        if (event_is(&a->f, "restart") && a->acked != a->f.event.generation)
            EN(JOB_EV(EV_READY));
        if (!runs_now(md, i))
            continue;
        nrun++;
        EN(NODE_EV(EV_EXIT_LATE, i));
        EN(NODE_EV(EV_EXIT_KILL, i));
        EN(NODE_EV(EV_LEAVE, i));
        if (startup_window(j))
            EN(NODE_EV(EV_EXIT_START, i));
    }
    /* Every node of the generation (P4): each must be there to report; some failing alike is
     * driven by the nodes' own start-up exits. */
    if (nrun >= 2 && j && nrun == j->round.nnodes && startup_window(j))
        EN(JOB_EV(EV_ALL_FAIL));
    if (next_timer(md, what, sizeof(what)))
        EN(JOB_EV(EV_TIMER));
    if (!md->op_cancelled && ((j && j->state != JOB_ENDED) || (!j && md->recorded)))
        EN(JOB_EV(EV_OP_CANCEL));
    if (md->v->state_dir && md->restarts < RDZVD_RESTARTS_MAX)
        EN(JOB_EV(EV_RESTART));
    /* Waiting in its record, no agent of it connected (rdzvd-job-abandon.c ends only those). */
    if (!md->abandoned && !j && md->recorded)
        EN(JOB_EV(EV_ABANDON));
#undef EN
    return mask;
}

/* Agents told the outcome, left or put aside go; the loop closes what went. */
static void reap(struct model *md)
{
    for (int i = 0; i < NODES; i++) {
        struct agent *a = &md->a[i];
        bool over = a->noutcome || event_is(&a->f, "left") || event_is(&a->f, "put_aside");

        if (a->st != A_IN)
            continue;
        if (!a->f.closed && a->f.m && over)
            jt_gone(a->f.m);
        if (a->f.closed || !a->f.m || over) {
            a->f.m = NULL;
            a->st = over ? A_DONE : A_LOST;
        }
    }
    jt_run_pass();
}

static void model_begin(struct model *md, const struct variant *v)
{
    memset(md, 0, sizeof(*md));
    memset(g_agents, 0, sizeof(g_agents));
    md->a = g_agents;
    md->v = v;
    g_agents[2].f.silent = v->silent_spare;
    if (v->state_dir)
        (void)rdzvd_journal_unlink(g_fd, "jobs");
    env_init(&md->e, v->state_dir ? g_fd : -1);
    host_setup(&md->e);
}

static void model_end(struct model *md)
{
    env_done(&md->e);
    if (md->v->state_dir)
        (void)rdzvd_journal_unlink(g_fd, "jobs");
}

/* The abstract state: what the machine and the agents act on, hashed (FNV-1a). */
static uint64_t state_key(struct model *md)
{
    const struct rdzvd_job *j = the_job(md);
    struct rdzvd_job_record rec;
    char buf[1024];
    size_t n = 0;
    uint64_t h = 1469598103934665603ull;
    int r = record_of(md, &rec);

    md->recorded = r == 0;
#define PUT(...)                                                                                   \
    (n += (size_t)snprintf(buf + n, n < sizeof(buf) ? sizeof(buf) - n : 0, __VA_ARGS__))
    PUT("r%d,%" PRIu64 ",%d,%" PRId64 ";m%d%d%d%d%d;", r, rec.generation, rec.running,
        rec.restart_count, md->op_cancelled, md->abandoned, md->ended_seen, md->restarts,
        j != NULL);
    rdzvd_job_record_clear(&rec);
    if (j) {
        uint64_t now = jt_now_ms();

        PUT("j%d,%" PRIu64 ",%" PRId64 ",%d,%d,%d,%d,%d;", j->state, j->generation,
            j->restart_count, j->cancelled != 0, j->timer_armed ? (int)j->timer_kind : -1,
            j->rebuilt, j->stall_ms && now - j->stall_ms < (uint64_t)j->hb_timeout_ms,
            (int)j->nmembers);
        for (unsigned k = 0; k < j->n_hist; k++)
            PUT("h%s,%d,%" PRId64 ";", j->hist[k].node_id, j->hist[k].aside,
                j->hist[k].failures);
    }
    for (int i = 0; i < NODES; i++) {
        struct agent *a = &md->a[i];
        struct rdzvd_member *m = member_of(j, i);

        if (m)
            PUT("M%d,%d,%d,%" PRId64 ",%d,%d,%d,%d;", i, m->away, !m->peer, m->node_rank,
                m->ready, m->signalled, m->left_ok, m->stopping_gen == j->generation);
        PUT("A%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%s;", a->st, a->noutcome, a->nsucceeded > 0,
            a->naside > 0, a->ranked, a->evidence, a->host_proof, a->workers, a->left,
            a->cancel_sent, a->f.nrounds > 0,
            j ? (int)((int64_t)a->resume - (int64_t)j->generation) : (int)a->resume,
            a->acked == a->f.event.generation, a->f.event.type);
    }
#undef PUT
    for (size_t k = 0; k < n && k < sizeof(buf); k++)
        h = (h ^ (uint8_t)buf[k]) * 1099511628211ull;
    return h ? h : 1;
}
