/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-stories.c: the rows of docs/design/job-policy.md as stories, in the style of
 * etcd/raft's data-driven tests: each file of tests/unit/stories/ is a sequence of commands to the
 * job machine, each followed by "----" and what it must print (tests/README.md describes the
 * format). The agents are jobtest.h's fake ones, in its world: time moves only by a command.
 * Each file is one TAP test; a mismatch prints the command, what was expected and what came.
 * RDZV_STORY_REWRITE=1 writes what came into the files instead. Arguments: story files to run
 * (default: every *.txt of $RDZV_STORIES). */
#include <dirent.h>
#include <stdarg.h>

#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-sm-int.h"

#define MAX_CONNS 64
#define MAX_ARGS 32

/* One connection of an agent: the fake that rdzvd talks to. An agent ("a" is node id node-0 on
 * host0, "b" node-1 ...) opens a new one at each JOIN; it acts through its latest. */
struct conn {
    struct fake f; /* first: the peer rdzvd knows */
    int agent;     /* 0 for "a" */
    int nth;       /* its agent's 1st, 2nd ... connection */
    bool dead;     /* closed by its agent, or rdzvd restarted */
};

static struct env E; /* rdzvd */
static struct conn conns[MAX_CONNS];

static struct story {
    bool up;   /* E is initialised */
    int dirfd; /* the --state-dir, or -1 */
    char dir[64];
    struct rdzv_join tmpl;                      /* the job's options, given to every JOIN */
    int nconns;                                 /* of conns */
    int latest[JT_NODES];                       /* each agent's latest connection, -1: none */
    char secret[JT_NODES][RDZV_SECRET_HEX + 1]; /* what each agent holds */
    char last_job[512], last_record[512], last_admitted[512];
} S;

static FILE *out; /* the command's output, as it is said */

/* One line of the command's output. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
}

/* A mistake of the story's own (an unknown command, an agent with no connection): said, and the
 * story fails even when rewritten. */
static bool story_bad;
static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...)
{
    va_list ap;

    fputs("error: ", out);
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    story_bad = true;
}

/* ---- what the agents are told: jobtest.h's fakes, each message said ---- */

static const char *label(const void *peer)
{
    static char buf[16];
    const struct conn *c = peer;

    if (c->nth > 1)
        snprintf(buf, sizeof(buf), "%c#%d", 'a' + c->agent, c->nth);
    else
        snprintf(buf, sizeof(buf), "%c", 'a' + c->agent);
    return buf;
}

static void st_joined(void *peer, const char *run_id, int64_t waiting, bool spare, bool resumed,
                      uint64_t gen, bool inplace, const char *secret, const char *warning)
{
    struct conn *c = peer;
    const char *held = S.secret[c->agent]; /* the agent's, "": none yet */
    const char *kept = !held[0] ? "" : strcmp(held, secret) ? ", a new secret" : ", its secret";

    say("%s: JOINED%s%s%s%s%s", label(peer), spare ? " spare" : "", resumed ? " resumed" : "", kept,
        warning && warning[0] ? ", warning: " : "", warning ? warning : "");
    fake_joined(peer, run_id, waiting, spare, resumed, gen, inplace, secret, warning);
}

static void st_round(void *peer, struct rdzv_round *rd)
{
    say("%s: ROUND gen %llu, node rank %lld of %lld, restarts %lld%s", label(peer),
        (unsigned long long)rd->generation, (long long)rd->node_rank, (long long)rd->nnodes,
        (long long)rd->restart_count, rd->n_ids ? ", NCCL ids" : "");
    fake_round(peer, rd);
}

static void say_event(const void *peer, const struct rdzv_event *e)
{
    say("%s: EVENT %s gen %llu, exit %lld%s: %s", label(peer), e->type,
        (unsigned long long)e->generation, (long long)e->exit_code,
        e->startup_grace_ms ? ", with a start-up grace" : "", e->summary);
}

static void st_event(void *peer, const struct rdzv_event *e)
{
    say_event(peer, e);
    fake_event(peer, e);
}

