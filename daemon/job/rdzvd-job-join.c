/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-join.c: JOIN and resume (rdzvd_job_join in rdzvd-job-sm.h). It checks an agent
 * against its job, places it (candidate for the next round, or spare), takes over a reconnecting
 * agent's member, and rebuilds a job that a restarted rdzvd does not have in memory: from its
 * record in --state-dir, else from the resuming agent. */
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
#include "common/rdzv-auth.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-status.h"

/* One JOIN being served: what it says, the records it is judged by, where a refusal goes. Not
 * the connection it came on (peer): that is handed only to what binds a member to it
 * (rdzvd_member_add, member_take_over), and compared with a member's own. */
struct join_req {
    const struct rdzvd_job_host *h;
    const struct rdzv_join *jn;
    char *err; /* the refusal, for the caller's ERROR frame */
    size_t errlen;
    struct rdzv_event *told; /* a refusal as the job ended (-EBUSY): its outcome's EVENT */
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
                       " is over, restart %" PRId64 " of %" PRId64 "; forming the next one%s",
                       j->generation, j->restart_count, j->max_restarts,
                       rec->n_stopped ? " once its nodes are back" : "");
        if (rec->n_stopped && rec->generation) { /* W2: its nodes are coming back */
            free(j->stopped_wait);
            j->stopped_wait = rec->stopped;
            j->n_stopped_wait = rec->n_stopped;
            rec->stopped = NULL;
            rec->n_stopped = 0;
            int64_t coming = 0;

            for (int64_t i = 0; i < j->n_stopped_wait; i++) { /* one put aside since: not back */
                const struct rdzvd_job_record_hist *h = rdzvd_job_hist_find(j, j->stopped_wait[i]);

                if (h && h->aside)
                    j->stopped_wait[i][0] = '\0';
                coming += j->stopped_wait[i][0] != '\0';
            }
            if (coming)
                rdzvd_job_timer_start(j, T_REBUILD, window_ms);
        }
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
    memset(j->rank_done, 0, (size_t)j->rank_cap * sizeof(*j->rank_done)); /* a newer claim's */
    j->nin_done = 0;
    for (int64_t i = 0; j->rebuilt_nodes && i < j->round.nnodes; i++)
        if (j->rebuilt_nodes[i].done) { /* gone after its LEAVE succeeded (R17b) */
            j->rank_done[i] = true;
            j->nin_done++;
        }
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
    rdzvd_job_note(j, j->claim_gen != 0,
                   "rebuilding generation %" PRIu64 " (%" PRId64
                   " nodes%s) from reconnecting agents%s",
                   j->generation, rec->nnodes, j->rebuilt_nodes ? ", named by its record" : "",
                   j->claim_gen ? ": a resume of it came after one of an older generation, whose "
                                  "nodes stop their workers and rejoin (W5a)" : "");
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

/* The record a resume's claim stands for, when rdzvd has none (W5): its generation running. */
static void claim_record(struct rdzvd_job_record *rec, const struct rdzv_resume *rs)
{
    rec->generation = rs->generation;
    rec->running = true;
    rec->nnodes = rs->nnodes;
    rec->world_size = rs->world_size;
    rec->store_port = (uint16_t)rs->master_port;
    rec->restart_count = rs->restart_count;
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
        claim_record(rec, rs);
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
    j->claim_gen = claimed ? j->generation : 0;
    j->claimed = claimed;
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

    rdzvd_job_tell_end(h, e);
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
    if (rdzvd_job_find(h->jobs, run_id))
        return; /* an agent's JOIN rebuilt it meanwhile */
    /* Not rebuilt (between generations): it waits for its nodes from now on, --abandon-after's
     * time counted afresh. */
    if (job_rebuild_recorded(h, run_id, handlers) && h->keep_waiting && h->ended &&
        !rdzvd_job_find(h->jobs, run_id))
        rdzvd_job_tell_waiting(h, run_id,
                               rdzvd_jobs_waiting_since(h, run_id, rdzvd_job_now_ms(h),
                                                        rdzvd_job_now_ms(h),
                                                        (int64_t)(rdzvd_job_wall_s(h) * 1000)),
                               0);
}

