/* SPDX-License-Identifier: Apache-2.0 */
/* test-cluster-sim.c: the whole cluster in one deterministic process (issue 74): rdzvd's job
 * machine and 3 to 8 agents' session machines, joined by a simulated network (cluster.h), with
 * simulated workers (cluster-agent.h), driven by a seed. A seed draws the job's options and a
 * trace of faults (late joiners, lost connections, a node cut off, workers that crash, are
 * killed, hang, slow down or end early, a step-wide SIGTERM, rdzvd's restart with or without
 * --state-dir); everything else follows from the seed. After every event it checks what a user
 * is promised:
 *   C1 every worker of a generation sees the same world: generation, world size, distinct
 *      ranks, one NCCL id;
 *   C2 no worker of an older generation steps beside a newer one, except in-place survivors;
 *   C3 every agent ends, and its outcome and root cause match what rdzvd told the job's end;
 *   C4 once the faults stop, the job ends within CS_BOUND_MS of the simulated clock;
 *   C5 the job's bounds: its restart count within its budget, at most
 *      RDZVD_JOB_UNCOUNTED_RESTARTS - 1 scale-ups (not counted) within
 *      RDZVD_JOB_UNCOUNTED_WINDOW_MS;
 *   C6 every message crosses the wire: encoded and decoded by proto's functions (cluster-wire.h;
 *      RDZV_CSIM_WIRE=0 passes the structs as they are).
 * A violation prints the seed's trace, shrunk to the faults it needs; RDZV_CSIM_TRACE replays
 * one, and the traces under tests/unit/cluster-traces/ (RDZV_CSIM_TRACES) replay as tests: a
 * race still open there must still be found (its line "open"), or the trace fails. */
#include <dirent.h>
#include <time.h>

#include "../tap.h"
#include "cluster.h"
#include "cluster-agent.h"
#include "cluster-check.h"

#define CS_BOUND_MS (20 * 60 * 1000) /* C4: from the last fault to the job's end */
#define CS_RUN_EVENTS 2000000        /* a seed's events at most (a runaway's end) */
#define CS_FAULTS 16

static bool g_wire = true; /* RDZV_CSIM_WIRE=0: messages pass as structs, not encoded */

/* ---- a seed: its configuration and its faults ---- */

static void cs_config(uint64_t seed, struct cs_cfg *c)
{
    uint64_t x = seed * 0x2545f4914f6cdd1dull + 7;
#define D(lo, hi) ((int64_t)(lo) + (int64_t)(cs_rnd(&x) % (uint64_t)((hi) - (lo) + 1)))
    memset(c, 0, sizeof(*c));
    c->nagents = (int)D(3, CS_AGENTS);
    c->nproc = D(1, CS_NPROC);
    c->max = D(2, c->nagents);
    c->min = D(1, c->max);
    c->first = (int)D(c->min, c->max);
    c->max_restarts = D(0, 6);
    c->inplace = D(0, 9) < 4;
    c->scale_up_now = D(0, 1);
    c->follows = D(0, 9) < 9;
    c->state_dir = D(0, 1);
    c->steps = D(5, 40);
    c->ckpt_every = D(1, 5);
    c->step_ms = D(100, 500);
    c->progress_timeout_ms = D(0, 1) ? D(8000, 20000) : 0;
    c->hb_ms = 1000;
    c->hb_timeout_ms = D(5000, 10000);
    c->last_call_ms = D(0, 3000);
    c->join_timeout_ms = D(10000, 30000);
    c->connect_timeout_ms = D(30000, 60000);
    c->net_min_ms = 1;
    c->net_max_ms = D(2, 50);
    c->bad_node_failures = D(2, 4);
    c->replicas = c->state_dir && D(0, 2) == 0; /* drawn last: the seeds' other draws stay */
#undef D
    snprintf(c->name, sizeof(c->name), "seed %" PRIu64 ": %d agents (%d at first) x %" PRId64
             " workers, --nnodes %" PRId64 ":%" PRId64 ", --max-restarts %" PRId64 "%s%s%s%s%s, "
             "%" PRId64 " steps of %" PRId64 " ms, checkpoint every %" PRId64 ", "
             "--progress-timeout %" PRId64 " ms",
             seed, c->nagents, c->first, c->nproc, c->min, c->max, c->max_restarts,
             c->inplace ? ", --recovery inplace" : "", c->inplace && !c->follows ? " (plain)" : "",
             c->scale_up_now ? ", --scale-up now" : "", c->state_dir ? ", --state-dir" : "",
             c->replicas ? ", 3 replicas" : "", c->steps, c->step_ms, c->ckpt_every,
             c->progress_timeout_ms);
}