static int st_nccl_request(void *peer, uint64_t gen, int64_t count, bool store, const char *allow)
{
    say("%s: NCCL_REQUEST gen %llu", label(peer), (unsigned long long)gen);
    return fake_nccl_request(peer, gen, count, store, allow);
}

static void st_close(void *peer, const char *reason)
{
    say("%s: closed: %s", label(peer), reason);
    fake_close(peer, reason);
}

static void st_put_aside(void *peer, const struct rdzv_event *e)
{
    say_event(peer, e);
    say("%s: closed", label(peer));
    fake_put_aside(peer, e);
}

static struct rdzvd_job_ops story_ops;

/* ---- the world after a command: the job, its record, the node ids admitted ---- */

static const char *name_of(const char *node_id)
{
    static char buf[RDZV_ID_MAX + 1];
    unsigned i;

    if (sscanf(node_id, "node-%u", &i) == 1 && i < JT_NODES)
        snprintf(buf, sizeof(buf), "%c", 'a' + i);
    else
        snprintf(buf, sizeof(buf), "%s", node_id);
    return buf;
}

static void job_line(char *buf, size_t len)
{
    const struct rdzvd_job *j = rdzvd_job_view(&E.jobs, "job");

    if (!j) {
        snprintf(buf, len, "job: none in memory");
        return;
    }
    snprintf(buf, len, "job: %s, gen %llu, restarts %lld, members %lld, ready %lld",
             rdzvd_job_state_names[j->state], (unsigned long long)j->generation,
             (long long)j->restart_count, (long long)j->nmembers, (long long)j->nready);
}

static void record_line(char *buf, size_t len)
{
    struct rdzvd_job_record rec;
    size_t n;

    if (rdzvd_job_record_get(E.table, "job", &rec) < 0) {
        snprintf(buf, len, "record: none");
        return;
    }
    n = (size_t)snprintf(buf, len, "record: gen %llu, restarts %lld, %s",
                         (unsigned long long)rec.generation, (long long)rec.restart_count,
                         rec.running ? "running" : "stopped");
    for (unsigned i = 0; i < rec.n_hist && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "; %s failed %lld%s", name_of(rec.hist[i].node_id),
                              (long long)rec.hist[i].failures, rec.hist[i].aside ? ", aside" : "");
    rdzvd_job_record_clear(&rec);
}

static void admitted_line(char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "admitted:");

    for (int i = 0; i < JT_NODES; i++) {
        char id[16];

        snprintf(id, sizeof(id), "node-%d", i);
        if (admitted(&E, id))
            n += (size_t)snprintf(buf + n, len - n, " %c", 'a' + i);
    }
    if (strcmp(buf, "admitted:") == 0)
        snprintf(buf, len, "admitted: none");
}

/* Say line when it is not *last, the line said before; it is then. */
static void say_changed(char *last, size_t len, const char *line)
{
    if (strcmp(line, last))
        say("%s", line);
    snprintf(last, len, "%s", line);
}

/* Say each of the job, its record (with a job table) and the ids admitted that changed. */
static void say_world(void)
{
    char buf[512];

    if (!S.up)
        return;
    job_line(buf, sizeof(buf));
    say_changed(S.last_job, sizeof(S.last_job), buf);
    if (E.table) {
        record_line(buf, sizeof(buf));
        say_changed(S.last_record, sizeof(S.last_record), buf);
    }
    admitted_line(buf, sizeof(buf));
    say_changed(S.last_admitted, sizeof(S.last_admitted), buf);
}

/* ---- commands ---- */

struct cmd {
    int argc;
    char *argv[MAX_ARGS];
};

/* The value of key=VALUE among the arguments, or def. */
static const char *arg(const struct cmd *c, const char *key, const char *def)
{
    size_t n = strlen(key);

    for (int i = 1; i < c->argc; i++)
        if (strncmp(c->argv[i], key, n) == 0 && c->argv[i][n] == '=')
            return c->argv[i] + n + 1;
    return def;
}

