/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-queue.c: what comes back while a Ready is carried out (a store opened, a connection
 * gone) is an input of a step of its own, stepped once that Ready is carried out whole
 * (docs/design/architecture.md, "The job machine and its adapters"), driven with fake agents
 * (jobtest.h); what the host learns and the journals it drops are effects of the Ready. */
#include <fcntl.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "jobtest.h"

/* The ops the host saw, one letter each, in the order they ran. */
static char op_log[256];
static size_t op_n;

static void log_op(char c)
{
    if (op_n + 1 < sizeof(op_log))
        op_log[op_n++] = c;
    op_log[op_n] = '\0';
}

static void q_joined(void *peer, const char *run_id, int64_t waiting, bool spare, bool resumed,
                     uint64_t generation, bool inplace, const char *secret, const char *warning)
{
    log_op('J');
    fake_joined(peer, run_id, waiting, spare, resumed, generation, inplace, secret, warning);
}

static void q_round(void *peer, struct rdzv_round *rd)
{
    log_op('R');
    fake_round(peer, rd);
}

static void q_event(void *peer, const struct rdzv_event *e)
{
    log_op('E');
    fake_event(peer, e);
}

static void q_close(void *peer, const char *reason)
{
    log_op('X');
    fake_close(peer, reason);
}

static void q_flush(void *ud)
{
    log_op('F');
    fake_flush(ud);
}

static int q_store_open(void *ud, const char *desc, const char *state_name, uint16_t port,
                        void **store, uint16_t *port_out)
{
    log_op('O');
    return fake_store_open(ud, desc, state_name, port, store, port_out);
}

static void q_store_close(void *ud, void *store, bool drop)
{
    log_op('C');
    fake_store_close(ud, store, drop);
}

static int stale_fd = -1;  /* the state dir whose stale journal a test watches */
static int stale_records;  /* records written while that journal was still there */
static int records_seen;   /* records written */
static bool journal_there(int dirfd, const char *run_id, uint64_t gen);

static int q_record(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                    const uint8_t *val, size_t vlen)
{
    records_seen++;
    if (stale_fd >= 0 && journal_there(stale_fd, "job", 1))
        stale_records++;
    return fake_record(ud, what, key, klen, val, vlen);
}

static const struct rdzvd_job_ops q_ops = {
    .joined = q_joined,
    .round = q_round,
    .event = q_event,
    .nccl_request = fake_nccl_request,
    .close = q_close,
    .put_aside = fake_put_aside,
    .preflight = fake_preflight,
    .bind = fake_bind,
    .unread = fake_unread,
    .flush = q_flush,
    .store_open = q_store_open,
    .store_close = q_store_close,
    .record = q_record,
};

static char send_letter(enum rdzvd_job_send_kind kind)
{
    switch (kind) {
    case RDZVD_SEND_JOINED:
        return 'J';
    case RDZVD_SEND_ROUND:
        return 'R';
    case RDZVD_SEND_EVENT:
        return 'E';
    case RDZVD_SEND_CLOSE:
        return 'X';
    case RDZVD_SEND_FLUSH:
        return 'F';
    case RDZVD_SEND_STORE_OPEN:
        return 'O';
    case RDZVD_SEND_STORE_CLOSE:
        return 'C';
    default:
        return '?';
    }
}

/* The second JOIN closes the round, and its Ready asks rdzvd's own store. The store's answer
 * (the input STORE_OPENED, which sends the ROUNDs) is stepped after everything that Ready held
 * is carried out, never in the middle of it. */
static void test_store_answer_after_the_ready(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    struct rdzvd_job_input in = {.kind = RDZVD_IN_JOIN, .peer = &f[1]};
    struct rdzvd_job_ready rd;
    struct rdzvd_job_send s;
    const void *at = NULL;
    char want[64];
    size_t n = 0;
    struct env e;

    env_init(&e, -1);
    e.h.ops = &q_ops;
    ASSERT_OK(join(&e, &f[0], &jn));
    jn = join_of(1, 2, 2, 0);
    in.u.join = &jn;
    op_n = 0;
    op_log[0] = '\0';
    ASSERT_OK(rdzvd_job_step(&e.h, &in, jt_clock(), &rd));
    while (rdzvd_job_ready_next(&rd, &at, &s) && n + 1 < sizeof(want))
        want[n++] = send_letter(s.kind);
    want[n] = '\0';
    ASSERT_TRUE(strchr(want, 'O') != NULL); /* the Ready asks the store */
    ASSERT_TRUE(strchr(want, 'R') == NULL); /* and sends no ROUND: the answer does */
    rdzvd_job_advance(&rd);
    if (strncmp(op_log, want, n) != 0)
        fprintf(stderr, "# the Ready held %s; the host saw %s\n", want, op_log);
    ASSERT_TRUE(strncmp(op_log, want, n) == 0);
    ASSERT_TRUE(strchr(op_log + n, 'R') != NULL); /* then the answer's ROUNDs */
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_EQ(f[1].nrounds, 1);
    env_done(&e);
}

