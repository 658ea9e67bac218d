/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-sim.c: a deterministic simulator of the job state machine, in the style of
 * TigerBeetle's VOPR: seeded random streams of events, many of them, every bound made small,
 * the invariants checked after every event. Each seed draws a configuration (1 to 6 nodes,
 * fixed or elastic, spares, room to scale up (MAX past the honest nodes, one seed in three), a
 * stranger with the token, --scale-up now, --state-dir or none, budgets, --max-jobs, ended jobs
 * kept, the job table's node ids and ends) and drives the model
 * of jobexplore.h forward (no replay: that is what makes it fast) with the explorer's events and
 * the simulator's own: an agent that joins and crashes at once under a new node id, another
 * one-node job that runs and ends, a new run of the same id once the job is over (fresh agents,
 * the same rdzvd), a fresh rdzvd, and a drain (agents back, workers done, timers) after which
 * every agent must have been told how the job ended. Its adversary (adv-join, adv-gone) is a
 * token holder that sends what an agent sends, a HEARTBEAT among it, under a new host name and
 * node id each time; placed, it may claim a step, send CANCEL and JOIN back at once with its
 * secret and a resume (adv-cancel), or report a worker failure as it takes its ROUND (adv-exit);
 * some seeds draw it often (adversary x1 to x8).
 *
 * After every event: I1..I5 (jobcheck.h, as the explorer) and S1..S8 (sim_inv). A violation of a
 * case still open (open_cases: a known violation) is counted and reported, not failed; any
 * other fails
 * the test. The first violation of each check is shrunk (chunks of events dropped while it still
 * violates, replayed from a fresh rdzvd) and printed event by event, with the trace that replays
 * it: RDZV_SIM_TRACE='seed=N join:0 join:1 ...'. RDZV_SIM_SEED=N runs that seed only,
 * RDZV_SIM_FIRST=N the seeds from N; RDZV_SIM_SEEDS, RDZV_SIM_EVENTS (in all) and
 * RDZV_SIM_SECONDS (a wall-time budget, shared fairly among the seeds: each stops at its share,
 * and the count says how far they got) size the run, RDZV_SIM_JOBS (default 2) the processes
 * that share the seeds; RDZV_SIM_KEEP_GOING=1 goes on past a failing violation,
 * RDZV_SIM_VERBOSE=1 prints every event, RDZV_SIM_LOG=3 (info) or 4 (debug) the machine's log.
 * Every trace in RDZV_SIM_TRACES (tests/unit/sim-traces/) is replayed first; "narrow" after its
 * seed replays it in the seed's configuration before MAX could pass the honest nodes. */
#include <dirent.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "common/rdzv-assert.h"
#include "common/rdzv-log.h"
#include "jobsim.h"

/* The known violations not fixed yet, by the case number of their traces (sim-traces/caseN-*):
 * counted and reported, not failed. Take each out as its fix merges; -1 ends the list. */
static const int open_cases[] = {-1};

static char g_path[64];
static bool g_keep_going, g_failed, g_verbose, g_stop;
static uint64_t g_deadline = UINT64_MAX; /* real ms: the seed's share of RDZV_SIM_SECONDS */
static uint64_t g_nviol[N_ALL], g_ncase[8];
static struct {
    const char *name, *check;
    int kase;
} g_seen[128]; /* each (slot, check, case) reported once */
static unsigned g_nseen;
static struct keyset g_states;

static uint64_t real_ms(void)
{
    struct timespec ts;

    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts); /* the real clock, not the injected one */
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);

    return s && *s ? strtoull(s, NULL, 10) : dflt;
}

static bool case_open(int c)
{
    for (size_t k = 0; open_cases[k] >= 0; k++)
        if (open_cases[k] == c)
            return true;
    return false;
}

/* ---- traces: the events from a fresh rdzvd, replayed and shrunk ---- */

struct trace {
    uint64_t seed;
    bool narrow; /* the seed's configuration before MAX could pass the honest nodes */
    int n;
    uint8_t ev[TRACE_MAX];
};

/* The trace being applied, and how many of its events so far (the last one under way). */
static struct {
    const struct trace *t;
    int n;
} g_live;

static void live_at(const struct trace *t, int n)
{
    g_live.t = t;
    g_live.n = n;
}

static const char *token(int code, char *buf, size_t len)
{
    if (code < EV_NODE_KINDS * NODES)
        snprintf(buf, len, "%s:%d", tok_node[code / NODES], code % NODES);
    else
        snprintf(buf, len, "%s", tok_job[code - JOB_EV(EV_NODE_KINDS)]);
    return buf;
}

