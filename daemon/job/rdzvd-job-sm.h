/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-sm.h: the job state machine (proto/RENDEZVOUS.md): members join a job keyed by
 * run_id, a round closes at max ready members or last call after min, node ranks are assigned,
 * node rank 0 supplies NCCL ids, every member gets its ROUND; a failed worker or a lost node
 * moves the job to a new generation within its restart budget; members beyond max wait as
 * spares; a restarted rdzvd rebuilds running jobs (--state-dir record, agents' resume).
 *
 * The host feeds it one input at a time through rdzvd_job_step (an agent's message, its
 * connection closing, the operator's request, the host's rebuild or shutdown) and carries out
 * what the step decided with rdzvd_job_advance. It has no socket code: it reaches members and
 * its host only through struct rdzvd_job_ops, so the wire side (rdzvd-job-wire.c, on
 * rdzvd_conn) and the C unit tests (fake members) plug in alike. Its own timers are due times
 * in the host's set (rdzvd-job-world.h): the Ready says when the first is due, and the host
 * then steps the input TICK. Its entry points behind the step are private
 * (rdzvd-job-sm-int.h).
 *
 * Threads: everything on the loop thread, from the host's read/close callbacks or from the
 * state machine's own timers. The ops are called from rdzvd_job_advance (the step's records,
 * then its outbox), never while the machine decides (but store_open for a job a JOIN rebuilds:
 * the JOIN's answer waits for it). One step at a time: no step begins inside another, nor while
 * a Ready is carried out. What comes back meanwhile (a store opened, a connection closing as an
 * op writes to it) is queued as an input (rdzvd_job_input_later), and stepped once that Ready
 * is carried out whole, first to last.
 *
 * Ownership: the state machine owns jobs and members (allocated on JOIN, freed after the last
 * member is gone, once the host reaps their closed timers). A peer pointer is the host's; the
 * state machine keeps it until its RDZVD_IN_CLOSED, or hands it back through ops->close.
 * Errors: rdzvd_job_step returns 0 or a negative errno (the input refused, ready->err says
 * why); the machine logs what goes wrong, and a job that cannot go on ends with an outcome sent
 * to its members. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-list.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/data/rdzvd-store.h"
#include "proto/rdzv-msg.h"
#include "proto/rdzv-status.h"
#include "daemon/job/rdzvd-job-world.h"

struct rdzvd_journal;

struct rdzvd_ended_jobs;
struct rdzvd_job_end;
struct rdzvd_job_timers;
struct rdzvd_job;
struct rdzvd_job_record_hist;
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
    void (*put_aside)(void *peer, const struct rdzv_event *e);
    /* PREFLIGHT p to peer (1.23); NULL: not sent (its link then counts as unreachable). */
    void (*preflight)(void *peer, const struct rdzv_preflight *p);
    /* Tie peer to member m (NULL: untie); rdzvd_member_closed() later gets it back from the host.
     */
    void (*bind)(void *peer, struct rdzvd_member *m);
    /* Bytes waiting unread on peer (0: none or unknown): a late deadline then gets one more
     * loop turn, whose poll reads them. */
    size_t (*unread)(void *peer);

    /* To the host (ud of struct rdzvd_job_host). Send what the calls above queued. */
    void (*flush)(void *ud);
    /* Open a generation's store: state_name as rdzvd_listener_open() takes it, port 0 for any.
     * 0 with *store and *port_out set, or a negative errno. Called by rdzvd_job_advance (the
     * outbox's STORE_OPEN): its answer comes back as the input STORE_OPENED. */
    int (*store_open)(void *ud, const char *desc, const char *state_name, uint16_t port,
                      void **store, uint16_t *port_out);
    /* Close a store; drop: delete its journal too. */
    void (*store_close)(void *ud, void *store, bool drop);
    /* Write one record of the job table (what a step decided, rdzvd_job_host_keep_records) as
     * the table's change hook takes it: the host passes it on (rdzvd_store_pass_change) to the
     * journal or the replica's batch. 0, or a negative errno: not written, so nothing decided
     * after it goes out. NULL: passed on, and counted as written. */
    int (*record)(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                  const uint8_t *val, size_t vlen);
};

/* What a step records and sends to members' connections and the host, queued in the order the
 * machine decided it until the step is done (rdzvd-job-effects.c holds its entries). */