/* A member's connection closes while the Ready that asks its round's store is carried out (the
 * host's store_open: an op's own work, as a write that fails closes a connection in rdzvd). Its
 * input GONE is queued: while that Ready is carried out the job still holds both members. It is
 * stepped once the Ready is done, before the store's answer (queued after it), so the round is
 * undone and the store that comes for it is closed, not used. */
static struct fake *gone_on_open;
static int64_t members_when_gone = -1;

static void gone_while_carried_out(struct env *e)
{
    struct rdzvd_member *m = gone_on_open ? gone_on_open->m : NULL;

    gone_on_open = NULL;
    if (!m)
        return;
    jt_gone(m);
    members_when_gone = rdzvd_job_view(&e->jobs, "job")->nmembers;
}

static void test_gone_while_carried_out_is_stepped_after(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    struct env e;

    env_init(&e, -1);
    e.h.ops = &q_ops;
    e.store_opening = gone_while_carried_out;
    gone_on_open = &f[0];
    ASSERT_OK(join(&e, &f[0], &jn));
    jn = join_of(1, 2, 2, 0);
    op_n = 0;
    ASSERT_OK(join(&e, &f[1], &jn));
    ASSERT_EQ(members_when_gone, 2); /* not stepped inside the Ready */
    ASSERT_EQ(rdzvd_job_view(&e.jobs, "job")->nmembers, 1); /* stepped after it */
    ASSERT_EQ(e.stores_open, 1);
    ASSERT_EQ(e.stores_closed, 1); /* the answer came after GONE: not used */
    ASSERT_EQ(f[0].nrounds + f[1].nrounds, 0);
    ASSERT_TRUE(strncmp(op_log, "JO", 2) == 0);
    env_done(&e);
}

/* What the host's tables learn (a job that ended and went, one waiting for its nodes, a member
 * lost) is an effect of the Ready too: each host function runs as the Ready is carried out,
 * never while the machine decides, and the Ready lists it. */
static int n_kept_ended, n_kept_waiting, n_lost;

static void t_keep_ended(struct rdzvd_ended_jobs *ended, const struct rdzvd_job *j)
{
    jt_not_deciding("keep_ended");
    n_kept_ended++;
    rdzvd_ended_jobs_add(ended, j);
}

static void t_keep_waiting(struct rdzvd_ended_jobs *ended, const char *run_id, uint64_t since_ms,
                           uint16_t port)
{
    jt_not_deciding("keep_waiting");
    n_kept_waiting++;
    rdzvd_waiting_jobs_add(ended, run_id, since_ms, port);
}

static void t_lost(void *ud)
{
    (void)ud;
    jt_not_deciding("lost");
    n_lost++;
}

static void host_tables(struct env *e)
{
    n_kept_ended = n_kept_waiting = n_lost = 0;
    e->h.ended = &e->ended;
    e->h.keep_ended = t_keep_ended;
    e->h.keep_waiting = t_keep_waiting;
    e->h.lost = t_lost;
}

/* m's connection closes: GONE, and how many of the Ready's effects are of kind. */
static int gone_sends(struct rdzvd_member *m, enum rdzvd_job_send_kind kind)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_CLOSED, .member = m};
    struct rdzvd_job_ready rd;
    int n;

    ASSERT_OK(rdzvd_job_step(&m->job->host, &in, jt_clock(), &rd));
    n = jt_sends(&rd, kind, NULL);
    rdzvd_job_advance(&rd);
    return n;
}

static void test_host_tables_learn_from_the_ready(void)
{
    struct fake f[2] = {0}, g[2] = {0};
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    host_tables(&e);
    join_n(&e, f, 2, join_of(0, 2, 2, 1));
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_EQ(gone_sends(f[0].m, RDZVD_SEND_LOST), 1); /* lost while it ran */
    ASSERT_EQ(n_lost, 1);
    /* The last member gone before the job ended: it waits for its nodes in its record. */
    ASSERT_EQ(gone_sends(f[1].m, RDZVD_SEND_KEEP_WAITING), 1);
    ASSERT_EQ(n_kept_waiting, 1);
    ASSERT_EQ(n_kept_ended, 0);
    env_done(&e);
    jt_state_dir_done(fd, path);

    env_init(&e, -1);
    host_tables(&e);
    join_n(&e, g, 2, join_of(0, 2, 2, 1));
    jt_leave(g[0].m, 1, true);
    jt_leave(g[1].m, 1, true);
    ASSERT_TRUE(event_is(&g[0], "succeeded"));
    ASSERT_EQ(gone_sends(g[0].m, RDZVD_SEND_KEEP_ENDED), 0);
    ASSERT_EQ(gone_sends(g[1].m, RDZVD_SEND_KEEP_ENDED), 1); /* the job went with it */
    ASSERT_EQ(n_kept_ended, 1);
    env_done(&e);
}

