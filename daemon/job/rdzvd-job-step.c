/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-step.c: the job machine's inputs. rdzvd_job_step (rdzvd-job-sm.h) is its one
 * entry: each input goes to its part below, and its answers come back in the Ready. JOIN and
 * resume; what a member reports (HEARTBEAT, WORKER_EXIT, CANCEL, UNHEALTHY, LEAVE, READY,
 * NCCL_ID); the operator's RELEASE and CANCEL_JOB; the straggler check a HEARTBEAT makes.
 * Part of the job state machine (rdzvd-job-impl.h): no libuv, no clock, no host op. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-sm.h"
#include "common/rdzv-assert.h"
#include "common/rdzv-auth.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-status.h"
#include "common/rdzv-util.h"

/* What every input assumes of a job the machine holds: its counters agree. The machine's own
 * invariants, O(1): what a peer sends is refused, never asserted (rdzv-assert.h). */
static void job_holds(const struct rdzvd_job *j)
{
    rdzv_assert(j->state < _JOB_STATE_MAX);
    rdzv_assert(j->nmembers >= 0);
    rdzv_assert(j->naway >= 0 && j->naway <= j->nmembers);
    rdzv_assert(j->nready >= 0 && j->nready <= j->nmembers);
    rdzv_assert(j->nin_round >= 0 && j->nin_round <= j->nmembers);
    rdzv_assert(j->rank_cap >= 0 && j->rank_cap <= j->max);
    rdzv_assert(j->restart_count >= 0 && j->restart_count <= j->max_restarts);
    rdzv_assert(j->store_ask <= j->store_asks);
    rdzv_assert(j->generation > 0 || j->state == JOB_FORMING || j->state == JOB_ENDED);
}

/* A member's input names a member of a job the machine holds: neither removed from its job
 * (its connection is untied then) nor of a job freed. */
static void member_holds(const struct rdzvd_member *m)
{
    rdzv_assert(m && m->job);
    rdzv_assert(!rdzv_list_empty(&m->node));
    rdzv_assert(!rdzv_list_empty(&m->job->node));
    rdzv_assert(m->job->nmembers > 0);
    rdzv_assert(m->node_rank < m->job->rank_cap);
    job_holds(m->job);
}

/* The job's handlers (below), handed to what makes a job (rdzvd_job_new). */
static const struct rdzvd_job_handlers job_handlers;

static void step_join(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                      struct rdzvd_job_ready *rd)
{
    if (in->member) { /* refused before the message is read: no join */
        snprintf(rd->err, sizeof(rd->err), "this connection has already joined job '%s'",
                 rdzvd_member_run_id(in->member));
        rd->rc = -EEXIST;
        return;
    }
    rdzv_assert(in->u.join);
    rd->rc = rdzvd_job_join(h, in->peer, in->u.join, rd->err, sizeof(rd->err), &rd->member,
                            &job_handlers);
}

static void step_heartbeat(struct rdzvd_member *m, const struct rdzv_heartbeat *hb,
                           struct rdzvd_job_ready *rd)
{
    rdzv_assert(hb);
    rdzvd_member_progress(m, hb);
    rd->generation = rdzvd_member_heartbeat(m);
    rdzvd_member_wait(m, &rd->wait); /* what its job waits for, if anything (1.15) */
    if (!rdzvd_member_twin_warning(m, rd->warning, sizeof(rd->warning))) /* (1.17) */
        rd->warning[0] = '\0';
    /* Last: it may put m aside (m gone). What it sends goes after the answer, at advance. */
    rdzvd_member_straggler_check(m);
}

/* A stale NCCL_ID is ignored whatever its ids say. */
static void step_nccl_id(struct rdzvd_member *m, const struct rdzvd_job_input *in,
                         struct rdzvd_job_ready *rd)
{
    const struct rdzv_nccl_id *n = in->u.nccl_id.msg;

    if (!rdzvd_member_nccl_wanted(m, in->u.nccl_id.generation))
        return;
    if (!n) {
        rd->rc = -EBADMSG;
        return;
    }
    rdzvd_member_store_offer(m, n->store_addr, n->store_port);
    if (n->failed)
        rdzvd_member_nccl_error(m, n->error);
    else
        rdzvd_member_nccl_ids(m, (char(*)[RDZV_NCCL_HEX_LEN + 1])n->ids, n->n_ids);
}

/* The operator's and the host's inputs, which name a job by its run id. */
static void step_host(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                      struct rdzvd_job_ready *rd)
{
    int r;

    switch (in->kind) {
    case RDZVD_IN_RELEASE:
        rdzv_assert(in->u.release);
        r = rdzvd_jobs_release(h->jobs, in->u.release->run_id, in->u.release->node, rd->err,
                               sizeof(rd->err));
        rd->count = r < 0 ? 0 : r;
        rd->rc = r < 0 ? r : 0;
        break;
    case RDZVD_IN_CANCEL_JOB:
        rdzv_assert(in->u.cancel_job);
        rd->rc = rdzvd_jobs_cancel(h, in->u.cancel_job->run_id, in->u.cancel_job->reason,
                                   rd->err, sizeof(rd->err));
        break;
    case RDZVD_IN_END_WAITING:
        rd->rc = rdzvd_jobs_end_waiting(h, in->u.end.run_id, in->u.end.type, in->u.end.exit_code,
                                        in->u.end.why, rd->err, sizeof(rd->err));
        break;
    case RDZVD_IN_REBUILD_BEGIN:
        rd->rc = rdzvd_jobs_rebuild_begin(h, &rd->ids, &rd->n_ids);
        break;
    case RDZVD_IN_REBUILD:
        rdzv_assert(in->u.rebuild.ids || !in->u.rebuild.n);
        for (size_t i = 0; i < in->u.rebuild.n; i++)
            rdzvd_jobs_rebuild_one(h, in->u.rebuild.ids[i], &job_handlers);
        break;
    case RDZVD_IN_DROP_ALL:
        rdzvd_jobs_drop_all(h->jobs);
        break;
    case RDZVD_IN_UNRECORDED: /* the host op record refused a decision of ours */
        rdzv_assert(in->u.unrecorded.run_id && in->u.unrecorded.err < 0);
        rdzvd_jobs_unrecorded(h->jobs, in->u.unrecorded.run_id, in->u.unrecorded.decision,
                              in->u.unrecorded.err);
        break;
    default:
        break;
    }
}

/* A member's input: what its agent said, or that its connection closed. */
static void step_member(const struct rdzvd_job_input *in, struct rdzvd_job_ready *rd)
{
    struct rdzvd_member *m = in->member;

    /* The outbox's reports may come after their member or job went (their memory outlives the
     * pass); every other input names one the machine holds. */
    if (in->kind == RDZVD_IN_NCCL_UNSENT)
        rdzv_assert(m && m->job);
    else if (in->kind != RDZVD_IN_STORE_OPENED)
        member_holds(m);
    switch (in->kind) {
    case RDZVD_IN_SEEN:
        rdzvd_member_seen(m);
        break;
    case RDZVD_IN_HEARTBEAT:
        step_heartbeat(m, in->u.heartbeat, rd);
        break;
    case RDZVD_IN_NCCL_ID:
        step_nccl_id(m, in, rd);
        break;
    case RDZVD_IN_WORKER_EXIT:
        rd->rc = rdzvd_member_worker_exit(m, in->u.worker_exit, rd->err, sizeof(rd->err));
        break;
    case RDZVD_IN_LEAVE:
        rdzvd_member_leave(m, in->u.leave->generation, in->u.leave->succeeded);
        break;
    case RDZVD_IN_READY:
        rdzvd_member_ready(m, in->u.ready->generation);
        break;
    case RDZVD_IN_CANCEL:
        rdzvd_member_cancel(m, in->u.cancel->signal, in->u.cancel->reason,
                            in->u.cancel->sched_job);
        break;
    case RDZVD_IN_UNHEALTHY:
        rdzvd_member_unhealthy(m, in->u.unhealthy->reason);
        break;
    case RDZVD_IN_PREFLIGHT_REPORT:
        rdzvd_member_pf_report(m, in->u.preflight_report);
        break;
    case RDZVD_IN_GONE:
        rdzvd_member_gone(m);
        break;
    case RDZVD_IN_DEADLINE:
        rdzvd_member_deadline(m, in->u.deadline);
        break;
    case RDZVD_IN_NCCL_UNSENT:
        rdzvd_member_nccl_unsent(m, in->u.nccl_unsent.generation, in->u.nccl_unsent.peer);
        break;
    case RDZVD_IN_STORE_OPENED:
        /* The answer to an ask the job made (its number, of store_asks), or a failure. */
        rdzv_assert(in->u.store_opened.job);
        rdzv_assert(in->u.store_opened.ask >= 1 &&
                    in->u.store_opened.ask <= in->u.store_opened.job->store_asks);
        rdzv_assert(in->u.store_opened.err <= 0);
        rdzvd_job_store_opened(in->u.store_opened.job, in->u.store_opened.ask,
                               in->u.store_opened.generation, in->u.store_opened.store,
                               in->u.store_opened.port, in->u.store_opened.err);
        break;
    default:
        break;
    }
}

int rdzvd_job_step(const struct rdzvd_job_host *jobs, const struct rdzvd_job_input *in,
                   struct rdzvd_job_now now, struct rdzvd_job_ready *rd)
{
    struct rdzvd_job_input due;

    rdzv_assert(jobs && jobs->steps && jobs->timers && jobs->jobs && in && rd);
    rdzv_assert(in->kind < RDZVD_IN_KINDS);
    rdzv_assert(now.ms != 0);
    jobs->steps->now = now;
    rd->rc = 0;
    rd->err[0] = rd->warning[0] = '\0';
    rd->member = NULL;
    rd->generation = 0;
    rd->count = 0;
    rd->ids = NULL;
    rd->n_ids = 0;
    rd->timers_ = jobs->timers;
    rd->ticked = false;
    if (in->kind == RDZVD_IN_TICK) { /* the first timer due, as its own input */
        rd->ticked = rdzvd_job_timer_due(jobs, in->u.until, &due);
        in = rd->ticked ? &due : NULL;
    } else if (in->kind == RDZVD_IN_REAP) {
        rdzvd_job_timers_reap(jobs);
        in = NULL;
    }
    rdzvd_job_ready_open(jobs, rd);
    switch (in ? in->kind : RDZVD_IN_REAP) {
    case RDZVD_IN_JOIN:
        step_join(jobs, in, rd);
        break;
    case RDZVD_IN_RELEASE:
    case RDZVD_IN_CANCEL_JOB:
    case RDZVD_IN_END_WAITING:
    case RDZVD_IN_REBUILD_BEGIN:
    case RDZVD_IN_REBUILD:
    case RDZVD_IN_DROP_ALL:
    case RDZVD_IN_UNRECORDED:
        step_host(jobs, in, rd);
        break;
    case RDZVD_IN_TIMER: /* a job held, its timer armed and not closed */
        rdzv_assert(in->u.job && in->u.job->timer_armed);
        rdzv_assert(rdzv_list_empty(&in->u.job->timer.closing));
        rdzv_assert(!rdzv_list_empty(&in->u.job->node));
        job_holds(in->u.job);
        rdzvd_job_fired(in->u.job);
        break;
    case RDZVD_IN_TICK:
    case RDZVD_IN_REAP:
        break;
    default:
        step_member(in, rd);
        break;
    }
    /* Its step stays open until advance: nothing of its outbox has gone out. */
    rdzv_assert(rd->rc <= 0 && rd->steps_ == jobs->steps && rd->steps_->depth > 0);
    rd->next_deadline_ms = rdzvd_job_timers_first(rd->timers_);
    rd->reap = rdzvd_job_timers_closing(jobs);
    return rd->rc;
}

/* What the step queued is carried out at the step's time: a step begun meanwhile (a connection
 * closing) brings a time of its own. */
void rdzvd_job_advance(struct rdzvd_job_ready *rd)
{
    rdzv_assert(rd && rd->steps_ && rd->steps_->depth > 0); /* its step's, once */
    rdzvd_job_ready_close(rd);
    rd->next_deadline_ms = rdzvd_job_timers_first(rd->timers_);
    rd->reap = !rdzv_list_empty(&rd->timers_->closing);
}

/* What the outbox could not do (an NCCL_REQUEST not queued, a record not written), or a store's
 * answer, as rdzvd-job-effects.c reports it: an input of a step of its own. */