static int code_of(const char *tok)
{
    char buf[32];

    for (int code = 0; code < SC_END; code++)
        if (!strcmp(token(code, buf, sizeof(buf)), tok))
            return code;
    return -1;
}

/* "seed=N [narrow] ev ev ..." (line breaks and '#' comments allowed) into t: 0, or -1. */
static int trace_parse(const char *text, struct trace *t)
{
    char *copy = strdup(text), *save = NULL, *tok;
    int r = -1;

    ASSERT_NOT_NULL(copy);
    memset(t, 0, sizeof(*t));
    for (char *c = copy; *c; c++)
        if (*c == '#')
            while (*c && *c != '\n')
                *c++ = ' ';
    for (tok = strtok_r(copy, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
        int code = code_of(tok);

        if (!strncmp(tok, "seed=", 5)) {
            t->seed = strtoull(tok + 5, NULL, 10);
            r = 0;
        } else if (!strcmp(tok, "narrow")) {
            t->narrow = true;
        } else if (code < 0 || t->n == TRACE_MAX) {
            fprintf(stderr, "test-job-sim: '%s' is no event of a trace\n", tok);
            r = -1;
            break;
        } else {
            t->ev[t->n++] = (uint8_t)code;
        }
    }
    free(copy);
    return r;
}

/* With want set, whether a replay of t finds want's violation (slot, fmt) before any other.
 * Events not enabled where they come are skipped (a shrunk trace drops what they needed). verbose:
 * each event applied is printed, and its violations; *out (if set) gets the applied events. */
static bool replay(const struct trace *t, int want_slot, const char *want, bool verbose,
                   struct trace *out)
{
    struct sim *s = calloc(1, sizeof(*s));
    bool found = false, other = false;
    char buf[32];

    ASSERT_NOT_NULL(s);
    sim_begin(s, t->seed, t->narrow);
    s->md.verbose = verbose;
    if (out)
        *out = (struct trace){.seed = t->seed, .narrow = t->narrow};
    for (int k = 0; k < t->n && !found && !other; k++) {
        if (!code_enabled(s, t->ev[k]))
            continue;
        memset(s->vio, 0, sizeof(s->vio));
        live_at(t, k + 1);
        apply_one(s, t->ev[k]);
        if (out)
            out->ev[out->n++] = t->ev[k];
        if (verbose)
            printf("#   %3d. [%s] %s\n", out ? out->n : k + 1, token(t->ev[k], buf, sizeof(buf)),
                   s->md.label);
        for (int v = 0; v < N_ALL; v++) {
            if (!s->vio[v][0])
                continue;
            if (verbose)
                printf("#        VIOLATION %.2s (case %d): %s\n",
                       v < N_INV ? inv_name[v] : sim_inv[v - N_INV], s->vcase[v], s->vio[v]);
            found |= want && v == want_slot && s->vcheck[v] == want;
            other |= want && !s->vrefused[v]; /* another violation first: another story */
        }
    }
    sim_end(s);
    free(s);
    return found;
}

/* Drop chunks of t's events, halving their size, while the check still fails. */
static void shrink(struct trace *t, int slot, const char *check)
{
    struct trace c;

    for (int size = t->n / 2; size >= 1; size /= 2)
        for (int at = 0; at + size <= t->n;) {
            c = *t;
            memmove(c.ev + at, c.ev + at + size, (size_t)(t->n - at - size));
            c.n -= size;
            if (replay(&c, slot, check, false, NULL))
                *t = c;
            else
                at += size;
        }
    c = *t;
    replay(&c, slot, check, false, t); /* only the events applied */
}

static void print_trace(const struct trace *t)
{
    char buf[32];

    printf("#   RDZV_SIM_TRACE='seed=%" PRIu64 "%s", t->seed, t->narrow ? " narrow" : "");
    for (int k = 0; k < t->n; k++)
        printf(" %s", token(t->ev[k], buf, sizeof(buf)));
    printf("'\n");
}

/* A failed assertion of the machine (rdzv_assert's hook) prints the events that led to it, the
 * one being applied last, as a trace that replays it. */
static void print_live(void *ud)
{
    struct trace t;

    (void)ud;
    if (!g_live.t)
        return;
    t = *g_live.t;
    t.n = g_live.n;
    printf("# an assertion of the machine failed at event %d of this trace:\n", t.n);
    print_trace(&t);
    fflush(stdout);
}

/* Violations whose check is new, to shrink and print once the model that found them is gone
 * (one model lives at a time). */
static struct pending {
    int slot, kase;
    const char *check;
    char what[512], config[256];
} g_pend[N_ALL];
static int g_npend;

/* What a step found: counted; a check's first kept in g_pend. A violation that comes with one
 * of an open case in the same step is taken for its consequence. Whether the step found any
 * but a refused JOIN (after which the machine is as it was). */
static bool found(struct sim *s)
{
    bool any = false;
    int kase = 0;

    for (int v = 0; v < N_ALL; v++)
        if (s->vio[v][0] && case_open(s->vcase[v]))
            kase = s->vcase[v];
    for (int v = 0; v < N_ALL; v++)
        if (s->vio[v][0] && !s->vcase[v])
            s->vcase[v] = kase;
    for (int v = 0; v < N_ALL; v++) {
        const char *name = v < N_INV ? inv_name[v] : sim_inv[v - N_INV];
        unsigned k;

        if (!s->vio[v][0])
            continue;
        any |= !s->vrefused[v];
        g_nviol[v]++;
        g_ncase[s->vcase[v] & 7]++;
        for (k = 0; k < g_nseen; k++)
            if (g_seen[k].name == name && g_seen[k].check == s->vcheck[v] &&
                g_seen[k].kase == s->vcase[v])
                break;
        if (k < g_nseen || g_nseen == 128 || g_npend == N_ALL)
            continue;
        g_seen[g_nseen].name = name;
        g_seen[g_nseen].kase = s->vcase[v];
        g_seen[g_nseen++].check = s->vcheck[v];
        g_pend[g_npend] = (struct pending){.slot = v, .kase = s->vcase[v], .check = s->vcheck[v]};
        snprintf(g_pend[g_npend].what, sizeof(g_pend[g_npend].what), "%s", s->vio[v]);
        snprintf(g_pend[g_npend++].config, sizeof(g_pend[0].config), "%s", s->c.name);
    }
    return any;
}

/* Shrink and print what found() kept, t the events that reached it. */
static void report(const struct trace *t)
{
    for (int k = 0; k < g_npend; k++) {
        struct pending *p = &g_pend[k];
        const char *name = p->slot < N_INV ? inv_name[p->slot] : sim_inv[p->slot - N_INV];
        bool fails = !case_open(p->kase);
        struct trace small = *t;

        printf("# %s %.2s%s%.0d: %s\n#   (%s)\n", fails ? "VIOLATION" : "open case:", name,
               p->kase ? ", case " : "", p->kase, p->what, p->config);
        if (!replay(&small, p->slot, p->check, false, NULL))
            printf("#   NOT REPRODUCED from a fresh rdzvd\n");
        shrink(&small, p->slot, p->check);
        printf("#   shortest trace found, %d events (of %d):\n", small.n, t->n);
        replay(&small, -1, NULL, true, NULL);
        print_trace(&small);
        fflush(stdout);
        if (fails) {
            g_failed = true;
            g_stop = !g_keep_going; /* test_no_violation fails */
        }
    }
    g_npend = 0;
}

/* ---- the run ---- */

static uint64_t fingerprint(const struct config *c)
{
    return (uint64_t)c->nodes << 48 ^ (uint64_t)c->v.min << 40 ^ (uint64_t)c->v.max << 32 ^
           (uint64_t)c->v.max_restarts << 24 ^ (uint64_t)c->v.state_dir << 16 ^
           (uint64_t)c->v.scale_up_now << 8 ^ (uint64_t)(c->stranger + 1);
}

/* The next event: one of those enabled, the job-wide ones less often than a node's; a new run
 * once the job is over; a drain, then a fresh rdzvd, after len events. The operator's cancel
 * and --abandon-after, which end the run, come one pick in 8: runs long enough for a bound over
 * a window to be passed (S7). READY is each agent's, as often as its other events. */
static int pick(struct sim *s, uint64_t *x, int n, int len)
{
    uint64_t mask = sim_enabled(s);
    int codes[N_CODES + 48], nc = 0;

    if (n >= len)
        return n == len ? SC_DRAIN : SC_NEW_RDZVD;
    if (rnd(x) % 8)
        mask &= ~(1ull << JOB_EV(EV_OP_CANCEL) | 1ull << JOB_EV(EV_ABANDON));
    if (job_over(s)) { /* its late agents back, other jobs, or a new run */
        codes[nc++] = SC_OTHER;
        codes[nc++] = SC_OTHER;
        codes[nc++] = rnd(x) % 4 ? SC_NEW_RUN : SC_NEW_RDZVD;
    }
    for (int code = 0; code < N_CODES; code++)
        if (mask >> code & 1)
            codes[nc++] = code;
    for (int i = 0, more = -1; mask >> JOB_EV(EV_READY) & 1 && i < NODES; i++) {
        const struct agent *a = &s->md.a[i];

        if (a->st == A_IN && event_is(&a->f, "restart") && a->acked != a->f.event.generation &&
            ++more) /* past the first, whose READY is in */
            codes[nc++] = JOB_EV(EV_READY);
    }
    if (code_enabled(s, SC_FRESH) && rnd(x) % 2)
        codes[nc++] = SC_FRESH;
    for (int k = 0; k < s->c.adversary && code_enabled(s, SC_ADV_JOIN); k++)
        codes[nc++] = SC_ADV_JOIN;
    if (code_enabled(s, SC_ADV_GONE))
        codes[nc++] = SC_ADV_GONE;
    for (int k = 0; k < s->c.adversary && code_enabled(s, SC_ADV_CANCEL); k++)
        codes[nc++] = SC_ADV_CANCEL;
    for (int k = 0; k < s->c.adversary && code_enabled(s, SC_ADV_RESUME); k++)
        codes[nc++] = SC_ADV_RESUME;
    for (int k = 0; k < s->c.adversary && code_enabled(s, SC_ADV_EXIT); k++)
        codes[nc++] = SC_ADV_EXIT;
    if (code_enabled(s, SC_WAIT) && rnd(x) % 4 == 0) /* time passing, now and then */
        codes[nc++] = SC_WAIT;
    if (rnd(x) % 16 == 0)
        codes[nc++] = SC_OTHER;
    if (!nc) /* nothing can happen: a drain says whether anyone waits, then a fresh rdzvd */
        return s->last == SC_DRAIN ? SC_NEW_RDZVD : SC_DRAIN;
    return codes[rnd(x) % (uint64_t)nc];
}

/* Seed's run: events until budget, fresh rdzvds as it goes. The events applied. */
static uint64_t run_seed(uint64_t seed, uint64_t budget)
{
    struct sim *s = calloc(1, sizeof(*s));
    struct trace *t = calloc(1, sizeof(*t));
    uint64_t x = seed, done = 0, fp, key;
    bool fresh;
    int len = 0;

    ASSERT_NOT_NULL(s);
    ASSERT_NOT_NULL(t);
    sim_begin(s, seed, false);
    fp = fingerprint(&s->c);
    *t = (struct trace){.seed = seed};
    len = 100 + (int)(rnd(&x) % 400);
    while (done < budget && !g_stop && (done % 1024 || real_ms() < g_deadline)) {
        int code = pick(s, &x, t->n, len);

        if (code == SC_NEW_RDZVD) {
            sim_end(s);
            sim_begin(s, seed, false);
            t->n = 0;
            len = 100 + (int)(rnd(&x) % 400);
            continue;
        }
        memset(s->vio, 0, sizeof(s->vio));
        s->md.verbose = g_verbose;
        t->ev[t->n] = (uint8_t)code; /* t->n < TRACE_MAX: a full trace began afresh */
        live_at(t, t->n + 1);
        key = apply_one(s, code);
        s->last = code;
        done += s->substeps;
        s->substeps = 0;
        t->ev[t->n++] = (uint8_t)code;
        if (g_verbose)
            printf("#   live %3d. %s\n", t->n, s->md.label);
        done++;
        keyset_add(&g_states, (key ^ fp * 0x9e3779b97f4a7c15ull) | 1);
        /* After a violation the run has left the promises: a fresh rdzvd. One that only
         * refused a JOIN left the machine as it was: the run goes on, from a replay of its
         * trace when the violation was reported (one model lives at a time). */
        fresh = found(s) || t->n == TRACE_MAX;
        if (g_npend || fresh) {
            sim_end(s);
            report(t);
            sim_begin(s, seed, false);
            if (fresh)
                t->n = 0;
            for (int k = 0; k < t->n; k++)
                if (code_enabled(s, t->ev[k])) {
                    live_at(t, k + 1);
                    apply_one(s, t->ev[k]);
                }
        }
    }
    sim_end(s);
    free(t);
    free(s);
    return done;
}

static void commas(uint64_t v, char *buf, size_t len)
{
    char raw[32];
    size_t n, o = 0;

    snprintf(raw, sizeof(raw), "%" PRIu64, v);
    n = strlen(raw);
    for (size_t k = 0; k < n && o + 2 < len; k++) {
        if (k && (n - k) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = raw[k];
    }
    buf[o] = '\0';
}

/* Every saved trace replays: a violation of a case not open fails. */
static void test_saved_traces(void)
{
    const char *dir = getenv("RDZV_SIM_TRACES");
    struct dirent **names = NULL;
    int n = dir && *dir ? scandir(dir, &names, NULL, alphasort) : 0;

    for (int k = 0; k < n; k++) {
        char path[1024], text[16384];
        struct trace t;
        FILE *f;
        size_t len;

        if (strlen(names[k]->d_name) > 6 &&
            !strcmp(names[k]->d_name + strlen(names[k]->d_name) - 6, ".trace")) {
            snprintf(path, sizeof(path), "%s/%s", dir, names[k]->d_name);
            ASSERT_NOT_NULL(f = fopen(path, "r"));
            len = fread(text, 1, sizeof(text) - 1, f);
            text[len] = '\0';
            fclose(f);
            ASSERT_OK(trace_parse(text, &t));
            printf("# replaying %s (%d events)\n", names[k]->d_name, t.n);
            {
                struct sim *s = calloc(1, sizeof(*s));

                ASSERT_NOT_NULL(s);
                sim_begin(s, t.seed, t.narrow);
                for (int e = 0; e < t.n; e++) {
                    if (!code_enabled(s, t.ev[e]))
                        continue;
                    memset(s->vio, 0, sizeof(s->vio));
                    live_at(&t, e + 1);
                    apply_one(s, t.ev[e]);
                    found(s);
                }
                sim_end(s);
                free(s);
                report(&t);
            }
        }
        free(names[k]);
    }
    free(names);
}

/* What a worker did, sent back to the parent, its keys of distinct states after it. */
struct tally {
    uint64_t done, nseeds, nviol[N_ALL], ncase[8], nkeys;
    bool failed, stopped;
};

/* Worker k of n: seeds first + k, first + k + n, ... (per events each) until the deadline. */
static void run_share(uint64_t first, uint64_t seeds, uint64_t per, uint64_t deadline, int k,
                      int n, struct tally *t)
{
    uint64_t left = (seeds - (uint64_t)k + (uint64_t)n - 1) / (uint64_t)n, now, got;

    for (uint64_t seed = first + (uint64_t)k; seed < first + seeds && !g_stop;
         seed += (uint64_t)n, left--) {
        /* A fair share of the time left to each seed still to run: all of them run. */
        now = real_ms();
        g_deadline = now < deadline ? now + (deadline - now) / left : now;
        got = run_seed(seed, per);
        t->done += got;
        t->nseeds++;
        t->stopped |= got < per;
    }
}

static void write_all(int fd, const void *buf, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, (const char *)buf + off, len - off);

        ASSERT_TRUE(w > 0);
        off += (size_t)w;
    }
}

