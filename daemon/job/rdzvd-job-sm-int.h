/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-sm-int.h: PRIVATE to the job machine's files and its unit tests: the machine's entry
 * points, one per input, that rdzvd_job_step (rdzvd-job-step.c) dispatches to, and the outbox
 * that a step holds open. The rest of rdzvd goes through rdzvd_job_step (rdzvd-job-sm.h).
 * Threads, ownership and errors as rdzvd-job-sm.h says. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-list.h"
#include "proto/rdzv-msg.h"
#include "daemon/job/rdzvd-job-sm.h"

struct rdzvd_job_handlers; /* rdzvd-job-impl.h: the step's, handed to a job made */

/* The outbox (etcd/raft's Ready). What the machine records and sends is queued, in the order it
 * decides it, in the outbox of the step under way: every entry below runs inside rdzvd_job_step,
 * which holds its Ready open until rdzvd_job_advance carries it out, the records first
 * (ops->record), then the rest. No step opens while another is open or a Ready is carried out:
 * what comes back then is an input queued for later (rdzvd_job_input_later), stepped once the
 * Ready is done. So no op runs while a decision is made, and a decision is written before
 * anything it sends goes out; only bind runs at once (a pointer: a connection that closes
 * meanwhile must find its member as decided), and, out of memory for its entry, a close (the
 * machine let go of the connection or the store: nothing comes back). Loop thread only.
 *
 * rdzvd_job_step's step is held open in rd (its outbox: no other step is open, and no Ready is
 * carried out) until rdzvd_job_advance closes it: its Ready carried out, then what came back
 * meanwhile stepped in order. */
void rdzvd_job_ready_open(const struct rdzvd_job_host *h, struct rdzvd_job_ready *rd);
void rdzvd_job_ready_close(struct rdzvd_job_ready *rd);
/* h's steps keep the records of h's job table (rdzvd_job_host_keep_records): a record not
 * written comes back as the input UNRECORDED (its bytes, err the host's), stepped by fn once the
 * Ready that held it is carried out, in order with the rest that came back: never inside a
 * step. fn is kept in h's steps, and h keeps its records (keep_records). */
void rdzvd_job_records_keep(struct rdzvd_job_host *h, rdzvd_job_input_fn fn);
/* A record of h's job table (a change the store holds: rdzvd_store_change_held) for the step
 * under way, made before its change so that memory cannot fail after it: NULL, out of memory.
 * rdzvd_job_record_queue adds it to the step's records once the change is made (made), or frees
 * it. holds: when it is not written, the messages to agents the step queued after it are not
 * sent. */
struct rdzvd_job_kept;
struct rdzvd_job_kept *rdzvd_job_record_new(const struct rdzvd_job_host *h,
                                            enum rdzvd_change what, const uint8_t *key,
                                            size_t klen, const uint8_t *val, size_t vlen,
                                            bool holds);
void rdzvd_job_record_queue(const struct rdzvd_job_host *h, struct rdzvd_job_kept *k, bool made);
/* Whether a step of s is open and its effects not yet carried out (tests: no op runs then). */
bool rdzvd_job_deciding(const struct rdzvd_job_steps *s);

/* Rebuild every job of h's job table whose record says a generation runs and that is not in
 * memory, as rdzvd finds them when it starts or a replica becomes the leader: the agents of the
 * generation have a window to come back (T_REBUILD) before those missing count as lost; when none
 * comes, the job goes back to its record (state "waiting"). In steps, so that the host serves its
 * connections in between: _begin keeps the ended jobs and lists the run ids to rebuild (*ids,
 * free it; 0, or -ENOMEM logged), _one rebuilds one of them unless it is in memory already (an
 * agent's JOIN rebuilt it meanwhile). Failures are logged (that job is rebuilt by its agents'
 * first JOIN then). */
int rdzvd_jobs_rebuild_begin(const struct rdzvd_job_host *h, char (**ids)[RDZV_ID_MAX + 1],
                             size_t *n);