static void input_step(struct rdzvd_job *j, const struct rdzvd_job_input *in,
                       struct rdzvd_job_now now)
{
    struct rdzvd_job_ready rd;

    rdzvd_job_step(&j->host, in, now, &rd);
    rdzvd_job_advance(&rd);
}

static void nccl_unsent_input(struct rdzvd_member *m, uint64_t gen, void *peer,
                              struct rdzvd_job_now now)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_NCCL_UNSENT, .member = m,
                                 .u.nccl_unsent = {.generation = gen, .peer = peer}};

    input_step(m->job, &in, now);
}

static void store_opened_input(struct rdzvd_job *j, uint64_t ask, uint64_t gen, void *store,
                               uint16_t port, int err, struct rdzvd_job_now now)
{
    struct rdzvd_job_input in = {
        .kind = RDZVD_IN_STORE_OPENED,
        .u.store_opened = {.job = j, .ask = ask, .generation = gen, .store = store, .port = port,
                           .err = err}};

    input_step(j, &in, now);
}

/* A record of h's job table not written, as rdzvd-job-effects.c reports it once the Ready that
 * held it is carried out: a decision whose move or JOIN waits on it (rdzvd_decision_holds) is
 * the input UNRECORDED, a step of its own. The others (ENDED, WAITING, FORGOTTEN) are logged. */
static void unrecorded_record(const struct rdzvd_job_host *h, enum rdzvd_change what,
                              const uint8_t *val, size_t vlen, int err, struct rdzvd_job_now now)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_UNRECORDED};
    char run_id[RDZV_ID_MAX + 1];
    enum rdzvd_decision_kind kind;
    struct rdzvd_job_ready rd;

    if (what != RDZVD_CHANGE_DECISION || rdzvd_decision_peek(val, vlen, run_id, &kind) < 0) {
        log_error_errno(err, "a change of the job table was not written");
        return;
    }
    log_warn_errno(err, "job=%s: its decision '%s' was not written to its job table", run_id,
                   rdzvd_decision_name(kind));
    if (!rdzvd_decision_holds(kind))
        return;
    in.u.unrecorded.run_id = run_id;
    in.u.unrecorded.decision = rdzvd_decision_name(kind);
    in.u.unrecorded.err = err;
    rdzvd_job_step(h, &in, now, &rd);
    rdzvd_job_advance(&rd);
}

void rdzvd_job_host_keep_records(struct rdzvd_job_host *h)
{
    rdzvd_job_records_keep(h, unrecorded_record);
}

/* Every job's, given at its making (rdzvd_job_new). */
static const struct rdzvd_job_handlers job_handlers = {
    .freed = rdzvd_job_freed,
    .nccl_unsent = nccl_unsent_input,
    .store_opened = store_opened_input,
    .put_aside = rdzvd_member_put_aside,
    .close_checked = rdzvd_job_close_checked,
};

/* -------------------------------------------------------------------------------------------- */
/* JOIN and resume (rdzvd_job_join in rdzvd-job-sm.h): checks an agent against
 * its job, places it (candidate for the next round, or spare), takes over a reconnecting agent's
 * member, and rebuilds a job that a restarted rdzvd does not have in memory: from its record in
 * --state-dir, else from the resuming agent. */

/* One JOIN being served: what it says, the records it is judged by, where a refusal goes. Not
 * the connection it came on (peer): that is handed only to what binds a member to it
 * (rdzvd_member_add, member_take_over), and compared with a member's own. */
struct join_req {
    const struct rdzvd_job_host *h;
    const struct rdzv_join *jn;
    char *err; /* the refusal, for the caller's ERROR frame */
    size_t errlen;
    struct rdzvd_member **ret;
    bool proven; /* jn carries the secret the job's table keeps the hash of (check_identity) */
    const struct rdzvd_job_handlers *handlers; /* the step's, for a job made (rdzvd_job_new) */
    /* The job's record when the job is not in memory, read once per JOIN (rdzvd_job_join):
     * rec_r 0, or -ENOENT (none, no table, or unreadable: logged). job_restore takes over its
     * nodes and history; rdzvd_job_join clears the rest. */
    struct rdzvd_job_record rec;
    int rec_r;
};

static int refuse(struct join_req *q, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(struct join_req *q, int r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(q->err, q->errlen, fmt, ap);
    va_end(ap);
    return r;
}

/* The agent jn was started with the job's --nnodes and --max-restarts (min, max, mr)? */
static int check_join_matches(struct join_req *q, int64_t min, int64_t max, int64_t mr)
{
    const struct rdzv_join *jn = q->jn;

    if (min != jn->min || max != jn->max || mr != jn->max_restarts)
        return refuse(q, -EINVAL,
                      "job '%s' was started with --nnodes %" PRId64 ":%" PRId64
                      " --max-restarts %" PRId64 ", this agent has --nnodes %" PRId64 ":%" PRId64
                      " --max-restarts %" PRId64 "; start every agent with the same values",
                      jn->run_id, min, max, mr, jn->min, jn->max, jn->max_restarts);
    return 0;
}

/* The agent jn recovers as the job does (inplace: its --recovery, in memory or in its record)?
 * An agent that predates recovery in place sends no "recovery" and reads as restart: it is
 * refused by an in-place job. */
static int check_join_recovery(struct join_req *q, bool inplace)
{
    const struct rdzv_join *jn = q->jn;

    if (jn->inplace != inplace)
        return refuse(q, -EINVAL,
                      "job '%s' was started with --recovery %s, this agent has --recovery %s%s; "
                      "start every agent with the same --recovery",
                      jn->run_id, inplace ? "inplace" : "restart",
                      jn->inplace ? "inplace" : "restart",
                      jn->inplace ? "" : " (or is older than recovery in place)");
    return 0;
}

/* The agent jn runs the job's command (command: its first JOIN's fingerprint, in memory or in
 * its record)? Not compared when either is not known (an older agent or record). A second job
 * started with the same --rdzv-id by mistake is refused at once, not made a spare that never
 * runs its command and then says the job succeeded. */
static int check_join_command(struct join_req *q, const char *command)
{
    const struct rdzv_join *jn = q->jn;

    if (command[0] && jn->command[0] && strcmp(command, jn->command))
        return refuse(q, -EINVAL,
                      "job '%s' runs another command than this agent's (command fingerprint %s, "
                      "this agent's %s): every agent of a job runs the same command; give this "
                      "one its own --rdzv-id, or the job's command (rdzv-agent --any-command on "
                      "every agent: commands that differ from node to node)",
                      jn->run_id, command, jn->command);
    return 0;
}

/* A resume is a claim, checked before anything is set from it: the generation it names stays exact
 * in JSON and cannot wrap, its size and ranks fit the job the JOIN describes (--nnodes MAX), its
 * restart count is within the budget, and with a record in --state-dir (saved before every ROUND,
 * so an honest agent is never ahead of it) it is not past the record. 0, or a negative errno with
 * q->err set. */
static int check_resume_claim(struct join_req *q, const struct rdzvd_job_record *rec)
{
    const struct rdzv_join *jn = q->jn;
    const struct rdzv_resume *rs = &jn->resume;

    if (rs->generation > RDZV_GENERATION_MAX)
        return refuse(q, -ERANGE,
                      "JOIN resume: generation %" PRIu64 " is past the largest rdzvd issues (%llu)",
                      rs->generation, (unsigned long long)RDZV_GENERATION_MAX);
    if (rs->nnodes > jn->max || rs->node_rank >= rs->nnodes)
        return refuse(q, -ERANGE,
                      "JOIN resume: node rank %" PRId64 " of %" PRId64 " nodes does not fit "
                      "job '%s' (--nnodes at most %" PRId64 ")",
                      rs->node_rank, rs->nnodes, jn->run_id, jn->max);
    if (rs->world_size > rs->nnodes * RDZV_NPROC_MAX ||
        rs->rank_offset + jn->nproc > rs->world_size)
        return refuse(q, -ERANGE,
                      "JOIN resume: ranks %" PRId64 "..%" PRId64 " do not fit a world of %" PRId64
                      " on %" PRId64 " nodes",
                      rs->rank_offset, rs->rank_offset + jn->nproc - 1, rs->world_size, rs->nnodes);
    if (rs->restart_count > jn->max_restarts)
        return refuse(q, -ERANGE,
                      "JOIN resume: restart %" PRId64 " is past --max-restarts %" PRId64,
                      rs->restart_count, jn->max_restarts);
    /* A record of a generation being stopped (a restart charged, the next generation not
     * formed yet) has a restart count one past what that generation's agents were told: their
     * claim of it is theirs, and they are told it is over (found by faults-replicas: a new
     * leader refused them, and the job failed). */
    if (rec && (rs->generation > rec->generation ||
                (rs->generation == rec->generation &&
                 (rec->running ? rs->restart_count != rec->restart_count ||
                                     rs->nnodes != rec->nnodes || rs->world_size != rec->world_size
                               : rs->restart_count > rec->restart_count))))
        return refuse(q, -ESTALE,
                      "JOIN resume: generation %" PRIu64 " (restart %" PRId64 ", %" PRId64
                      " nodes) is not job '%s' as its record has it (generation %" PRIu64
                      ", restart %" PRId64 ", %" PRId64 " nodes)",
                      rs->generation, rs->restart_count, rs->nnodes, jn->run_id, rec->generation,
                      rec->restart_count, rec->nnodes);
    return 0;
}

/* A job rdzvd_job_new made here that took no member goes from memory; one built from its job
 * record (recorded) goes back to it unchanged, the node ids it admitted and its store's journal
 * kept, not forgotten as a job that never formed is. */
static void job_unbuild(struct rdzvd_job *j, bool recorded)
{
    j->unloaded = recorded;
    rdzvd_job_free(j);
}

static void store_not_reopened(struct rdzvd_job *j, uint16_t port, int err)
{
    rdzvd_job_note(j, true,
                   "cannot reopen the store of generation %" PRIu64 " on port %u (%s); workers "
                   "that reconnect to it will fail",
                   j->generation, port, rdzvd_job_strerror(err));
}

/* The first agent of a generation rebuilt at start is back: its deferred store opens on its
 * port (another when that one is taken: noted), asked of the outbox; the port stays the job's
 * until the answer (rdzvd_job_store_opened). */
static void job_open_deferred(struct rdzvd_job *j)
{
    int r;

    if (!j->store_deferred_gen || j->store_ask)
        return;
    if ((r = rdzvd_job_open_store(j, j->store_port, false, STORE_THEN_REOPEN)) < 0) {
        j->store_deferred_gen = 0;
        store_not_reopened(j, j->store_port, r);
    }
}

/* A JOIN rebuilt j: its answer waits for the store, opened within the step on its port
 * (another when that one is taken: noted). 0 or a negative errno. */
static int job_open_deferred_now(struct rdzvd_job *j)
{
    uint16_t port = j->store_port;
    int r;

    j->store_deferred_gen = 0;
    r = rdzvd_job_open_store_now(j, port);
    if (r < 0) {
        store_not_reopened(j, port, r);
        r = rdzvd_job_open_store_now(j, 0);
    }
    return r;
}

/* Rebuild the job j (just made by rdzvd_job_new) as a restarted rdzvd finds it in rec: generation
 * and restart count as they were; when its workers run, the generation's store reopened (with its
 * keys) on the port they know, and the job RUNNING until their agents are back or the rebuild
 * window, window_ms, ends. 0 or a negative errno (the store could not be opened at all). */
static int job_rebuild(struct rdzvd_job *j, struct rdzvd_job_record *rec, uint64_t window_ms,
                       bool defer_store)
{
    int r;

    r = rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = JOB_MOVE_RESTORE,
                                                  .generation = rec->generation,
                                                  .restart_count = rec->restart_count,
                                                  .running = rec->running && rec->generation,
                                                  .world_size = rec->world_size,
                                                  .nnodes = rec->nnodes});
    if (r < 0)
        return r;
    if (!rec->running || rec->generation == 0) {
        rdzvd_job_note(j, false,
                       "restored from --state-dir after an rdzvd restart: generation %" PRIu64
                       " is over, restart %" PRId64 " of %" PRId64 "; forming the next one",
                       j->generation, j->restart_count, j->max_restarts);
        return 0; /* JOB_FORMING: the next round is generation + 1 */
    }
    r = rdzvd_job_ranks_reserve(j, rec->nnodes);
    if (r < 0)
        return r;
    j->rebuilt = true;
    j->round.nnodes = rec->nnodes; /* its generation and restart count: the move's */
    j->round.world_size = rec->world_size;
    j->round.n_ids = rec->n_ids;
    if (rec->n_ids)
        memcpy(j->round.ids, rec->ids, rec->n_ids * sizeof(*rec->ids));
    j->rebuilt_nodes = rec->nodes; /* who may resume each node rank: taken over */
    rec->nodes = NULL;
    if (rec->store_addr[0]) {
        /* Node rank 0's agent hosts it: it went on without us. */
        memcpy(j->store_addr, rec->store_addr, sizeof(j->store_addr));
        j->store_port = rec->store_port;
        r = 0;
    } else {
        j->store_port = rec->store_port;
        j->store_deferred_gen = j->generation;
        r = defer_store ? 0 : job_open_deferred_now(j);
    }
    if (r < 0)
        return r;
    /* Agents that do not come back within this window count as lost (rebuild_window). */
    rdzvd_job_timer_start(j, T_REBUILD, window_ms);
    rdzvd_job_note(j, false,
                   "rebuilding generation %" PRIu64 " (%" PRId64
                   " nodes%s) from reconnecting agents",
                   j->generation, rec->nnodes, j->rebuilt_nodes ? ", named by its record" : "");
    return 0;
}