static bool has_word(const struct cmd *c, const char *word)
{
    for (int i = 1; i < c->argc; i++)
        if (strcmp(c->argv[i], word) == 0)
            return true;
    return false;
}

/* The agent an argument names ("a" .. "p"), or -1: an option (KEY=VALUE, no-secret, failed), or a
 * mistake, said. */
static int agent_of(const char *w)
{
    if (w[0] >= 'a' && w[0] < 'a' + JT_NODES && !w[1])
        return w[0] - 'a';
    if (!strchr(w, '=') && strcmp(w, "no-secret") && strcmp(w, "failed"))
        bad("%s is neither an agent (a to p) nor an option", w);
    return -1;
}

/* The agent's latest connection, if it is a member's: else says why and returns NULL. */
static struct conn *member_conn(int agent)
{
    struct conn *c = S.latest[agent] < 0 ? NULL : &conns[S.latest[agent]];

    if (!c || c->dead || c->f.closed || !c->f.m) {
        bad("%c has no member's connection", 'a' + agent);
        return NULL;
    }
    return c;
}

static uint64_t job_gen(void)
{
    const struct rdzvd_job *j = rdzvd_job_view(&E.jobs, "job");

    return j ? j->generation : 0;
}

static uint64_t gen_arg(const struct cmd *c)
{
    const char *g = arg(c, "gen", NULL);

    return g ? strtoull(g, NULL, 10) : job_gen();
}

static void say_refusal(const char *who, const struct rdzvd_job_ready *rd)
{
    const char *name = strerrorname_np(-rd->rc);

    say("%s: refused (%s): %s", who, name ? name : "?", rd->err);
}

/* One input through the machine's step, as rdzvd's adapters feed it; a refusal said. */
static void step(const char *who, const struct rdzvd_job_input *in)
{
    struct rdzvd_job_ready rd;

    if (jt_step(&E.h, in, &rd))
        say_refusal(who, &rd);
}

static void env_up(void)
{
    env_init(&E, S.dirfd);
    E.h.ops = &story_ops;
    /* The ended and waiting jobs kept as rdzvd keeps them (rdzvd-job-wire.c). */
    rdzvd_ended_jobs_free(&E.ended);
    rdzvd_ended_jobs_init(&E.ended, 3600 * 1000, 16);
    E.h.ended = &E.ended;
    E.h.keep_ended = rdzvd_ended_jobs_add;
    E.h.keep_end = rdzvd_ended_jobs_add_recorded;
    E.h.keep_waiting = rdzvd_waiting_jobs_add;
    E.h.take_waiting = rdzvd_waiting_jobs_take;
    S.up = true;
}

/* rdzvd goes: its jobs dropped (records kept), every connection to it closed. */
static void env_down(void)
{
    if (!S.up)
        return;
    env_done(&E);
    S.up = false;
    for (int i = 0; i < S.nconns; i++)
        conns[i].dead = true;
}

/* A new story: no rdzvd, no agent, nothing said yet. */
static void story_begin(void)
{
    memset(&S, 0, sizeof(S));
    S.dirfd = -1;
    for (int i = 0; i < JT_NODES; i++)
        S.latest[i] = -1;
    snprintf(S.last_job, sizeof(S.last_job), "job: none in memory");
    snprintf(S.last_record, sizeof(S.last_record), "record: none");
    snprintf(S.last_admitted, sizeof(S.last_admitted), "admitted: none");
}

static void story_end(void)
{
    env_down();
    if (S.dirfd >= 0) {
        env_forget_table(S.dirfd);
        jt_state_dir_done(S.dirfd, S.dir);
    }
    S.dirfd = -1;
}

/* job [--nnodes MIN[:MAX]] [--max-restarts N] [--restart-backoff S] [--last-call S]
 *     [--heartbeat-timeout S] [--nccl auto] [--scale-up now] [--state-dir] */