/* The JOIN proves it is m's agent: it carries the secret m was given in JOINED (a node id alone,
 * which STATUS used to show anyone, let a stranger take a live agent's place). */
static bool secret_ok(const struct rdzvd_member *m, const struct rdzv_join *jn)
{
    return rdzvd_member_secret_equal(jn->secret, m->secret);
}

/* m holds a node rank in the job's generation, running or stopping, and its agent never took its
 * ROUND: no HEARTBEAT of that generation came (rdzvd-job-progress.c), no worker of it started. */
static bool round_not_taken(const struct rdzvd_member *m, enum job_state st)
{
    return m->job->state == st && m->node_rank >= 0 && m->ran_gen != m->job->generation;
}

/* jn, without a resume, comes from m's own agent (its secret) on another connection than m's,
 * live or not: a newer connection of the agent supersedes the old one (R4b). Such an agent holds
 * no generation: its READY went, or it never took a ROUND. */
static bool own_agent_back(const struct rdzvd_member *m, const struct rdzv_join *jn, void *peer)
{
    return m->peer != peer && !jn->resume.generation && secret_ok(m, jn);
}

/* R4b: jn is the own agent of a member of the running generation that took its ROUND (a
 * HEARTBEAT of it came): the agent says it holds no generation, so its workers of it are gone.
 * The node is lost now (R23), as if rdzvd had seen its old connection close first, and the JOIN
 * goes on as that of a node id the job knows. true when so (the job may have ended). */
static bool lose_superseded(struct rdzvd_job *j, const struct rdzv_join *jn, void *peer)
{
    struct rdzvd_member *m = rdzvd_member_index_find(&j->by_id, jn->node_id);

    if (!m || j->state != JOB_RUNNING || m->node_rank < 0 || m->ran_gen != j->generation ||
        !own_agent_back(m, jn, peer))
        return false;
    rdzvd_member_remove(m, "came back without its workers (a JOIN without a resume)", NULL);
    return true;
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

/* What rs is checked against: j's record as rebuilt_as_recorded gives it. A job rebuilt from a
 * claim alone (W5) has no record behind it: a claim of its generation or an older one that
 * differs is another history, told it is over (W5b), not refused; a newer one is (E0-11). */
static const struct rdzvd_job_record *claim_against(const struct rdzvd_job *j,
                                                    const struct rdzv_resume *rs,
                                                    struct rdzvd_job_record *rec)
{
    const struct rdzvd_job_record *r = rebuilt_as_recorded(j, rec);

    return r && j->claimed && rs->generation <= r->generation ? NULL : r;
}

/* W5a: j runs the generation it was rebuilt from a resume's claim alone (no record), and rs
 * (of a node that is not a member) names a newer one, as far in the budget. The first claim
 * was stale: its agent was cut off before the job moved on, and never heard of the
 * generations after it. */
static bool claim_is_newer(const struct rdzvd_job *j, const struct rdzv_resume *rs)
{
    return j->claim_gen && j->claim_gen == j->generation && j->state == JOB_RUNNING &&
           rs->generation > j->generation && rs->restart_count >= j->restart_count;
}

/* The newest resume wins (W5a): the generation rebuilt from a stale claim stops, each node back
 * in it is told it is over and rejoins as a new member (as R3), and j is rebuilt from q's newer
 * claim, its store on the port that claim names. 0, or a negative errno with q->err set. */
static int rebuild_newer_claim(struct join_req *q, struct rdzvd_job *j)
{
    static const enum rdzvd_job_move_kind stop[] = {JOB_MOVE_STOP, JOB_MOVE_STOPPED};
    const struct rdzv_resume *rs = &q->jn->resume;
    struct rdzvd_job_record rec = {.generation = 0};
    struct rdzv_event e = {.type = "restart", .generation = j->generation};
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    int r = 0;

    snprintf(e.summary, sizeof(e.summary),
             "generation %" PRIu64 " is over (the job is at generation %" PRIu64
             "); this node rejoins as a new member",
             j->generation, rs->generation);
    for (unsigned k = 0; k < sizeof(stop) / sizeof(stop[0]) && r == 0; k++)
        r = rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = stop[k]});
    if (r < 0)
        goto out_refuse;
    rdzvd_job_close_store(j); /* the older generation's: job_rebuild opens the newer's */
    for_each_member(j, m, pos, tmp)
    {
        if (m->node_rank < 0)
            continue;
        rdzvd_member_unrank(m); /* not ready: its workers run (R2) */
        m->prev_rank = -1;
        m->left_ok = false;
        m->stopping_gen = e.generation;
        rdzvd_member_send_event(m, &e);
    }
    memset(&j->round, 0, sizeof(j->round));
    claim_record(&rec, rs);
    if ((r = job_rebuild(j, &rec, rebuild_window(j, REBUILT_BY_JOIN), false)) < 0)
        goto out_refuse;
    j->claim_gen = j->generation;
    return 0;