/* A generation rebuilt from a record that names its nodes is resumed at each node rank only by
 * the node the record names there, with its workers at the same global ranks: an agent that
 * claims another node's place (a stale or confused one) cannot take it from the node that holds
 * it. NULL when jn's claim agrees with the record (or there is nothing to check it against),
 * else why not, in buf. */
static const char *rebuilt_claim_mismatch(const struct rdzvd_job *j, const struct rdzv_join *jn,
                                          char *buf, size_t len)
{
    const struct rdzv_resume *rs = &jn->resume;
    const struct rdzvd_job_record_node *n;
    int64_t offset = 0;
    int w;

    if (!j->rebuilt_nodes || rs->generation != j->generation || rs->node_rank < 0 ||
        rs->node_rank >= j->round.nnodes)
        return NULL;
    for (int64_t i = 0; i < rs->node_rank; i++)
        offset += j->rebuilt_nodes[i].nproc;
    n = &j->rebuilt_nodes[rs->node_rank];
    if (strcmp(n->node_id, jn->node_id) != 0)
        w = snprintf(buf, len,
                     "the job's record gives node rank %" PRId64 " of generation %" PRIu64
                     " to node id '%s', not to '%s'",
                     rs->node_rank, rs->generation, n->node_id, jn->node_id);
    else if (n->nproc != jn->nproc || offset != rs->rank_offset)
        w = snprintf(buf, len,
                     "the job's record has node rank %" PRId64 " of generation %" PRIu64
                     " run ranks %" PRId64 "..%" PRId64 ", not %" PRId64 "..%" PRId64,
                     rs->node_rank, rs->generation, offset, offset + n->nproc - 1, rs->rank_offset,
                     rs->rank_offset + jn->nproc - 1);
    else
        return NULL;
    return w < 0 ? "the job's record has another node at that node rank" : buf;
}

/* The window in which the agents of a rebuilt generation come back, from when it starts:
 * REBUILT_AT_START by rdzvd's start or election, REBUILT_BY_JOIN by an agent's JOIN, FIRST_BACK
 * from the first of its agents back (the window is cut then). After an rdzvd restart the agents
 * may be in their reconnect backoff: two heartbeat timeouts from the first one there. A new
 * leader of replicas is elected about an election timeout after the old one went silent; an
 * agent finds the old one silent a heartbeat timeout after it last heard it and comes at once
 * (one heartbeat timeout from a JOIN), and every live agent notices within a fifth of a
 * heartbeat timeout of the first (an agent hears from the leader at least that often: its
 * heartbeats' answers), so the window is cut to REBUILD_AFTER_FIRST_FRACTION of a heartbeat
 * timeout once the first is back: a node lost with the old leader's host is declared lost about
 * when the old leader would have seen it (docs/guide/operating.md, "Replicas"). From the start
 * or the election, before any agent is back: two heartbeat timeouts and an agent's longest
 * reconnect wait. */
#define REBUILD_AFTER_FIRST_FRACTION 0.4
enum rebuild_from { REBUILT_AT_START, REBUILT_BY_JOIN, FIRST_BACK };
static uint64_t rebuild_window(const struct rdzvd_job *j, enum rebuild_from from)
{
    uint64_t hb = (uint64_t)j->hb_timeout_ms;

    if (from == REBUILT_AT_START)
        return 2 * hb + RDZV_RECONNECT_WAIT_MAX_MS;
    if (!j->host.agent_stores)
        return 2 * hb;
    return from == REBUILT_BY_JOIN ? hb : (uint64_t)((double)hb * REBUILD_AFTER_FIRST_FRACTION);
}

/* The first member of a rebuilt generation is back: the rest of the window is cut to
 * rebuild_window's from it. */
static void rebuild_window_shorten(struct rdzvd_job *j)
{
    uint64_t rest = rebuild_window(j, FIRST_BACK);

    if (rdzvd_job_timer_due_in(j) > rest)
        rdzvd_job_timer_start(j, T_REBUILD, rest);
}

/* While a rebuilt generation waits for its agents, nobody else is placed. */
static bool job_rebuilding(const struct rdzvd_job *j)
{
    return j->rebuilt && j->timer_armed && j->timer_kind == T_REBUILD;
}

/* Once a node's workers have all exited 0 (LEAVE succeeded), the job is finishing: a scale-up
 * would start a generation that needs workers that are done. Said (for m, the joiner) when so:
 * it waits as a spare, and is told how the job ends. */
static bool job_finishing(struct rdzvd_job *j, const struct rdzvd_member *m)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;

    for_each_member(j, o, pos, tmp) if (o->node_rank >= 0 && o->left_ok)
    {
        rdzvd_job_note(j, false,
                       "node=%s is not taken in now (--scale-up now): the workers of node %s "
                       "have all exited 0, the job is finishing; it waits as a spare",
                       m->join.host, o->join.host);
        return true;
    }
    return false;
}

/* A job not held (not in memory, no record) is about to be made for q: refused past --max-jobs
 * (the jobs held, in memory and waiting in their records). 0, or -ENOSPC with q->err set. */
static int check_room(struct join_req *q)
{
    const struct rdzvd_job_host *h = q->h;

    if (!h->max_jobs || rdzvd_jobs_held(h) < h->max_jobs)
        return 0;
    return refuse(q, -ENOSPC,
                  "rdzvd holds %" PRIu64 " jobs, its --max-jobs: job '%s' cannot start until one "
                  "ends (rdzvctl status lists them; the operator ends one with rdzvctl cancel "
                  "JOB; one whose agents are all gone ends after --abandon-after)",
                  h->max_jobs, q->jn->run_id);
}

/* The job jn names is not in memory: after an rdzvd restart, rebuild it from its record in
 * --state-dir (or, after a failover, in the replicas' job table), else (no record) from what a
 * resuming agent says. *ret: the job, or NULL when
 * neither knows it (a plain JOIN of a new job). 0, or a negative errno with q->err set. */
static int job_restore(struct join_req *q, struct rdzvd_job **ret)
{
    const struct rdzv_join *jn = q->jn;
    const struct rdzv_resume *rs = &jn->resume;
    struct rdzvd_job_record *rec = &q->rec;
    struct rdzvd_job *j;
    bool claimed = false;
    int r = q->rec_r;

    *ret = NULL;
    if ((r == 0 && check_join_matches(q, rec->min, rec->max, rec->max_restarts) < 0) ||
        (r == 0 && rec->has_settings && check_join_recovery(q, rec->settings.inplace) < 0) ||
        (r == 0 && rec->has_settings && check_join_command(q, rec->settings.command) < 0) ||
        (rs->generation && check_resume_claim(q, r == 0 ? rec : NULL) < 0))
        return -EINVAL;
    /* A job table records each generation before its ROUND, until the job ends: none, and the
     * job ended (its end older than those kept) or ran elsewhere: never rebuilt from a claim. */
    if (r == -ENOENT && rs->generation && q->h->record_table)
        return refuse(q, -ESTALE, "job '%s' has ended, or ran on another rdzvd: it has no "
                      "record here; to run it again, start its line again (a new run)",
                      jn->run_id);
    if (r == -ENOENT && rs->generation && rs->incarnation && rs->incarnation == q->h->incarnation)
        return rdzvd_job_gone_line(q->err, q->errlen, jn->run_id, rs->generation); /* ended */
    if (r == -ENOENT && rs->generation) {
        /* No record (no --state-dir, or none written): the claim is all there is, and only an
         * rdzvd that restarted (or a new leader: another incarnation) may take it. */
        rec->generation = rs->generation;
        rec->running = true;
        rec->nnodes = rs->nnodes;
        rec->world_size = rs->world_size;
        rec->store_port = (uint16_t)rs->master_port;
        rec->restart_count = rs->restart_count;
        claimed = true;
        /* A claim makes a job as a new JOIN does: within the bound. */
        if ((r = check_room(q)) < 0)
            return r;
    }
    if (r < 0)
        return 0;
    /* The job runs by the settings it was started with (its record's), not by this agent's. */
    if (!(j = rdzvd_job_new(q->h, jn, rec->has_settings ? &rec->settings : NULL,
                            q->handlers)))
        return refuse(q, -ENOMEM, "rdzvd is out of memory");
    rdzvd_job_hist_take(j, rec);
    r = job_rebuild(j, rec, rebuild_window(j, REBUILT_BY_JOIN), false);
    if (r < 0) {
        job_unbuild(j, !claimed); /* a claim has no record to go back to */
        return refuse(q, r, "rdzvd could not reopen the job's store: %s", rdzvd_job_strerror(r));
    }
    *ret = j;
    return 0;
}

/* The job run_id from its record (in --state-dir, or the replicas' job table), when that says a
 * generation runs and keeps the job's settings: rebuilt now, its agents' window running. A job
 * between generations has nothing running to wait for, and a record of an older rdzvd lacks the
 * settings: both are rebuilt by the first JOIN of one of their agents (job_restore). */
static bool job_rebuild_recorded(const struct rdzvd_job_host *h, const char *run_id,
                                 const struct rdzvd_job_handlers *handlers)
{
    struct rdzvd_job_record rec;
    struct rdzv_join jn = {.min = 0};
    struct rdzvd_job *j;
    int r;

    if (rdzvd_job_record_load(h, run_id, &rec) < 0)
        return false;
    if (!rec.has_settings || !rec.running || rec.generation == 0)
        goto out;
    snprintf(jn.run_id, sizeof(jn.run_id), "%s", rec.run_id);
    jn.min = rec.min;
    jn.max = rec.max;
    jn.max_restarts = rec.max_restarts;
    if (!(j = rdzvd_job_new(h, &jn, &rec.settings, handlers))) {
        log_error("job=%s: out of memory: not rebuilt until one of its agents comes back", run_id);
        goto out;
    }
    rdzvd_job_hist_take(j, &rec);
    r = job_rebuild(j, &rec, rebuild_window(j, REBUILT_AT_START), true);
    if (r < 0) {
        log_error("job=%s: its store cannot be reopened (%s): not rebuilt until one of its agents "
                  "comes back", run_id, rdzvd_job_strerror(r));
        job_unbuild(j, true);
    }
out:
    rdzvd_job_record_clear(&rec);
    return true;
}

/* For rdzvd_job_ends_foreach: an ended job's outcome to the host's ended jobs. */
static int keep_end(const struct rdzvd_job_end *e, void *ud)
{
    const struct rdzvd_job_host *h = ud;

    h->keep_end(h->ended, e, h->steps->now);
    return 0;
}

int rdzvd_jobs_rebuild_begin(const struct rdzvd_job_host *h, char (**ids)[RDZV_ID_MAX + 1],
                             size_t *n)
{
    *ids = NULL;
    *n = 0;
    if (!h->record_table)
        return 0;
    /* The jobs that ended first: their agents that come back are told so (P6), not rebuilt. */
    if (h->keep_end && h->ended &&
        rdzvd_job_ends_foreach(h->record_table, keep_end, (void *)h) < 0)
        log_error("out of memory reading the ended jobs of the job table");
    if (rdzvd_job_records_unloaded(h->record_table, h->jobs, ids, n) < 0) {
        log_error("out of memory reading the job table: its jobs are rebuilt when their agents "
                  "come back");
        return -ENOMEM;
    }
    return 0;
}

