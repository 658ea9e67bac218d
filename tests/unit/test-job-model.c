/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-model.c: a model test of the job state machine. Seeded random sequences of events
 * (JOINs, worker failures, READYs, NCCL ids, agents lost, LEAVEs, time passing, rdzvd restarted on
 * its --state-dir with the agents resuming; nodes put aside after repeated failures or a failed
 * health check; an agent cancelled from outside) drive a leader: the state machine over a job table
 * journaled in a state directory (jobtest.h), as a single rdzvd with --state-dir keeps it. Two
 * followers apply the journal's records as they are written, with rdzvd_record_apply, as a replica
 * applies the Raft entries that carry the same records. After every event each follower's table
 * equals the leader's byte for byte, and each job's memory (state, generation, restart count,
 * failure history) equals its record; at the end a fresh replay of the journal equals them too.
 * Over all seeds every move of the table (daemon/job/rdzvd-job-move.c) is taken at least once: the
 * counts are printed. RDZV_MODEL_SEEDS=N runs N seeds (default 40), RDZV_MODEL_SEED=S only seed S
 * (to replay a failure). */
#include <inttypes.h>
#include <sys/stat.h>

#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/data/rdzvd-record.h"
#include "daemon/job/rdzvd-job-impl.h"

#define NODES 4
#define STEPS 200

struct follower {
    struct rdzvd_store *t;
    size_t off; /* the journal's bytes applied so far */
};

struct model {
    struct env e;
    int fd;
    char path[64];
    struct fake f[NODES];
    uint64_t acked[NODES];  /* the restart generation each fake answered with READY */
    int nccl_done[NODES];   /* NCCL requests each fake answered */
    struct follower fl[2];
    char run_id[32];
    int njobs;
    uint64_t rng;
    enum rdzv_nccl_mode nccl;
    int64_t max_restarts;
    int64_t bad_node_failures; /* Nodes put aside after this many failures (0: never) */
};

static uint64_t rnd(struct model *md, uint64_t n)
{
    uint64_t x = md->rng;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    md->rng = x;
    return x % n;
}

/* ---- the journal, read as a follower reads the leader's log ---- */

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    uint8_t *buf;
    long n;

    ASSERT_NOT_NULL(fp);
    ASSERT_OK(fseek(fp, 0, SEEK_END));
    n = ftell(fp);
    ASSERT_TRUE(n >= 0);
    rewind(fp);
    buf = malloc((size_t)n + 1);
    ASSERT_NOT_NULL(buf);
    ASSERT_EQ(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

/* Apply to each follower what the journal holds past its offset. */
static void followers_catch_up(struct model *md)
{
    char file[128];
    size_t len;
    uint8_t *buf;

    snprintf(file, sizeof(file), "%s/jobs.journal", md->path);
    buf = read_file(file, &len);
    ASSERT_TRUE(len >= 8 && memcmp(buf, "RDZVJRN1", 8) == 0);
    for (int k = 0; k < 2; k++) {
        struct follower *fl = &md->fl[k];

        if (!fl->off) /* past the header: magic, version, name length, name, CRC */
            fl->off = 8 + 4 + 4 + strlen("jobs") + 4;
        while (fl->off < len) {
            struct rdzvd_record rec;
            const char *why = NULL;
            ssize_t n = rdzvd_record_decode(buf + fl->off, len - fl->off, &rec, &why);

            if (n <= 0)
                fprintf(stderr, "# journal record at %zu: %zd (%s)\n", fl->off, n, why ? why : "");
            ASSERT_TRUE(n > 0);
            ASSERT_OK(rdzvd_record_apply(fl->t, &rec));
            fl->off += (size_t)n;
        }
    }
    free(buf);
}

/* A store's content in a canonical order: each entry as hex, sorted, joined. */
struct dump {
    char **rows;
    size_t n, cap;
};

static int dump_cb(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                   const uint8_t *val, size_t vlen)
{
    struct dump *d = ud;
    char *row = malloc(2 * (klen + vlen) + 8);

    ASSERT_NOT_NULL(row);
    row[0] = (char)('0' + (int)what);
    rdzv_hex(key, klen, row + 1);
    row[1 + 2 * klen] = '=';
    rdzv_hex(val, vlen, row + 2 + 2 * klen);
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 16;
        d->rows = realloc(d->rows, d->cap * sizeof(*d->rows));
        ASSERT_NOT_NULL(d->rows);
    }
    d->rows[d->n++] = row;
    return 0;
}

