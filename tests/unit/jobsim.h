/* SPDX-License-Identifier: Apache-2.0 */
/* jobsim.h: the simulator's model (test-job-sim.c): jobexplore.h's job and agents with up to
 * six nodes, a configuration drawn from a seed, the simulator's own events (an agent that joins
 * and crashes under a new node id, the adversary: a token holder under a new host name and node
 * id each time that JOINs, sends its HEARTBEAT and closes at its ROUND or at will, or answers
 * it with a step claimed and stays, and, placed, claims a step, sends CANCEL and JOINs back
 * with its secret and a resume, or reports a worker failure as it takes its ROUND
 * (jobsim-adv.h); another job that runs and ends, a new run of
 * the same id, a drain) and its invariants S1..S8, checked after every event beside
 * jobcheck.h's I1..I5 (apply_one). S7 is a bound over a window, not a moment: the job's
 * restarts not counted, whoever caused them, but a signal to a node that rdzvd saw run. S8: no
 * token holder fails a healthy job, nor (checked as it goes) spends its budget before rdzvd
 * saw it run. For test-job-sim.c only, which includes it once. */
#pragma once
#define NODES 6
static int g_stranger = -1; /* the configuration's stranger, -1: none */
#define STRANGER g_stranger

#include <inttypes.h>
#include <stdarg.h>

#include "jobcheck.h"

/* The simulator's own events, past the model's codes. */
enum {
    SC_FRESH = N_CODES, SC_OTHER, SC_NEW_RUN, SC_NEW_RDZVD, SC_DRAIN,
    SC_ADV_JOIN, /* the adversary: a token holder under a new host name and node id JOINs and
                  * sends a HEARTBEAT, as an agent does on JOINED; it closes at its ROUND */
    SC_ADV_GONE, /* its connection closes */
    SC_ADV_CANCEL, /* it claims a step, sends CANCEL (SIGTERM) and closes: a signal from outside */
    SC_ADV_RESUME, /* it JOINs again, the same node id and secret, with a resume of the generation
                    * it was placed in, and READY when the job stops */
    SC_ADV_EXIT, /* placed, it answers its ROUND and at once reports a worker failure */
    SC_WAIT, /* a minute passes, every connected agent heartbeating (the adversary too) */
    SC_END
};
#define TRACE_MAX 600 /* events from a fresh rdzvd to the next */

enum { S1 = N_INV, S2, S3, S4, S5, S6, S7, S8, N_ALL };
static const char *const sim_inv[N_ALL - N_INV] = {
    "S1: a restart is charged to the budget only for a failure of a node that ran in that "
    "generation",
    "S2: a node that never ran moves nobody: no restart, no verdict, no lost place",
    "S3: no table fills from nodes that left or never ran; a job can always take a replacement",
    "S4: an ended job never runs again; a new run of the same id is a new run",
    "S5: a node whose workers fail first at start-up is charged, even when others fail after it",
    "S6: every agent is told a true outcome in bounded time",
    "S7: at most RDZVD_JOB_UNCOUNTED_RESTARTS restarts not counted within any "
    "RDZVD_JOB_UNCOUNTED_WINDOW_MS caused by nodes that rdzvd did not see run, whoever joins and "
    "whatever they claim; the restart count within the budget",
    "S8: with every honest node healthy (no honest fault since the run began), the job never "
    "fails for its budget; a token holder that rdzvd did not see run, whatever it claimed, "
    "charges it nothing within the bound",
};

static const char *const tok_node[EV_NODE_KINDS] = {
    "join", "gone", "blip", "exit-start", "exit-late", "kill", "unhealthy", "sigterm", "leave"};
static const char *const tok_job[] = {"all-fail", "ready",     "timer",     "op-cancel",
                                      "restart",  "abandon",   "fresh-crash", "other-job",
                                      "new-run",  "new-rdzvd", "drain",     "adv-join",
                                      "adv-gone", "adv-cancel", "adv-resume", "adv-exit",
                                      "wait"};

struct config {
    struct variant v;
    char name[256];
    int nodes; /* slots 0..nodes-1 act (the stranger among them, when there is one) */
    int stranger;
    uint64_t ids_max, ends_kept;
    int64_t startup_fail_ms; /* the start-up window, and the grace's longest */
    int adversary; /* how often the adversary acts: its JOIN among the events, 1 to 8 times */
};