void rdzvd_jobs_rebuild_one(const struct rdzvd_job_host *h, const char *run_id,
                            const struct rdzvd_job_handlers *handlers)
{
    RDZVD_JOB_STEP(h);
    if (rdzvd_job_find(h->jobs, run_id))
        return; /* an agent's JOIN rebuilt it meanwhile */
    /* Not rebuilt (between generations): it waits for its nodes from now on, --abandon-after's
     * time counted afresh. */
    if (job_rebuild_recorded(h, run_id, handlers) && h->keep_waiting && h->ended &&
        !rdzvd_job_find(h->jobs, run_id))
        h->keep_waiting(h->ended, run_id, rdzvd_job_now_ms(h), 0);
}

void rdzvd_jobs_rebuild(const struct rdzvd_job_host *h)
{
    RDZVD_JOB_STEP(h);
    char(*ids)[RDZV_ID_MAX + 1];
    size_t n;

    if (rdzvd_jobs_rebuild_begin(h, &ids, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++)
        rdzvd_jobs_rebuild_one(h, ids[i], &job_handlers);
    free(ids);
}

/* The JOIN proves it is m's agent: it carries the secret m was given in JOINED (a node id alone,
 * which STATUS used to show anyone, let a stranger take a live agent's place). */
static bool secret_ok(const struct rdzvd_member *m, const struct rdzv_join *jn)
{
    return rdzvd_member_secret_equal(jn->secret, m->secret);
}

/* A JOIN that names a node id the job's table knows (ADMITTED: its first JOIN, before a restart
 * or a change of leader too) must carry the secret rdzvd gave that node: q->proven. A node id
 * it does not know is a new node's. 0, or -EPERM with q->err set. */
static int check_identity(struct join_req *q)
{
    const struct rdzv_join *jn = q->jn;
    char hash[RDZVD_SECRET_HASH_HEX + 1];

    q->proven = false;
    if (!q->h->secret_table ||
        rdzvd_job_secret_hash_get(q->h->secret_table, jn->run_id, jn->node_id, hash) < 0)
        return 0;
    if (rdzvd_member_secret_proves(jn->secret, hash)) {
        q->proven = true;
        return 0;
    }
    return refuse(q, -EPERM,
                  "node id '%s' " RDZV_ERROR_NODE_ID_KNOWN " '%s' (its record knows it); only "
                  "its agent, with the secret rdzvd gave it in JOINED, may JOIN with it",
                  jn->node_id, jn->run_id);
}

/* The secret of a member about to be added for q into secret: its own when q proved it, else a
 * new one, admitted (decided before its JOINED leaves). 0, or a negative errno with q->err set. */
static int member_secret(struct join_req *q, struct rdzvd_job *j, char secret[RDZV_SECRET_HEX + 1])
{
    int r;

    if (q->proven) {
        snprintf(secret, RDZV_SECRET_HEX + 1, "%s", q->jn->secret);
        return 0;
    }
    if (rdzvd_member_secret_new(secret) < 0)
        return refuse(q, -EIO, "rdzvd has no random bytes for a member's secret");
    r = rdzvd_job_admit(j, q->jn->node_id, secret);
    if (r == -ENOSPC)
        return refuse(q, r, "job '%s' cannot take node id '%s': the node ids of its members and "
                      "its running generation fill the %zu bytes a job keeps; stop some of its "
                      "spares, or start a new job with a new --rdzv-id", q->jn->run_id,
                      q->jn->node_id,
                      rdzvd_job_bounds_of(j->host.secret_table)->ids_bytes_max);
    if (r < 0)
        return refuse(q, r, "rdzvd cannot record node id '%s' in job '%s': %s", q->jn->node_id,
                      q->jn->run_id, strerror(-r));
    return 0;
}

/* The agent of m is back on peer (a new connection): m's old peer (if any) is closed. */
static void member_take_over(struct rdzvd_member *m, void *peer)
{
    struct rdzvd_job *j = m->job;

    rdzvd_job_note(j, false, "node=%s reconnected", m->join.host);
    if (m->peer) {
        void *op = m->peer;

        rdzvd_job_peer_bind(j, op, NULL);
        m->peer = NULL;
        rdzvd_job_peer_close(j, op, "replaced by the agent's new connection");
    }
    m->peer = peer;
    m->closed_ms = 0;
    rdzvd_job_peer_bind(j, peer, m);
    rdzvd_member_hb_arm(m, (uint64_t)j->hb_timeout_ms);
    if (m->away) {
        m->away = false;
        j->naway--;
        rdzvd_member_set_ready(m, true);
    }
}

/* The record of j, rebuilt from one and running, as j holds it (memory and record agree on a
 * running generation), into rec: a resume is checked against it as against the record of a job
 * not in memory. NULL for any other job. */
static const struct rdzvd_job_record *rebuilt_as_recorded(const struct rdzvd_job *j,
                                                          struct rdzvd_job_record *rec)
{
    if (!j->rebuilt || j->state != JOB_RUNNING)
        return NULL;
    rec->generation = j->generation;
    rec->running = true;
    rec->restart_count = j->restart_count;
    rec->nnodes = j->round.nnodes;
    rec->world_size = j->round.world_size;
    return rec;
}

/* A reconnecting agent, on peer, whose workers run generation jn->resume.generation. */
static int join_resume(struct join_req *q, struct rdzvd_job *j, void *peer)
{
    const struct rdzv_join *jn = q->jn;
    const struct rdzv_resume *rs = &jn->resume;
    struct rdzvd_member *m, *old;
    const char *mismatch = NULL;
    char why[RDZV_SUMMARY_MAX / 2]; /* room for the rest of the summary around it */
    char secret[RDZV_SECRET_HEX + 1];
    bool created = false;
    int r;

    if (!j) {
        /* rdzvd restarted: rebuild the job, generation and all. */
        if ((r = job_restore(q, &j)) < 0)
            return r;
        created = true;
    } else if (check_join_matches(q, j->min, j->max, j->max_restarts) < 0 ||
               check_join_recovery(q, j->inplace) < 0 || check_join_command(q, j->command) < 0 ||
               check_resume_claim(q, rebuilt_as_recorded(j, &q->rec)) < 0) {
        return -EINVAL;
    }
    old = rdzvd_member_index_find(&j->by_id, jn->node_id);
    if (old && old->peer != peer && !secret_ok(old, jn)) {
        if (created)
            job_unbuild(j, true);
        return refuse(q, -EPERM,
                      "node id '%s' of job '%s' belongs to a member; only its agent, with the "
                      "secret rdzvd gave it in JOINED, may take it over",
                      jn->node_id, jn->run_id);
    }
    if (old && old->peer != peer) {
        /* The same agent on a new connection (the old one closed after a stall of rdzvd, or
         * not seen closing yet): take it over. */
        member_take_over(old, peer);
        *q->ret = old;
        rdzvd_member_send_joined(old, old->node_rank < 0, true);
        if (j->state == JOB_STOPPING && old->stopping_gen == rs->generation && !old->ready) {
            struct rdzv_event e = {.type = "restart", .generation = rs->generation};

            snprintf(e.summary, sizeof(e.summary), "%s", j->last_cause);
            rdzvd_member_send_event(old, &e);
        }
        return 0;
    }
    if ((r = member_secret(q, j, secret)) < 0 ||
        !(m = rdzvd_member_add(j, peer, jn, secret))) {
        if (created)
            job_unbuild(j, true);
        return r < 0 ? r : refuse(q, -ENOMEM, "rdzvd is out of memory");
    }
    *q->ret = m;
    if (j->state == JOB_RUNNING && j->generation == rs->generation && rs->node_rank < j->max &&
        !rdzvd_member_by_rank(j, rs->node_rank) && rs->nnodes == j->round.nnodes &&
        !(mismatch = rebuilt_claim_mismatch(j, jn, why, sizeof(why)))) {
        rdzvd_member_set_rank(m, rs->node_rank);
        m->prev_rank = rs->node_rank;
        m->ran_gen = rs->generation; /* its workers run it */
        m->rank_offset = rs->rank_offset;
        rdzvd_member_set_ready(m, false);
        rdzvd_job_note(j, false,
                       "node=%s is back (node rank %" PRId64 " of generation %" PRIu64 ", %" PRId64
                       " of %" PRId64 " nodes)",
                       jn->host, rs->node_rank, j->generation, j->nin_round, j->round.nnodes);
        job_open_deferred(j); /* its first agent back: noted when it fails */
        rdzvd_member_send_joined(m, false, true);
        if (j->rebuilt && j->nin_round == j->round.nnodes && j->timer_armed) {
            rdzvd_job_timer_stop(j);
            rdzvd_job_note(j, false, "generation %" PRIu64 " rebuilt; its workers never stopped",
                           j->generation);
        } else if (j->rebuilt && j->nin_round == 1 && j->timer_armed &&
                   j->timer_kind == T_REBUILD) {
            rebuild_window_shorten(j);
        }
        /* Its workers all exited 0 while it was away (its LEAVE went nowhere): the job may be
         * over now. */
        if (rs->left)
            rdzvd_member_leave(m, rs->generation, true);
        return 0;
    }
    /* The job moved on without it: stop the old workers, then it is a candidate like any. */
    {
        struct rdzv_event e = {.type = "restart", .generation = rs->generation};

        if (mismatch)
            snprintf(e.summary, sizeof(e.summary),
                     "%s; this node stops its workers and rejoins as a new member", mismatch);
        else
            snprintf(e.summary, sizeof(e.summary),
                     "generation %" PRIu64 " is over (the job is at generation %" PRIu64
                     "); this node rejoins as a new member",
                     rs->generation, j->generation);
        rdzvd_member_set_ready(m, false);
        m->stopping_gen = rs->generation;
        m->held_place = q->proven;
        rdzvd_member_send_joined(m, true, false);
        rdzvd_member_send_event(m, &e);
        rdzvd_job_note(j, mismatch != NULL,
                       "node=%s reconnected from generation %" PRIu64 " (now %" PRIu64 "): told to "
                       "stop its workers%s%s",
                       jn->host, rs->generation, j->generation, mismatch ? ": " : "",
                       mismatch ? mismatch : "");
    }
    return 0;
}

/* For rdzvd_job_ends_foreach: the newest end of run_id the job table keeps. */
struct end_find {
    const char *run_id;
    struct rdzvd_job_end e;
    bool found;
};

static int end_find_one(const struct rdzvd_job_end *e, void *ud)
{
    struct end_find *f = ud;

    if (strcmp(e->run_id, f->run_id) == 0) {
        f->e = *e; /* oldest first: the last one found is the newest */
        f->found = true;
    }
    return 0;
}

/* A resume of a job with no record whose end the job table keeps (the newest 256, longer than
 * the ended jobs in memory, --keep-ended): its workers ran the job that ended, which stays ended
 * (P6); one whose agent started after that end runs a new job. 0, or -EBUSY with q->err set. */
static int check_recorded_end(struct join_req *q)
{
    struct end_find f = {.run_id = q->jn->run_id};
    double ago;

    if (!q->h->record_table ||
        rdzvd_job_ends_foreach(q->h->record_table, end_find_one, &f) < 0 || !f.found)
        return 0;
    ago = rdzvd_job_wall_s(q->h) - f.e.ended_s;
    if (q->jn->age_ms > 0 && (double)q->jn->age_ms / 1000 < ago)
        return 0;
    rdzvd_job_ended_line(q->err, q->errlen, q->jn->run_id, f.e.type, f.e.exit_code,
                         f.e.ended_s, f.e.summary);
    return -EBUSY;
}

/* An agent that started before the newest end of j's run id (its JOIN's age_ms against how long
 * ago that run ended), back while j, a new run of that id, is in memory, and no member of j
 * (its node id unknown to j, or not proven by its secret): an agent of the run that ended. It is
 * told that run's outcome (X8), not recruited into j. 0, or -EBUSY with q->err set. */
static int check_earlier_run(struct join_req *q, const struct rdzvd_job *j)
{
    const struct rdzv_join *jn = q->jn;
    const struct rdzvd_member *m = rdzvd_member_index_find(&j->by_id, jn->node_id);
    int r;

    if (jn->age_ms <= 0 || q->proven || (m && secret_ok(m, jn)))
        return 0; /* an agent that says nothing of its start (before 1.12) is taken as before */
    q->err[0] = '\0';
    r = rdzvd_ended_jobs_refuse(q->h->ended, jn->run_id, jn->age_ms, true, q->h->steps->now,
                                q->err, q->errlen);
    q->err[0] = r < 0 ? q->err[0] : '\0';
    return r < 0 ? r : check_recorded_end(q);
}

/* A node the job put aside takes no part in it again (its history, in memory or, for a job not
 * in memory, in its record): -EACCES with q->err saying why, else 0. */
static int check_aside(struct join_req *q, const struct rdzvd_job *j)
{
    /* By host and GPUs too, for a new node id only: a member's own reconnection is judged by
     * its id. */
    if (j) {
        bool known = rdzvd_member_index_find(&j->by_id, q->jn->node_id) != NULL;

        return rdzvd_job_check_aside(j->hist, j->n_hist, j->run_id, q->jn->node_id,
                                     known ? NULL : q->jn->host, known ? NULL : &q->jn->gpus,
                                     q->err, q->errlen);
    }
    if (q->rec_r < 0)
        return 0;
    return rdzvd_job_check_aside(q->rec.hist, q->rec.n_hist, q->rec.run_id, q->jn->node_id,
                                 q->jn->resume.generation ? NULL : q->jn->host,
                                 q->jn->resume.generation ? NULL : &q->jn->gpus, q->err,
                                 q->errlen);
}

/* The JOIN of q (jn: its copy, which a spare's node rank changes), on peer, to j, the job in
 * memory or NULL. */
static int join_job(struct join_req *q, struct rdzv_join *jn, struct rdzvd_job *j, void *peer)
{
    const struct rdzvd_job_host *h = q->h;
    char *err = q->err;
    size_t errlen = q->errlen;
    struct rdzvd_member **ret = q->ret;
    struct rdzvd_job *found = j;
    char secret[RDZV_SECRET_HEX + 1], twin[RDZV_WARNING_MAX + 1];
    struct rdzvd_member *m, *twin_of;
    char asked[48];
    bool spare;
    int r;

    if ((r = check_aside(q, j)) < 0 || (r = check_identity(q)) < 0)
        return r;
    /* Not in memory but recorded (rdzvd restarted): rebuild it before placing this agent. */
    if (!j && !jn->resume.generation && (r = job_restore(q, &j)) < 0)
        return r;
    if (j && !jn->resume.generation && rdzvd_job_ended_gives_way(j, jn->age_ms))
        j = NULL; /* gone, kept ended: this agent, started after the end, runs a new job */
    if (j && j->state == JOB_ENDED) { /* its agents are still leaving */
        rdzvd_job_ended_line(err, errlen, jn->run_id, j->outcome.type, j->outcome.exit_code,
                             j->ended_s, j->outcome.summary);
        return -EBUSY;
    }
    if (j && (r = check_earlier_run(q, j)) < 0)
        return r;
    /* A job that ended stays ended: a new agent's JOIN (unless a new run, as below) and a
     * resume alike are told its outcome, the resume of a job not rebuilt from a record (its
     * workers ran the job that ended: it is no new run). */
    if (!j && (!jn->resume.generation || q->rec_r < 0)) {
        err[0] = '\0';
        r = rdzvd_ended_jobs_refuse(h->ended, jn->run_id, jn->age_ms, jn->resume.generation != 0,
                                    h->steps->now, err, errlen);
        if (r < 0)
            return r;
        if (err[0]) /* a new run of a job that ended */
            log_info("%s", err);
        err[0] = '\0';
    }
    if (!j && (jn->resume.generation || jn->ran_incarnation) && q->rec_r < 0 &&
        (r = check_recorded_end(q)) < 0)
        return r;
    /* An agent whose workers ran a generation of it (1.20), back to a job neither memory nor a
     * record holds: with a job table (a record from its first ROUND to its end) the job ended,
     * or ran elsewhere, as for a resume (job_restore); without one, it ended here if this very
     * rdzvd ran it. */
    if (!j && !jn->resume.generation && q->rec_r < 0 && jn->ran_incarnation) {
        if (h->record_table)
            return refuse(q, -ESTALE, "job '%s' has ended, or ran on another rdzvd: it has no "
                          "record here; to run it again, start its line again (a new run)",
                          jn->run_id);
        if (jn->ran_incarnation == h->incarnation)
            return rdzvd_job_gone_line(err, errlen, jn->run_id, 0);
    }
    if (jn->resume.generation)
        return join_resume(q, j, peer);
    if (j && (check_join_matches(q, j->min, j->max, j->max_restarts) < 0 ||
              check_join_recovery(q, j->inplace) < 0))
        return -EINVAL;
    m = j ? rdzvd_member_index_find(&j->by_id, jn->node_id) : NULL;
    if (m && m->node_rank < 0 && m->peer != peer && (!m->peer || rdzvd_member_stalled(m)) &&
        secret_ok(m, jn)) {
        /* An agent without workers (a spare, a candidate) back on a new connection after it
         * found rdzvd stalled: the same member, not a duplicate. */
        member_take_over(m, peer);
        *ret = m;
        rdzvd_member_send_joined(m, j->state != JOB_FORMING, false);
        if (!m->ready)
            rdzvd_member_ready(m, m->stopping_gen); /* it has no workers left to stop */
        else if (j->state == JOB_FORMING)
            rdzvd_job_try_close(j);
        return 0;
    }
    if (m && j->state == JOB_NCCL && m->node_rank >= 0 && m->peer != peer &&
        (!m->peer || rdzvd_member_stalled(m)) && secret_ok(m, jn)) {
        /* A node of the round being formed (no worker started: no generation to resume) back on
         * a new connection after it found rdzvd stalled: its place, and node rank 0 is asked
         * again what its old connection was asked (the answer may have gone with it). */
        member_take_over(m, peer);
        *ret = m;
        rdzvd_member_send_joined(m, false, false);
        if (m->node_rank == 0)
            (void)rdzvd_member_send_nccl_request(m, j->nccl_want, j->nccl_store);
        return 0;
    }
    if (jn->node_rank >= jn->max) {
        if (!jn->rank_hint)
            return refuse(q, -ERANGE,
                          "node rank %" PRId64 " is out of range: job '%s' has at most "
                          "%" PRId64 " nodes (ranks 0..%" PRId64 ")",
                          jn->node_rank, jn->run_id, jn->max, jn->max - 1);
        jn->node_rank = -1; /* the scheduler's extra node: a spare */
    }
    if (j && jn->node_rank >= 0) {
        struct rdzvd_member *o = rdzvd_member_by_req(j, jn->node_rank)
                                     ? rdzvd_member_by_req(j, jn->node_rank)
                                     : rdzvd_member_by_rank(j, jn->node_rank);

        if (o && jn->rank_hint)
            jn->node_rank = -1; /* only a preference: take any free rank */
        else if (o && strcmp(o->join.host, jn->host) == 0)
            /* Most often a second experiment on this host, with the first one's line. */
            return refuse(q, -EEXIST,
                          "node rank %" PRId64 " of job '%s' is already taken by another agent "
                          "on this host, %s (node id %s): another job running here? give this "
                          "one its own --rdzv-id, or its own rdzvd with another --master-port "
                          "(or --rdzv-endpoint); agents of one job on one host need each its "
                          "own --node-rank",
                          jn->node_rank, jn->run_id, o->join.host, o->join.node_id);
        else if (o)
            return refuse(q, -EEXIST,
                          "node rank %" PRId64 " of job '%s' is already taken by %s (node id "
                          "%s); "
                          "give each node its own --node-rank, or run one agent per node (another "
                          "job needs its own --rdzv-id or --master-port)",
                          jn->node_rank, jn->run_id, o->join.host, o->join.node_id);
    }
    if (j && rdzvd_member_index_find(&j->by_id, jn->node_id))
        return refuse(q, -EEXIST, "node id '%s' has already joined job '%s'", jn->node_id,
                      jn->run_id);
    /* After the node rank's: a second job on this host is told that, which says more. */
    if (j && check_join_command(q, j->command) < 0)
        return -EINVAL;
    if (!j && (r = check_room(q)) < 0)
        return r;
    if (!j && !(j = rdzvd_job_new(h, jn, NULL, q->handlers)))
        return refuse(q, -ENOMEM, "rdzvd is out of memory");
    if ((r = member_secret(q, j, secret)) < 0 || !(m = rdzvd_member_add(j, peer, jn, secret))) {
        if (j != found) /* made for this JOIN (a job in memory with no member keeps waiting) */
            job_unbuild(j, q->rec_r == 0);
        return r < 0 ? r : refuse(q, -ENOMEM, "rdzvd is out of memory");
    }
    *ret = m;
    spare = j->state != JOB_FORMING;
    if (jn->node_rank >= 0)
        snprintf(asked, sizeof(asked), "node rank %" PRId64 " asked", jn->node_rank);
    rdzvd_job_note(j, false,
                   "node=%s joined (node id %s, %" PRId64 " workers, %s), %" PRId64 " of %" PRId64
                   "..%" PRId64 "%s",
                   jn->host, rdzvd_job_named(j, jn->node_id), jn->nproc,
                   jn->node_rank >= 0 ? asked : "any node rank",
                   j->nmembers, j->min, j->max, spare ? " (waits for the next generation)" : "");
    twin_of = rdzvd_member_index_find(&j->by_host, jn->host);
    if (twin_of == m || (twin_of && !twin_of->peer)) /* gone: most likely this agent, before */
        twin_of = NULL;
    if (twin_of) {
        /* Two agents of the job under one host name: both are told (the other at its next
         * HEARTBEAT), with the --host to give each. */
        rdzvd_member_twin_text(m, twin_of, twin, sizeof(twin));
        twin_of->twin = m;
        rdzvd_job_note(j, true,
                       "node=%s joined (node id %s) under the host name of node id %s: both "
                       "agents are told to give each its own --host",
                       jn->host, rdzvd_job_named(j, jn->node_id),
                       rdzvd_job_named(j, twin_of->join.node_id));
    }
    rdzvd_member_send_joined_warn(m, spare, false, twin_of ? twin : NULL);
    if (j->state == JOB_FORMING)
        rdzvd_job_try_close(j);
    else /* --scale-up now: at a HEARTBEAT (one that goes before moves nobody) */
        m->scale_up_wait = j->scale_up_now;
    return 0;
}

int rdzvd_job_join(const struct rdzvd_job_host *h, void *peer, const struct rdzv_join *join,
                   char *err, size_t errlen, struct rdzvd_member **ret,
                   const struct rdzvd_job_handlers *handlers)
{
    RDZVD_JOB_STEP(h);
    struct rdzv_join jn = *join;
    struct join_req q = {.h = h, .jn = &jn, .err = err, .errlen = errlen, .ret = ret,
                         .handlers = handlers, .rec_r = -ENOENT};
    struct rdzvd_job *j;
    int r;

    *ret = NULL;
    j = rdzvd_job_find(h->jobs, jn.run_id);
    if (!j) /* rdzvd restarted, or a new leader: the job may be in its record */
        q.rec_r = rdzvd_job_record_load(h, jn.run_id, &q.rec);
    r = join_job(&q, &jn, j, peer);
    if (r < 0 && !j) {
        /* A job rebuilt from its record for this JOIN, which was then refused, goes back to it
         * (else it stayed in memory with no member, neither waiting nor abandoned). */
        struct rdzvd_job *made = rdzvd_job_find(h->jobs, jn.run_id);

        if (made && made->nmembers == 0 && made->state != JOB_ENDED)
            job_unbuild(made, q.rec_r == 0);
    }
    rdzvd_job_record_clear(&q.rec);
    return r;
}

/* -------------------------------------------------------------------------------------------- */
/* What a member reports (decoded by rdzvd-job-wire.c): heartbeats,
 * worker exits (a node put aside after too many), a cancel from outside, a failed health check,
 * LEAVE and READY; and an operator's release of a node put aside. Part of the job state machine
 * (rdzvd-job-impl.h): it moves the job through rdzvd-job-sm.c, never the other way. */

int rdzvd_jobs_release(struct rdzv_list *jobs, const char *run_id, const char *node, char *err,
                       size_t errlen)
{
    struct rdzvd_job *j = rdzvd_job_find(jobs, run_id);
    RDZVD_JOB_STEP(j ? &j->host : NULL);

    if (!j || j->state == JOB_ENDED) {
        snprintf(err, errlen, "job '%s' is not running on this rdzvd (its agents rebuild it on "
                              "the leader within a heartbeat timeout of a change)", run_id);
        return -ENOENT;
    }
    return rdzvd_job_release(j, node, err, errlen);
}

uint64_t rdzvd_jobs_held(const struct rdzvd_job_host *h)
{
    uint64_t n = h->ended ? h->ended->n_waiting + h->ended->n_pending : 0;
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, h->jobs)
        n++;
    return n;
}