struct rdzvd_job_effect;
struct rdzvd_job_shared;
struct rdzvd_job_kept;
struct rdzvd_job_outbox {
    struct rdzvd_job_effect *head, *last; /* NULL, NULL: empty */
    /* What the step records (the job table's changes), in order: written before anything of
     * the outbox goes out. Each notes how many effects were queued before it (queued). */
    struct rdzvd_job_kept *kept, *kept_last;
    uint64_t queued;
    /* The newest event and round, to share with the next equal one. */
    struct rdzvd_job_shared *last_event, *last_round;
    const struct rdzvd_job_ops *flush_ops; /* a flush not queued (out of memory): at the end */
    void *flush_ud;
};

/* What the machine counted across a host's jobs since the host began (status, /metrics, the
 * model test): each move taken, by kind and by the state it left (enum rdzvd_job_move_kind, enum
 * job_state: rdzvd-job-impl.h checks the sizes); the nodes put aside, by reason; every
 * recovery's phases, by cause. */
#define RDZVD_JOB_MOVE_KINDS 7
#define RDZVD_JOB_STATES 5
enum {
    RDZVD_ASIDE_FAILURES,
    RDZVD_ASIDE_CHECK,
    RDZVD_ASIDE_STRAGGLER,
    RDZVD_ASIDE_NETWORK, /* the network pre-flight's verdict */
    RDZVD_ASIDE_REASONS
};
struct rdzvd_job_counts {
    uint64_t moves_taken[RDZVD_JOB_MOVE_KINDS][RDZVD_JOB_STATES];
    uint64_t put_aside[RDZVD_ASIDE_REASONS];
    struct rdzv_hist recovery[_RDZV_MARK_MAX][_RDZV_RECOVERY_PHASES];
};

struct rdzvd_job_input;
/* One input stepped by the machine's own code (rdzvd_job_step, then rdzvd_job_advance), at now:
 * how the queue of inputs that came back (struct rdzvd_job_steps) is run. */
typedef void (*rdzvd_job_input_fn)(const struct rdzvd_job_host *h,
                                   const struct rdzvd_job_input *in, struct rdzvd_job_now now);
struct rdzvd_job_later;

/* The steps under way on a host, shared by its jobs (struct rdzvd_job_host's steps; zeroed
 * before the first), and what the machine keeps across them: nothing of it is in a global, so
 * that two machines in one process share nothing. One step at a time: a step never begins while
 * another is open or while a Ready is carried out. What comes back meanwhile (a store opened,
 * an NCCL request not queued, a record refused, a connection gone) waits in later, in order,
 * each stepped on its own once the Ready is carried out whole. Loop thread only. */
struct rdzvd_job_steps {
    struct rdzvd_job_outbox *out; /* the open step's, or the one carried out; NULL: none */
    bool draining;                /* its Ready is carried out: no step may begin */
    /* The time of the last step (rdzvd_job_step's now), which the machine reads, and what the
     * step queued is carried out at. A read-only view between steps reads it as its host set
     * it last. */
    struct rdzvd_job_now now;
    struct rdzvd_job_counts counts;
    /* A worker's exit this soon after its generation formed is a start-up failure, and the
     * grace the others get is at most this long (rdzvd_job_startup_fail_ms); 0:
     * RDZVD_JOB_STARTUP_FAIL_MS, which a test may make smaller. */
    int64_t startup_fail_ms;
    /* How a record of the job table not written (rdzvd_job_records_keep's) is stepped: the
     * input UNRECORDED, queued in later with the rest. */
    rdzvd_job_input_fn input;
    /* The input being stepped (rdzvd_job_step), NULL outside: what its host read for the
     * machine, as now (rdzvd_job_input_waiting). */
    const struct rdzvd_job_input *in;
    /* The inputs that came back, first to last, and whether they are being stepped now
     * (running: each one's own Ready adds to the queue, and the loop running it goes on). */
    struct rdzvd_job_later *later, *later_last;
    bool running;
};

/* A worker's exit this soon after its generation formed is a start-up failure, and the grace the
 * others get is at most this long: RDZVD_JOB_STARTUP_FAIL_MS, or what the host's steps s say
 * (startup_fail_ms: a test makes it smaller). */
static inline int64_t rdzvd_job_startup_fail_ms(const struct rdzvd_job_steps *s)
{
    return s->startup_fail_ms ? s->startup_fail_ms : RDZVD_JOB_STARTUP_FAIL_MS;
}