static void read_all(int fd, void *buf, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t r = read(fd, (char *)buf + off, len - off);

        ASSERT_TRUE(r > 0);
        off += (size_t)r;
    }
}

/* Worker k of n in a process of its own (one model lives in a process), with its own state
 * directory; its tally and keys come back on a pipe. */
static void fork_share(uint64_t first, uint64_t seeds, uint64_t per, uint64_t deadline, int k,
                       int n, int *rfd, pid_t *pid)
{
    int p[2];

    ASSERT_OK(pipe(p));
    fflush(stdout);
    ASSERT_TRUE((*pid = fork()) >= 0);
    if (*pid == 0) {
        struct tally t = {0};
        char path[64];

        close(p[0]);
        setvbuf(stdout, NULL, _IOFBF, 1 << 16); /* a report leaves in one write */
        g_fd = state_dir_open(path, sizeof(path), "test-job-sim");
        memset(g_nviol, 0, sizeof(g_nviol));
        memset(g_ncase, 0, sizeof(g_ncase));
        g_failed = false;
        run_share(first, seeds, per, deadline, k, n, &t);
        fflush(stdout);
        memcpy(t.nviol, g_nviol, sizeof(t.nviol));
        memcpy(t.ncase, g_ncase, sizeof(t.ncase));
        t.failed = g_failed;
        t.nkeys = g_states.n;
        write_all(p[1], &t, sizeof(t));
        for (size_t i = 0; i < g_states.cap; i++)
            if (g_states.k[i])
                write_all(p[1], &g_states.k[i], sizeof(g_states.k[i]));
        jt_state_dir_done(g_fd, path);
        _exit(0);
    }
    close(p[1]);
    *rfd = p[0];
}