static int row_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *content(struct rdzvd_store *s)
{
    struct dump d = {0};
    size_t len = 1;
    char *out;

    ASSERT_OK(rdzvd_store_dump(s, dump_cb, &d));
    qsort(d.rows, d.n, sizeof(*d.rows), row_cmp);
    for (size_t i = 0; i < d.n; i++)
        len += strlen(d.rows[i]) + 1;
    out = malloc(len);
    ASSERT_NOT_NULL(out);
    out[0] = '\0';
    for (size_t i = 0; i < d.n; i++) {
        strcat(out, d.rows[i]);
        strcat(out, "\n");
        free(d.rows[i]);
    }
    free(d.rows);
    return out;
}

static void assert_same_tables(struct model *md)
{
    char *lead = content(md->e.table);

    followers_catch_up(md);
    for (int k = 0; k < 2; k++) {
        char *c = content(md->fl[k].t);

        if (strcmp(c, lead) != 0)
            fprintf(stderr, "# follower %d:\n%s# leader:\n%s", k, c, lead);
        ASSERT_TRUE(strcmp(c, lead) == 0);
        free(c);
    }
    free(lead);
}

/* ---- what the job remembers against what its record holds ---- */

static void assert_memory_is_record(struct model *md)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &md->e.jobs)
    {
        const struct rdzvd_job *j = rdzv_container_of(pos, struct rdzvd_job, node);
        struct rdzvd_job_record rec = {0};
        int r = rdzvd_job_record_get(md->e.table, j->run_id, &rec);

        /* The history, as every decision records it: the record's is memory's. */
        if (r == 0 && j->state != JOB_ENDED) {
            ASSERT_EQ(rec.n_hist, j->n_hist);
            for (unsigned k = 0; k < j->n_hist; k++) {
                ASSERT_TRUE(strcmp(rec.hist[k].node_id, j->hist[k].node_id) == 0);
                ASSERT_EQ(rec.hist[k].failures, j->hist[k].failures);
                ASSERT_EQ(rec.hist[k].aside, j->hist[k].aside);
                ASSERT_TRUE(strcmp(rec.hist[k].reason, j->hist[k].reason) == 0);
            }
        }
        switch (j->state) {
        case JOB_RUNNING:
        case JOB_STOPPING:
            ASSERT_OK(r);
            ASSERT_EQ(rec.running, j->state == JOB_RUNNING);
            ASSERT_EQ(rec.generation, j->generation);
            ASSERT_EQ(rec.restart_count, j->restart_count);
            break;
        case JOB_FORMING:
        case JOB_NCCL: {
            /* The record is the last stopped generation's; NCCL is one generation past it. */
            uint64_t last = j->generation - (j->state == JOB_NCCL);

            if (r == -ENOENT) {
                ASSERT_EQ(last, 0);
                ASSERT_EQ(j->n_hist, 0);
                break;
            }
            ASSERT_OK(r);
            ASSERT_FALSE(rec.running);
            ASSERT_EQ(rec.generation, last);
            ASSERT_EQ(rec.restart_count, j->restart_count);
            break;
        }
        case JOB_ENDED:
            ASSERT_EQ(r, -ENOENT);
            break;
        default:
            ASSERT_TRUE(false);
        }
        rdzvd_job_record_clear(&rec);
    }
}

/* ---- the events ---- */