static int cs_faults(uint64_t seed, const struct cs_cfg *c, struct cs_fault *f)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 11;
    uint64_t span = (uint64_t)(c->steps * c->step_ms + c->last_call_ms + 2000);
    int n = 0, more = (int)(cs_rnd(&x) % 9);

#define D(lo, hi) ((int64_t)(lo) + (int64_t)(cs_rnd(&x) % (uint64_t)((hi) - (lo) + 1)))
    for (int a = c->first; a < c->nagents && n < CS_FAULTS; a++) { /* the late joiners */
        uint64_t t = cs_rnd(&x) % 2 ? (uint64_t)D(0, (int64_t)span)
                                    : (uint64_t)D((int64_t)span * 6 / 10, (int64_t)span);

        f[n++] = (struct cs_fault){.t = t, .kind = F_JOIN, .a = a};
    }
    for (int k = 0; k < more && n < CS_FAULTS; k++) {
        struct cs_fault *q = &f[n++];

        q->t = (uint64_t)D(0, (int64_t)span);
        q->kind = (enum cs_fault_kind)D(F_LOSE, F_RESTART);
        if (q->kind == F_RESTART && D(0, 2))
            q->kind = F_CRASH; /* rdzvd's restart, less often */
        if (D(0, 15) == 0)
            q->kind = F_SICK;
        else if (D(0, 40) == 0)
            q->kind = F_CANCEL;
        else if (D(0, 30) == 0)
            q->kind = F_AKILL;
        else if (D(0, 30) == 0)
            q->kind = F_SIG;
        if (q->kind == F_HANG && !c->progress_timeout_ms)
            q->kind = F_SLOW; /* without --progress-timeout a hang is for ever (not bounded) */
        q->a = (int)D(0, c->nagents - 1);
        q->arg = q->kind == F_PART      ? (int)D(500, 3 * c->hb_timeout_ms)
                 : q->kind == F_RESTART ? (int)D(200, 8000)
                 : q->kind == F_TERM    ? (int)D(0, 700)
                 : q->kind == F_SIG     ? (int[]){SIGHUP, SIGINT, SIGQUIT, SIGUSR1}[D(0, 3)]
                                        : (int)D(0, c->nproc - 1);
    }
#undef D
    return n;
}

/* ---- traces: "seed=N f=T:kind:agent:arg ..." ---- */

static void cs_trace_print(FILE *out, uint64_t seed, const struct cs_fault *f, int n)
{
    fprintf(out, "seed=%" PRIu64, seed);
    for (int k = 0; k < n; k++)
        fprintf(out, " f=%" PRIu64 ":%s:%d:%d", f[k].t, cs_fault_names[f[k].kind], f[k].a,
                f[k].arg);
}

/* Parse text into *seed and f (*n faults); open: the trace says "open" (a race still open),
 * or "open: TEXT", TEXT (to the end of its line) into expect: what its violation must say. 0 or
 * -EINVAL. */