static void cmd_job(const struct cmd *c)
{
    story_end();
    story_begin();
    S.tmpl = join_of(0, 2, 2, 3);
    for (int i = 1; i < c->argc; i++) {
        const char *o = c->argv[i], *v = i + 1 < c->argc ? c->argv[i + 1] : "";
        bool valued = true; /* the option takes the next argument */

        if (strcmp(o, "--nnodes") == 0) {
            S.tmpl.min = strtoll(v, NULL, 10);
            S.tmpl.max = strchr(v, ':') ? strtoll(strchr(v, ':') + 1, NULL, 10) : S.tmpl.min;
        } else if (strcmp(o, "--max-restarts") == 0)
            S.tmpl.max_restarts = strtoll(v, NULL, 10);
        else if (strcmp(o, "--restart-backoff") == 0)
            S.tmpl.restart_backoff_s = strtoll(v, NULL, 10);
        else if (strcmp(o, "--last-call") == 0)
            S.tmpl.last_call_ms = (int64_t)(strtod(v, NULL) * 1000);
        else if (strcmp(o, "--heartbeat-timeout") == 0)
            S.tmpl.heartbeat_timeout_ms = (int64_t)(strtod(v, NULL) * 1000);
        else if (strcmp(o, "--nccl") == 0 && strcmp(v, "auto") == 0)
            S.tmpl.nccl = RDZV_NCCL_AUTO;
        else if (strcmp(o, "--scale-up") == 0 && strcmp(v, "now") == 0)
            S.tmpl.scale_up_now = true;
        else if (strcmp(o, "--state-dir") == 0) {
            S.dirfd = jt_state_dir(S.dir, sizeof(S.dir));
            valued = false;
        } else {
            bad("unknown option %s %s", o, v);
            valued = false;
        }
        i += valued;
    }
    env_up();
}

/* join AGENT... [no-secret] [host=H]; resume AGENT... (from the ROUND it got last) */
static void cmd_join(const struct cmd *c, bool resume)
{
    for (int i = 1; i < c->argc; i++) {
        int a = agent_of(c->argv[i]);
        struct rdzv_join jn = S.tmpl;
        struct conn *k;
        char err[RDZV_ERROR_MAX + 1];
        int r;

        if (a < 0)
            continue;
        if (S.nconns == MAX_CONNS) {
            bad("too many connections");
            return;
        }
        snprintf(jn.node_id, sizeof(jn.node_id), "node-%d", a);
        snprintf(jn.host, sizeof(jn.host), "host%d", a);
        if (arg(c, "host", NULL))
            snprintf(jn.host, sizeof(jn.host), "%s", arg(c, "host", NULL));
        if (resume) {
            const struct rdzv_round *rd;

            if (S.latest[a] < 0) {
                bad("%c got no ROUND to resume", 'a' + a);
                continue;
            }
            rd = &conns[S.latest[a]].f.round;
            jn.resume = (struct rdzv_resume){.generation = rd->generation,
                                             .node_rank = rd->node_rank,
                                             .nnodes = rd->nnodes,
                                             .rank_offset = rd->rank_offset,
                                             .world_size = rd->world_size,
                                             .restart_count = rd->restart_count,
                                             .master_port = rd->master_port};
        }
        k = &conns[S.nconns];
        memset(k, 0, sizeof(*k));
        k->agent = a;
        k->nth = 1;
        for (int j = 0; j < S.nconns; j++)
            k->nth += conns[j].agent == a;
        /* The agent sends the secret it holds (jobtest.h's join takes it from e->secrets). */
        snprintf(E.secrets[a], sizeof(E.secrets[a]), "%s",
                 has_word(c, "no-secret") ? "" : S.secret[a]);
        r = join_err(&E, &k->f, &jn, err, sizeof(err));
        if (r < 0) {
            const char *name = strerrorname_np(-r);

            say("%s: refused (%s): %s", label(k), name ? name : "?", err);
            continue;
        }
        S.latest[a] = S.nconns++;
        snprintf(S.secret[a], sizeof(S.secret[a]), "%s", k->f.secret);
    }
}