/* A job made in memory takes over the note of its waiting that its input carries (the host read
 * it before the step), and its Ready tells the host to forget the note (TAKE_WAITING). */
static void test_join_takes_the_note_its_input_carries(void)
{
    struct fake f[2] = {0}, back = {0};
    struct rdzv_join jn = resume_of(0, 1, 0, 1);
    struct rdzvd_job_input in = {.kind = RDZVD_IN_JOIN, .peer = &back, .u.join = &jn};
    struct rdzvd_job_ready rd;
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    uint64_t since;
    struct env e;

    env_init(&e, fd);
    host_tables(&e);
    e.h.take_waiting = rdzvd_waiting_jobs_take;
    join_n(&e, f, 2, join_of(0, 2, 2, 1));
    jt_gone(f[0].m);
    jt_gone(f[1].m);
    ASSERT_EQ(n_kept_waiting, 1);
    since = rdzvd_waiting_jobs_peek(&e.ended, "job");
    ASSERT_TRUE(since > 0);
    jt_advance(5000);
    in.waiting = &since;
    snprintf(jn.secret, sizeof(jn.secret), "%s", e.secrets[0]);
    ASSERT_OK(rdzvd_job_step(&e.h, &in, jt_clock(), &rd));
    ASSERT_EQ(jt_sends(&rd, RDZVD_SEND_TAKE_WAITING, NULL), 1);
    ASSERT_EQ(rdzvd_waiting_jobs_peek(&e.ended, "job"), since); /* not yet: the Ready's */
    rdzvd_job_advance(&rd);
    ASSERT_EQ(rdzvd_waiting_jobs_peek(&e.ended, "job"), 0);
    ASSERT_EQ(rdzvd_job_view(&e.jobs, "job")->waiting_since_ms, since);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* The index in rd's outbox of the first effect of kind after index from (-1: none), with it in
 * *s. */
static int send_at(const struct rdzvd_job_ready *rd, enum rdzvd_job_send_kind kind, int from,
                   struct rdzvd_job_send *s)
{
    const void *at = NULL;
    int i = 0;

    for (; rdzvd_job_ready_next(rd, &at, s); i++)
        if (i > from && s->kind == kind)
            return i;
    return -1;
}

/* Whether the journal of run_id's generation gen's store is in state directory fd. */
static bool journal_there(int fd, const char *run_id, uint64_t gen)
{
    char file[RDZVD_JOB_NAME_MAX + 16];

    ASSERT_OK(rdzvd_job_state_name(run_id, gen, file, sizeof(file)));
    strcat(file, ".journal");
    return faccessat(fd, file, F_OK, 0) == 0;
}

/* Leave a journal of run_id's generation gen's store in state directory fd. */
static void journal_leave(int fd, const char *run_id, uint64_t gen)
{
    char file[RDZVD_JOB_NAME_MAX + 16];
    int jfd;

    ASSERT_OK(rdzvd_job_state_name(run_id, gen, file, sizeof(file)));
    strcat(file, ".journal");
    jfd = openat(fd, file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_TRUE(jfd >= 0);
    close(jfd);
    ASSERT_TRUE(journal_there(fd, run_id, gen));
}

/* A generation rebuilt at rdzvd's start ends before its store reopened (the operator cancels
 * it): the journal of that store goes as an effect of the Ready (JOURNAL_DROP, its name), not
 * while the machine decides; it is gone once the Ready is carried out. */
static void test_ended_generation_drops_journal_in_ready(void)
{
    struct rdzvd_job_record rec = jt_running_record(4);
    struct rdzv_cancel_job c = {.run_id = "job"};
    struct rdzvd_job_input in = {.kind = RDZVD_IN_CANCEL_JOB, .u.cancel_job = &c};
    char path[64], sname[RDZVD_JOB_NAME_MAX];
    struct rdzvd_job_ready rd;
    struct rdzvd_job_send s;
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    jt_record_save(fd, &rec);
    journal_leave(fd, "job", 4);
    ASSERT_OK(rdzvd_job_state_name("job", 4, sname, sizeof(sname)));
    env_init(&e, fd);
    jt_remember_secrets(&e, "job");
    jt_rebuild(&e.h);
    ASSERT_EQ(e.stores_open, 0); /* its store not reopened: no agent back */
    ASSERT_OK(rdzvd_job_step(&e.h, &in, jt_clock(), &rd));
    ASSERT_TRUE(journal_there(fd, "job", 4)); /* not while the machine decides */
    ASSERT_EQ(jt_sends(&rd, RDZVD_SEND_JOURNAL_DROP, NULL), 1);
    ASSERT_TRUE(send_at(&rd, RDZVD_SEND_JOURNAL_DROP, -1, &s) >= 0);
    ASSERT_BYTES_STR(s.state_name, strlen(s.state_name), sname);
    ASSERT_BYTES_STR(s.run_id, strlen(s.run_id), "job");
    ASSERT_EQ(s.generation, 4);
    ASSERT_FALSE(s.fresh);
    rdzvd_job_advance(&rd);
    ASSERT_FALSE(journal_there(fd, "job", 4));
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    rdzvd_job_record_clear(&rec);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

static bool stale_at_open;

static void note_stale_at_open(struct env *e)
{
    (void)e;
    stale_at_open = journal_there(stale_fd, "job", 1);
}

/* A new generation's store opens fresh: a journal left under its name (an earlier job of the
 * same run id) goes first. The Ready drops it (JOURNAL_DROP, fresh) before its STORE_OPEN of
 * that name; the host opens the store once the journal is gone. */
static void test_fresh_store_drops_stale_journal_first(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    struct rdzvd_job_input in = {.kind = RDZVD_IN_JOIN, .peer = &f[1], .u.join = &jn};
    char path[64], sname[RDZVD_JOB_NAME_MAX];
    struct rdzvd_job_send drop, open;
    struct rdzvd_job_ready rd;
    int at_drop, at_open;
    struct env e;

    stale_fd = jt_state_dir(path, sizeof(path));
    journal_leave(stale_fd, "job", 1);
    ASSERT_OK(rdzvd_job_state_name("job", 1, sname, sizeof(sname)));
    env_init(&e, stale_fd);
    e.h.ops = &q_ops; /* its records: written once the stale journal is gone */
    e.store_opening = note_stale_at_open;
    ASSERT_OK(join(&e, &f[0], &jn));
    jn = join_of(1, 2, 2, 0);
    ASSERT_OK(rdzvd_job_step(&e.h, &in, jt_clock(), &rd));
    ASSERT_TRUE(journal_there(stale_fd, "job", 1)); /* not while the machine decides */
    at_drop = send_at(&rd, RDZVD_SEND_JOURNAL_DROP, -1, &drop);
    at_open = send_at(&rd, RDZVD_SEND_STORE_OPEN, -1, &open);
    ASSERT_TRUE(at_drop >= 0);
    ASSERT_TRUE(at_open > at_drop); /* the stale journal goes, then the store opens */
    ASSERT_EQ(jt_sends(&rd, RDZVD_SEND_JOURNAL_DROP, NULL), 1);
    ASSERT_TRUE(drop.fresh && open.fresh);
    ASSERT_EQ(drop.generation, 1);
    ASSERT_BYTES_STR(drop.state_name, strlen(drop.state_name), sname);
    ASSERT_BYTES_STR(open.state_name, strlen(open.state_name), sname);
    stale_at_open = true;
    records_seen = stale_records = 0;
    rdzvd_job_advance(&rd);
    ASSERT_TRUE(records_seen > 0);  /* the generation formed is recorded ... */
    ASSERT_EQ(stale_records, 0);   /* ... once the stale journal is gone: a rebuild never
                                     * replays it */
    ASSERT_EQ(e.stores_open, 1);
    ASSERT_FALSE(stale_at_open); /* gone when the host opened the store */
    ASSERT_FALSE(journal_there(stale_fd, "job", 1));
    ASSERT_EQ(f[0].nrounds, 1);
    env_done(&e);
    jt_state_dir_done(stale_fd, path);
    stale_fd = -1;
}

int main(void)
{
    rdzv_log_setup("test-job-queue", RDZV_LOG_ERROR);
    TEST(test_store_answer_after_the_ready);
    TEST(test_gone_while_carried_out_is_stepped_after);
    TEST(test_host_tables_learn_from_the_ready);
    TEST(test_join_takes_the_note_its_input_carries);
    TEST(test_ended_generation_drops_journal_in_ready);
    TEST(test_fresh_store_drops_stale_journal_first);
    return tap_done();
}