struct sim {
    struct model md;
    struct config c;
    uint64_t seed;
    int fresh_k, other_k;
    bool left_memory;   /* the job left memory cancelled or ended since rdzvd started */
    int ff_node;        /* the node whose start-up failure came first in its generation ... */
    int64_t ff_charged; /* ... and its failures then, -1: none */
    bool run_ended;     /* the run before this one ended (its agents are a new run) ... */
    bool run_new;       /* ... and its job is yet to be made */
    uint64_t ff_gen;    /* the generation of ff_node's failure */
    char vio[N_ALL][512];
    const char *vcheck[N_ALL];
    int vcase[N_ALL];
    bool vrefused[N_ALL]; /* a JOIN refused: the machine's state is as before */
    int last;             /* the last event */
    uint64_t substeps;    /* events a drain applied */
    /* The adversary (SC_ADV_JOIN): connected, and how many it made. */
    struct agent adv;
    bool adv_in;
    int adv_k;
    /* Its last node id, host and secret, and the generation it was placed in, for a resume
     * (SC_ADV_RESUME, once after its CANCEL); the generation whose ROUND it answered. */
    char adv_id[32], adv_host[32], adv_secret[RDZV_SECRET_HEX + 1];
    uint64_t adv_gen, adv_answered;
    int adv_ev0; /* the EVENTs its resume was told at once (restart: the job moved on) */
    bool adv_resumable, adv_resumed; /* it may resume; it did (it answers its ROUNDs) */
    /* It joined after a generation formed in this rdzvd, and rdzvd has not seen it run (P7d):
     * its worker failure is a claim (S8). */
    bool adv_late;
    bool honest_fault; /* an honest node's fault since the run began (S8) */
    int adv_rounds;    /* the ROUNDs the adversary got as far as seen ... */
    bool adv_below;    /* ... and it got one while some honest node was out (MIN needed it) */
    /* The restarts every worker of the job heard (EVENT restart), as the agents saw them: the
     * last generation restarted, and when those not counted were (the sim's clock, ms), the
     * newest RDZVD_JOB_UNCOUNTED_RESTARTS + 1 in the window, oldest first, and which were
     * scale-ups. */
    uint64_t restart_gen;
    struct {
        uint64_t at;
        bool scale;
    } uncounted_at[RDZVD_JOB_UNCOUNTED_RESTARTS + 1];
    int nuncounted;
    /* The job's restart count right after the event, before the adversary answered or closed
     * at a ROUND it brought: what S1 and S2 charge to the event's node (past P8's bound the
     * adversary's own loss is charged, P8d). */
    int64_t ev_restarts;
    uint64_t veteran_gen; /* the last generation stopped past the bound by no newcomer (S7) */
    /* The last generations whose stop the budget counted (S7): their EVENT restart may reach
     * an agent events later (it was away), when the count no longer moves. */
    uint64_t counted_gen[8];
    unsigned ncounted;
};

/* Before a step, what the simulator's checks compare with. */
struct spre {
    bool exists, over; /* the job is in memory; cancelled or ended */
    bool ended;        /* the job was seen to end */
    enum job_state st;
    uint64_t gen, formed_ms;
    int64_t restarts, fails[NODES];
    int nevents[NODES], nrounds[NODES], naside[NODES], noutcome[NODES];
    uint64_t resume[NODES]; /* the generation each agent would resume */
    bool spent;             /* the job's bound on restarts not counted was spent (P8) */
    bool adv_ran; /* the adversary ran its generation, as rdzvd sees it: no claim counts */
    /* Members that took a ROUND of the job on their connection (no newcomers, P8c): past the
     * bound, a restart one causes stays uncounted (P8d), once, as it comes back a newcomer. */
    bool took_round[NODES], adv_took_round;
    bool away[NODES]; /* a member whose agent is away: its heartbeat deadline runs */
    bool all_in;  /* every honest node (not the stranger) is in the job */
};