/* RDZV_SIM_JOBS workers (default 2: this machine's CPUs), each a share of the seeds. */
static void test_simulate(void)
{
    uint64_t t0 = real_ms(), seeds = env_u64("RDZV_SIM_SEEDS", 128);
    uint64_t events = env_u64("RDZV_SIM_EVENTS", 1050000);
    uint64_t first = env_u64("RDZV_SIM_FIRST", 1);
    uint64_t deadline = t0 + 1000 * env_u64("RDZV_SIM_SECONDS", 60);
    int n = (int)env_u64("RDZV_SIM_JOBS", 2), fds[16];
    struct tally all = {0};
    pid_t pids[16];
    char a[32], b[32], c[32];

    if (getenv("RDZV_SIM_SEED")) {
        first = env_u64("RDZV_SIM_SEED", 1);
        seeds = 1;
    }
    n = n < 1 ? 1 : n > 16 ? 16 : (uint64_t)n > seeds ? (int)seeds : n;
    for (int k = 0; k < n; k++)
        fork_share(first, seeds, events / seeds, deadline, k, n, &fds[k], &pids[k]);
    for (int k = 0; k < n; k++) {
        struct tally t;
        int status;

        read_all(fds[k], &t, sizeof(t));
        for (uint64_t i = 0; i < t.nkeys; i++) {
            uint64_t key;

            read_all(fds[k], &key, sizeof(key));
            keyset_add(&g_states, key);
        }
        close(fds[k]);
        ASSERT_TRUE(waitpid(pids[k], &status, 0) == pids[k]);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        all.done += t.done;
        all.nseeds += t.nseeds;
        all.stopped |= t.stopped;
        g_failed |= t.failed;
        for (int v = 0; v < N_ALL; v++)
            g_nviol[v] += t.nviol[v];
        for (int v = 0; v < 8; v++)
            g_ncase[v] += t.ncase[v];
    }
    if (all.stopped)
        printf("# RDZV_SIM_SECONDS ran out: seeds cut short of their %" PRIu64 " events\n",
               events / seeds);
    commas(all.done, a, sizeof(a));
    commas(all.nseeds, b, sizeof(b));
    commas(g_states.n, c, sizeof(c));
    printf("# simulated %s events over %s seeds, %s distinct states\n", a, b, c);
    printf("# %.1f s, %.0f events/s, %d workers\n", (double)(real_ms() - t0) / 1000,
           (double)all.done * 1000 / (double)(real_ms() - t0 + 1), n);
}