static const struct rdzvd_job *the_job(struct model *md)
{
    return rdzvd_job_view(&md->e.jobs, md->run_id);
}

static struct rdzv_join join_as(struct model *md, int i)
{
    struct rdzv_join jn = join_of(i, 2, 2, md->max_restarts);

    snprintf(jn.run_id, sizeof(jn.run_id), "%s", md->run_id);
    jn.join_timeout_ms = 5;
    jn.nccl = md->nccl;
    jn.bad_node_failures = md->bad_node_failures;
    return jn;
}

static void fake_reset(struct model *md, int i)
{
    memset(&md->f[i], 0, sizeof(md->f[i]));
    md->acked[i] = 0;
    md->nccl_done[i] = 0;
}

static void ev_join(struct model *md, int i)
{
    struct rdzv_join jn = join_as(md, i);

    if (md->f[i].m)
        return;
    fake_reset(md, i);
    (void)join(&md->e, &md->f[i], &jn);
}

/* The agents the state machine closed are gone, as the host reports them. */
static void reap_closed(struct model *md)
{
    for (int i = 0; i < NODES; i++)
        if (md->f[i].m && md->f[i].closed) {
            jt_gone(md->f[i].m);
            md->f[i].m = NULL;
        }
}

static bool in_generation(struct model *md, int i, const struct rdzvd_job *j)
{
    return md->f[i].m && j && j->state == JOB_RUNNING && md->f[i].nrounds &&
           md->f[i].round.generation == j->generation;
}

static void ev_ready(struct model *md, int i)
{
    struct fake *f = &md->f[i];

    if (f->m && event_is(f, "restart") && md->acked[i] != f->event.generation) {
        md->acked[i] = f->event.generation;
        jt_ready(f->m, f->event.generation);
    }
}

static void ev_nccl(struct model *md, int i, const struct rdzvd_job *j)
{
    char ids[RDZV_MAX_NCCL_IDS][RDZV_NCCL_HEX_LEN + 1];
    struct fake *f = &md->f[i];

    if (!f->m || !j || j->state != JOB_NCCL || f->nnccl == md->nccl_done[i] ||
        f->nccl_gen != j->generation)
        return;
    md->nccl_done[i] = f->nnccl;
    for (int64_t k = 0; k < f->nccl_count && k < RDZV_MAX_NCCL_IDS; k++)
        fill_id(ids[k], (char)('a' + k));
    jt_nccl_ids(f->m, ids, (unsigned)f->nccl_count);
}

/* Node rank 0's agent cannot make the ids: with --nccl required the job fails. */
static void ev_nccl_error(struct model *md, int i, const struct rdzvd_job *j)
{
    struct fake *f = &md->f[i];

    if (!f->m || !j || j->state != JOB_NCCL || f->nnccl == md->nccl_done[i] ||
        f->nccl_gen != j->generation)
        return;
    md->nccl_done[i] = f->nnccl;
    jt_nccl_error(f->m, "libnccl.so.2: cannot open shared object file");
}

static void ev_fail(struct model *md, int i, const struct rdzvd_job *j)
{
    struct rdzv_worker_exit w = {.exit_code = 1};
    char err[256];

    if (!in_generation(md, i, j))
        return;
    w.generation = md->f[i].round.generation;
    w.rank = md->f[i].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(md->f[i].m, &w, err, sizeof(err)));
}

static void ev_gone(struct model *md, int i)
{
    if (md->f[i].m) {
        jt_gone(md->f[i].m);
        md->f[i].m = NULL;
    }
}

/* The node fails a health check: put aside, lost if it runs (a spare just goes). */
static void ev_unhealthy(struct model *md, int i)
{
    if (md->f[i].m)
        jt_unhealthy(md->f[i].m, "disk gone");
}

/* The agent is stopped from outside: the job ends cancelled, nothing charged. */
static void ev_cancel(struct model *md, int i)
{
    if (md->f[i].m)
        jt_member_cancel(md->f[i].m, 15, "Slurm job 1", "");
}