void rdzvd_jobs_rebuild_one(const struct rdzvd_job_host *h, const char *run_id,
                            const struct rdzvd_job_handlers *handlers);
/* A JOIN (plain, or a resume after a reconnect) from peer. 0 with *ret the new member (bound
 * to peer), or the agent's member taken over (a resume; a plain JOIN of a member without a
 * node rank whose connection closed or that rdzvd stalled on); or a negative errno with err set
 * to the refusal: the caller sends it as ERROR and closes peer, except -EACCES (a node the job
 * put aside), which it sends as EVENT put_aside (ops->put_aside), and -EBUSY (its job ended),
 * which it sends as told, the EVENT of the job's outcome. */
int rdzvd_job_join(const struct rdzvd_job_host *h, void *peer, const struct rdzv_join *jn,
                   char *err, size_t errlen, struct rdzv_event *told, struct rdzvd_member **ret,
                   const struct rdzvd_job_handlers *handlers);

/* Any message from m's agent: it is alive. */
void rdzvd_member_seen(struct rdzvd_member *m);
const char *rdzvd_member_run_id(const struct rdzvd_member *m);

/* HEARTBEAT: re-arms m's deadline; returns the job's generation for the answer. */
uint64_t rdzvd_member_heartbeat(struct rdzvd_member *m);
/* What m's job waits for now, for the HEARTBEAT's answer (1.15): forming (nodes joined of its
 * --nnodes, the join timeout's time left), a rebuilt or restored stopped generation's nodes
 * coming back (the window's time left), a restart's backoff; RDZVD_WAIT_NONE (w zeroed) when
 * it runs (rdzvd-job-round.c). */
void rdzvd_member_wait(const struct rdzvd_member *m, struct rdzv_wait *w);
/* Another agent of m's job joined since under m's host name: the warning for m's agent (1.17,
 * HEARTBEAT's answer) into buf, once. false when there is none to give. */
bool rdzvd_member_twin_warning(struct rdzvd_member *m, char *buf, size_t len);
/* HEARTBEAT's progress (validated by the codec): kept when hb is of the job's generation and m
 * holds a node rank in it (local ranks >= the node's nproc are ignored); a report hb says came
 * age_ms ago is stored as made then, on rdzvd's clock. A newer generation's first report
 * forgets the older one's. Out of memory: logged, the report dropped (rdzvd-job-progress.c). */
void rdzvd_member_progress(struct rdzvd_member *m, const struct rdzv_heartbeat *hb);
/* NCCL_ID: true when m (node rank 0) is asked for generation gen's ids now; otherwise the
 * message is stale and is ignored. */
bool rdzvd_member_nccl_wanted(const struct rdzvd_member *m, uint64_t gen);
/* ... then either the ids (n of 1..RDZV_MAX_NCCL_IDS, validated) or node rank 0's error. */
void rdzvd_member_nccl_ids(struct rdzvd_member *m, char ids[][RDZV_NCCL_HEX_LEN + 1], unsigned n);
void rdzvd_member_nccl_error(struct rdzvd_member *m, const char *error);
/* Before either: where node rank 0's agent opened the generation's store (port 0: it named
 * none; rdzvd then opens its own when the job asked the agent for one). */
void rdzvd_member_store_offer(struct rdzvd_member *m, const char *addr, int64_t port);
/* WORKER_EXIT: a worker failed. A report of the current generation speaks only for the sender's
 * own node: its local rank must be one of the node's and its rank the node's rank offset plus
 * that local rank. 0, or -EINVAL with err (errlen bytes) saying why: the caller refuses the
 * message. Late reports of earlier generations are ignored (0). */
int rdzvd_member_worker_exit(struct rdzvd_member *m, const struct rdzv_worker_exit *w, char *err,
                             size_t errlen);
/* UNRECORDED: the record of job run_id's decision (its name) was not written (err): nothing
 * decided after it was sent, and the job fails, naming why. Nothing for a job not in memory or
 * ended. */