/* The messages an agent's member sends, by command. */
static const struct {
    const char *name;
    enum rdzvd_job_input_kind kind;
} member_cmds[] = {
    {"heartbeat", RDZVD_IN_HEARTBEAT}, {"worker-exit", RDZVD_IN_WORKER_EXIT},
    {"leave", RDZVD_IN_LEAVE},         {"ready", RDZVD_IN_AGENT_READY},
    {"nccl-id", RDZVD_IN_NCCL_ID},     {"cancel", RDZVD_IN_CANCEL},
    {"unhealthy", RDZVD_IN_UNHEALTHY}, {"gone", RDZVD_IN_CLOSED},
};

/* NAME AGENT... [gen=G] [code=C] [failed] [signal=S] [reason=WORD]: the message of member_cmds
 * from each agent named, through its latest connection (gone: that connection closed). */
static void cmd_member(const struct cmd *c, enum rdzvd_job_input_kind kind)
{
    uint64_t gen = gen_arg(c);

    for (int i = 1; i < c->argc; i++) {
        int a = agent_of(c->argv[i]);
        struct rdzvd_job_input in = {.kind = kind};
        struct conn *k;
        static struct rdzv_heartbeat hb;
        struct rdzv_worker_exit w = {.generation = gen};
        struct rdzv_leave l = {.generation = gen, .succeeded = !has_word(c, "failed")};
        struct rdzv_ready rdy = {.generation = gen};
        struct rdzv_nccl_id n = {.generation = gen, .n_ids = 1};
        struct rdzv_cancel cn = {.signal = strtoll(arg(c, "signal", "15"), NULL, 10)};
        struct rdzv_unhealthy u;

        if (a < 0 || !(k = member_conn(a)))
            continue;
        in.member = k->f.m;
        switch (kind) {
        case RDZVD_IN_HEARTBEAT:
            hb = (struct rdzv_heartbeat){.generation = k->f.round.generation};
            in.u.heartbeat = &hb;
            break;
        case RDZVD_IN_WORKER_EXIT:
            w.exit_code = strtoll(arg(c, "code", "1"), NULL, 10);
            w.rank = k->f.round.rank_offset; /* its local rank 0 */
            in.u.worker_exit = &w;
            break;
        case RDZVD_IN_LEAVE:
            in.u.leave = &l;
            break;
        case RDZVD_IN_AGENT_READY:
            in.u.ready = &rdy;
            break;
        case RDZVD_IN_NCCL_ID:
            fill_id(n.ids[0], "0123456789abcdef"[gen % 16]);
            in.u.nccl_id.generation = gen;
            in.u.nccl_id.msg = &n;
            break;
        case RDZVD_IN_CANCEL:
            snprintf(cn.reason, sizeof(cn.reason), "%s", arg(c, "reason", ""));
            in.u.cancel = &cn;
            break;
        case RDZVD_IN_UNHEALTHY:
            snprintf(u.reason, sizeof(u.reason), "%s", arg(c, "reason", "a check failed"));
            in.u.unhealthy = &u;
            break;
        default:            /* RDZVD_IN_CLOSED */
            k->dead = true; /* the machine does not touch its peer again */
            break;
        }
        step(label(k), &in);
        if (k->dead)
            k->f.m = NULL;
    }
}

/* tick MS [heartbeats=AGENT,...]: the clock runs MS ms, the agents named sending a HEARTBEAT
 * every second meanwhile. */
static void cmd_tick(const struct cmd *c)
{
    uint64_t ms = c->argc > 1 ? strtoull(c->argv[1], NULL, 10) : 0;
    const char *beating = arg(c, "heartbeats", "");

    while (ms) {
        uint64_t d = ms < 1000 || !beating[0] ? ms : 1000;

        for (const char *p = beating; *p; p++) {
            struct conn *k;
            static struct rdzv_heartbeat hb;

            if (*p < 'a' || *p >= 'a' + JT_NODES || !(k = member_conn(*p - 'a')))
                continue;
            hb = (struct rdzv_heartbeat){.generation = k->f.round.generation};
            step(label(k), &(struct rdzvd_job_input){
                               .kind = RDZVD_IN_HEARTBEAT, .member = k->f.m, .u.heartbeat = &hb});
        }
        run_ms(&E, d);
        ms -= d;
    }
}