/* What a job needs of its host; copied into each job. */
struct rdzvd_job_host {
    const struct rdzvd_job_ops *ops;
    void *ud;               /* passed to the host ops */
    struct rdzvd_job_steps *steps; /* the host's own, the same for each job */
    int state_dirfd;        /* --state-dir opened, or -1: no journal, no record files */
    /* The job table (rdzvd_server_job_table: journaled in --state-dir, or a replica's,
     * replicated), or NULL: no record is kept, and no job is rebuilt after a restart. */
    struct rdzvd_store *record_table;
    /* record_table's records wait in the steps until their Ready is carried out
     * (rdzvd_job_host_keep_records); false: its hook writes each change at once. */
    bool keep_records;
    /* record_table's journal when a single rdzvd keeps it in --state-dir, or NULL (none, or a
     * replica's: Raft). The machine does not read it: the host's op record writes through it (a
     * record is on disk when the op returns), and counts one a failed journal took as not
     * written. */
    struct rdzvd_journal *record_journal;
    /* Node rank 0's agent hosts each generation's store when it can (JOIN host_store; asked
     * with NCCL_REQUEST store), so that the store does not die with this rdzvd: a replica. */
    bool agent_stores;
    /* --allow-store-from as given (NULL: anywhere): node rank 0's agent applies it to the store
     * it hosts. */
    const char *store_allow;
    /* What the host's tables must learn. Each function below but take_waiting is called as an
     * effect of a step's Ready, in order with the rest (RDZVD_SEND_KEEP_ENDED, ...), never while
     * the machine decides. A job that ended is handed to keep_ended(ended, j) when its last
     * member is gone (status keeps it a while: rdzvd-job-status.h); NULL: not kept. */
    struct rdzvd_ended_jobs *ended;
    /* This rdzvd's incarnation (JOINED incarnation, 1.18), drawn at its start; 0: none. A
     * resume that names it, of a job rdzvd holds neither in memory nor in a record, is of a job
     * that ended here: it is told so, never rebuilt from its word (job_restore). */
    uint64_t incarnation;
    void (*keep_ended)(struct rdzvd_ended_jobs *ended, const struct rdzvd_job *j);
    /* How a job ended, as the job table kept it (rdzvd-job-ends.h), handed to
     * keep_end(ended, e, now) by the input REBUILD_BEGIN at the step's time; NULL: not read. */
    void (*keep_end)(struct rdzvd_ended_jobs *ended, const struct rdzvd_job_end *e,
                     struct rdzvd_job_now now);
    /* A job whose last member is gone before it ended keeps its record (it lives until the job
     * ends: its agents may come back): keep_waiting(ended, run_id, since_ms), waiting for its
     * nodes since since_ms (rdzvd_job_now_ms). So are the records the input REBUILD_BEGIN does
     * not rebuild. A job made in memory takes its note over from its input (the input's waiting),
     * and take_waiting(ended, run_id) forgets it. NULL: not noted. */
    void (*keep_waiting)(struct rdzvd_ended_jobs *ended, const char *run_id, uint64_t since_ms,
                         uint16_t port);
    uint64_t (*take_waiting)(struct rdzvd_ended_jobs *ended, const char *run_id);
    /* --max-jobs: a JOIN that would make a job past this many held (rdzvd_jobs_held) is
     * refused; 0: no bound. */
    uint64_t max_jobs;
    struct rdzv_list *jobs; /* the host's list of jobs (initialised by the host) */
    /* The host's set of the machine's timers (initialised by the host: rdzvd_job_timers_init). */
    struct rdzvd_job_timers *timers;
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
 * closing, the operator's request, the host's own (rebuild, shutdown, its clock's TICK and
 * REAP), and the machine's undeliverable requests, which rdzvd-job-effects.c hands back. */
enum rdzvd_job_input_kind {
    RDZVD_IN_SEEN,        /* member: any message from its agent (it is alive) */
    RDZVD_IN_JOIN,        /* peer, join; member: the connection's, if it joined already */
    RDZVD_IN_HEARTBEAT,   /* member, heartbeat: its answer in the Ready */
    RDZVD_IN_NCCL_ID,     /* member, nccl_id */
    RDZVD_IN_WORKER_EXIT, /* member, worker_exit */
    RDZVD_IN_LEAVE,       /* member, leave */
    RDZVD_IN_AGENT_READY,       /* member, ready */
    RDZVD_IN_CANCEL,      /* member, cancel */
    RDZVD_IN_UNHEALTHY,   /* member, unhealthy */
    RDZVD_IN_CLOSED,        /* member: its connection closed */
    RDZVD_IN_RELEASE,     /* the operator's RELEASE */
    RDZVD_IN_CANCEL_JOB,  /* the operator's CANCEL_JOB */
    RDZVD_IN_END_WAITING, /* end, of a job waiting for its nodes in its record */
    RDZVD_IN_REBUILD_BEGIN, /* the job table's jobs to rebuild: their ids in the Ready */
    RDZVD_IN_REBUILD,     /* rebuild, the ids of a batch */
    RDZVD_IN_DROP_ALL,    /* the host shuts down, or its replica was deposed */
    RDZVD_IN_TIMER,       /* job: its timer ran out */
    RDZVD_IN_DEADLINE,    /* member, deadline: its heartbeat deadline ran out */
    RDZVD_IN_NCCL_UNSENT, /* member, nccl_unsent: its NCCL_REQUEST could not be queued */
    RDZVD_IN_STORE_OPENED, /* store_opened: the answer to the outbox's STORE_OPEN */
    /* unrecorded: a record of the step that decided it was not written (ops->record failed),
     * stepped once that step's Ready was carried out: nothing sent after it went out, and its
     * job fails, naming why. */
    RDZVD_IN_UNRECORDED,
    /* The host's clock reached the Ready's next deadline: the first of its timers due by
     * u.until, if any, runs (a job's as TIMER, a member's as DEADLINE, with the bytes waiting
     * unread on its connection); the Ready says whether one did. A timer armed meanwhile is due
     * after until, so it waits for the next pass. */
    RDZVD_IN_TICK,
    RDZVD_IN_REAP, /* the loop turn that closed timers is done (the Ready said reap) */
    RDZVD_IN_PREFLIGHT_REPORT, /* member, preflight_report: a link's figures (1.23) */
    RDZVD_IN_KINDS, /* how many kinds: none is this */
};

struct rdzvd_job_input {
    enum rdzvd_job_input_kind kind;
    void *peer;                  /* JOIN: the connection (the host's) */
    struct rdzvd_member *member; /* a member's input */
    /* JOIN, REBUILD: what the host's table of jobs waiting for their nodes notes (since_ms, 0:
     * none), read by the host before the step: for the job the JOIN names, or for each of the
     * rebuild's ids in order. NULL: no note. A job the step makes takes its note over, and its
     * Ready tells the host to forget it (RDZVD_SEND_TAKE_WAITING). */
    const uint64_t *waiting;
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
        const struct rdzv_preflight_report *preflight_report;
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
        struct rdzvd_job *job; /* TIMER */
        uint64_t until;        /* TICK */
        size_t deadline;      /* DEADLINE: the bytes waiting unread on its connection */
        struct {
            uint64_t generation;
            void *peer; /* the connection it was for (the member may be on another by now) */
        } nccl_unsent;
        /* The job that asked (its memory outlives the outbox's pass: freed by a later REAP),
         * its ask and generation; the store on port, or err (< 0; port: the one asked). */
        struct {
            struct rdzvd_job *job;
            uint64_t ask, generation;
            void *store;
            uint16_t port;
            int err;
        } store_opened;
        /* run_id and decision; or, run_id NULL, the record as ops->record refused it (what,
         * val, vlen), which the step reads. */
        struct {
            const char *run_id;
            const char *decision; /* its name ("formed", "stopped", ...) */
            int err;              /* the negative errno ops->record gave */
            enum rdzvd_change what;
            const uint8_t *val;
            size_t vlen;
        } unrecorded;
    } u;
};