static void ev_leave(struct model *md, int i, const struct rdzvd_job *j)
{
    if (in_generation(md, i, j))
        jt_leave(md->f[i].m, md->f[i].round.generation, true);
}

/* rdzvd restarts on its state directory: its jobs go (their records stay), the job table is
 * replayed from the journal, and the agents of a running generation resume it. */
static void ev_restart(struct model *md)
{
    char secrets[JT_NODES][RDZV_SECRET_HEX + 1];
    struct rdzvd_job_record rec = {0};

    memcpy(secrets, md->e.secrets, sizeof(secrets));
    env_done(&md->e);
    env_init(&md->e, md->fd);
    memcpy(md->e.secrets, secrets, sizeof(secrets));
    for (int i = 0; i < NODES; i++)
        ASSERT_NULL(md->f[i].m); /* untied by the shutdown */
    if (rdzvd_job_record_get(md->e.table, md->run_id, &rec) < 0 || !rec.running)
        goto out;
    for (int i = 0; i < NODES; i++) {
        struct fake *f = &md->f[i];
        struct rdzv_round rd = f->round;
        struct rdzv_join jn;

        if (!f->nrounds || rd.generation != rec.generation)
            continue;
        jn = join_as(md, i);
        jn.resume = (struct rdzv_resume){.generation = rd.generation,
                                         .node_rank = rd.node_rank,
                                         .nnodes = rd.nnodes,
                                         .rank_offset = rd.rank_offset,
                                         .world_size = rd.world_size,
                                         .restart_count = rd.restart_count,
                                         .master_port = rd.master_port};
        fake_reset(md, i);
        f->round = rd;
        f->nrounds = 1;
        (void)join(&md->e, f, &jn);
    }
out:
    rdzvd_job_record_clear(&rec);
}

/* The job is over (ended, or gone with its last member): its agents go, and the next job starts
 * under a new run id. */
static void next_job_if_over(struct model *md)
{
    const struct rdzvd_job *j = the_job(md);

    if (j && j->state != JOB_ENDED)
        return;
    for (int i = 0; i < NODES; i++) {
        ev_gone(md, i);
        fake_reset(md, i);
    }
    ASSERT_NULL(the_job(md));
    snprintf(md->run_id, sizeof(md->run_id), "job-%d", ++md->njobs);
    memset(md->e.secrets, 0, sizeof(md->e.secrets));
}

static void step(struct model *md)
{
    const struct rdzvd_job *j = the_job(md);
    int i = (int)rnd(md, NODES);
    uint64_t dice = rnd(md, 100);

    if (dice < 18)
        ev_join(md, i);
    else if (dice < 40)
        ev_ready(md, i);
    else if (dice < 50)
        ev_nccl(md, i, j);
    else if (dice < 52)
        ev_nccl_error(md, i, j);
    else if (dice < 64)
        ev_fail(md, i, j);
    else if (dice < 74)
        ev_gone(md, i);
    else if (dice < 82)
        ev_leave(md, i, j);
    else if (dice < 85)
        run_ms(&md->e, 10); /* a join timeout (5 ms) passes */
    else if (dice < 89)
        ev_restart(md);
    else if (dice < 91)
        ev_unhealthy(md, i);
    else if (dice < 92)
        ev_cancel(md, i);
    /* else: nothing happens */
    reap_closed(md);
    assert_memory_is_record(md);
    assert_same_tables(md);
    next_job_if_over(md);
}