static int cs_trace_parse(const char *text, uint64_t *seed, struct cs_fault *f, int *n, bool *open,
                          char *expect, size_t elen)
{
    const char *p = text;

    *n = 0;
    *open = false;
    *seed = 0;
    expect[0] = '\0';
    while (*p) {
        char tok[128], kind[32];
        int len = 0;

        if (sscanf(p, " %127s%n", tok, &len) != 1)
            break;
        p += len;
        if (tok[0] == '#') { /* a comment: the rest of the line */
            p += strcspn(p, "\n");
            continue;
        }
        if (!strcmp(tok, "open") || !strcmp(tok, "open:")) {
            size_t k = strspn(p, " \t"), end = strcspn(p + k, "\n");

            *open = true;
            if (tok[4] == ':')
                snprintf(expect, elen, "%.*s", (int)end, p + k);
            if (tok[4] == ':')
                p += k + end;
        } else if (!strncmp(tok, "seed=", 5)) {
            *seed = strtoull(tok + 5, NULL, 10);
        } else if (!strncmp(tok, "f=", 2) && *n < CS_FAULTS) {
            struct cs_fault *q = &f[*n];
            int k;

            if (sscanf(tok + 2, "%" SCNu64 ":%31[a-z]:%d:%d", &q->t, kind, &q->a, &q->arg) != 4)
                return -EINVAL;
            for (k = 0; k < F_KINDS && strcmp(kind, cs_fault_names[k]); k++)
                ;
            if (k == F_KINDS)
                return -EINVAL;
            q->kind = (enum cs_fault_kind)k;
            (*n)++;
        } else {
            return -EINVAL;
        }
    }
    return *seed ? 0 : -EINVAL;
}

/* ---- distinct states ---- */

static struct {
    uint64_t *k;
    size_t n, cap;
} g_states;

static void cs_state_add(uint64_t key)
{
    size_t i;

    key |= 1;
    if (2 * (g_states.n + 1) > g_states.cap) {
        uint64_t *old = g_states.k;
        size_t oc = g_states.cap;

        g_states.cap = oc ? 2 * oc : 1 << 16;
        g_states.k = calloc(g_states.cap, sizeof(*g_states.k));
        if (!g_states.k)
            abort();
        g_states.n = 0;
        for (size_t j = 0; j < oc; j++)
            if (old[j])
                cs_state_add(old[j]);
        free(old);
    }
    for (i = key % g_states.cap; g_states.k[i]; i = (i + 1) % g_states.cap)
        if (g_states.k[i] == key)
            return;
    g_states.k[i] = key;
    g_states.n++;
}

static uint64_t cs_mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

/* Both machines' abstract states: the job's state, restarts and members; each agent's state,
 * connection and workers. */
static uint64_t cs_state_key(void)
{
    const struct rdzvd_job *j = W->up ? rdzvd_job_view(&W->jobs, "job") : NULL;
    uint64_t h = cs_mix(0, W->up);

    if (j)
        h = cs_mix(cs_mix(cs_mix(h, j->state + 1), (uint64_t)j->restart_count),
                   (uint64_t)j->nin_round);
    for (int a = 0; a < W->c.nagents; a++) {
        const struct cs_agent *ag = &W->ag[a];
        unsigned run = 0;

        for (int k = 0; k < W->c.nproc; k++)
            run += ag->w[k].alive;
        h = cs_mix(h, (uint64_t)ag->started | (uint64_t)ag->done << 1 |
                          (uint64_t)cs_connected(ag) << 2 | (uint64_t)ag->joined << 3 |
                          (uint64_t)ag->sm.state << 4 | (uint64_t)run << 8);
    }
    return h;
}

static uint64_t g_last_key; /* every state of the last run, folded: its fingerprint */
static uint64_t g_slowest_ms, g_slowest_seed; /* the longest from a last fault to the end */

/* ---- a world: one seed's run ---- */

static void cs_world_begin(struct cs_world *w, uint64_t seed, const struct cs_fault *f, int nf)
{
    memset(w, 0, sizeof(*w));
    W = w;
    w->seed = seed;
    w->rng = seed * 0xd1342543de82ef95ull + 3;
    w->side = seed * 0x9e3779b97f4a7c15ull + 7;
    w->now = CS_T0;
    cs_config(seed, &w->c);
    w->c.wire = g_wire;
    w->bounds = (struct rdzvd_job_bounds)RDZVD_JOB_BOUNDS_DEFAULT;
    w->faults = malloc((size_t)(nf ? nf : 1) * sizeof(*f));
    memcpy(w->faults, f, (size_t)nf * sizeof(*f));
    w->nfaults = nf;
    for (int a = 0; a < w->c.nagents; a++)
        cs_agent_init(a);
    cs_rdzvd_start();
    for (int a = 0; a < w->c.first; a++)
        cs_push(NOW + (uint64_t)cs_draw(0, 300), (struct cs_ev){.kind = E_FAULT, .arg = -1 - a});
    for (int k = 0; k < nf; k++) {
        cs_push(CS_T0 + f[k].t, (struct cs_ev){.kind = E_FAULT, .arg = k});
        if (CS_T0 + f[k].t > w->last_fault_t)
            w->last_fault_t = CS_T0 + f[k].t;
    }
    if (!w->last_fault_t)
        w->last_fault_t = CS_T0;
}