/* What the step hands back: the answers to the input, and in its outbox what it records (the
 * job table's changes) and what it sends to members' connections and the host (the stores to
 * open or close, their journals to drop), until rdzvd_job_advance writes the records through
 * ops->record and then carries the rest out (read the sends with rdzvd_job_ready_next); then
 * it steps what came back meanwhile, each input with its own Ready. No step may be taken while
 * another of its host is open or its Ready is carried out (asserted). */
struct rdzvd_job_ready {
    int rc;       /* 0, or a negative errno: the input is refused (err says why) */
    char err[RDZV_ERROR_MAX + 1];
    /* JOIN refused as its job ended (-EBUSY, job-policy X1, X5): the EVENT its agent is told
     * instead of ERROR, of the job's outcome (type and exit code), err its summary; type "":
     * none. */
    struct rdzv_event told;
    struct rdzvd_member *member; /* JOIN: the new member, bound to the peer */
    /* HEARTBEAT: its answer: the job's generation, what the job waits for (1.15), a warning
     * for the agent ("": none, 1.17). */
    uint64_t generation;
    struct rdzv_wait wait;
    char warning[RDZV_WARNING_MAX + 1];
    int64_t count;                  /* RELEASE: the nodes released or changed */
    char (*ids)[RDZV_ID_MAX + 1];   /* REBUILD_BEGIN: the run ids to rebuild (the caller's to */
    size_t n_ids;                   /* free), n_ids of them */
    struct rdzvd_job_outbox out;    /* what the step records and sends, in the order decided */
    struct rdzvd_job_steps *steps_; /* the host's, its step held open until rdzvd_job_advance */
    /* When the first of the host's timers is due, on the step's clock (0: none armed), as the
     * step left them; rdzvd_job_advance brings it up to date with what it carried out. */
    uint64_t next_deadline_ms;
    struct rdzvd_job_timers *timers_; /* the host's, for rdzvd_job_advance */
    bool ticked; /* TICK: a timer was due and ran; tick again for the next */
    /* Timers were closed: the memory of what held them (a job, a member) is freed by a REAP
     * input once the host's loop turn is done (callbacks of the turn may still name them). */
    bool reap;
};