/* status: the jobs rdzvd lists (in memory, ended, waiting in their records). */
static void cmd_status(void)
{
    struct rdzvd_server_info info = {.start_ms = rdzv_now_ms()};
    struct rdzv_status st = {0};

    ASSERT_OK(rdzvd_status_fill(&info, &E.jobs, &jt_steps.counts, &E.ended, NULL, jt_clock(), &st));
    if (E.table)
        ASSERT_OK(rdzvd_status_add_waiting(&st, E.table, &E.jobs, &E.ended, jt_now_ms(),
                                           jt_clock()));
    for (size_t i = 0; i < st.n_jobs; i++) {
        const struct rdzv_status_job *j = &st.jobs[i];

        say("status: %s %s%s%s, gen %llu, restarts %lld", j->run_id, j->state, j->ended ? " " : "",
            j->ended ? j->outcome_type : "", (unsigned long long)j->generation,
            (long long)j->restart_count);
    }
    if (!st.n_jobs)
        say("status: no job");
    rdzv_status_free(&st);
}

/* cancel-job [reason=WORD]: the operator's CANCEL_JOB of the job. */
static void cmd_cancel_job(const struct cmd *c)
{
    struct rdzv_cancel_job cj = {.run_id = "job"};
    struct rdzvd_job_input in = {.kind = RDZVD_IN_CANCEL_JOB, .u.cancel_job = &cj};
    struct rdzvd_job_ready rd;

    snprintf(cj.reason, sizeof(cj.reason), "%s", arg(c, "reason", ""));
    if (jt_step(&E.h, &in, &rd))
        say_refusal("operator", &rd);
    else
        say("operator: cancelled"); /* the reply */
}

static void run_command(struct cmd *c)
{
    const char *name = c->argv[0];

    if (strcmp(name, "job") == 0) {
        cmd_job(c);
    } else if (!S.up) {
        bad("no job yet (start with: job --nnodes ...)");
        return;
    } else if (strcmp(name, "join") == 0 || strcmp(name, "resume") == 0) {
        cmd_join(c, name[0] == 'r');
    } else if (strcmp(name, "tick") == 0) {
        cmd_tick(c);
    } else if (strcmp(name, "stall") == 0) {
        jt_stall_ms(&E, c->argc > 1 ? strtoull(c->argv[1], NULL, 10) : 0);
    } else if (strcmp(name, "cancel-job") == 0) {
        cmd_cancel_job(c);
    } else if (strcmp(name, "restart-rdzvd") == 0) {
        env_down();
        env_up();
        jt_rebuild(&E.h);
        S.last_job[0] = S.last_record[0] = S.last_admitted[0] = '\0'; /* say them all */
    } else if (strcmp(name, "status") == 0) {
        cmd_status();
    } else {
        size_t i = 0, n = sizeof(member_cmds) / sizeof(member_cmds[0]);

        while (i < n && strcmp(name, member_cmds[i].name))
            i++;
        if (i < n)
            cmd_member(c, member_cmds[i].kind);
        else
            bad("unknown command %s", name);
    }
    say_world();
}

/* ---- the files ---- */

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    int ch;

    ASSERT_NOT_NULL(m);
    if (!f) {
        fclose(m);
        free(buf);
        return NULL;
    }
    while ((ch = fgetc(f)) != EOF)
        fputc(ch, m);
    fclose(f);
    fclose(m);
    return buf;
}

/* Run the story in path: true when every command printed what it expects. With rewrite, the
 * file gets what each printed instead. */