static void cs_world_end(struct cs_world *w)
{
    struct cs_ev ev;

    if (w->up)
        cs_rdzvd_stop();
    while (cs_heap_pop(&w->q, &ev))
        free(ev.msg);
    free(w->q.v);
    free(w->conns);
    free(w->faults);
    w->table = rdzvd_store_free(w->table);
    W = NULL;
}

static void cs_fault(const struct cs_fault *f)
{
    struct cs_agent *ag = &W->ag[f->a];
    struct cs_worker *w = &ag->w[f->arg < W->c.nproc && f->arg >= 0 ? f->arg : 0];
    unsigned lr = (unsigned)(w - ag->w);

    cs_say("fault %s node-%d %d", cs_fault_names[f->kind], f->a, f->arg);
    switch (f->kind) {
    case F_JOIN:
        cs_agent_start(f->a);
        return;
    case F_LOSE:
        if (ag->conn >= 0)
            cs_conn_lose(ag->conn);
        return;
    case F_PART:
        if (W->part_until[f->a] < NOW + (uint64_t)f->arg)
            W->part_until[f->a] = NOW + (uint64_t)f->arg;
        return;
    case F_DONE:
        /* Mid-training, its peers would wait for it for ever without --progress-timeout: it
         * ends so only while a generation forms (or with the timeout). In place its exit 0 is
         * done even then (agent-policy A3a: not started again), as in a real DDP job, whose
         * peers re-form without it until the timeout: without one it does not end early. */
        if (!W->c.progress_timeout_ms && (ag->sm.state == AG_RUNNING || W->c.inplace))
            return;
        /* fall through */
    case F_CRASH:
    case F_KILL:
        if (w->alive && !w->exiting)
            cs_w_exit_in(f->a, lr, 1, f->kind == F_CRASH ? 1 : 0, f->kind == F_KILL ? SIGKILL : 0);
        return;
    case F_HANG:
        w->hung = true;
        return;
    case F_SLOW:
        ag->slow = 4;
        return;
    case F_TERM:
        if (!ag->started || ag->done)
            return;
        for (unsigned k = 0; k < (unsigned)W->c.nproc; k++)
            if (ag->w[k].alive && !ag->w[k].exiting)
                cs_w_exit_in(f->a, k, (uint64_t)cs_draw(1, 100), 0, SIGTERM);
        cs_push(NOW + (uint64_t)f->arg, (struct cs_ev){.kind = E_SIGNAL, .a = f->a,
                                                        .arg = SIGTERM});
        return;
    case F_RESTART:
        if (!W->up)
            return;
        cs_rdzvd_stop();
        cs_push(NOW + (uint64_t)f->arg, (struct cs_ev){.kind = E_RDZVD_UP});
        return;
    case F_SICK: /* its periodic check is due now (and at each beat after, cs_beat) */
        ag->sick = true;
        if (ag->started && !ag->done)
            cs_feed(f->a, (struct agent_input){.kind = AGENT_IN_HEALTH_DUE});
        return;
    case F_CANCEL:
        if (W->up) {
            struct rdzv_cancel_job cj = {.run_id = "job", .reason = "the operator's test"};
            struct rdzvd_job_ready rd;

            cs_r_step(&(struct rdzvd_job_input){.kind = RDZVD_IN_CANCEL_JOB,
                                                .u.cancel_job = &cj},
                      &rd);
        }
        return;
    case F_AKILL:
        if (ag->started && !ag->done) {
            snprintf(ag->sm.outcome.type, sizeof(ag->sm.outcome.type), "killed");
            snprintf(ag->sm.outcome.summary, sizeof(ag->sm.outcome.summary), "SIGKILLed");
            ag->sm.exit_code = 128 + SIGKILL;
            cs_finish(f->a); /* no word of its own: the connection ends, the workers go */
        }
        return;
    case F_SIG:
        if (ag->started && !ag->done)
            cs_feed(f->a, (struct agent_input){.kind = AGENT_IN_SIGNAL, .sig = f->arg});
        return;
    case F_KINDS:
        return;
    }
}