/* Take in one input at now (both clocks, as the host read them; now.ms never 0): decide (the
 * job table changed in memory), and queue what to record and what goes out; the step reads no
 * clock of its own, and the host's steps keep now (struct rdzvd_job_steps).
 * Returns ready->rc. The caller writes the answers it owes the input's connection (a HEARTBEAT's)
 * and then calls rdzvd_job_advance(ready): it hands the records to ops->record, in order, and
 * then carries out what the step queued. A record not written stops the messages decided after
 * it when its decision's kind says so (rdzvd_decision_holds), and comes back as the input
 * RDZVD_IN_UNRECORDED: a step of its own, once the Ready is carried out, never inside it. */
/* Read-only views of the host's timers, which the Ready also says. When the first of h's timers
 * is due (0: none armed); whether timers were closed whose memory (a job's, a member's) waits
 * to be freed. */
uint64_t rdzvd_job_next_deadline(const struct rdzvd_job_host *h);
bool rdzvd_job_timers_closing(const struct rdzvd_job_host *h);

int rdzvd_job_step(const struct rdzvd_job_host *jobs, const struct rdzvd_job_input *in,
                   struct rdzvd_job_now now, struct rdzvd_job_ready *ready);
void rdzvd_job_advance(struct rdzvd_job_ready *ready);

/* One thing a Ready's outbox holds, as the adapter and the tests read it: what goes to one
 * connection, or the host's flush. The pointers are the outbox's, valid until advance. */
enum rdzvd_job_send_kind {
    RDZVD_SEND_JOINED,  /* joined */
    RDZVD_SEND_ROUND,   /* round (its node_rank and rank_offset: the peer's own) */
    RDZVD_SEND_EVENT,   /* event */
    RDZVD_SEND_NCCL,    /* generation, count, store: an NCCL_REQUEST */
    RDZVD_SEND_CLOSE,   /* why (NULL: none given) */
    RDZVD_SEND_PUT_ASIDE, /* event, then the connection closed */
    RDZVD_SEND_FLUSH,   /* peer is the host's ud */
    /* peer is the host's ud: open the store of run_id's generation (desc, state_name NULL: no
     * journal, port 0: any, fresh), its answer the input STORE_OPENED; close handle (drop). */
    RDZVD_SEND_STORE_OPEN,
    RDZVD_SEND_STORE_CLOSE,
    /* Delete the journal state_name of run_id's store of generation from the host's
     * --state-dir: a store let go of before it reopened, or (fresh) the stale journal under the
     * name of a new generation's store, just before its STORE_OPEN; advance drops a stale
     * one before it writes the step's records. */
    RDZVD_SEND_JOURNAL_DROP,
    RDZVD_SEND_PREFLIGHT, /* preflight: measure a link (1.23) */
    /* What the host's tables must learn (struct rdzvd_job_host's keep_ended, keep_end,
     * keep_waiting, take_waiting and lost), carried out in order with the rest: a job that
     * ended and went (run_id); how a job ended, from its record (run_id); a job waiting for its
     * nodes since since_ms (run_id, port); run_id's note of waiting to forget; a member lost. */
    RDZVD_SEND_KEEP_ENDED,
    RDZVD_SEND_KEEP_END,
    RDZVD_SEND_KEEP_WAITING,
    RDZVD_SEND_TAKE_WAITING,
    RDZVD_SEND_LOST,
};