static uint64_t rnd(uint64_t *x) /* splitmix64 */
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void sbad(struct sim *s, int slot, int kase, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void sbad(struct sim *s, int slot, int kase, const char *fmt, ...)
{
    va_list ap;

    if (s->vio[slot][0])
        return;
    s->vcheck[slot] = fmt;
    s->vcase[slot] = kase;
    s->vrefused[slot] = s->md.refused != 0;
    va_start(ap, fmt);
    vsnprintf(s->vio[slot], sizeof(s->vio[slot]), fmt, ap);
    va_end(ap);
}

/* ---- the configuration of a seed ---- */

/* Seed's configuration; narrow: as drawn before MAX could pass the honest nodes (a saved
 * trace's "narrow", which keeps its story). */
static void config_of(uint64_t seed, bool narrow, struct config *c)
{
    uint64_t x = seed * 0x2545f4914f6cdd1dull + 1;
    int honest;

    memset(c, 0, sizeof(*c));
    c->nodes = 1 + (int)(rnd(&x) % NODES);
    c->stranger = c->nodes >= 2 && rnd(&x) % 3 == 0 ? c->nodes - 1 : -1;
    honest = c->stranger >= 0 ? c->nodes - 1 : c->nodes;
    c->v.min = 1 + (int64_t)(rnd(&x) % (uint64_t)honest);
    c->v.max = c->v.min + (int64_t)(rnd(&x) % (uint64_t)(honest - c->v.min + 1));
    if (rnd(&x) % 3 && c->v.max < honest) /* a spare, often */
        c->v.max = honest - 1 >= c->v.min ? honest - 1 : c->v.max;
    c->v.max_restarts = (int64_t)(rnd(&x) % 4);
    c->v.bad_node_failures = 1 + (int64_t)(rnd(&x) % 3);
    c->v.state_dir = rnd(&x) % 2;
    c->v.scale_up_now = c->v.max > c->v.min && rnd(&x) % 3 == 0;
    c->ids_max = 24 + rnd(&x) % 120; /* a node id is 7 to 9 bytes: 2 to 20 of them */
    c->ends_kept = 1 + rnd(&x) % 4;
    c->startup_fail_ms = (int64_t[]){1000, 2500, RDZVD_JOB_STARTUP_FAIL_MS}[rnd(&x) % 3];
    c->adversary = (int[]){1, 1, 4, 8}[rnd(&x) % 4];
    /* Room to scale up, one seed in three: MAX above the honest nodes (up to nodes + 1), where
     * the adversary's joins (and --scale-up now, often) take the places left. Drawn last: a
     * seed's other draws stay as they were. */
    if (rnd(&x) % 3 == 0 && !narrow) {
        c->v.max = honest + 1 + (int64_t)(rnd(&x) % (uint64_t)(c->nodes + 1 - honest));
        c->v.scale_up_now = rnd(&x) % 3 != 0;
    }
    snprintf(c->name, sizeof(c->name), "seed %" PRIu64 ": %d node(s)%s, --nnodes %" PRId64
             ":%" PRId64 ", --max-restarts %" PRId64 ", --bad-node-failures %" PRId64 "%s%s; "
             "node ids %" PRIu64 " B, ends %" PRIu64 ", start-up %" PRId64 " ms, adversary x%d",
             seed, c->nodes, c->stranger >= 0 ? " (one a stranger)" : "", c->v.min, c->v.max,
             c->v.max_restarts, c->v.bad_node_failures, c->v.state_dir ? ", --state-dir" : "",
             c->v.scale_up_now ? ", --scale-up now" : "", c->ids_max, c->ends_kept,
             c->startup_fail_ms, c->adversary);
    c->v.name = c->name;
}

/* A fresh rdzvd with seed's bounds (narrow: config_of's), and agents that started now. */
static void sim_begin(struct sim *s, uint64_t seed, bool narrow)
{
    memset(s, 0, sizeof(*s));
    s->seed = seed;
    config_of(seed, narrow, &s->c);
    /* The same clocks at each start: a replay meets the same second boundaries (an end is kept
     * to the second). */
    jt_wall_base = 1800000000.0;
    jt_clock_set(JT_START_MS);
    g_stranger = s->c.stranger;
    g_host.keep_ended_ms = 3600 * 1000;
    g_host.keep_ended_max = 2;
    g_host.max_jobs = 3;
    jt_bounds.ids_bytes_max = s->c.ids_max;
    jt_bounds.ends_kept = (unsigned)s->c.ends_kept;
    jt_steps.startup_fail_ms = s->c.startup_fail_ms;
    model_begin(&s->md, &s->c.v);
    g_run_start_ms = 0;
    s->md.checking = true;
    s->ff_charged = -1;
    for (int i = 0; i < NODES; i++)
        s->md.a[i].born_ms = jt_now_ms();
}

static void sim_end(struct sim *s)
{
    model_end(&s->md);
}

/* ---- the simulator's events ---- */

static int64_t fails_of(const struct rdzvd_job *j, int i)
{
    char id[24];

    snprintf(id, sizeof(id), "node-%d", i);
    for (unsigned k = 0; j && k < j->n_hist; k++)
        if (!strcmp(j->hist[k].node_id, id))
            return j->hist[k].failures;
    return 0;
}

static int sim_join(struct sim *s, struct agent *f, struct rdzv_join *jn0, const char *node_id,
                    const char *host, char *err, size_t errlen);

/* A newcomer's JOIN (node_id on host, the job's options, its agent started now) by f: refused
 * (its error kept for the checks) or joined. 0 or the refusal. */
static int newcomer_join(struct sim *s, struct agent *f, const char *node_id, const char *host,
                         char *err, size_t errlen)
{
    struct rdzv_join jn = join_of(0, s->c.v.min, s->c.v.max, s->c.v.max_restarts);

    return sim_join(s, f, &jn, node_id, host, err, errlen);
}

/* jn (its node id and host set here, and the job's options) by f, as newcomer_join. */
static int sim_join(struct sim *s, struct agent *f, struct rdzv_join *jn0, const char *node_id,
                    const char *host, char *err, size_t errlen)
{
    struct rdzv_join jn = *jn0;
    int r;

    memset(f, 0, sizeof(*f));
    f->f.silent = true; /* it answers no ROUND */
    snprintf(jn.node_id, sizeof(jn.node_id), "%s", node_id);
    snprintf(jn.host, sizeof(jn.host), "%s", host);
    jn.last_call_ms = LAST_CALL_MS;
    jn.heartbeat_timeout_ms = HB_MS;
    jn.join_timeout_ms = JOIN_TIMEOUT_MS;
    jn.bad_node_failures = s->c.v.bad_node_failures;
    jn.scale_up_now = s->c.v.scale_up_now;
    jn.age_ms = 1;
    r = join_err(&s->md.e, &f->f, &jn, err, errlen);
    s->md.refused = r;
    s->md.refused_promised = ids_promised(the_job(&s->md));
    snprintf(s->md.refused_err, sizeof(s->md.refused_err), "%s", r ? err : "");
    return r;
}

/* An agent that JOINs under a node id never seen (a new process), and whose connection closes
 * at once (it crashed). */
static int ev_fresh(struct sim *s)
{
    static struct agent f;
    char err[512], id[32], host[32];
    int r;

    snprintf(id, sizeof(id), "crash-%d", s->fresh_k++);
    snprintf(host, sizeof(host), "hostc%d", s->fresh_k % 3);
    r = newcomer_join(s, &f, id, host, err, sizeof(err));
    say(&s->md, ": %s%s%s", r ? "refused (" : "joined, then its connection closed", r ? err : "",
        r ? ")" : "");
    if (!r && f.f.m && !f.f.closed)
        jt_gone(f.f.m);
    jt_run_pass();
    return r;
}

#include "jobsim-adv.h"

/* Another job of one node runs and ends (its worker exits 0): the ended jobs kept and the job
 * table's ends fill. */
static void ev_other(struct sim *s)
{
    static struct agent o;
    struct rdzv_join jn = join_of(0, 1, 1, 0);
    char err[512];

    memset(&o, 0, sizeof(o));
    snprintf(jn.run_id, sizeof(jn.run_id), "other-%d", s->other_k++);
    snprintf(jn.node_id, sizeof(jn.node_id), "other-node");
    jn.last_call_ms = 0;
    if (join_err(&s->md.e, &o.f, &jn, err, sizeof(err))) {
        say(&s->md, ": refused (%s)", err);
        return;
    }
    run_ms(&s->md.e, 1);
    if (o.f.m && o.f.nrounds)
        jt_leave(o.f.m, o.f.round.generation, true);
    if (o.f.m && !o.f.closed)
        jt_gone(o.f.m);
    jt_run_pass();
    say(&s->md, ": %s ran and ended", jn.run_id);
}

/* The job is over: its agents go, new ones (a new run of the same line) start. */
static void ev_new_run(struct sim *s)
{
    struct model *md = &s->md;

    /* Started after the end, as a person runs the line again: a few ms later at least (an
     * agent's age is said in whole ms, one more than measured; an end and a start in the same
     * ms are read as the start first). */
    jt_advance(3);
    memset(md->e.secrets, 0, sizeof(md->e.secrets));
    for (int i = 0; i < NODES; i++) { /* the same machines: what they gave against them stays */
        bool evidence = md->a[i].evidence, host_proof = md->a[i].host_proof;

        memset(&md->a[i], 0, sizeof(md->a[i]));
        md->a[i].evidence = evidence;
        md->a[i].host_proof = host_proof;
        md->a[i].born_ms = jt_now_ms();
    }
    g_run_start_ms = jt_now_ms();
    md->op_cancelled = md->abandoned = false;
    s->run_ended = s->run_new = md->ended_seen;
    s->left_memory = false; /* the last run's agents are gone */
    md->ended_seen = false;
    s->ff_charged = -1;
}

/* The run is over: each of its agents was told how it ended (or refused), or never joined. */
static bool job_over(struct sim *s)
{
    bool any = false;

    for (int i = 0; i < NODES; i++) {
        if (s->md.a[i].st == A_IN || s->md.a[i].st == A_LOST)
            return false;
        any |= s->md.a[i].st == A_DONE;
    }
    return any;
}

static bool active(struct sim *s, int code)
{
    return code >= EV_NODE_KINDS * NODES || code % NODES < s->c.nodes;
}

static uint64_t sim_enabled(struct sim *s)
{
    uint64_t mask = enabled(&s->md);

    for (int code = 0; code < EV_NODE_KINDS * NODES; code++)
        if (!active(s, code))
            mask &= ~(1ull << code);
    return mask;
}

static bool code_enabled(struct sim *s, int code)
{
    const struct rdzvd_job *j = the_job(&s->md);

    if (code < N_CODES)
        return sim_enabled(s) >> code & 1;
    if (code == SC_FRESH)
        return j && j->state != JOB_ENDED;
    if (code == SC_ADV_JOIN)
        return j && j->state != JOB_ENDED && !s->adv_in;
    if (code == SC_ADV_GONE)
        return s->adv_in;
    if (code == SC_ADV_CANCEL) /* placed: a spare's CANCEL is its leaving (adv-gone) */
        return s->adv_in && s->adv.f.m && !s->adv.f.closed && s->adv.f.m->node_rank >= 0;
    if (code == SC_ADV_RESUME)
        return j && j->state != JOB_ENDED && !s->adv_in && s->adv_resumable;
    if (code == SC_ADV_EXIT) /* placed in the running generation, its ROUND come */
        return s->adv_in && s->adv.f.m && !s->adv.f.closed && s->adv.f.m->node_rank >= 0 &&
               s->adv.f.nrounds && j && j->state == JOB_RUNNING &&
               s->adv.f.round.generation == j->generation;
    if (code == SC_NEW_RUN)
        return job_over(s);
    if (code == SC_WAIT)
        return j && j->state == JOB_RUNNING;
    return code < SC_END;
}

static uint64_t apply_one(struct sim *s, int code);

/* Agents away come back, running workers exit 0, READY answered, time passes: whatever the job
 * waits for comes, so that every agent is told how it ended. */
static void ev_drain(struct sim *s)
{
    if (s->adv_in) { /* the adversary goes: it would hold its place forever */
        adv_gone(s);
        reap(&s->md); /* the outcomes it brought, as after any event */
    }
    for (int k = 0; k < 400; k++) {
        uint64_t mask = sim_enabled(s);
        int code = -1;

        for (int i = 0; i < s->c.nodes && code < 0; i++)
            if (s->md.a[i].st == A_LOST && mask >> NODE_EV(EV_JOIN, i) & 1)
                code = NODE_EV(EV_JOIN, i);
        if (code < 0 && mask >> JOB_EV(EV_READY) & 1)
            code = JOB_EV(EV_READY);
        for (int i = 0; i < s->c.nodes && code < 0; i++)
            if (mask >> NODE_EV(EV_LEAVE, i) & 1)
                code = NODE_EV(EV_LEAVE, i);
        if (code < 0 && mask >> JOB_EV(EV_TIMER) & 1)
            code = JOB_EV(EV_TIMER);
        if (code < 0)
            break;
        apply_one(s, code);
        s->substeps++;
        if (s->md.verbose)
            printf("#          drain: %s\n", s->md.label);
    }
    for (int i = 0; i < NODES; i++) {
        struct agent *a = &s->md.a[i];

        if (a->st == A_IN || (a->st == A_LOST && a->resume && a->f.nrounds))
            sbad(s, S6, 0, "node-%d was told no outcome (%s, its last event '%s')", i,
                 a->st == A_IN ? "connected" : "away, its workers ran", a->f.event.type);
    }
}

/* ---- the simulator's checks ---- */

/* The restarts not counted within the window before now, in the sim's count (those older
 * dropped). */
static int uncounted_in_window(struct sim *s)
{
    uint64_t now = jt_now_ms();
    int old = 0;

    while (old < s->nuncounted && now - s->uncounted_at[old].at >= RDZVD_JOB_UNCOUNTED_WINDOW_MS)
        old++;
    memmove(&s->uncounted_at[0], &s->uncounted_at[old],
            (size_t)(s->nuncounted - old) * sizeof(s->uncounted_at[0]));
    s->nuncounted -= old;
    return s->nuncounted;
}

/* The job's bound spent (P8): by the sim's count, or by the machine's own. */
static bool bound_spent(struct sim *s, const struct rdzvd_job *j)
{
    int64_t now = j ? (int64_t)(rdzvd_job_wall_s(&j->host) * 1000) : 0;
    unsigned n = 0;

    for (unsigned k = 0; j && k < j->n_uncounted; k++)
        n += now - j->uncounted_ms[k] < RDZVD_JOB_UNCOUNTED_WINDOW_MS;
    return uncounted_in_window(s) >= RDZVD_JOB_UNCOUNTED_RESTARTS ||
           n >= RDZVD_JOB_UNCOUNTED_RESTARTS;
}

static void take_spre(struct sim *s, struct spre *p)
{
    const struct rdzvd_job *j = the_job(&s->md);

    memset(p, 0, sizeof(*p));
    p->spent = bound_spent(s, j);
    p->ended = s->md.ended_seen;
    p->all_in = true;
    for (int i = 0; i < s->c.nodes; i++)
        p->all_in &= i == s->c.stranger || s->md.a[i].st == A_IN;
    p->adv_ran = s->adv_in && j && s->adv_answered == j->generation &&
                 s->adv.f.round.generation == j->generation &&
                 (!j->formed_ms ||
                  jt_now_ms() - j->formed_ms >= (uint64_t)rdzvd_job_startup_fail_ms(&jt_steps));
    p->adv_took_round = s->adv_in && s->adv.f.m && !s->adv.f.closed && s->adv.f.m->ran_gen;
    s->adv_late &= !p->adv_ran; /* seen running: its failures count from now on */
    if ((p->exists = j != NULL)) {
        p->st = j->state;
        p->gen = j->generation;
        p->formed_ms = j->formed_ms;
        p->restarts = j->restart_count;
        p->over = (j->cancelled || j->state == JOB_ENDED) && this_run(j);
    }
    for (int i = 0; i < NODES; i++) {
        p->fails[i] = fails_of(j, i);
        p->nevents[i] = s->md.a[i].f.nevents;
        p->nrounds[i] = s->md.a[i].f.nrounds;
        p->naside[i] = s->md.a[i].naside;
        p->noutcome[i] = s->md.a[i].noutcome;
        p->resume[i] = s->md.a[i].resume;
        p->took_round[i] = member_of(j, i) && member_of(j, i)->ran_gen;
        p->away[i] = member_of(j, i) && !member_of(j, i)->peer;
    }
}

/* Node i ran generation p->gen as rdzvd sees it: it got its ROUND and the generation is older
 * than the start-up window by rdzvd's clock; a step its workers report does not count. A
 * generation rebuilt from its agents' resumes (no formed_ms in this rdzvd) ran before. */
static bool seen_ran(struct sim *s, int i, const struct spre *p)
{
    const struct agent *a = &s->md.a[i];

    return a->f.nrounds && a->f.round.generation == p->gen &&
           (!p->formed_ms ||
            jt_now_ms() - p->formed_ms >= (uint64_t)rdzvd_job_startup_fail_ms(&jt_steps));
}

static void check_moved(struct sim *s, const struct spre *p, int node, const char *who)
{
    const struct rdzvd_job *j = the_job(&s->md);
    int kase = s->c.v.scale_up_now ? 2 : 1;

    if (j && p->exists && s->ev_restarts > p->restarts && !p->spent)
        sbad(s, S2, kase, "%s, which never ran, was charged a restart (%" PRId64 " of %" PRId64
             ")", who, j->restart_count, s->c.v.max_restarts);
    for (int k = 0; k < NODES; k++) {
        struct agent *a = &s->md.a[k];

        if (k == node)
            continue;
        /* Past P8's bound a newcomer placed because MIN needed it, lost before it ran, is
         * charged (P8d), and with the budget used the job fails. */
        if (p->spent && a->noutcome > p->noutcome[k] && event_is(&a->f, "failed") &&
            strstr(a->f.event.summary, "restart budget exhausted"))
            continue;
        if (a->naside > p->naside[k] || a->noutcome > p->noutcome[k])
            sbad(s, S2, kase, "%s, which never ran, brought node-%d a verdict: %s: %s", who, k,
                 a->f.event.type, a->f.event.summary);
        else if (p->st == JOB_RUNNING && a->f.nevents > p->nevents[k] && a->f.nrounds)
            sbad(s, S2, kase, "%s, which never ran, stopped node-%d's workers (%s)", who, k,
                 a->f.event.type);
    }
}

/* The timer that moved the job was the heartbeat deadline of a member away that took a ROUND
 * (no newcomer): gone with it, the restart is that member's (P8d). */
static bool away_veteran_gone(const struct rdzvd_job *j, const struct spre *p)
{
    for (int i = 0; i < NODES; i++)
        if (p->away[i] && p->took_round[i] && !member_of(j, i))
            return true;
    return false;
}

/* S7, after every event: the restarts every worker heard (an agent's EVENT restart of a
 * generation not restarted before) that the budget did not count, but for a signal to a node
 * that rdzvd saw run (its generation past the start-up window by rdzvd's clock: a claimed step
 * does not count), a rebuild nobody came back to, or, past the bound, one caused by a member
 * that took a ROUND of the job (no newcomer: P8d, once a member), are at most
 * RDZVD_JOB_UNCOUNTED_RESTARTS within any RDZVD_JOB_UNCOUNTED_WINDOW_MS of the sim's clock, whoever
 * joined; the restart count never
 * passes the budget. The count goes with the job: a new run, a job made afresh (no record kept
 * its bound), an rdzvd restart without a job table. */
static void check_bound(struct sim *s, int code, const struct spre *p)
{
    const struct rdzvd_job *j = the_job(&s->md);
    int kind = code < EV_NODE_KINDS * NODES ? code / NODES : -1;
    uint64_t gen = 0;
    bool scale = false, ran = false;
    int nscale = 0;

    if (code == SC_NEW_RUN || (code == JOB_EV(EV_RESTART) && !s->c.v.state_dir) ||
        (j && !p->exists && (!s->c.v.state_dir || !j->n_uncounted))) {
        s->nuncounted = 0;
        s->restart_gen = s->veteran_gen = 0;
        s->ncounted = 0;
    }
    if (j && p->exists && j->restart_count > p->restarts)
        s->counted_gen[s->ncounted++ % 8] = p->gen; /* the generation it stopped, counted */
    if (!j && p->exists) { /* it left memory in the event: its record says what it counted */
        struct rdzvd_job_record rec;

        if (record_of(&s->md, &rec) == 0 && rec.restart_count > p->restarts)
            s->counted_gen[s->ncounted++ % 8] = p->gen;
        rdzvd_job_record_clear(&rec);
    }
    /* Past the bound, a member that took a ROUND (no newcomer) stopped its generation: P8d
     * leaves that restart uncounted, whenever its agents hear it. */
    if (p->spent && j && p->exists && (p->st == JOB_RUNNING || p->st == JOB_NCCL) &&
        (j->state != p->st || j->generation != p->gen) && j->restart_count == p->restarts &&
        ((kind >= 0 && p->took_round[code % NODES]) ||
         ((code == SC_ADV_GONE || code == SC_ADV_CANCEL) && p->adv_took_round) ||
         (code == JOB_EV(EV_TIMER) && away_veteran_gone(j, p))))
        s->veteran_gen = p->gen;
    if (j && j->restart_count > s->c.v.max_restarts)
        sbad(s, S7, 0, "the job's restart count is %" PRId64 ", past its budget (%" PRId64 ")",
             j->restart_count, s->c.v.max_restarts);
    for (int i = 0; i < NODES; i++) {
        const struct fake *f = &s->md.a[i].f;

        if (f->nevents > p->nevents[i] && event_is(f, "restart") && f->event.generation > gen) {
            gen = f->event.generation;
            scale = strstr(f->event.summary, "scale up") != NULL;
            /* Nobody came back to a rebuild, or a node that rdzvd saw run left on a signal:
             * no claim of a joiner's (P8d); the bound counts the others. */
            ran = strstr(f->event.summary, "did not come back") ||
                  (kind == EV_CANCEL && seen_ran(s, code % NODES, p)) ||
                  (code == SC_ADV_CANCEL && p->adv_ran) || gen == s->veteran_gen;
        }
    }
    if (gen <= s->restart_gen)
        return;
    s->restart_gen = gen;
    for (unsigned k = 0; k < s->ncounted && k < 8; k++)
        ran |= s->counted_gen[k] == gen; /* counted when it stopped, heard later */
    if (!j || !p->exists || j->restart_count > p->restarts || j->state == JOB_ENDED || ran)
        return; /* counted, or a node that ran caused it (or not this job's) */
    if (uncounted_in_window(s) == RDZVD_JOB_UNCOUNTED_RESTARTS + 1) {
        memmove(&s->uncounted_at[0], &s->uncounted_at[1],
                RDZVD_JOB_UNCOUNTED_RESTARTS * sizeof(s->uncounted_at[0]));
        s->nuncounted--;
    }
    s->uncounted_at[s->nuncounted].at = jt_now_ms();
    s->uncounted_at[s->nuncounted++].scale = scale;
    for (int k = 0; k < s->nuncounted; k++)
        nscale += s->uncounted_at[k].scale;
    /* Case 1 of issue 71 when scale-ups are among them, case 2 (re-forms only) when not. */
    if (s->nuncounted > RDZVD_JOB_UNCOUNTED_RESTARTS)
        sbad(s, S7, nscale ? 1 : 2,
             "%d restarts not counted within %.0f s (the bound: %d in %d "
             "min), %d of them scale-ups, the last of generation %" PRIu64 ": every worker "
             "restarted each time",
             s->nuncounted, (double)(jt_now_ms() - s->uncounted_at[0].at) / 1000,
             RDZVD_JOB_UNCOUNTED_RESTARTS, RDZVD_JOB_UNCOUNTED_WINDOW_MS / 60000, nscale, gen);
}

/* S8: an honest node's fault (its connection lost, its workers failing, put aside, signalled;
 * the operator's cancel, an rdzvd restart, every node failing alike), or the loss of the
 * adversary once it ran, since the run began.
 * Without one, and with every honest node in the job (at least MIN: below it the job needs any
 * node, failures.md), the job never fails for its budget: no token holder spends it. */
static void check_healthy(struct sim *s, int code, const struct spre *p)
{
    int kind = code < EV_NODE_KINDS * NODES ? code / NODES : -1;
    const struct rdzvd_job *j;

    if (code == SC_NEW_RUN)
        s->honest_fault = false;
    /* The adversary ran (rdzvd saw it: its generation past the start-up window) and went: the
     * loss of a node that ran is a failure like any (P1), counted, whoever it was. */
    if (p->adv_ran && !s->adv_in)
        s->honest_fault = true;
    /* Its worker failure as a member of the first generation (not late): a failure like any
     * node's there (P7d), counted, whoever it was. */
    if (code == SC_ADV_EXIT && !s->adv_late)
        s->honest_fault = true;
    /* Placed while an honest node was out: the job needed it (below MIN any node is taken, and
     * its loss before it ran may use the budget, failures.md). */
    if (s->adv.f.nrounds > s->adv_rounds) {
        s->adv_rounds = s->adv.f.nrounds;
        s->adv_below |= !p->all_in;
    }
    if ((kind >= 0 && kind != EV_JOIN && kind != EV_LEAVE) || code == JOB_EV(EV_ALL_FAIL) ||
        code == JOB_EV(EV_OP_CANCEL) || code == JOB_EV(EV_RESTART) ||
        code == JOB_EV(EV_ABANDON) || code == SC_NEW_RDZVD)
        s->honest_fault = true; /* whatever the adversary did before */
    if (s->adv_below)
        return;
    /* At once: the adversary closed before rdzvd saw it run (it answered its ROUND with a step
     * claimed, or not), within P8's bound, and the budget was charged. */
    if (code == SC_ADV_GONE && !p->adv_ran && !p->spent && p->exists && (j = the_job(&s->md)) &&
        j->restart_count > p->restarts)
        sbad(s, S8, 1, "%s went before rdzvd saw it run (%s), and the job was charged restart "
             "%" PRId64 " of %" PRId64, s->adv_host,
             s->adv_answered ? "it took its ROUND and claimed a step" : "at its ROUND",
             j->restart_count, s->c.v.max_restarts);
    /* At once: having joined late, it reported a worker failure before rdzvd saw it run, within
     * P8's bound, and the budget was charged (P7d). */
    if (code == SC_ADV_EXIT && s->adv_late && !p->adv_ran && !p->spent && p->exists &&
        (j = the_job(&s->md)) && j->restart_count > p->restarts)
        sbad(s, S8, 3, "%s joined late, took its ROUND and reported a worker failure before "
             "rdzvd saw it run, and the job was charged restart %" PRId64 " of %" PRId64,
             s->adv_host, j->restart_count, s->c.v.max_restarts);
    for (int i = 0; i < NODES && !s->honest_fault && p->all_in; i++) {
        const struct fake *f = &s->md.a[i].f;

        if (f->nevents && !strcmp(f->event.type, "failed") &&
            strstr(f->event.summary, "budget exhausted"))
            sbad(s, S8, 2, "the job failed with every honest node healthy, its budget spent by "
                 "nodes that never ran: %s", f->event.summary);
    }
}

static void sim_check(struct sim *s, int code, const struct spre *p)
{
    struct model *md = &s->md;
    const struct rdzvd_job *j = the_job(md);
    int kind = code < EV_NODE_KINDS * NODES ? code / NODES : -1;
    int i = kind >= 0 ? code % NODES : -1;
    const char *q;

    if (kind == EV_JOIN && !p->exists && j && j->rebuilt && s->left_memory)
        sbad(s, S4, 6, "node-%d's resume rebuilt generation %" PRIu64 " of a job that left "
             "memory cancelled or ended, though rdzvd never restarted", i, j->generation);
    if (kind == EV_JOIN && p->ended && !md->refused && !p->exists && j && !p->resume[i])
        sbad(s, S4, 7, "node-%d, an agent of the run that ended (started before its end), "
             "started the job again", i);
    if (strstr(md->bad[I4], "resumed and was taken back")) { /* the explorer's P6, as S4 */
        sbad(s, S4, p->resume[i] ? 4 : 7, "%s", md->bad[I4]);
        md->bad[I4][0] = '\0';
    }
    /* S1: a restart for a lost node that never ran its generation. */
    if ((kind == EV_GONE || kind == EV_BLIP) && j && p->exists && s->ev_restarts > p->restarts &&
        md->a[i].f.nrounds && !seen_ran(s, i, p) && !p->spent) /* past P8's bound: charged */
        sbad(s, S1, s->c.v.scale_up_now ? 2 : 1, "node-%d's connection closed %" PRIu64 " ms "
             "after generation %" PRIu64 " formed, before its workers ran, and the job was "
             "charged restart %" PRId64 " of %" PRId64, i, jt_now_ms() - p->formed_ms, p->gen,
             j->restart_count, s->c.v.max_restarts);
    /* S2: a node that never got a ROUND, gone at once. */
    if (code == SC_FRESH)
        check_moved(s, p, -1, "an agent that joined and crashed at once");
    if ((kind == EV_GONE || kind == EV_BLIP) && !p->nrounds[i])
        check_moved(s, p, i, i == STRANGER ? "the stranger" : "a node that never got a ROUND");
    /* S3: a refusal for a table full of nodes that left: only the ids of the members and of
     * the running generation may fill it, as they were at the refusal (the step's timers may
     * take members away after it). */
    if ((kind == EV_JOIN || code == SC_FRESH) && md->refused &&
        (strstr(md->refused_err, "seen too many node ids") ||
         ((q = strstr(md->refused_err, "cannot take node id '")) &&
          md->refused_promised + strcspn(q + 21, "'") + 1 <= s->c.ids_max)))
        sbad(s, S3, 3, "a JOIN was refused though the members' and the running generation's "
             "node ids fill %zu of %" PRIu64 " bytes: %s", md->refused_promised,
             s->c.ids_max, md->refused_err);
    if ((kind == EV_JOIN || code == SC_FRESH) && md->refused && strstr(md->refused_err,
                                                                       "--max-jobs"))
        sbad(s, S3, 0, "a JOIN was refused though no other job runs: %s", md->refused_err);
    /* S4: an ended job is not rebuilt, and a new run is not refused for the old one's end. */
    /* (Once this run has ended too, its own agents, started before that end, are told it.) */
    if (kind == EV_JOIN && s->run_ended && !p->ended && !md->a[i].resume &&
        md->refused == -EBUSY && strstr(md->refused_err, "has ended"))
        sbad(s, S4, 7, "node-%d, started after the last run ended, was refused: %s", i,
             md->refused_err);
    if (kind == EV_JOIN && !p->exists && j && s->run_new && !md->a[i].resume &&
        (j->restart_count || j->generation > 1 || j->state == JOB_ENDED))
        sbad(s, S4, s->c.v.state_dir ? 4 : 0, "node-%d's new run took the last run's job "
             "(generation %" PRIu64 ", restart %" PRId64 ", %s)", i, j->generation,
             j->restart_count, rdzvd_job_state_names[j->state]);
    if (j)
        s->run_new = false;
    /* S5: the node that failed first at start-up keeps its charge. */
    if (kind == EV_EXIT_START && p->st == JOB_RUNNING && j && p->gen != s->ff_gen) {
        s->ff_node = i;
        s->ff_gen = p->gen;
        s->ff_charged = fails_of(j, i);
    } else if (s->ff_charged >= 0 && j && kind >= EV_EXIT_START && kind <= EV_EXIT_KILL &&
               i != s->ff_node && j->generation == s->ff_gen &&
               fails_of(j, s->ff_node) < s->ff_charged) {
        sbad(s, S5, 5, "node-%d's workers failed first at start-up, and its charge was taken "
             "back (%" PRId64 " failures, then %" PRId64 ")", s->ff_node, s->ff_charged,
             fails_of(j, s->ff_node));
        s->ff_charged = -1;
    }
    if (!j)
        s->ff_charged = -1;
    check_bound(s, code, p);
    check_healthy(s, code, p);
    if (p->exists && p->over && !j && code != JOB_EV(EV_RESTART))
        s->left_memory = true;
    if (code == JOB_EV(EV_RESTART))
        s->left_memory = false;
}

/* One event with every check around it; the violations in s->vio. The key of the state it
 * reached (state_key, which notes whether the job has a record: enabled() reads it). */
static uint64_t apply_one(struct sim *s, int code)
{
    struct model *md = &s->md;
    struct spre p;

    md->refused = 0;
    if (code < EV_NODE_KINDS * NODES && code / NODES == EV_JOIN) {
        struct agent *a = &md->a[code % NODES];

        /* An agent told to restart stops its workers even when its connection closed before
         * its READY: it comes back with a plain JOIN, not a resume of what it stopped. */
        if (a->st == A_LOST && event_is(&a->f, "restart") && a->acked != a->f.event.generation) {
            a->f.event.type[0] = '\0';
            a->resume = 0;
        }
    }
    if (code == JOB_EV(EV_RESTART))
        s->adv_in = false; /* its connection goes with rdzvd */
    take_spre(s, &p);
    if (code < N_CODES) {
        apply(md, (uint8_t)code);
    } else {
        struct pre pp;

        memset(md->bad, 0, sizeof(md->bad));
        md->label[0] = '\0';
        say(md, "%s", tok_job[code - JOB_EV(EV_NODE_KINDS)]);
        take_pre(md, -1, &pp);
        g_freed_ended = false;
        if (code == SC_FRESH)
            ev_fresh(s);
        else if (code == SC_ADV_JOIN)
            ev_adv_join(s);
        else if (code == SC_ADV_GONE)
            adv_gone(s);
        else if (code == SC_ADV_CANCEL)
            ev_adv_cancel_resume(s);
        else if (code == SC_ADV_RESUME)
            ev_adv_resume(s);
        else if (code == SC_ADV_EXIT)
            ev_adv_exit(s);
        else if (code == SC_WAIT)
            ev_wait(s);
        else if (code == SC_OTHER)
            ev_other(s);
        else if (code == SC_NEW_RUN)
            ev_new_run(s);
        else if (code == SC_DRAIN)
            ev_drain(s);
        md->refused =
            code == SC_FRESH || code == SC_ADV_JOIN || code == SC_ADV_RESUME ? md->refused : 0;
        if (code != SC_DRAIN && code != SC_NEW_RUN) {
            check_step(md, EV_TIMER, -1, &pp);
            reap(md);
            check_after_reap(md, EV_TIMER, &pp);
        }
    }
    s->ev_restarts = the_job(md) ? the_job(md)->restart_count : p.restarts;
    if (s->adv_in && (s->adv.f.closed || !s->adv.f.m))
        s->adv_in = false; /* rdzvd closed it (lost, put aside, the job's end) */
    /* Placed, it closes at its ROUND, or (every other one) answers it (a HEARTBEAT naming the
     * generation, a step claimed) and stays: its loss within the start-up window is not counted,
     * whatever it claimed (P7). Its WORKER_EXIT is its own move (adv-exit: a claim when it
     * joined late, P7d); told an outcome (the job's end, put aside) or to restart, it exits as
     * an agent does. */
    if (s->adv_in && s->adv.f.nrounds && s->adv.f.nevents <= s->adv_ev0 &&
        (s->adv_k % 2 == 0 || s->adv_resumed) &&
        s->adv_answered != s->adv.f.round.generation) {
        static struct rdzv_heartbeat hb;

        s->adv_answered = s->adv.f.round.generation;
        hb = (struct rdzv_heartbeat){.generation = s->adv_answered, .n_progress = 1};
        hb.progress[0] = (struct rdzv_rank_progress){.local_rank = 0, .step = 1}; /* a claim */
        jt_progress(s->adv.f.m, &hb); /* its ROUND taken, as an agent does */
        jt_run_pass();
    }
    if (s->adv_in && (s->adv.f.closed || !s->adv.f.m))
        s->adv_in = false;
    if (s->adv_in && ((s->adv.f.nrounds && s->adv_k % 2 && !s->adv_resumed) ||
                      s->adv.f.nevents > s->adv_ev0))
        adv_gone(s);
    sim_check(s, code, &p);
    for (int k = 0; k < N_INV; k++)
        if (md->bad[k][0] && !s->vio[k][0]) {
            snprintf(s->vio[k], sizeof(s->vio[k]), "%s", md->bad[k]);
            s->vcheck[k] = md->check[k];
            s->vcase[k] = 0;
            s->vrefused[k] = false;
        }
    return state_key(md);
}