static void test_no_violation(void)
{
    for (int v = 0; v < N_ALL; v++)
        printf("# %.2s %s (%" PRIu64 " events)\n", v < N_INV ? inv_name[v] : sim_inv[v - N_INV],
               g_nviol[v] ? "violated" : "holds", g_nviol[v]);
    for (int k = 1; k < 8; k++)
        if (g_ncase[k])
            printf("# case %d of issue 62%s: %" PRIu64 " violating events\n", k,
                   case_open(k) ? " (open)" : "", g_ncase[k]);
    ASSERT_TRUE(!g_failed);
}

int main(void)
{
    const char *trace = getenv("RDZV_SIM_TRACE");

    rdzv_log_setup("test-job-sim", (enum rdzv_log_level)env_u64("RDZV_SIM_LOG", RDZV_LOG_ERROR));
    g_keep_going = env_u64("RDZV_SIM_KEEP_GOING", 0) != 0;
    g_verbose = env_u64("RDZV_SIM_VERBOSE", 0) != 0;
    g_fd = state_dir_open(g_path, sizeof(g_path), "test-job-sim");
    rdzv_assert_set_hook(print_live, NULL);
    if (trace && *trace) {
        struct trace t;

        struct config c;

        ASSERT_OK(trace_parse(trace, &t));
        config_of(t.seed, t.narrow, &c);
        printf("# replaying RDZV_SIM_TRACE (%d events; %s)\n", t.n, c.name);
        replay(&t, -1, NULL, true, NULL);
    } else {
        TEST(test_saved_traces);
        TEST(test_simulate);
        TEST(test_no_violation);
    }
    jt_state_dir_done(g_fd, g_path);
    return tap_done();
}