void rdzvd_jobs_unrecorded(struct rdzv_list *jobs, const char *run_id, const char *decision,
                           int err);
/* RELEASE (rdzvctl release): job run_id takes back the nodes it put aside whose node id or host
 * is node, or (node a GPU UUID) that GPU from the nodes put aside that hold it. The number of
 * nodes released or changed (0: none such), or a negative errno with err set (-ENOENT: no such
 * job here). */
int rdzvd_jobs_release(struct rdzv_list *jobs, const char *run_id, const char *node, char *err,
                       size_t errlen);
/* CANCEL: m's agent was stopped from outside by signal sig (scancel, a time limit, a
 * preemption, a drain of one node; reason: what it knows). That node leaves, charging nothing: a
 * spare is dropped, a member counts as a node lost (the job re-forms without it, uncounted); its
 * agent gets EVENT left. When the job cannot go on without its signalled members (formed: fewer
 * than MIN are left; forming: none), it ends "cancelled", exit code 128 + sig, every member told.
 * So it does at once when sched_job is not "" (the scheduler ends that whole job) and m held a
 * place in the job (or it forms). Ignored once the job has ended, or for a member already
 * signalled. */
void rdzvd_member_cancel(struct rdzvd_member *m, int64_t sig, const char *reason,
                         const char *sched_job);
/* CANCEL_JOB (rdzvctl cancel, the operator's): job run_id ends "cancelled" (exit code 143,
 * nothing charged), saying reason; every member is told. A job that waits for its nodes (no
 * member connected, its record in h's table) ends too: its record goes. 0, or -ENOENT with err
 * set when no such job runs or waits here. A job stopping ends so once its members are
 * stopped. */
int rdzvd_jobs_cancel(const struct rdzvd_job_host *h, const char *run_id, const char *reason,
                      char *err, size_t errlen);
/* UNHEALTHY: m's node failed a health check (reason, its line). The node is put aside (its
 * history recorded), its agent told (EVENT put_aside) and let go; a node of the running
 * generation counts as lost (the job re-forms without it), a spare or candidate just leaves. */
void rdzvd_member_unhealthy(struct rdzvd_member *m, const char *reason);
/* m reported its ranks' progress (after rdzvd_member_progress): score it against the job's
 * median (made again at most every RDZVD_STRAGGLER_MEDIAN_MS), call it a straggler once it
 * stayed at or above the job's factor for its window (counted from its first slow step, unless
 * at least half the others are as slow at their last step), and with --on-straggler aside put it
 * aside when the job can do without it (m is then gone: call it last). Nothing when the job
 * scores nobody (rdzvd-job-verdict.c). */
void rdzvd_member_straggler_check(struct rdzvd_member *m);
/* LEAVE for generation gen; succeeded: every worker of the node exited 0. */
void rdzvd_member_leave(struct rdzvd_member *m, uint64_t gen, bool succeeded);
/* READY: the node's workers of generation gen have stopped. */
void rdzvd_member_ready(struct rdzvd_member *m, uint64_t gen);
/* m's peer is gone (connection closed): m is lost. The peer is not touched again. Except
 * within a heartbeat timeout of a stall of rdzvd (m's input read past its deadline): then its
 * agent is likely reconnecting, and m waits (unplaced) up to a heartbeat timeout for it. */
void rdzvd_member_closed(struct rdzvd_member *m);

/* Host shutdown: drop every job in jobs (stores closed with their journals and records kept:
 * the agents come back to the next rdzvd). Peers are untied, not closed. */
void rdzvd_jobs_drop_all(struct rdzv_list *jobs);
/* End job run_id, which waits for its nodes in h's job table (not in memory), as type (exit code,
 * why): the ENDED decision, its outcome kept for its agents that come back (P6). 0; -ENOENT (not
 * waiting: in memory, or no record) or the decision's error, with err set. */
int rdzvd_jobs_end_waiting(const struct rdzvd_job_host *h, const char *run_id, const char *type,
                           int64_t exit_code, const char *why, char *err, size_t errlen);