int rdzvd_jobs_end_waiting(const struct rdzvd_job_host *h, const char *run_id, const char *type,
                           int64_t exit_code, const char *why, char *err, size_t errlen)
{
    RDZVD_JOB_STEP(h);
    struct rdzvd_job_record rec = {.generation = 0};
    struct rdzvd_job_record end = {.generation = 0, .has_end = true};
    int r;

    if (rdzvd_job_find(h->jobs, run_id) || !h->record_table ||
        rdzvd_job_record_get(h->record_table, run_id, &rec) < 0) {
        snprintf(err, errlen, "job '%s' is not waiting for its nodes on this rdzvd", run_id);
        return -ENOENT;
    }
    /* Nobody to tell now, its record to end, and how it ended kept for its agents that come
     * back (P6). */
    memcpy(end.run_id, rec.run_id, sizeof(end.run_id));
    rdzvd_job_end_set(&end.end, rec.run_id, type, exit_code, why, rdzvd_job_wall_s(h),
                      rec.generation, rec.restart_count);
    rdzvd_job_record_clear(&rec);
    if ((r = rdzvd_job_host_decide(h, h->record_table, RDZVD_DECIDE_ENDED, &end)) < 0) {
        snprintf(err, errlen, "rdzvd could not end job '%s' in its job table (%s)", run_id,
                 strerror(-r));
        return r;
    }
    if (h->take_waiting && h->ended)
        (void)h->take_waiting(h->ended, run_id);
    if (h->keep_end && h->ended)
        h->keep_end(h->ended, &end.end, h->steps->now);
    return 0;
}