/* RDZV_CSIM_VERBOSE=2: every event of the run, as it is dispatched. */
static void cs_say_event(const struct cs_ev *ev)
{
    static const char *const kinds[] = {"deliver", "gone", "lost", "tick", "reap", "timer",
                                        "beat", "connect", "step", "exit", "health", "fault",
                                        "signal", "rdzvd up", "stderr closed", "stacks"};
    static const char *const msgs[] = {"JOIN", "HEARTBEAT", "NCCL_ID", "WORKER_EXIT", "LEAVE",
                                       "READY", "CANCEL", "UNHEALTHY", "JOINED", "ROUND", "EVENT",
                                       "NCCL_REQUEST", "HEARTBEAT", "ERROR", "FIN"};

    if (ev->kind == E_DELIVER)
        cs_say("%s node-%d %s %s (conn %d)", kinds[ev->kind], ev->a, ev->arg ? "->" : "<-",
               msgs[ev->msg->kind], ev->msg->conn);
    else if (ev->kind == E_STEP)
        cs_say("step generation %" PRIu64 " (run %" PRIu64 ")", ev->gen & 0xffffffffff,
               ev->gen >> 40);
    else if (ev->kind != E_FAULT)
        cs_say("%s node-%d %d", kinds[ev->kind], ev->a, ev->arg);
}

static void cs_dispatch(struct cs_ev *ev)
{
    if (W->verbose > 1)
        cs_say_event(ev);
    switch (ev->kind) {
    case E_DELIVER:
        if (ev->arg)
            cs_r_deliver(ev->msg);
        else
            cs_a_deliver(ev->msg);
        free(ev->msg);
        return;
    case E_GONE:
        cs_r_gone(ev->arg, ev->token);
        return;
    case E_LOST:
        cs_a_lost(ev->a, ev->arg, "the connection to rdzvd broke");
        return;
    case E_TICK:
        if (W->up && ev->token == W->epoch)
            cs_r_tick();
        return;
    case E_REAP:
        if (W->up && ev->token == W->epoch) {
            struct rdzvd_job_ready rd;

            cs_r_step(&(struct rdzvd_job_input){.kind = RDZVD_IN_REAP}, &rd);
        }
        return;
    case E_ATIMER:
        if (ev->token == W->ag[ev->a].timer_token[ev->arg])
            cs_feed(ev->a, (struct agent_input){.kind = AGENT_IN_TIMER,
                                                .timer = (enum agent_timer)ev->arg});
        return;
    case E_BEAT:
        cs_beat(ev->a);
        return;
    case E_CONNECT:
        cs_connect(ev->a);
        return;
    case E_STEP:
        cs_step(ev->gen);
        return;
    case E_WEXIT:
        cs_w_exited(ev->a, (unsigned)ev->arg, ev->token, (int64_t)ev->gen, ev->sig);
        return;
    case E_HEALTH:
        cs_checked(ev->a);
        return;
    case E_OUTPUT:
        cs_output_closed(ev);
        return;
    case E_STACKS:
        cs_feed(ev->a, (struct agent_input){.kind = AGENT_IN_HUNG, .local_rank = (unsigned)ev->arg,
                                            .gen = ev->gen, .text = "made no progress"});
        return;
    case E_FAULT:
        if (ev->arg < 0)
            cs_agent_start(-1 - ev->arg);
        else
            cs_fault(&W->faults[ev->arg]);
        return;
    case E_SIGNAL:
        cs_feed(ev->a, (struct agent_input){.kind = AGENT_IN_SIGNAL, .sig = ev->arg});
        return;
    case E_RDZVD_UP:
        cs_rdzvd_start();
        return;
    }
}