struct rdzvd_job_send {
    enum rdzvd_job_send_kind kind;
    void *peer; /* the host's connection */
    const struct rdzv_round *round;
    int64_t node_rank, rank_offset;
    const struct rdzv_event *event;
    const char *why;
    const char *run_id, *warning; /* JOINED (warning NULL: none) */
    uint64_t generation;          /* JOINED, NCCL */
    int64_t count;                /* JOINED: the members waiting; NCCL: the ids asked */
    bool spare, resumed, store;
    const char *desc, *state_name; /* STORE_OPEN (run_id, generation: its job's); JOURNAL_DROP */
    uint16_t port;                 /* STORE_OPEN */
    bool fresh, drop;              /* STORE_OPEN, JOURNAL_DROP; STORE_CLOSE */
    void *handle;                  /* STORE_CLOSE: the store */
    const struct rdzv_preflight *preflight; /* PREFLIGHT */
    uint64_t since_ms;                      /* KEEP_WAITING */
};

/* The next thing ready's outbox holds after *cursor (NULL: from the first) into *send, moving
 * *cursor on; false when there is none left. */
bool rdzvd_job_ready_next(const struct rdzvd_job_ready *ready, const void **cursor,
                          struct rdzvd_job_send *send);

/* What comes back into the machine while a step of h is open or its Ready is carried out (an
 * op's own work: a connection that closes as a write fails, a fake agent that answers its
 * ROUND): in, a member's input, is copied with the blen bytes of body that its message pointer
 * names (NULL: none), and queued. It is stepped at now, after the Ready is carried out and
 * after what came back before it. True: queued (or lost for want of memory, logged); false:
 * no step is under way, and the caller steps in itself. */
bool rdzvd_job_input_later(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                           struct rdzvd_job_now now, const void *body, size_t blen);

/* The records of h's job table (h->record_table, and its secret_table when the same) go to
 * the step that makes them: they wait in its Ready until rdzvd_job_advance hands them to
 * ops->record, before anything else. A record is made only inside a step. h must outlive the
 * table's use; rdzvd and the unit tests call this once h is set. */
void rdzvd_job_host_keep_records(struct rdzvd_job_host *h);

/* Read-only views of the machine's jobs, for the host and its status. */
/* Job run_id in jobs (a host's list), to read (the unit tests read its state through it); NULL:
 * not in memory. A linear scan. */
const struct rdzvd_job *rdzvd_job_view(struct rdzv_list *jobs, const char *run_id);
/* The failure history job j keeps of node node_id (rdzvd-job-record.h: its failures, whether
 * and why it is put aside), or NULL: none. */
const struct rdzvd_job_record_hist *rdzvd_job_hist_find(const struct rdzvd_job *j,
                                                        const char *node_id);
/* The jobs h holds: in memory (an ended one until its last agent left), and waiting for their
 * nodes in their records (ended's notes). */
uint64_t rdzvd_jobs_held(const struct rdzvd_job_host *h);
/* Whether a job in jobs, rebuilt at start, has its store still to reopen on port (its workers
 * reconnect there: no other job's store may take it). A linear scan. */
bool rdzvd_jobs_port_deferred(struct rdzv_list *jobs, uint16_t port);
/* run_id's agents all left, since_ms ago by the monotonic clock now_ms (wall_ms: the wall clock
 * now, unix ms): when its record keeps an earlier leaving (RDZVD_DECIDE_WAITING, not cleared by
 * an agent back since), that leaving on the monotonic clock, so that --abandon-after counts from
 * it across restarts and leaders; else since_ms, recorded. Inside a step only: its record is the
 * step's. */
uint64_t rdzvd_jobs_waiting_since(const struct rdzvd_job_host *h, const char *run_id,
                                  uint64_t since_ms, uint64_t now_ms, int64_t wall_ms);