int rdzvd_jobs_cancel(const struct rdzvd_job_host *h, const char *run_id, const char *reason,
                      char *err, size_t errlen)
{
    RDZVD_JOB_STEP(h);
    struct rdzvd_job *j = rdzvd_job_find(h->jobs, run_id);
    struct rdzvd_job_record rec = {.generation = 0};
    char why[RDZV_SUMMARY_MAX + 1];
    int r;

    if (!j && h->record_table && rdzvd_job_record_get(h->record_table, run_id, &rec) == 0) {
        /* Waiting for its nodes. */
        rdzvd_job_record_clear(&rec);
        snprintf(why, sizeof(why), "cancelled by the operator%s%s", reason[0] ? ": " : "",
                 reason);
        r = rdzvd_jobs_end_waiting(h, run_id, "cancelled", 128 + SIGTERM, why, err, errlen);
        if (r < 0)
            return r;
        log_warn("job=%s cancelled by the operator while it waited for its nodes%s%s", run_id,
                 reason[0] ? ": " : "", reason);
        return 0;
    }
    if (!j || j->state == JOB_ENDED) {
        snprintf(err, errlen, "job '%s' is not running on this rdzvd", run_id);
        return -ENOENT;
    }
    if (j->cancelled)
        return 0; /* already ending so */
    snprintf(j->cancel_why, sizeof(j->cancel_why), "cancelled by the operator%s%s",
             reason[0] ? ": " : "", reason);
    j->cancelled = 128 + SIGTERM;
    rdzvd_job_note(j, true, "%s", j->cancel_why);
    if (j->state == JOB_STOPPING)
        rdzvd_job_stop_now(j); /* and ended, recorded before anyone hears it */
    else
        rdzvd_job_end(j, "cancelled", j->cancelled, j->cancel_why);
    if (j->state == JOB_ENDED && j->nmembers == 0)
        rdzvd_job_free(j); /* rebuilt at start or election, nobody back: no member to free it */
    return 0;
}

/* j ended, and a plain JOIN's agent started age_ms ago. One started after the end runs a new
 * job: j, whose members are all away (kept for their agents to be told the outcome), goes now,
 * kept ended as at their deadlines. Whether it went. */
bool rdzvd_job_ended_gives_way(struct rdzvd_job *j, int64_t age_ms)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    if (j->state != JOB_ENDED || age_ms <= 0 ||
        (double)age_ms / 1000 >= rdzvd_job_wall_s(&j->host) - j->ended_s)
        return false;
    for_each_member(j, m, pos, tmp) if (m->peer) return false;
    rdzvd_job_note(j, false, "an agent started after the job ended: a new run");
    for_each_member(j, m, pos, tmp) rdzvd_member_remove(m); /* the last frees j */
    return true;
}

const char *rdzvd_member_run_id(const struct rdzvd_member *m)
{
    return m->job->run_id;
}

uint64_t rdzvd_member_heartbeat(struct rdzvd_member *m)
{
    RDZVD_JOB_STEP(&m->job->host);
    rdzvd_member_check_stall(m);
    /* The first HEARTBEAT of its generation comes as its agent takes the ROUND, before its
     * workers start (uv_spawn may hold its loop): the start grace lasts until the next. */
    rdzvd_member_hb_arm(m, (uint64_t)m->job->hb_timeout_ms *
                               (m->ran_now ? RDZVD_JOB_INIT_GRACE_FACTOR : 1));
    m->ran_now = false;
    /* --scale-up now takes a joiner in at a HEARTBEAT, not at its JOIN: an agent that goes
     * before it speaks again (a crash, a token holder that closes) moved nobody, and costs
     * nothing. A joiner the job cannot take in yet (a rebuilt generation's agents not all back,
     * MAX reached) asks again at its next HEARTBEAT; one placed meanwhile asks no more. */
    if (m->scale_up_wait) {
        struct rdzvd_job *j = m->job;

        if (m->node_rank >= 0 || j->state == JOB_ENDED) {
            m->scale_up_wait = false;
        } else if (j->state == JOB_RUNNING && j->nin_round < j->max && !job_rebuilding(j) &&
                   !job_finishing(j, m) && rdzvd_job_free_scale_up(j)) {
            /* Within the job's bound on restarts not counted, spaced: else it asks again. */
            m->scale_up_wait = false;
            if (rdzvd_member_scale_up_now(m)) {
                j->scaling_up = true;
                rdzvd_job_restart(j, RDZV_MARK_RESTART, "scale-up", 0,
                                  "a node joined below --nnodes MAX: restarting to scale up");
            }
        }
    }
    return m->job->generation;
}

void rdzvd_member_wait(const struct rdzvd_member *m, struct rdzv_wait *w)
{
    const struct rdzvd_job *j = m->job;
    int64_t left = j->timer_armed ? (int64_t)rdzvd_job_timer_due_in(j) : -1;

    memset(w, 0, sizeof(*w));
    w->left_ms = -1;
    if (j->timer_armed && j->timer_kind == T_BACKOFF) {
        w->what = RDZV_WAIT_BACKOFF;
        w->left_ms = left;
    } else if (j->state == JOB_RUNNING && j->rebuilt && j->timer_armed &&
               j->timer_kind == T_REBUILD) {
        w->what = RDZV_WAIT_REBUILD;
        w->nodes = j->nin_round;
        w->need = j->round.nnodes;
        w->left_ms = left;
    } else if (j->state == JOB_FORMING) {
        w->what = RDZV_WAIT_NODES;
        w->nodes = j->nready;
        w->need = j->min;
        w->max = j->max;
        if (j->timer_armed && j->timer_kind == T_JOIN)
            w->left_ms = left;
    }
    if (w->left_ms > RDZV_WAIT_LEFT_MAX_MS)
        w->left_ms = RDZV_WAIT_LEFT_MAX_MS;
}

/* Signals that come from outside a worker (a kill, a hang-up, a terminal's, a peer's socket
 * gone), as opposed to the ones a process raises on itself when it crashes (SIGSEGV, SIGBUS,
 * SIGABRT, SIGFPE, SIGILL, ...), which count against its node. */
static bool signal_from_outside(int64_t sig)
{
    return sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT ||
           sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGPIPE;
}

/* Killed from outside (the scheduler, an operator, the kernel's OOM killer: a signal the agent
 * did not send, with no reason of its own). A shell or launcher between the agent and the
 * process reports its child's signal N as exit code 128 + N, as POSIX shells do. */
static bool exit_from_outside(const struct rdzv_worker_exit *w)
{
    return !w->reason[0] &&
           (signal_from_outside(w->signal) ||
            (w->signal <= 0 && w->exit_code > 128 && signal_from_outside(w->exit_code - 128)));
}

/* Whether m's local rank failed at start-up: soon after its generation formed (within
 * extra_ms more: a generation that stops after a start-up failure gave the others' workers its
 * grace, and a second of slack for the report), and before it reported a step. */
static bool failed_at_startup(const struct rdzvd_member *m, int64_t local_rank, int64_t extra_ms)
{
    const struct rdzvd_job *j = m->job;

    return j->formed_ms &&
           (int64_t)(rdzvd_job_now_ms(&j->host) - j->formed_ms) <
               rdzvd_job_startup_fail_ms(j->host.steps) + extra_ms &&
           !rdzvd_member_rank_progressed(m, local_rank);
}

/* m's start-up failure would put its node aside, but the others' workers may be about to fail
 * alike (a script bug: the job's failure, P4): they are given as long again as it ran, 2 to
 * 5 s, before they are stopped (EVENT restart's startup_grace_ms, 1.17). Only then: a failure
 * that puts nobody aside restarts at once. */
static void startup_grace(struct rdzvd_job *j)
{
    int64_t grace = (int64_t)(rdzvd_job_now_ms(&j->host) - j->formed_ms);

    if (grace < RDZVD_JOB_STARTUP_GRACE_MIN_MS)
        grace = RDZVD_JOB_STARTUP_GRACE_MIN_MS;
    if (grace > rdzvd_job_startup_fail_ms(j->host.steps)) /* GRACE_MAX_MS as set */
        grace = rdzvd_job_startup_fail_ms(j->host.steps);
    j->startup_grace_ms = grace;
}

/* Whether two workers' errors (WORKER_EXIT error) say the same, their numbers left out (ranks,
 * ports, addresses, pointers): each run of digits, or of hex digits after "0x", is one '#'. */