/* Every agent started has ended (and none is still to start). */
static bool cs_all_done(void)
{
    for (int a = 0; a < W->c.nagents; a++)
        if (W->ag[a].started && !W->ag[a].done)
            return false;
    for (int k = 0; k < W->nfaults; k++)
        if (W->faults[k].kind == F_JOIN && CS_T0 + W->faults[k].t > NOW)
            return false;
    return true;
}

/* Run the world to its end: events out of the queue, the checks after each. */
static uint64_t cs_run(void)
{
    struct cs_ev ev;
    uint64_t n = 0;

    while (!W->bad_inv && n < CS_RUN_EVENTS && cs_heap_pop(&W->q, &ev)) {
        const struct rdzvd_job *j;

        W->now = ev.t;
        cs_dispatch(&ev);
        n++;
        j = W->up ? rdzvd_job_view(&W->jobs, "job") : NULL;
        if (j && j->restart_count > W->c.max_restarts)
            cs_bad(C5, "the job's restart count is %" PRId64 ", past its budget %" PRId64,
                   j->restart_count, W->c.max_restarts);
        cs_end_forgotten_check(false);
        g_last_key = cs_mix(g_last_key, cs_state_key());
        cs_state_add(cs_state_key());
        if (cs_all_done())
            break;
        if (NOW > W->last_fault_t + CS_BOUND_MS) {
            bool short_rebuilt = j && j->rebuilt && j->state == JOB_RUNNING &&
                                 j->nin_round < j->round.nnodes;

            cs_bad(C4, "the job has not ended %d min after the last fault%s", CS_BOUND_MS / 60000,
                   cs_waits_for_done() ? " (a worker waits for peers that are done)"
                   : W->round_ignored  ? " (a ROUND came while the node's last workers stopped, "
                                         "ignored)"
                   : short_rebuilt     ? " (a rebuilt generation short of a node that left "
                                         "never ends)"
                                       : "");
            break;
        }
    }
    if (!W->bad_inv)
        cs_end_forgotten_check(true);
    if (!W->bad_inv)
        cs_check_outcomes();
    if (!W->bad_inv && NOW > W->last_fault_t && NOW - W->last_fault_t > g_slowest_ms) {
        g_slowest_ms = NOW - W->last_fault_t; /* C4's margin: the slowest end seen */
        g_slowest_seed = W->seed;
    }
    for (int a = 0; a < W->c.nagents && W->verbose && W->bad_inv; a++) {
        const struct cs_agent *ag = &W->ag[a];

        cs_say("node-%d: %s, machine state %d, generation %" PRIu64 ", %s, workers %d %d", a,
               !ag->started ? "not started" : ag->done ? "done" : "running", ag->sm.state,
               ag->sm.round.generation, cs_connected(ag) ? "connected" : "not connected",
               ag->w[0].alive, ag->w[1].alive);
    }
    W->events = n;
    return n;
}

/* One seed with faults f: its violation (0: none) into *bad, its events returned. */
static uint64_t cs_one(uint64_t seed, const struct cs_fault *f, int nf, int verbose, int *inv,
                       char *bad, size_t len)
{
    struct cs_world *w = calloc(1, sizeof(*w));
    uint64_t n;

    if (!w)
        abort();
    cs_world_begin(w, seed, f, nf);
    g_last_key = 0;
    w->verbose = verbose;
    if (verbose)
        printf("# %s\n", w->c.name);
    n = cs_run();
    *inv = w->bad_inv;
    snprintf(bad, len, "%s", w->bad);
    cs_world_end(w);
    free(w);
    return n;
}

/* ---- the tests ---- */

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);

    return v && *v ? strtoull(v, NULL, 10) : def;
}

