/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-sm.h: the job state machine (proto/RENDEZVOUS.md): members join a job keyed by
 * run_id, a round closes at max ready members or last call after min, node ranks are assigned,
 * node rank 0 supplies NCCL ids, every member gets its ROUND; a failed worker or a lost node
 * moves the job to a new generation within its restart budget; members beyond max wait as
 * spares; a restarted rdzvd rebuilds running jobs (--state-dir record, agents' resume).
 *
 * It has no socket code. It reaches members and its host only through struct rdzvd_job_ops,
 * so the wire side (rdzvd-job-wire.c, on rdzvd_conn) and the C unit tests (fake members) plug in
 * alike. Timers run on the host's uv loop.
 *
 * Threads: everything on the loop thread, from the host's read/close callbacks or from the
 * state machine's own timers. The ops are called synchronously from inside these functions;
 * an op must not call back into the state machine.
 *
 * Ownership: the state machine owns jobs and members (allocated on JOIN, freed after the last
 * member is gone, the job's timer closed through the loop). A peer pointer is the host's; the
 * state machine keeps it until rdzvd_member_gone(), or hands it back through ops->close.
 * Errors: functions returning int return 0 or a negative errno; the void ones cannot fail (they
 * log what goes wrong, and a job that cannot go on ends with an outcome sent to its members). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/rdzv-list.h"
#include "proto/rdzv-msg.h"

struct rdzvd_journal;

struct rdzvd_ended_jobs;
struct rdzvd_job_end;
struct rdzvd_job;
struct rdzvd_member;
struct rdzvd_store;

struct rdzvd_job_ops {
    /* To one member's peer. Frames are queued; a failure is logged by the op. */
    /* warning: a line for the agent to say (NULL: none), JOINED's (1.17). */
    void (*joined)(void *peer, const char *run_id, int64_t waiting, bool spare, bool resumed,
                   uint64_t generation, bool inplace, const char *secret, const char *warning);
    /* rd->master_addr empty: the op fills in the address the peer reached us on. */
    void (*round)(void *peer, struct rdzv_round *rd);
    void (*event)(void *peer, const struct rdzv_event *e);
    /* NCCL_REQUEST: count ids (0..), and with store the generation's store, its TCPStore
     * clients allowed from store_allow (NULL: anywhere). 0, or a negative
     * errno when it cannot be queued (the job then fails). */
    int (*nccl_request)(void *peer, uint64_t generation, int64_t count, bool store,
                        const char *store_allow);
    /* Close peer (logging reason); the state machine has already let go of it. */
    void (*close)(void *peer, const char *reason);
    /* Send peer the event e (EVENT put_aside), then close it once that is written: the state
     * machine has already let go of it. */
    void (*dismiss)(void *peer, const struct rdzv_event *e);
    /* Tie peer to member m (NULL: untie); rdzvd_member_gone() later gets it back from the host. */
    void (*bind)(void *peer, struct rdzvd_member *m);
    /* Bytes waiting unread on peer (0: none or unknown): a late deadline then gets one more
     * loop turn, whose poll reads them. */
    size_t (*unread)(void *peer);

    /* To the host (ud of struct rdzvd_job_host). Send what the calls above queued. */
    void (*flush)(void *ud);
    /* Open a generation's store: state_name as rdzvd_listener_open() takes it, port 0 for any.
     * 0 with *store and *port_out set, or a negative errno. */
    int (*store_open)(void *ud, const char *desc, const char *state_name, uint16_t port,
                      void **store, uint16_t *port_out);
    /* Close a store; drop: delete its journal too. */
    void (*store_close)(void *ud, void *store, bool drop);
};

/* What a job needs of its host; copied into each job. */
struct rdzvd_job_host {
    uv_loop_t *loop;
    const struct rdzvd_job_ops *ops;
    void *ud;               /* passed to the host ops */
    int state_dirfd;        /* --state-dir opened, or -1: no journal, no record files */
    /* The job table (rdzvd_server_job_table: journaled in --state-dir, or a replica's,
     * replicated), or NULL: no record is kept, and no job is rebuilt after a restart. */
    struct rdzvd_store *record_table;
    /* record_table's journal when a single rdzvd keeps it in --state-dir (written through: a
     * decision is on disk when its change returns), or NULL (none, or a replica's: Raft). A
     * decision the journal failed to write counts as refused. */
    struct rdzvd_journal *record_journal;
    /* Node rank 0's agent hosts each generation's store when it can (JOIN host_store; asked
     * with NCCL_REQUEST store), so that the store does not die with this rdzvd: a replica. */
    bool agent_stores;
    /* --allow-store-from as given (NULL: anywhere): node rank 0's agent applies it to the store
     * it hosts. */
    const char *store_allow;
    /* A job that ended is handed to keep_ended(ended, j) when its last member is gone (status
     * keeps it a while: rdzvd-job-status.h); NULL: not kept. */
    struct rdzvd_ended_jobs *ended;
    /* This rdzvd's incarnation (JOINED incarnation, 1.18), drawn at its start; 0: none. A
     * resume that names it, of a job rdzvd holds neither in memory nor in a record, is of a job
     * that ended here: it is told so, never rebuilt from its word (job_restore). */
    uint64_t incarnation;
    void (*keep_ended)(struct rdzvd_ended_jobs *ended, const struct rdzvd_job *j);
    /* How a job ended, as the job table kept it (rdzvd-job-ends.h), handed to keep_end(ended, e)
     * by rdzvd_jobs_rebuild; NULL: not read. */
    void (*keep_end)(struct rdzvd_ended_jobs *ended, const struct rdzvd_job_end *e);
    /* A job whose last member is gone before it ended keeps its record (it lives until the job
     * ends: its agents may come back): keep_waiting(ended, run_id, since_ms), waiting for its
     * nodes since since_ms (rdzvd_job_now_ms). So are the records rdzvd_jobs_rebuild does not
     * rebuild. A job made in memory hands its note back: take_waiting(ended, run_id) returns
     * its since_ms (0: none). NULL: not noted. */
    void (*keep_waiting)(struct rdzvd_ended_jobs *ended, const char *run_id, uint64_t since_ms,
                         uint16_t port);
    uint64_t (*take_waiting)(struct rdzvd_ended_jobs *ended, const char *run_id);
    /* --max-jobs: a JOIN that would make a job past this many held (rdzvd_jobs_held) is
     * refused; 0: no bound. */
    uint64_t max_jobs;
    struct rdzv_list *jobs; /* the host's list of jobs (initialised by the host) */
    bool quiet;             /* job events (not warnings) logged at debug instead of info */
    /* Where the hashes of nodes' secrets are kept (ADMITTED, rdzvd-job-record.h): record_table,
     * so that a restarted rdzvd and the next leader know them; without one, a table of the
     * host's in memory, where a job's go when the job leaves memory. NULL: none (each member's
     * secret then goes with the member). */
    struct rdzvd_store *secret_table;
    /* A member was declared lost before it was done (its connection closed, or it fell silent),
     * or nodes of a generation rebuilt from its record did not come back: lost(lost_ud).
     * NULL: not told. */
    void (*lost)(void *ud);
    void *lost_ud;
};

/* ---- the step: the one call the adapters make (etcd/raft's Step, Ready, Advance) ---- */

/* What comes into the machine: an agent's message (decoded by the wire side), its connection
 * closing, the operator's request, or the host's own (rebuild, shutdown). The machine's own
 * timers still come back through the job's handlers (rdzvd-job-effects.c), each a step. */
enum rdzvd_job_input_kind {
    RDZVD_IN_SEEN,        /* member: any message from its agent (it is alive) */
    RDZVD_IN_JOIN,        /* peer, join; member: the connection's, if it joined already */
    RDZVD_IN_HEARTBEAT,   /* member, heartbeat: its answer in the Ready */
    RDZVD_IN_NCCL_ID,     /* member, nccl_id */
    RDZVD_IN_WORKER_EXIT, /* member, worker_exit */
    RDZVD_IN_LEAVE,       /* member, leave */
    RDZVD_IN_READY,       /* member, ready */
    RDZVD_IN_CANCEL,      /* member, cancel */
    RDZVD_IN_UNHEALTHY,   /* member, unhealthy */
    RDZVD_IN_GONE,        /* member: its connection closed */
    RDZVD_IN_RELEASE,     /* the operator's RELEASE */
    RDZVD_IN_CANCEL_JOB,  /* the operator's CANCEL_JOB */
    RDZVD_IN_END_WAITING, /* end, of a job waiting for its nodes in its record */
    RDZVD_IN_REBUILD_BEGIN, /* the job table's jobs to rebuild: their ids in the Ready */
    RDZVD_IN_REBUILD,     /* rebuild, the ids of a batch */
    RDZVD_IN_DROP_ALL,    /* the host shuts down, or its replica was deposed */
};

struct rdzvd_job_input {
    enum rdzvd_job_input_kind kind;
    void *peer;                  /* JOIN: the connection (the host's) */
    struct rdzvd_member *member; /* a member's input */
    union {
        const struct rdzv_join *join;
        const struct rdzv_heartbeat *heartbeat;
        /* The generation it names, and the message (NULL: it did not decode, which refuses it
         * only when that generation's ids are wanted). */
        struct {
            uint64_t generation;
            const struct rdzv_nccl_id *msg;
        } nccl_id;
        const struct rdzv_worker_exit *worker_exit;
        const struct rdzv_leave *leave;
        const struct rdzv_ready *ready;
        const struct rdzv_cancel *cancel;
        const struct rdzv_unhealthy *unhealthy;
        const struct rdzv_release *release;
        const struct rdzv_cancel_job *cancel_job;
        struct {
            const char *run_id, *type, *why;
            int64_t exit_code;
        } end;
        struct {
            char (*ids)[RDZV_ID_MAX + 1];
            size_t n;
        } rebuild;
    } u;
};

/* What the step hands back. What it sends to members' connections and the host waits in the
 * outbox below until rdzvd_job_advance; the answers to the input are here. */
struct rdzvd_job_ready {
    int rc;       /* 0, or a negative errno: the input is refused (err says why) */
    char err[RDZV_ERROR_MAX + 1];
    struct rdzvd_member *member; /* JOIN: the new member, bound to the peer */
    /* HEARTBEAT: its answer: the job's generation, what the job waits for (1.15), a warning
     * for the agent ("": none, 1.17). */
    uint64_t generation;
    struct rdzv_wait wait;
    char warning[RDZV_WARNING_MAX + 1];
    int64_t count;                  /* RELEASE: the nodes released or changed */
    char (*ids)[RDZV_ID_MAX + 1];   /* REBUILD_BEGIN: the run ids to rebuild (the caller's to */
    size_t n_ids;                   /* free), n_ids of them */
    int step_;                      /* the step held open until rdzvd_job_advance */
};

/* Take in one input at now_ms (the monotonic clock): decide, record, and queue what goes out.
 * Returns ready->rc. The caller writes the answers it owes the input's connection (a HEARTBEAT's)
 * and then calls rdzvd_job_advance(ready), which carries out what the step queued, in order. */
int rdzvd_job_step(const struct rdzvd_job_host *jobs, const struct rdzvd_job_input *in,
                   uint64_t now_ms, struct rdzvd_job_ready *ready);
void rdzvd_job_advance(struct rdzvd_job_ready *ready);

/* The outbox (etcd/raft's Ready). What the machine sends is queued in the order it decides it
 * and carried out (the ops above called) when the outermost step ends. Each function below
 * that changes a job, and each timer, is a step (RDZVD_JOB_STEP at its top; a host may open one
 * around several). So no op runs while a decision is made, and a decision is recorded before
 * anything it sends goes out; only bind runs at once (a pointer: a connection that closes
 * meanwhile must find its member as decided). A step that an op's own work begins (a
 * connection closing tells its member's job) adds to the pass under way. Loop thread only. */
int rdzvd_job_step_begin(void);
void rdzvd_job_step_end(int *unused);
#define RDZVD_JOB_STEP                                                                        \
    __attribute__((cleanup(rdzvd_job_step_end))) int rdzvd_job_step_ = rdzvd_job_step_begin()
/* Whether a step is open and its effects not yet carried out (tests: no op runs then). */
bool rdzvd_job_deciding(void);

/* run_id's agents all left, since_ms ago by the monotonic clock now_ms (wall_ms: the wall clock
 * now, unix ms): when its record keeps an earlier leaving (RDZVD_DECIDE_WAITING, not cleared by
 * an agent back since), that leaving on the monotonic clock, so that --abandon-after counts from
 * it across restarts and leaders; else since_ms, recorded. */
uint64_t rdzvd_jobs_waiting_since(const struct rdzvd_job_host *h, const char *run_id,
                                  uint64_t since_ms, uint64_t now_ms, int64_t wall_ms);

/* A JOIN (plain, or a resume after a reconnect) from peer. 0 with *ret the new member (bound
 * to peer), or the agent's member taken over (a resume; a plain JOIN of a member without a
 * node rank whose connection closed or that rdzvd stalled on); or a negative errno with err set
 * to the refusal: the caller sends it as ERROR and closes peer, except -EACCES (a node the job
 * put aside), which it sends as EVENT put_aside (ops->dismiss). */
/* Rebuild every job of h's job table whose record says a generation runs and that is not in
 * memory, as rdzvd finds them when it starts or a replica becomes the leader: the agents of the
 * generation have a window to come back (T_REBUILD) before those missing count as lost; when none
 * comes, the job goes back to its record (state "waiting"). Failures are logged (that job is
 * rebuilt by its agents' first JOIN then). */
void rdzvd_jobs_rebuild(const struct rdzvd_job_host *h);
/* The same in steps, so that the host serves its connections in between: _begin keeps the ended
 * jobs and lists the run ids to rebuild (*ids, free it; 0, or -ENOMEM logged), _one rebuilds one
 * of them unless it is in memory already (an agent's JOIN rebuilt it meanwhile). */
int rdzvd_jobs_rebuild_begin(const struct rdzvd_job_host *h, char (**ids)[RDZV_ID_MAX + 1],
                             size_t *n);
void rdzvd_jobs_rebuild_one(const struct rdzvd_job_host *h, const char *run_id);
/* Whether a job in jobs, rebuilt at start, has its store still to reopen on port (its workers
 * reconnect there: no other job's store may take it). A linear scan. */
bool rdzvd_jobs_port_deferred(struct rdzv_list *jobs, uint16_t port);
int rdzvd_job_join(const struct rdzvd_job_host *h, void *peer, const struct rdzv_join *jn,
                   char *err, size_t errlen, struct rdzvd_member **ret);

/* Any message from m's agent: it is alive. */
void rdzvd_member_seen(struct rdzvd_member *m);
const char *rdzvd_member_run_id(const struct rdzvd_member *m);

/* HEARTBEAT: re-arms m's deadline; returns the job's generation for the answer. */
uint64_t rdzvd_member_heartbeat(struct rdzvd_member *m);
/* What m's job waits for now, for the HEARTBEAT's answer (1.15): forming (nodes joined of its
 * --nnodes, the join timeout's time left), a rebuilt generation's nodes coming back (the
 * window's time left), a restart's backoff; RDZVD_WAIT_NONE (w zeroed) when it runs. */
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
 * Ignored once the job has ended, or for a member already signalled. */
void rdzvd_member_cancel(struct rdzvd_member *m, int64_t sig, const char *reason);
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
 * scores nobody (rdzvd-job-straggler.c). */
void rdzvd_member_straggler_check(struct rdzvd_member *m);
/* LEAVE for generation gen; succeeded: every worker of the node exited 0. */
void rdzvd_member_leave(struct rdzvd_member *m, uint64_t gen, bool succeeded);
/* READY: the node's workers of generation gen have stopped. */
void rdzvd_member_ready(struct rdzvd_member *m, uint64_t gen);
/* m's peer is gone (connection closed): m is lost. The peer is not touched again. Except
 * within a heartbeat timeout of a stall of rdzvd (m's input read past its deadline): then its
 * agent is likely reconnecting, and m waits (unplaced) up to a heartbeat timeout for it. */
void rdzvd_member_gone(struct rdzvd_member *m);

/* Host shutdown: drop every job in jobs (stores closed with their journals and records kept:
 * the agents come back to the next rdzvd). Peers are untied, not closed. */
void rdzvd_jobs_drop_all(struct rdzv_list *jobs);
/* The jobs h holds: in memory (an ended one until its last agent left), and waiting for their
 * nodes in their records (ended's notes). */
uint64_t rdzvd_jobs_held(const struct rdzvd_job_host *h);
/* End job run_id, which waits for its nodes in h's job table (not in memory), as type (exit code,
 * why): the ENDED decision, its outcome kept for its agents that come back (P6). 0; -ENOENT (not
 * waiting: in memory, or no record) or the decision's error, with err set. */
int rdzvd_jobs_end_waiting(const struct rdzvd_job_host *h, const char *run_id, const char *type,
                           int64_t exit_code, const char *why, char *err, size_t errlen);