out_refuse:
    return refuse(q, r, "rdzvd could not rebuild job '%s' from the newer resume: %s", j->run_id,
                  strerror(-r));
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
               check_join_recovery(q, j->inplace) < 0 || check_join_command(q, j->command) < 0) {
        return -EINVAL;
    }
    old = rdzvd_member_index_find(&j->by_id, jn->node_id);
    if (!created && !old && claim_is_newer(j, rs)) {
        if (check_resume_claim(q, NULL) < 0)
            return -EINVAL;
        if ((r = rebuild_newer_claim(q, j)) < 0)
            return r;
    } else if (!created && check_resume_claim(q, claim_against(j, rs, &q->rec)) < 0) {
        return -EINVAL;
    }
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
        /* Its workers still stop (the job stops, or a restored one forms: W2): the EVENT it
         * may have missed on the old connection, again. */
        if ((j->state == JOB_STOPPING || j->state == JOB_FORMING) &&
            old->stopping_gen == rs->generation && !old->ready) {
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
        /* R17a: a newcomer of it, as its record says (one rebuilt from its agents' claims
         * cannot say: its nodes are survivors, and every one of them leaves) */
        m->newcomer = j->rebuilt_nodes && j->rebuilt_nodes[rs->node_rank].newcomer;
        m->rank_offset = rs->rank_offset;
        rdzvd_member_set_ready(m, false);
        rdzvd_job_note(j, false,
                       "node=%s is back (node rank %" PRId64 " of generation %" PRIu64 ", %" PRId64
                       " of %" PRId64 " nodes)",
                       jn->host, rs->node_rank, j->generation, j->nin_round, j->round.nnodes);
        job_open_deferred(j); /* its first agent back: noted when it fails */
        rdzvd_member_send_joined(m, false, true);
        if (j->rebuilt && j->nin_round + j->nin_done == j->round.nnodes && j->timer_armed) {
            rdzvd_job_timer_stop(j);
            j->claim_gen = 0; /* whole: it runs as any (W5a, R26a no longer) */
            rdzvd_job_note(j, false, "generation %" PRIu64 " rebuilt; its workers never stopped",
                           j->generation);
        } else if (j->rebuilt && j->nin_round == 1 && j->timer_armed &&
                   j->timer_kind == T_REBUILD) {
            rebuild_window_shorten(j);
        }
        /* Its workers all exited 0 while it was away (its LEAVE went nowhere): the job may be
         * over now. So may it once a rebuilt generation is whole again, its nodes back done. */
        if (rs->left)
            rdzvd_member_leave(m, rs->generation, true);
        else
            rdzvd_job_check_all_left(j);
        return 0;
    }
    /* The job moved on without it: stop the old workers, then it is a candidate like any. */
    {
        struct rdzv_event e = {.type = "restart", .generation = rs->generation};

        if (mismatch)
            snprintf(e.summary, sizeof(e.summary),
                     "%s; this node stops its workers and rejoins as a new member", mismatch);
        else if (j->claimed && rs->generation == j->generation)
            snprintf(e.summary, sizeof(e.summary),
                     "generation %" PRIu64 " of %" PRId64 " nodes (restart %" PRId64
                     ") is not the job's (%" PRId64 " nodes, restart %" PRId64
                     "), rebuilt first after rdzvd restarted; this node rejoins as a new member",
                     rs->generation, rs->nnodes, rs->restart_count, j->round.nnodes,
                     j->restart_count);
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
                         f.e.ended_s, f.e.summary, q->told);
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
                                q->err, q->errlen, q->told);
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
        /* An agent started after the end is of a new run, not told this one's end as its own:
         * refused until the agents of the run that ended are gone (X1). */
        if (!jn->resume.generation && rdzvd_job_started_after_end(j, jn->age_ms)) {
            snprintf(err, errlen,
                     "job '%s' ended %.1f s ago and its agents are still leaving; this agent "
                     "started after that end, so it runs a new job of that id once they are "
                     "gone: start it again then, or give it a new --rdzv-id",
                     jn->run_id, rdzvd_job_wall_s(h) - j->ended_s);
            return -EAGAIN;
        }
        rdzvd_job_ended_line(err, errlen, jn->run_id, j->outcome.type, j->outcome.exit_code,
                             j->ended_s, j->outcome.summary, q->told);
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
                                    h->steps->now, err, errlen, q->told);
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
    if (m && (m->node_rank < 0 || j->state == JOB_STOPPING || j->state == JOB_FORMING) &&
        own_agent_back(m, jn, peer)) {
        /* An agent without workers of a running generation (a spare, a candidate, a node of the
         * generation stopping whose READY went: R4a, R4b) back on a new connection, the old one
         * gone or not yet seen closing: the same member, not a duplicate. */
        member_take_over(m, peer);
        *ret = m;
        rdzvd_member_send_joined(m, j->state != JOB_FORMING && m->node_rank < 0, false);
        if (!m->ready)
            rdzvd_member_ready(m, m->stopping_gen); /* it has no workers left to stop */
        else if (j->state == JOB_FORMING)
            rdzvd_job_try_close(j);
        return 0;
    }
    if (m && m->node_rank >= 0 && (j->state == JOB_NCCL || round_not_taken(m, JOB_RUNNING)) &&
        own_agent_back(m, jn, peer)) {
        /* A node of the round being formed, or of the running generation whose ROUND went with
         * its old connection (no worker started: no generation to resume), back on a new
         * connection, the old one gone or not yet seen closing: its place (R4a, R4b). Node rank
         * 0 of a round being formed is asked again what its old connection was asked (the answer
         * may have gone with it); a node of the running generation is sent its ROUND again. */
        member_take_over(m, peer);
        *ret = m;
        rdzvd_member_send_joined(m, false, false);
        if (j->state == JOB_RUNNING)
            rdzvd_member_send_own_round(m);
        else if (m->node_rank == 0)
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
                   char *err, size_t errlen, struct rdzv_event *told, struct rdzvd_member **ret,
                   const struct rdzvd_job_handlers *handlers)
{
    struct rdzv_join jn = *join;
    struct join_req q = {.h = h, .jn = &jn, .err = err, .errlen = errlen, .told = told,
                         .ret = ret, .handlers = handlers, .rec_r = -ENOENT};
    struct rdzvd_job *j;
    int r;

    *ret = NULL;
    j = rdzvd_job_find(h->jobs, jn.run_id);
    if (j && lose_superseded(j, &jn, peer))
        j = rdzvd_job_find(h->jobs, jn.run_id); /* the node lost may have ended it */
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