static void run_seed(uint64_t seed)
{
    struct model *md = calloc(1, sizeof(*md));
    struct rdzvd_store *replay;
    struct rdzvd_journal *jr = NULL;
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    char *lead, *c;

    ASSERT_NOT_NULL(md);
    md->rng = seed * 0x9E3779B97F4A7C15ull + 1;
    md->nccl = (enum rdzv_nccl_mode)(seed % 3); /* off, auto, required */
    md->max_restarts = (int64_t)(seed % 4 == 0 ? 1 : 50);
    md->bad_node_failures = seed % 2 ? 2 : 0;
    md->fd = jt_state_dir(md->path, sizeof(md->path));
    snprintf(md->run_id, sizeof(md->run_id), "job-0");
    env_init(&md->e, md->fd);
    for (int k = 0; k < 2; k++) {
        ASSERT_OK(rdzvd_store_new(&lim, NULL, &md->fl[k].t));
        rdzvd_store_set_decision_fn(md->fl[k].t, rdzvd_decision_apply, &jt_bounds);
    }
    for (int s = 0; s < STEPS; s++)
        step(md);
    env_done(&md->e); /* rdzvd shuts down: its jobs go, their records stay in the journal */
    for (int i = 0; i < NODES; i++)
        ASSERT_NULL(md->f[i].m);
    /* A fresh replay of the journal, as a restarted rdzvd reads it, holds what the followers
     * hold (each checked against the leader after every step). */
    lead = content(md->fl[0].t);
    ASSERT_OK(rdzvd_store_new(&lim, NULL, &replay));
    rdzvd_store_set_decision_fn(replay, rdzvd_decision_apply, &jt_bounds);
    ASSERT_OK(rdzvd_journal_open(NULL, md->fd, "(test)", "jobs", RDZVD_FSYNC_NO, replay, &jr));
    c = content(replay);
    ASSERT_TRUE(strcmp(c, lead) == 0);
    free(c);
    rdzvd_journal_close(jr, false);
    rdzvd_store_free(replay);
    for (int k = 0; k < 2; k++) {
        c = content(md->fl[k].t);
        ASSERT_TRUE(strcmp(c, lead) == 0);
        free(c);
        rdzvd_store_free(md->fl[k].t);
    }
    free(lead);
    jt_state_dir_done(md->fd, md->path);
    free(md);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);

    return s && *s ? strtoull(s, NULL, 10) : dflt;
}

/* Every seed, then: every legal move of the table was taken. */
static void test_model(void)
{
    static const char *const state_letter = "FNRSE";
    uint64_t one = env_u64("RDZV_MODEL_SEED", 0), seeds = env_u64("RDZV_MODEL_SEEDS", 40);
    int missing = 0;

    if (one) {
        run_seed(one);
        return;
    }
    for (uint64_t s = 1; s <= seeds; s++)
        run_seed(s);
    printf("# moves taken over %" PRIu64 " seeds of %d steps (kind: from state = count):\n", seeds,
           STEPS);
    for (int k = 0; k < _JOB_MOVE_MAX; k++) {
        printf("#   %-8s", rdzvd_job_move_name((enum rdzvd_job_move_kind)k));
        for (int st = 0; st < _JOB_STATE_MAX; st++) {
            struct rdzvd_job_move mv = {.kind = (enum rdzvd_job_move_kind)k};

            if (!rdzvd_job_move_legal((enum job_state)st, &mv))
                continue;
            printf(" %c=%" PRIu64, state_letter[st], jt_steps.counts.moves_taken[k][st]);
            if (!jt_steps.counts.moves_taken[k][st])
                missing++;
        }
        printf("\n");
    }
    printf("# nodes put aside: %" PRIu64 " for their failures, %" PRIu64 " for a failed "
           "check\n",
           jt_steps.counts.put_aside[RDZVD_ASIDE_FAILURES],
           jt_steps.counts.put_aside[RDZVD_ASIDE_CHECK]);
    ASSERT_TRUE(jt_steps.counts.put_aside[RDZVD_ASIDE_FAILURES] > 0);
    ASSERT_TRUE(jt_steps.counts.put_aside[RDZVD_ASIDE_CHECK] > 0);
    ASSERT_EQ(missing, 0);
}

int main(void)
{
    rdzv_log_setup("test-job-model", RDZV_LOG_ERROR);
    TEST(test_model);
    return tap_done();
}