static const char *past_number(const char *s)
{
    bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');

    for (s += hex ? 2 : 0; (*s >= '0' && *s <= '9') ||
                           (hex && ((*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F')));)
        s++;
    return s;
}

static bool errors_alike(const char *a, const char *b)
{
    for (;;) {
        bool na = *a >= '0' && *a <= '9', nb = *b >= '0' && *b <= '9';

        if (na != nb || (!na && *a != *b))
            return false;
        if (!*a)
            return true;
        a = na ? past_number(a) : a + 1;
        b = nb ? past_number(b) : b + 1;
    }
}

/* A worker of m failed in a generation that already stops (another node's failure came first).
 * Every node failing at start-up in the same generation with the same error is the job's own
 * failure (a script bug, a bad input): the start-up failures charged to the others in it are
 * taken back, so that no node is put aside for it and the job fails once its restart budget is
 * spent. A node whose workers die of another error (a connection that the first node's dead
 * worker closed) does not fail alike: the first node keeps its charge. Any other late report
 * changes nothing (the first one made the restart). */
static void worker_exit_late(struct rdzvd_member *m, const struct rdzv_worker_exit *w)
{
    struct rdzvd_job *j = m->job;
    int64_t since = (int64_t)(rdzvd_job_wall_s(&j->host) * 1000) -
                    (int64_t)(rdzvd_job_now_ms(&j->host) - j->formed_ms);
    struct rdzvd_job_record_hist *before;
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;
    int64_t alike = 0, extra = j->stopping_grace_ms ? j->stopping_grace_ms + 1000 : 0;
    int n;

    if (!failed_at_startup(m, w->local_rank, extra) || w->reason[0] || exit_from_outside(w) ||
        m->startup_gen == j->generation)
        return;
    if (j->first_error_gen == j->generation && !errors_alike(j->first_error, w->error)) {
        rdzvd_job_note(j, false,
                       "node=%s: its worker rank %" PRId64 " failed at start-up of another error "
                       "than the first failure's (%s%s%s, not %s%s%s): not the job's failure",
                       m->join.host, w->rank, w->error[0] ? "\"" : "",
                       w->error[0] ? w->error : "none said", w->error[0] ? "\"" : "",
                       j->first_error[0] ? "\"" : "",
                       j->first_error[0] ? j->first_error : "none said",
                       j->first_error[0] ? "\"" : "");
        return;
    }
    m->startup_gen = j->generation;
    /* Every node of the generation, not some: one bad node's start-up failure often makes the
     * others' workers fail at start-up too (their collectives' peer is gone). */
    for_each_member(j, o, pos, tmp) alike += o->node_rank >= 0 && o->startup_gen == j->generation;
    if (alike < j->round.nnodes || !j->n_hist)
        return;
    if (!(before = malloc(j->n_hist * sizeof(*before)))) {
        log_error("job=%s: out of memory; start-up failures of every node left charged",
                  j->run_id);
        return;
    }
    memcpy(before, j->hist, j->n_hist * sizeof(*before));
    if ((n = rdzvd_job_fails_alike(m, since)) > 0 && rdzvd_job_save_aside(j) < 0) {
        memcpy(j->hist, before, j->n_hist * sizeof(*before)); /* as its record has it */
        n = 0;
    }
    free(before);
    if (n > 0)
        rdzvd_job_note(j, true,
                       "every node of generation %" PRIu64 " failed at start-up: the job's "
                       "failure, not a node's (%d charge(s) taken back)", j->generation, n);
}

int rdzvd_member_worker_exit(struct rdzvd_member *m, const struct rdzv_worker_exit *w, char *err,
                             size_t errlen)
{
    RDZVD_JOB_STEP(&m->job->host);
    struct rdzvd_job *j = m->job;
    char when[32], summary[RDZV_SUMMARY_MAX + 1], how[2 * RDZV_REASON_MAX + 64];
    const char *uncounted = NULL; /* counted */
    enum rdzvd_aside aside = RDZVD_ASIDE_NOT;
    struct rdzvd_job_record_fail f;
    bool startup, outside = exit_from_outside(w);
    time_t secs;
    struct tm tm;

    if ((j->state != JOB_RUNNING && j->state != JOB_STOPPING) ||
        w->generation != j->generation || m->node_rank < 0)
        return 0; /* a late report from an earlier generation, or the job already moved on */
    if (w->local_rank < 0 || w->local_rank >= m->join.nproc ||
        w->rank != m->rank_offset + w->local_rank) {
        snprintf(err, errlen,
                 "WORKER_EXIT: rank %" PRId64 " (local rank %" PRId64 ") is not one of this "
                 "node's ranks %" PRId64 "..%" PRId64,
                 w->rank, w->local_rank, m->rank_offset, m->rank_offset + m->join.nproc - 1);
        return -EINVAL;
    }
    if (j->state == JOB_STOPPING) {
        worker_exit_late(m, w);
        return 0;
    }
    secs = (time_t)w->time; /* the parser bounds it */
    if (!gmtime_r(&secs, &tm) || !strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(when, sizeof(when), "?");
    if (w->reason[0]) /* the agent failed it: say why, not how it ended */
        snprintf(how, sizeof(how), "%s", w->reason);
    else if (w->signal > 0)
        snprintf(how, sizeof(how), "was killed by signal %" PRId64 " (%s)%s%s", w->signal,
                 strsignal((int)w->signal), w->error[0] ? ": " : "", w->error);
    else
        snprintf(how, sizeof(how), "exited with code %" PRId64 "%s%s", w->exit_code,
                 w->error[0] ? ": " : "", w->error);
    j->first_error_gen = j->generation; /* the others' start-up failures are compared with it */
    snprintf(j->first_error, sizeof(j->first_error), "%s", w->error);
    snprintf(summary, sizeof(summary),
             "root cause: worker rank %" PRId64 " (local rank %" PRId64 ") on node rank %" PRId64
             " (%s) %s at %s (generation %" PRIu64 ")",
             w->rank, w->local_rank, m->node_rank, m->join.host, how, when, j->generation);
    startup = failed_at_startup(m, w->local_rank, 0);
    /* A late joiner that rdzvd has not seen run: what it reports is a claim, whatever signal or
     * code it names (P7d). Not counted, within the job's bound; its host charged, unless a
     * signal from outside killed it (P1). */
    if (rdzvd_member_exit_unran(m, outside, startup)) {
        const struct rdzvd_job_record_hist *h = rdzvd_job_hist_find(j, m->join.node_id);

        uncounted = "a late joiner's worker failed before rdzvd saw it run";
        startup &= !outside; /* a kill from outside is no start-up failure of its own */
        if (h && h->aside) { /* its host put aside: it goes once the generation stopped */
            m->aside_pending = true;
            j->aside_cause = true;
            if (startup)
                startup_grace(j); /* the others may fail alike: then it is the job's (P4) */
        }
    } else if (outside) { /* killed from outside: the job's failure, not the node's */
        size_t used = strlen(summary);

        if (used < sizeof(summary))
            snprintf(summary + used, sizeof(summary) - used,
                     "; a signal from outside, not counted against the node");
        j->cause_s = w->time;
        rdzvd_job_restart(j, RDZV_MARK_FAILURE, NULL, w->exit_code ? w->exit_code : 1, summary);
        return 0;
    } else { /* a node put aside leaves before the restart: the next generation forms without it */
        f = (struct rdzvd_job_record_fail){
            .rank = w->rank, .local_rank = w->local_rank, .world_size = j->round.world_size,
            .startup = startup};
        aside = rdzvd_job_node_failed(m, f, summary, sizeof(summary));
    }
    if (startup)
        m->startup_gen = j->generation;
    switch (aside) {
    case RDZVD_ASIDE_NOW:
        /* Failed at start-up: the others' reports may still come, and every node failing
         * alike is the job's failure: it goes once the generation stopped, if still aside. */
        if (startup) {
            m->aside_pending = true;
            j->aside_cause = true; /* the recovery is a bad node's, as when it goes at once */
            startup_grace(j);
        } else {
            rdzvd_member_dismiss(m);
        }
        break;
    case RDZVD_ASIDE_NO_CHOICE: /* a job whose nodes all fail at start-up comes here too */
        rdzvd_job_note(j, true,
                       "node=%s (node id %s): its workers failed %" PRId64 " times; it is not "
                       "put aside: without a spare the job has only its --nnodes MIN of %" PRId64
                       " nodes, so it restarts on the nodes it has",
                       m->join.host, rdzvd_job_named(j, m->join.node_id),
                       rdzvd_job_hist_find(j, m->join.node_id)->failures, j->min);
        break;
    case RDZVD_ASIDE_NOT:
        break;
    }
    j->cause_s = w->time; /* the agent's clock: its worker's exit */
    rdzvd_job_restart(j, RDZV_MARK_FAILURE, uncounted, w->exit_code ? w->exit_code : 1, summary);
    return 0;
}

/* Whether j can go on without the members whose agents were signalled: while it forms, any
 * other member may still see it formed (more can join); once formed, its --nnodes MIN must be
 * left. */
static bool job_goes_on(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;
    int64_t left = 0;

    for_each_member(j, o, pos, tmp) left += !o->signalled && !o->aside_pending;
    if (j->state == JOB_FORMING)
        return left > 0;
    return left >= j->min;
}

void rdzvd_member_cancel(struct rdzvd_member *m, int64_t sig, const char *reason,
                         const char *sched_job)
{
    RDZVD_JOB_STEP(&m->job->host);
    struct rdzvd_job *j = m->job;
    struct rdzv_event e = {.type = "left", .generation = j->generation, .exit_code = 128 + sig};
    char what[RDZV_REASON_MAX + 64], buf[16];

    if (j->state == JOB_ENDED || m->signalled)
        return; /* the job is over: the others follow */
    snprintf(what, sizeof(what), "received %s from outside%s%s%s",
             rdzv_signal_name((int)sig, buf, sizeof(buf)),
             reason[0] ? " (" : "", reason, reason[0] ? ")" : "");
    m->signalled = true;
    if (j->cancelled) /* cancelled, not ended (its end not recorded): as below */
        goto out_stopped;
    /* A signal to one agent is that node leaving, as a scheduler that drains or preempts one
     * node means it: a spare just goes, a member is a node lost (a spare takes its ranks, an
     * elastic job goes on), charging nothing. The job is cancelled only when it cannot go on:
     * every agent signalled (scancel), or fewer than MIN nodes left. Only a node of the job's
     * generations can say so: once one formed, a node outside them (a spare, a stranger) just
     * goes, whoever else is away at that moment (a member's connection blipping, rdzvd just
     * restarted and its agents not back yet). A CANCEL naming the scheduler's job (sched_job)
     * is the scheduler ending the whole job: every node is being signalled, so the job is
     * cancelled now rather than each node told it left while the others still ran (R15a). */
    if ((j->generation == 0 || rdzvd_member_held_place(m)) &&
        (sched_job[0] || !job_goes_on(j))) {
        snprintf(j->cancel_why, sizeof(j->cancel_why), "cancelled: the agent of node %s %s",
                 m->join.host, what);
        j->cancelled = 128 + sig;
        /* Stopping (a worker the same signal reached first started a restart): it ends now
         * too, recorded first, not once every member stopped: until then only memory knew,
         * and an rdzvd restart in between formed the job again. */
        if (j->state == JOB_STOPPING)
            rdzvd_job_stop_now(j);
        else
            rdzvd_job_end(j, "cancelled", j->cancelled, j->cancel_why);
        return;
    }
    snprintf(e.summary, sizeof(e.summary),
             "node %s left job %s: its agent %s; the job goes on without it", m->join.host,
             j->run_id, what);
    rdzvd_member_drop(m, what, &e);
    return;
out_stopped:
    /* Cancelled, yet stopping (its end could not be recorded): it ends once stopped
     * (rdzvd_job_check_stopped). A signalled agent stops its own workers and sends no READY: it
     * counts as stopped, or the job would wait for it until it gave up. */
    if (j->state != JOB_STOPPING)
        return;
    rdzvd_member_set_ready(m, true);
    rdzvd_job_check_stopped(j);
}

void rdzvd_member_unhealthy(struct rdzvd_member *m, const char *reason)
{
    RDZVD_JOB_STEP(&m->job->host);
    rdzvd_member_put_aside(m, RDZVD_ASIDE_CHECK, reason);
}

void rdzvd_member_put_aside(struct rdzvd_member *m, unsigned reason_kind, const char *reason)
{
    struct rdzvd_job *j = m->job;
    bool restarts = j->state == JOB_RUNNING && m->node_rank >= 0 && !m->left_ok;
    bool slow = reason_kind == RDZVD_ASIDE_STRAGGLER;
    struct rdzv_event e = {
        .type = "put_aside", .generation = j->generation, .exit_code = RDZV_EXIT_PUT_ASIDE};
    char why[RDZV_REASON_MAX + 64], dropped[RDZV_REASON_MAX + 68];
    int r;

    if (j->state == JOB_ENDED)
        return; /* its agent is leaving anyway */
    rdzvd_job_node_aside(m, reason_kind, reason);
    /* Decided and recorded first: with a restart, by the restart's own decision (which carries
     * the history); without one, by its own. */
    if (!restarts && (r = rdzvd_job_save_aside(j)) < 0) {
        char fail[RDZV_SUMMARY_MAX + 1];

        snprintf(fail, sizeof(fail),
                 "rdzvd could not record that node %s was put aside in its job table (%s)",
                 m->join.host, strerror(-r));
        rdzvd_job_end(j, "failed", 1, fail);
        return;
    }
    snprintf(why, sizeof(why), "%s: %s",
             slow ? "a straggler"
             : reason_kind == RDZVD_ASIDE_NETWORK ? "failed the network pre-flight"
                                                  : "failed a health check",
             reason);
    snprintf(e.summary, sizeof(e.summary), "node %s (node id %s) is put aside by job %s: %s%s%s",
             m->join.host, rdzvd_job_named(j, m->join.node_id), j->run_id, slow ? "" : "it ",
             why,
             rdzvd_member_held_place(m) ? "" : " (it never held a place in the job: put aside by "
                                        "its node id, not its host)");
    rdzvd_job_note(j, true, "node=%s put aside (node id %s): %s", m->join.host,
                   rdzvd_job_named(j, m->join.node_id), why);
    rdzvd_job_mark(j, RDZV_MARK_PUT_ASIDE, "node %s put aside: %s", m->join.host, why);
    j->aside_cause = true;
    if (slow)
        j->straggler_cause = true;
    /* The root cause names the node's agent: "... (host) is a straggler: ...". */
    snprintf(dropped, sizeof(dropped), "%s%s", slow ? "is " : "", why);
    rdzvd_member_drop(m, dropped, &e);
}

void rdzvd_member_leave(struct rdzvd_member *m, uint64_t gen, bool succeeded)
{
    RDZVD_JOB_STEP(&m->job->host);
    struct rdzvd_job *j = m->job;

    if (j->state == JOB_RUNNING && gen == j->generation && m->node_rank >= 0 && succeeded)
        m->left_ok = true;
    rdzvd_job_check_all_left(j);
}

void rdzvd_member_ready(struct rdzvd_member *m, uint64_t gen)
{
    RDZVD_JOB_STEP(&m->job->host);
    struct rdzvd_job *j = m->job;

    /* Ignored: duplicates, other generations', replays by members of the running one or of the
     * one being formed (a late or repeated READY of the generation before: placed, it stopped
     * already, and its next workers are to start). */
    if (m->ready || gen != m->stopping_gen ||
        ((j->state == JOB_RUNNING || j->state == JOB_NCCL) && m->node_rank >= 0))
        return;
    rdzvd_member_set_ready(m, true);
    log_debug("job %s: %s ready after generation %" PRIu64, j->run_id, m->join.host, gen);
    if (j->state == JOB_STOPPING)
        rdzvd_job_check_stopped(j);
    else if (j->state == JOB_FORMING)
        rdzvd_job_try_close(j);
}

/* -------------------------------------------------------------------------------------------- */
/* Node rank 0's answer to NCCL_REQUEST: the generation's NCCL ids, or why
 * there are none, and (replicas) where its agent opened the generation's store; then the
 * generation's ROUNDs go out. Part of the job state machine (rdzvd-job-impl.h), above
 * rdzvd-job-sm.c: it calls down, nothing calls it but the wire side. */

/* After node rank 0's answer: 0 (the store in place), 1 (rdzvd's asked for: its answer sends the
 * ROUNDs), or -1 once the job ended (no store at all). */
static int store_ready(struct rdzvd_job *j)
{
    int r = rdzvd_job_store_fallback(j);

    if (r > 0)
        rdzvd_job_note(j, true,
                       "node rank 0 named no store for generation %" PRIu64 "; rdzvd hosts it",
                       j->generation);
    else if (r < 0)
        rdzvd_job_store_failed(j, r);
    return r < 0 ? -1 : r;
}

void rdzvd_job_store_opened(struct rdzvd_job *j, uint64_t ask, uint64_t gen, void *store,
                            uint16_t port, int err)
{
    RDZVD_JOB_STEP(&j->host);
    enum rdzvd_store_then then = j->store_then;

    /* Another ask since, the job gone or moved on: not wanted (its journal goes as its
     * store's would). */
    if (!ask || ask != j->store_ask || gen != j->generation ||
        (then == STORE_THEN_REOPEN ? j->state != JOB_RUNNING : j->state != JOB_NCCL)) {
        if (!err)
            rdzvd_job_store_drop(j, store, !j->shutting_down && !j->unloaded);
        else if (then == STORE_THEN_REOPEN && ask != j->store_ask && !j->store_deferred_gen)
            rdzvd_job_drop_journal(j, gen); /* let go of by close_store, not reopened */
        return;
    }
    j->store_ask = 0;
    if (!err) {
        j->store = store;
        j->store_port = port;
    }
    if (then == STORE_THEN_REOPEN) {
        if (err < 0 && port) { /* taken: any other */
            store_not_reopened(j, port, err);
            if ((err = rdzvd_job_open_store(j, 0, false, STORE_THEN_REOPEN)) == 0)
                return;
        }
        j->store_deferred_gen = 0;
    } else if (err < 0) {
        rdzvd_job_store_failed(j, err);
    } else if (then == STORE_THEN_NCCL) {
        rdzvd_job_ask_rank0(j, j->nccl_want, false);
    } else {
        rdzvd_job_send_rounds(j);
    }
}

void rdzvd_member_store_offer(struct rdzvd_member *m, const char *addr, int64_t port)
{
    RDZVD_JOB_STEP(&m->job->host);
    struct rdzvd_job *j = m->job;

    /* Only when asked: node rank 0 of a generation whose store rdzvd did not open. */
    if (port <= 0 || port > 65535 || j->store || !j->host.agent_stores || m->node_rank != 0)
        return;
    snprintf(j->store_addr, sizeof(j->store_addr), "%s", addr);
    j->store_port = (uint16_t)port;
}

bool rdzvd_member_nccl_wanted(const struct rdzvd_member *m, uint64_t gen)
{
    const struct rdzvd_job *j = m->job;

    if (j->state != JOB_NCCL || gen != j->generation || m->node_rank != 0) {
        log_debug("job %s: stale NCCL_ID for generation %" PRIu64 " ignored", j->run_id, gen);
        return false;
    }
    return true;
}

void rdzvd_member_nccl_ids(struct rdzvd_member *m, char ids[][RDZV_NCCL_HEX_LEN + 1], unsigned n)
{
    RDZVD_JOB_STEP(&m->job->host);
    struct rdzvd_job *j = m->job;

    for (unsigned i = 0; i < n; i++)
        memcpy(j->round.ids[i], ids[i], RDZV_NCCL_HEX_LEN + 1);
    j->round.n_ids = n;
    rdzvd_job_timer_stop(j);
    if (store_ready(j) == 0)
        rdzvd_job_send_rounds(j);
}

void rdzvd_member_nccl_error(struct rdzvd_member *m, const char *error)
{
    RDZVD_JOB_STEP(&m->job->host);
    struct rdzvd_job *j = m->job;
    char err[RDZV_HOST_MAX + 512];
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;
    bool required = false;

    for_each_member(j, o, pos, tmp) if (o->node_rank >= 0 && o->join.nccl == RDZV_NCCL_REQUIRED)
        required = true;
    if (required) {
        snprintf(err, sizeof(err),
                 "this job needs NCCL, but node rank 0 (%s) cannot make an NCCL id: %s",
                 m->join.host, error);
        rdzvd_job_end(j, "failed", 1, err);
        return;
    }
    rdzvd_job_note(j, false, "no NCCL id (%s); workers get no RDZV_NCCL_UNIQUE_ID", error);
    rdzvd_job_timer_stop(j);
    if (store_ready(j) == 0)
        rdzvd_job_send_rounds(j);
}

/* -------------------------------------------------------------------------------------------- */
/* The node that is merely slow (rdzvd-job-sm.h,
 * rdzvd_member_straggler_check). In synchronous data-parallel training every rank waits for the
 * slowest, so the job's step rate hides who is slow; each rank's compute time (the time it
 * spent not waiting on the step's collectives, HEARTBEAT progress compute_ms) does not. A
 * node's compute time is its slowest rank's (each rank's the median of its last steps, which a
 * checkpoint step or a data loader's hiccup does not move); its score is that over the job's
 * median (the lower median of its nodes', so that with two nodes the faster is the yardstick).
 * All nodes slowing together (a shared filesystem) moves the median with them and scores
 * nobody; the first steps of a generation (a window not full yet) are not scored. Event-driven:
 * a node is scored when its heartbeat brings its progress, no timer. Loop thread only. */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* The lower median of the compute times of j's nodes in the generation whose windows are full,
 * or -1 when fewer than two have one. */
static int64_t job_median(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    int64_t *v, med = -1;
    size_t n = 0;

    if (j->nin_round < 2 || !(v = malloc((size_t)j->nin_round * sizeof(*v))))
        return -1;
    for_each_member(j, m, pos, tmp)
    {
        int64_t c = m->node_rank >= 0 ? rdzvd_member_compute_ms(m, true) : -1;

        if (c >= 0 && n < (size_t)j->nin_round)
            v[n++] = c;
    }
    if (n >= 2) {
        qsort(v, n, sizeof(*v), cmp_i64);
        med = v[(n - 1) / 2];
    }
    free(v);
    return med;
}

/* Whether at least half of the job's other nodes in the generation are at threshold_ms too at
 * their last step: every node slowing together (a shared filesystem), their medians turning
 * some steps apart, m's first. */
static bool others_slow_too(struct rdzvd_job *j, const struct rdzvd_member *m, double threshold_ms)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;
    int64_t n = 0, slow = 0, c;

    for_each_member(j, o, pos, tmp)
    {
        if (o == m || o->node_rank < 0 || (c = rdzvd_member_last_compute_ms(o)) < 0)
            continue;
        n++;
        slow += (double)c >= threshold_ms;
    }
    return n > 0 && 2 * slow >= n;
}

/* A spare waiting to take a place: a connected member outside the generation. */
static bool spare_waiting(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    for_each_member(j, m, pos, tmp) if (m->node_rank < 0 && m->peer && !m->away && !m->signalled)
        return true;
    return false;
}

/* Whether j may put its straggler m aside, and if not why (into why). With a spare, yes; an
 * elastic job above its minimum, when the job without m is faster: with n nodes the job now
 * goes at n / slow, without m at (n - 1) / median, so when the score is above n / (n - 1). */
static bool may_put_aside(struct rdzvd_job *j, const struct rdzvd_member *m, char *why, size_t len)
{
    int64_t n = j->nin_round;

    if (spare_waiting(j))
        return true;
    if (n - 1 < j->min) {
        snprintf(why, len, "no spare is waiting and the job has only its --nnodes MIN of %" PRId64
                 " nodes", j->min);
        return false;
    }
    if (m->straggler_score * (double)(n - 1) <= (double)n) {
        snprintf(why, len, "no spare is waiting, and %" PRId64 " nodes at the others' pace would "
                 "train no faster than %" PRId64 " at its pace", n - 1, n);
        return false;
    }
    return true;
}

void rdzvd_member_straggler_check(struct rdzvd_member *m)
{
    RDZVD_JOB_STEP(&m->job->host);
    struct rdzvd_job *j = m->job;
    uint64_t now = rdzvd_job_now_ms(&j->host);
    char text[RDZV_REASON_MAX + 1], why[200];
    int64_t mine;

    if (j->straggler_factor <= 0 || j->state != JOB_RUNNING || m->node_rank < 0 ||
        (mine = rdzvd_member_compute_ms(m, true)) < 0)
        return;
    for (int fresh = 0; fresh < 2; fresh++) {
        if (j->median_gen != j->generation || now - j->median_at_ms >= RDZVD_STRAGGLER_MEDIAN_MS ||
            fresh) {
            j->median_compute_ms = job_median(j);
            j->median_at_ms = now;
            j->median_gen = j->generation;
        }
        if (j->median_compute_ms < RDZVD_STRAGGLER_MEDIAN_MIN_MS) {
            m->straggler_score = 0;
            m->slow_since_ms = 0;
            return;
        }
        m->straggler_score = (double)mine / (double)j->median_compute_ms;
        /* At the factor against a median made earlier: made again, once, before it counts
         * (every node slowing together would otherwise score high until the next one). */
        if (m->straggler_score < j->straggler_factor || j->median_at_ms == now)
            break;
    }
    if (m->straggler_score < j->straggler_factor) {
        m->slow_since_ms = 0;
        return;
    }
    if (!m->slow_since_ms) {
        /* From the slowing, not from the median's move some steps later; but from now when
         * the others slow too, their medians still to turn (no node is slow against them). */
        double threshold = j->straggler_factor * (double)j->median_compute_ms;

        m->slow_since_ms = others_slow_too(j, m, threshold)
                               ? now
                               : rdzvd_member_slow_since_ms(m, threshold, now);
    }
    if (now - m->slow_since_ms < (uint64_t)j->straggler_window_ms)
        return;
    snprintf(text, sizeof(text),
             "node rank %" PRId64 "'s slowest rank computes %" PRId64 " ms a step, %.2fx the "
             "job's median of %" PRId64 " ms, for %.0f s (--straggler-factor %.2f)",
             m->node_rank, mine, m->straggler_score, j->median_compute_ms,
             (double)(now - m->slow_since_ms) / 1000, j->straggler_factor);
    if (!m->straggler) {
        m->straggler = true;
        rdzvd_job_note(j, true, "node=%s (node id %s) is a straggler: %s", m->join.host,
                       rdzvd_job_named(j, m->join.node_id), text);
        rdzvd_job_mark(j, RDZV_MARK_STRAGGLER, "node %s is a straggler: %s", m->join.host, text);
    }
    if (!j->straggler_aside)
        return;
    if (!may_put_aside(j, m, why, sizeof(why))) { /* asked again at its next heartbeat */
        if (!m->straggler_kept)
            rdzvd_job_note(j, false, "node=%s, a straggler, is not put aside (--on-straggler "
                                     "aside) while %s", m->join.host, why);
        m->straggler_kept = true; /* said once per generation */
        return;
    }
    rdzvd_member_put_aside(m, RDZVD_ASIDE_STRAGGLER, text);
}