static bool run_story(const char *path, bool rewrite)
{
    char *text = read_all(path), *line, *next, *copy = NULL;
    size_t copy_len = 0;
    FILE *w = open_memstream(&copy, &copy_len);
    bool ok = true;
    int lineno = 0, cmd_line = 0;

    if (!text) {
        fprintf(stderr, "%s: cannot read it: %s\n", path, strerror(errno));
        fclose(w);
        free(copy);
        return false;
    }
    story_begin();
    story_bad = false;
    for (line = text; line && *line && ok; line = next) {
        struct cmd c = {0};
        char cmdline[512], *expected, *end, *p, *found;
        size_t found_len;

        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        fprintf(w, "%s\n", line);
        if (!line[0] || line[0] == '#')
            continue;
        cmd_line = lineno;
        snprintf(cmdline, sizeof(cmdline), "%s", line);
        for (p = strtok(line, " \t"); p && c.argc < MAX_ARGS; p = strtok(NULL, " \t"))
            c.argv[c.argc++] = p;
        if (!next || strncmp(next, "----\n", 5) != 0) {
            fprintf(stderr, "%s:%d: %s: no ---- line after the command\n", path, lineno, cmdline);
            ok = false;
            break;
        }
        expected = next + 5;
        lineno++;
        /* The expected output: the lines up to a blank one or the end. */
        for (end = expected; *end && *end != '\n'; lineno++)
            end = strchr(end, '\n') ? strchr(end, '\n') + 1 : end + strlen(end);
        next = end;
        out = open_memstream(&found, &found_len);
        ASSERT_NOT_NULL(out);
        run_command(&c);
        ASSERT_EQ(fclose(out), 0);
        fprintf(w, "----\n%s", found);
        if (story_bad || (!rewrite && (found_len != (size_t)(end - expected) ||
                                       memcmp(found, expected, found_len) != 0))) {
            fprintf(stderr, "%s:%d: %s\nexpected:\n%.*sfound:\n%s", path, cmd_line, cmdline,
                    (int)(end - expected), expected, found);
            ok = false;
        }
        free(found);
    }
    story_end();
    fclose(w);
    if (rewrite && ok) {
        FILE *f = fopen(path, "w");

        ASSERT_NOT_NULL(f);
        fputs(copy, f);
        ASSERT_EQ(fclose(f), 0);
    }
    free(copy);
    free(text);
    return ok;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    const char *dir = getenv("RDZV_STORIES");
    const char *rw = getenv("RDZV_STORY_REWRITE");
    bool rewrite = rw && strcmp(rw, "1") == 0;
    char *paths[256];
    int n = 0, failed = 0;

    rdzv_log_setup("test-job-stories", RDZV_LOG_ERROR);
    story_ops = jt_fake_ops;
    story_ops.joined = st_joined;
    story_ops.round = st_round;
    story_ops.event = st_event;
    story_ops.nccl_request = st_nccl_request;
    story_ops.close = st_close;
    story_ops.put_aside = st_put_aside;
    for (int i = 1; i < argc && n < 256; i++)
        paths[n++] = strdup(argv[i]);
    if (argc < 2) {
        DIR *d = opendir(dir ? dir : "tests/unit/stories");
        struct dirent *de;

        ASSERT_NOT_NULL(d);
        while ((de = readdir(d)) && n < 256) {
            size_t len = strlen(de->d_name);

            if (len > 4 && strcmp(de->d_name + len - 4, ".txt") == 0)
                ASSERT_TRUE(asprintf(&paths[n++], "%s/%s", dir ? dir : "tests/unit/stories",
                                     de->d_name) > 0);
        }
        closedir(d);
    }
    qsort(paths, (size_t)n, sizeof(paths[0]), by_name);
    for (int i = 0; i < n; i++) {
        bool ok = run_story(paths[i], rewrite);

        printf("%s %d - %s\n", ok ? "ok" : "not ok", i + 1,
               strrchr(paths[i], '/') ? strrchr(paths[i], '/') + 1 : paths[i]);
        failed += !ok;
        free(paths[i]);
    }
    printf("1..%d\n", n);
    if (failed)
        fprintf(stderr,
                "a story whose change is meant: RDZV_STORY_REWRITE=1 %s STORY.txt writes "
                "what was found into it (read its diff)\n",
                argv[0]);
    if (!n)
        fprintf(stderr, "no story found\n");
    return failed || !n;
}