static uint64_t real_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void commas(uint64_t v, char *buf, size_t len)
{
    char raw[32];
    size_t n, o = 0;

    snprintf(raw, sizeof(raw), "%" PRIu64, v);
    n = strlen(raw);
    for (size_t i = 0; i < n && o + 2 < len; i++) {
        if (i && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = '\0';
}

/* The faults of a failing seed, fewer while the same check still fails. */
static int cs_shrink(uint64_t seed, struct cs_fault *f, int nf, int inv)
{
    char bad[512];
    int got;

    for (int k = nf - 1; k >= 0; k--) {
        struct cs_fault keep = f[k];

        memmove(&f[k], &f[k + 1], (size_t)(nf - k - 1) * sizeof(*f));
        cs_one(seed, f, nf - 1, false, &got, bad, sizeof(bad));
        if (got == inv) {
            nf--;
            continue;
        }
        memmove(&f[k + 1], &f[k], (size_t)(nf - k - 1) * sizeof(*f));
        f[k] = keep;
    }
    return nf;
}

static void cs_print_violation(uint64_t seed, struct cs_fault *f, int nf, int inv,
                               const char *bad)
{
    struct cs_cfg c;

    cs_config(seed, &c);
    printf("# %s violated: %s\n#   %s\n#   trace: ", cs_inv[inv], bad, c.name);
    cs_trace_print(stdout, seed, f, nf);
    nf = cs_shrink(seed, f, nf, inv);
    printf("\n#   shrunk: RDZV_CSIM_TRACE='");
    cs_trace_print(stdout, seed, f, nf);
    printf("'\n");
}

/* Each trace under RDZV_CSIM_TRACES replays: one marked open must still find its violation,
 * any other finds none. */
static void test_saved_traces(void)
{
    const char *dir = getenv("RDZV_CSIM_TRACES");
    struct dirent **names = NULL;
    int n = dir && *dir ? scandir(dir, &names, NULL, alphasort) : 0;

    for (int k = 0; k < n; k++) {
        const char *nm = names[k]->d_name;
        size_t len = strlen(nm);

        if (len > 6 && !strcmp(nm + len - 6, ".trace")) {
            char path[1024], text[8192], bad[512], expect[128];
            struct cs_fault f[CS_FAULTS];
            uint64_t seed;
            int nf, inv;
            bool open;
            FILE *fp;

            snprintf(path, sizeof(path), "%s/%s", dir, nm);
            ASSERT_NOT_NULL(fp = fopen(path, "r"));
            len = fread(text, 1, sizeof(text) - 1, fp);
            text[len] = '\0';
            fclose(fp);
            ASSERT_OK(cs_trace_parse(text, &seed, f, &nf, &open, expect, sizeof(expect)));
            cs_one(seed, f, nf, false, &inv, bad, sizeof(bad));
            printf("# replayed %s (%d faults): %s%s\n", nm, nf, inv ? cs_inv[inv] : "no violation",
                   inv ? "" : "");
            if (inv)
                printf("#   %s\n", bad);
            if (open) /* the race is still there: found again, as it was */
                ASSERT_TRUE(inv != 0 && cs_open_race(bad) >= 0 && strstr(bad, expect));
            else
                ASSERT_EQ(inv, 0);
        }
        free(names[k]);
    }
    free(names);
}

/* A seed runs the same twice: the same events, the same states in the same order (what a
 * replay relies on), its saved trace's and a random one's. */
static void test_deterministic(void)
{
    static const uint64_t seeds[] = {10848, 5560, 4242};

    for (unsigned k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++) {
        struct cs_fault f[CS_FAULTS];
        struct cs_cfg cfg;
        uint64_t n1, n2, key1;
        char bad1[512], bad2[512];
        int nf, inv1, inv2;

        cs_config(seeds[k], &cfg);
        nf = cs_faults(seeds[k], &cfg, f);
        n1 = cs_one(seeds[k], f, nf, false, &inv1, bad1, sizeof(bad1));
        key1 = g_last_key;
        n2 = cs_one(seeds[k], f, nf, false, &inv2, bad2, sizeof(bad2));
        ASSERT_EQ(n1, n2);
        ASSERT_EQ(key1, g_last_key);
        ASSERT_EQ(inv1, inv2);
        ASSERT_TRUE(strcmp(bad1, bad2) == 0);
    }
}

static uint64_t g_events, g_seeds;
static int g_agents;
static bool g_failed;

/* Seeds from RDZV_CSIM_FIRST on until both RDZV_CSIM_SEEDS seeds and RDZV_CSIM_EVENTS events
 * ran, or RDZV_CSIM_SECONDS passed. */
static void test_simulate(void)
{
    uint64_t t0 = real_ms(), seed = env_u64("RDZV_CSIM_FIRST", 1);
    uint64_t seeds = env_u64("RDZV_CSIM_SEEDS", 128), events = env_u64("RDZV_CSIM_EVENTS", 1050000);
    uint64_t deadline = t0 + 1000 * env_u64("RDZV_CSIM_SECONDS", 80);
    bool one = getenv("RDZV_CSIM_SEED") != NULL;
    int verbose = (int)env_u64("RDZV_CSIM_VERBOSE", 0);
    char a[32], b[32], c[32];
    int shown = 0;

    if (one) {
        seed = env_u64("RDZV_CSIM_SEED", 1);
        seeds = 1;
        events = 0;
    }
    for (; (g_seeds < seeds || g_events < events) && real_ms() < deadline; seed++) {
        struct cs_fault f[CS_FAULTS];
        struct cs_cfg cfg;
        char bad[512];
        int nf, inv;

        cs_config(seed, &cfg);
        nf = cs_faults(seed, &cfg, f);
        g_events += cs_one(seed, f, nf, verbose, &inv, bad, sizeof(bad));
        g_seeds++;
        if (cfg.nagents > g_agents)
            g_agents = cfg.nagents;
        if (!inv)
            continue;
        if (cs_open_race(bad) >= 0) {
            if (g_open[cs_open_race(bad)]++ < env_u64("RDZV_CSIM_SHOW_OPEN", 1))
                cs_print_violation(seed, f, nf, inv, bad);
            continue;
        }
        g_failed = true;
        if (shown++ < 3)
            cs_print_violation(seed, f, nf, inv, bad);
    }
    commas(g_events, a, sizeof(a));
    commas(g_seeds, b, sizeof(b));
    commas(g_states.n, c, sizeof(c));
    printf("# cluster: %s events over %s seeds, up to %d agents, %s distinct states\n", a, b,
           g_agents, c);
    printf("# %.1f s, %.0f events/s; the slowest end %.1f s after the last fault (seed %" PRIu64
           ", C4's bound %d s)\n",
           (double)(real_ms() - t0) / 1000, (double)g_events * 1000 / (double)(real_ms() - t0 + 1),
           (double)g_slowest_ms / 1000, g_slowest_seed, CS_BOUND_MS / 1000);
    for (unsigned k = 0; cs_open[k]; k++)
        if (g_open[k])
            printf("# open: \"%s\" in %" PRIu64 " seeds\n", cs_open[k], g_open[k]);
}

static void test_no_violation(void)
{
    ASSERT_FALSE(g_failed);
}

int main(void)
{
    const char *trace = getenv("RDZV_CSIM_TRACE");

    g_wire = env_u64("RDZV_CSIM_WIRE", 1) != 0;
    rdzv_log_setup("test-cluster-sim",
                   (enum rdzv_log_level)env_u64("RDZV_CSIM_LOG", RDZV_LOG_ERROR));
    if (trace && *trace) {
        struct cs_fault f[CS_FAULTS];
        struct cs_cfg cfg;
        uint64_t seed;
        char bad[512], expect[128];
        int nf, inv;
        bool open;

        ASSERT_OK(cs_trace_parse(trace, &seed, f, &nf, &open, expect, sizeof(expect)));
        cs_config(seed, &cfg);
        printf("# replaying RDZV_CSIM_TRACE (%d faults; %s)\n", nf, cfg.name);
        cs_one(seed, f, nf, (int)env_u64("RDZV_CSIM_VERBOSE", 1), &inv, bad, sizeof(bad));
        printf("# %s%s%s\n", inv ? cs_inv[inv] : "no violation", inv ? ": " : "", bad);
        return 0;
    }
    TEST(test_saved_traces);
    TEST(test_deterministic);
    TEST(test_simulate);
    TEST(test_no_violation);
    return tap_done();
}
