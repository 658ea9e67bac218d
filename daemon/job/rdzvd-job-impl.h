/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-impl.h: PRIVATE to the job state machine's files (the "pure:" line of
 * tests/layers.txt, rdzvd-job-status.c, rdzvd-job-effects.c, rdzvd-job-abandon.c): the job
 * and member structs and the helpers these files share. Nothing else includes it; the rest of
 * rdzvd goes through rdzvd-job-sm.h.
 *
 * Ownership: a job owns its members (the list and the index), its timer, the by_req/by_rank
 * arrays and its store handle; it lives in its host's job list until its last member goes.
 * Threads: the loop thread only, as rdzvd-job-sm.h says. Functions returning int return 0 or
 * a negative errno; the void ones cannot fail (they log what goes wrong). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "common/rdzv-list.h"
#include "proto/rdzv-msg.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/data/rdzvd-timeline.h"
#include "daemon/job/rdzvd-job-identity.h"
#include "daemon/job/rdzvd-job-journals.h"
#include "daemon/job/rdzvd-job-sm-int.h"
#include "daemon/job/rdzvd-job-sm.h"
#include "daemon/job/rdzvd-job-world.h"

enum job_state {
    JOB_FORMING,  /* taking JOINs / READYs for the next round */
    JOB_NCCL,     /* round closed, waiting for node rank 0's NCCL ids */
    JOB_RUNNING,  /* ROUND sent; workers run */
    JOB_STOPPING, /* restart decided: waiting for the members' READY */
    JOB_ENDED,    /* outcome sent; waiting for agents to go */
    _JOB_STATE_MAX,
};
_Static_assert(_JOB_STATE_MAX == RDZVD_JOB_STATES, "struct rdzvd_job_counts's states");

extern const char *const rdzvd_job_state_names[_JOB_STATE_MAX];

/* What moves a job (rdzvd-job-move.c): the only changes of its state, generation and restart
 * count. Each kind is legal from some states only (the table there); rdzvd_job_move refuses any
 * other, changing nothing. */
enum rdzvd_job_move_kind {
    JOB_MOVE_CLOSE,   /* FORMING -> NCCL: the round closed; generation + 1 */
    JOB_MOVE_FORM,    /* NCCL -> RUNNING: ids and store in place, ROUNDs go out */
    JOB_MOVE_UNDO,    /* NCCL -> FORMING: a member went before any worker started; generation - 1 */
    JOB_MOVE_STOP,    /* RUNNING -> STOPPING: a restart; restart count + counted */
    JOB_MOVE_STOPPED, /* STOPPING -> FORMING: every member of the stopped generation is ready */
    JOB_MOVE_RESTORE, /* FORMING at generation 0 -> RUNNING (running) or FORMING: a new job
                       * rebuilt from its record, at the record's generation and restart count;
                       * or FORMING at claim_gen, stopped, to a newer claim (W5a) */
    JOB_MOVE_END,     /* FORMING, NCCL, RUNNING -> ENDED (a stopping job forms next, or goes
                       * with its last member) */
    _JOB_MOVE_MAX,
};
_Static_assert(_JOB_MOVE_MAX == RDZVD_JOB_MOVE_KINDS, "struct rdzvd_job_counts's moves");

struct rdzvd_job_move {
    enum rdzvd_job_move_kind kind;
    bool counted;           /* STOP: the restart uses the budget */
    uint64_t generation;    /* RESTORE */
    int64_t restart_count;  /* RESTORE */
    bool running;           /* RESTORE: the record's generation runs */
    int64_t world_size, nnodes; /* RESTORE: its sizes (the timeline's band) */
    /* END: how it ended (kept in the job table with its end: rdzvd-job-ends.h), and when (unix
     * seconds); type NULL: not kept. */
    const char *end_type, *end_summary;
    int64_t end_exit_code;
    double end_s;
};

enum job_timer { T_LAST_CALL, T_JOIN, T_NCCL, T_REBUILD, T_BACKOFF, T_PREFLIGHT };
/* What a generation's store, asked of the outbox, goes on with once open: the ROUNDs; the
 * NCCL_REQUEST (ids only, nccl_want); a rebuilt generation's store back (on another port when
 * its own is taken). */
enum rdzvd_store_then { STORE_THEN_ROUNDS, STORE_THEN_NCCL, STORE_THEN_REOPEN };

struct rdzvd_member {
    struct rdzv_list node;        /* in job->members, join order */
    struct rdzvd_member *id_next;   /* chain in job->by_id */
    struct rdzvd_member *host_next; /* chain in job->by_host */
    struct rdzvd_job *job;
    void *peer; /* the host's, NULL once gone */
    struct rdzv_join join;
    char secret[RDZV_SECRET_HEX + 1]; /* given in JOINED: the proof its agent reconnects with */
    struct rdzvd_job_timer hb_timer; /* heartbeat deadline */
    void (*freed)(struct rdzvd_member *m); /* once hb_timer is closed */
    bool hb_rechecked;   /* the deadline passed with input unread: one more loop turn given */
    bool host_indexed;   /* the first of its host name: in job->by_host */
    struct rdzv_list same_host; /* a ring of the job's members under its host name */
    /* Indexed: a later member under its host name, said to its agent in the next HEARTBEAT
     * answer (rdzvd_member_twin_warning); NULL: none, or said. */
    struct rdzvd_member *twin;
    double lost_since_s; /* its heartbeat deadline passed: since when it was silent (unix s) */
    uint64_t stall_ms;   /* when its input was last found waiting past its deadline (rdzvd
                          * stalled), 0: never; a close soon after may be its agent reconnecting */
    bool away;           /* connection closed after a stall: kept for its agent, not placed */
    uint64_t closed_ms;  /* its connection closed while kept (away or not): when; 0: open */
    int64_t node_rank;   /* in the current generation; -1 when not in it */
    int64_t prev_rank;   /* in the generation before (kept where possible), -1: none */
    int64_t rank_offset;
    bool ready;            /* no workers running: may be put in the next round */
    uint64_t stopping_gen; /* READY for this generation makes it ready */
    bool left_ok;          /* LEAVE succeeded received for the current generation */
    /* Placed in the current generation from no place (a spare or a new node): with --recovery
     * inplace its workers start fresh while the survivors' go on (R17a). */
    bool newcomer;
    bool signalled;        /* its agent was stopped from outside (CANCEL): it is leaving */
    /* Put aside for start-up failures of the generation that stops: it goes once every node's
     * report is in (rdzvd_job_tell_aside_pending), unless they all failed alike (the job's). */
    bool aside_pending;
    /* Its agent proved (the recorded secret) that its workers ran a generation of the job: a
     * resume that found the generation over. It held a place, as a node rank would show. */
    bool held_place;
    uint64_t startup_gen; /* the generation whose start-up it reported failing; 0: none */
    /* The last generation it ran: its agent answered that generation's ROUND (the HEARTBEAT
     * naming it, sent as it takes the round) or resumed it; 0: none. A node lost before it
     * ran is charged to its host, never to the job's budget (rdzvd_member_lost_unran). */
    uint64_t ran_gen;
    /* Placed while the job's bound on restarts not counted was spent (P8), never having run in
     * it: MIN needed it. A restart it causes before rdzvd sees it run is charged. */
    bool placed_spent;
    /* It joined after a generation of the job formed (or was rebuilt) in this rdzvd, and no
     * generation of its own ran past the start-up window by rdzvd's clock yet (P7d): its
     * worker failure is a claim. After an rdzvd restart, the nodes that form the job's next
     * generation are its first. */
    bool joined_late;
    bool ran_now; /* ran_gen was just set: its next deadline keeps the start grace */
    bool scaled_up; /* its JOIN restarted the job to take it in (--scale-up now) */
    bool scale_up_wait; /* its JOIN asks that: done at its first HEARTBEAT, if it still may */
    bool placed;           /* scratch for close_round() */
    uint64_t joined_ms;
    uint64_t last_seen_ms; /* last message from the agent */
    /* Its agent's longest event loop stall (HEARTBEAT loop_stall_ms, 1.21), when it said one. */
    bool has_loop_stall;
    int64_t loop_stall_ms;
    /* Last progress per local rank (HEARTBEAT "progress"), of generation progress_gen only:
     * join.nproc entries, allocated at the first report, freed with m (rdzvd-job-progress.c). */
    struct rdzvd_rank_progress *progress;
    uint64_t progress_gen;
    /* Its straggler score in progress_gen (its compute time over the job's median; 0: not
     * scored), since when it has been at or above the factor (0: it is not), and whether it was
     * called a straggler (rdzvd-job-verdict.c). */
    double straggler_score;
    uint64_t slow_since_ms;
    bool straggler, straggler_kept; /* kept: not put aside, said once */
    /* The network pre-flight (rdzvd-job-preflight.c): its node was checked in this job, and
     * its fastest link then (MB/s; 0: none reachable). */
    bool pf_checked;
    double pf_best;
    uint64_t scored_gen;
    /* The recovery under way that began at rec_since (the timeline's point before the first
     * step): this node's earliest step after it (0: none yet), rdzvd-job-progress.c. */
    double rec_since, rec_first;
};

struct rdzvd_job {
    struct rdzv_list node; /* in host.jobs */
    struct rdzvd_job_host host;
    char run_id[RDZV_ID_MAX + 1];
    int64_t min, max, max_restarts, last_call_ms, hb_timeout_ms, join_timeout_ms;
    bool scale_up_now;
    bool inplace; /* --recovery inplace: restarts keep the healthy workers (agents') */
    enum job_state state;
    uint64_t generation;
    int64_t restart_count;
    struct rdzv_list members;
    int64_t nmembers;
    int64_t nin_round;               /* members with node_rank >= 0 */
    int64_t nin_done;                /* ranks not held, their member gone once done (rank_done) */
    int64_t nready;                  /* members with ready set */
    int64_t naway;                   /* members away (never ready): they hold no stop */
    struct rdzvd_member_index by_id;   /* node_id -> member: duplicate check */
    struct rdzvd_member_index by_host; /* host -> members: agents of one job on one host */
    /* Node rank -> member, rank_cap entries each (grown on demand up to max: a job costs what its
     * members use, not what its --nnodes MAX allows): */
    struct rdzvd_member **by_req;  /* the member that asked for each node rank */
    struct rdzvd_member **by_rank; /* the member holding each rank of the generation */
    /* Each rank of the running generation whose member left succeeded, then went (a CANCEL, a
     * connection lost): it is accounted for, as back and done (R17b), until held again or the
     * next round closes. nin_done of them. */
    bool *rank_done;
    int64_t rank_cap;
    struct rdzvd_job_timer timer; /* last call, NCCL id timeout, join timeout, rebuild window */
    const struct rdzvd_job_handlers *handlers;
    bool timer_armed;
    enum job_timer timer_kind;
    bool rebuilt;       /* recreated after a daemon restart */
    /* The generation rebuilt from agents' resumes alone (no record: W5) while its nodes are not
     * all back, 0: none. A resume of a newer one rebuilds the job again (W5a); a restart of it
     * ends the job (R26a). */
    uint64_t claim_gen;
    bool claimed; /* rebuilt from a resume's claim alone (W5): no record stands behind it (W5b) */
    /* The nodes of the generation rebuilt from its record (round.nnodes of them, by node rank;
     * owned), or NULL (the record has none, or the job was not rebuilt): only the node a record
     * names at a node rank resumes it (rdzvd-job-join.c). Freed when the next round forms. */
    struct rdzvd_job_record_node *rebuilt_nodes;
    /* The node ids of the generation that stopped before the job was restored from its record
     * (n_stopped_wait of them, by node rank, "" where none; owned), or NULL: the next round
     * waits for them until they are all back or the rebuild window ends, and for the READY of
     * each back (W2). Each comes back a newcomer, as any node that left (P8c). */
    char (*stopped_wait)[RDZV_ID_MAX + 1];
    int64_t n_stopped_wait;
    bool shutting_down; /* host shutdown: keep the store's journal and the record */
    /* Freed back to its record (rebuilt, and no agent came or the JOIN that rebuilt it was
     * refused): keep the store's journal and the record, listed as waiting. */
    bool unloaded;
    bool had_member;            /* a member was added since it was made */
    uint64_t waiting_since_ms;  /* made from a record that waited since then (0: not noted) */
    void *store;        /* this generation's TCPStore (host's), or NULL */
    uint16_t store_port;
    /* Rebuilt at rdzvd's start or election: the store of this generation (on store_port, its
     * journal replayed) opens when the first of its agents is back (rdzvd-job-join.c),
     * not before: a restart with many recorded jobs listens at once and holds a descriptor only
     * for the jobs whose agents come back. 0: none deferred. */
    uint64_t store_deferred_gen;
    /* Node rank 0's agent hosts this generation's store at store_addr:store_port (host
     * agent_stores); "": none asked for, or rdzvd's own (store). */
    char store_addr[RDZV_STORE_ADDR_MAX + 1];
    /* The store open the outbox carries out for it (its number, of store_asks; 0: none), and
     * what its answer goes on with: its store comes back as RDZVD_IN_STORE_OPENED. */
    uint64_t store_ask, store_asks;
    enum rdzvd_store_then store_then;
    struct rdzv_round round; /* template: generation, sizes, ids */
    /* In NCCL: what node rank 0 was asked (ids, and whether to open the store), asked again
     * when its agent comes back on a new connection meanwhile. */
    int64_t nccl_want;
    bool nccl_store;
    struct rdzv_event outcome;
    char last_cause[RDZV_SUMMARY_MAX + 1]; /* why the last restart happened */
    uint64_t created_ms;
    uint64_t formed_ms; /* when the running generation formed (rdzv_now_ms); 0: not here */
    double ended_s;     /* when it ended (unix seconds) */
    double cause_s;     /* when the failure that rdzvd_job_restart is about to act on happened,
                         * as its report dates it (unix seconds; 0: now); consumed by it */
    int64_t startup_grace_ms; /* that failure's at start-up: EVENT restart's startup_grace_ms
                               * (1.17; 0: none); consumed by rdzvd_job_restart too, which */
    int64_t stopping_grace_ms; /* keeps it here for the stop under way (0: none) */
    /* The error the worker whose exit stopped generation first_error_gen died of (WORKER_EXIT
     * error, 1.18; "": none said): the others' start-up failures fail alike only with its error
     * (rdzvd-job-verdict.c). */
    uint64_t first_error_gen;
    char first_error[RDZV_REASON_MAX + 1];
    struct {
        double time; /* unix seconds */
        char text[200];
    } events[RDZVD_JOB_EVENTS]; /* ring, for status */
    unsigned nevents; /* total recorded; the newest is events[(nevents - 1) % RDZVD_JOB_EVENTS] */
    /* Node ids as its texts name them (rdzvd_job_named): two, for a text that names two. */
    char named[2][RDZV_NODE_ID_TEXT_MAX + 1];
    unsigned named_next;
    /* The job's failure history (rdzvd-job-history.c), as every decision records it: n_hist
     * entries, at most RDZVD_JOB_HISTORY_MAX, each node id once. Owned. */
    struct rdzvd_job_record_hist *hist;
    unsigned n_hist;
    /* The restarts not charged to the budget within RDZVD_JOB_UNCOUNTED_WINDOW_MS, when (rdzvd's
     * wall clock, unix ms), oldest first: every decision records them, so that an rdzvd restart
     * keeps the bound (rdzvd-job-history.c). uncounted_said: the bound's reason was logged (once).
     */
    int64_t uncounted_ms[RDZVD_JOB_UNCOUNTED_RESTARTS];
    unsigned n_uncounted;
    bool uncounted_said;
    bool uncounted_last_scale; /* the newest of them was a scale-up (memory only: after an rdzvd
                           * restart, none was) */
    bool scaling_up; /* the restart under way is a scale-up: its round takes the newcomers */
    /* A node of the generation a scale-up restart, or one for a node lost, stops left succeeded
     * (its LEAVE crossed the restart): training is over, and the job ends once that generation
     * stopped (R17c), unless a worker of it failed as it stopped (stop_failed). */
    bool scale_done;
    bool stop_failed;
    bool restart_lost; /* the restart under way is for a node lost (R17c holds for it too) */
    int64_t bad_node_failures; /* the first JOIN's: 0, nobody is put aside */
    int64_t bad_node_window_ms; /* the first JOIN's: only failures this recent count; 0: all */
    /* Restart backoff: the first JOIN's cap (0: none); the restarts in a row so far (0 after a
     * generation that ran healthy, RDZVD_JOB_BACKOFF_RESET_MS); the next round closes no
     * sooner than backoff_until_ms (rdzv_now_ms; 0: no wait). */
    int64_t backoff_max_ms;
    unsigned backoff_step;
    uint64_t backoff_until_ms;
    /* An agent was cancelled from outside (CANCEL) while the job was stopping: the exit code
     * (128 + signal) and why, for when it has stopped; 0: none. */
    int64_t cancelled;
    char cancel_why[RDZV_SUMMARY_MAX + 1];
    /* Its history for the status page (daemon/data/rdzvd-timeline.h): bands from the moves,
     * marks from rdzvd_job_mark, rates from rank 0's progress. Memory only: a job rebuilt from
     * its record starts a new one, marked as a leader change. */
    struct rdzvd_timeline timeline;
    /* A node was just put aside: the recovery it leads to (if one follows at once) is a bad
     * node's, whatever marks its restart. Cleared by the next restart or generation formed. */
    bool aside_cause;
    bool straggler_cause; /* the same, put aside as a straggler */
    /* Stragglers (rdzvd-job-verdict.c), from the first JOIN: factor 0, nobody is scored. */
    double straggler_factor;
    int64_t straggler_window_ms;
    bool straggler_aside;
    char command[RDZV_COMMAND_HEX + 1]; /* its agents' command's fingerprint; "": not known */
    /* The network pre-flight (rdzvd-job-preflight.c): settings of the job (its first JOIN's, or
     * its record's), on and the fraction of the median below which a link is slow; the check
     * under way (NULL: none); the next PREFLIGHT id; the last check's median (MB/s), the checks
     * made and their time in all. */
    bool pf_on;
    double pf_fraction, pf_median;
    struct rdzvd_job_pf *pf;
    int64_t pf_next_id;
    unsigned pf_checks;
    uint64_t pf_ms;
    uint64_t stall_ms; /* when rdzvd was last found stalled on one of its members (it ran late:
                        * input read past a deadline, or a deadline passed unserved); 0: never */
    int64_t median_compute_ms; /* the job's nodes' median compute time, -1: not known */
    uint64_t median_at_ms, median_gen; /* when (rdzv_now_ms) and in which generation made */
};

#define for_each_member(j, m, pos, tmp)                                                            \
    rdzv_list_for_each_safe(                                                                       \
        pos, tmp, &(j)->members) if (((m) = rdzv_container_of(pos, struct rdzvd_member, node)), 1)

/* m held a node rank in a generation of its job that formed (the running one, or the one before
 * a restart), or proved a resume of one (held_place): its word may change the job. A spare that
 * never took a place, a new node, or a stranger with the agents' token is outside it: what it
 * says changes only itself (docs/design/job-policy.md). */
static inline bool rdzvd_member_held_place(const struct rdzvd_member *m)
{
    return m->node_rank >= 0 || m->prev_rank >= 0 || m->held_place;
}

/* rdzvd-job-move.c. rdzvd_job_move: records the decision the move needs first (its row of the
 * table: FORM formed, STOP stopped, END ended; CLOSE, UNDO, STOPPED and RESTORE none), then
 * moves: 0; -EPERM for a move the table does not allow from the job's state; or the negative
 * errno of the decision the job table refused. Either way logged, and nothing changed. The move
 * also keeps the copies of generation and restart count that go out: the round's (CLOSE clears
 * it first; a RESTORE of a running generation) and the outcome's (END).
 * rdzvd_job_move_legal: whether the table allows mv from state from. rdzvd_job_move_decision:
 * the enum rdzvd_decision_kind the kind needs, or -1 for none. Each move taken is counted in
 * the host's steps (struct rdzvd_job_counts, moves_taken: the model test checks that every
 * legal move is taken). */
int rdzvd_job_move(struct rdzvd_job *j, const struct rdzvd_job_move *mv);
int rdzvd_job_move_decision(enum rdzvd_job_move_kind kind);
bool rdzvd_job_move_legal(enum job_state from, const struct rdzvd_job_move *mv);
/* The recovery under way in j reached point p now (its timeline; the moves STOPPED, CLOSE and
 * FORM call it, rdzvd-job-progress.c at a new generation's first step): each phase it completes
 * goes into the host's counts (struct rdzvd_job_counts, recovery), and the first step logs the
 * recovery's phases. */
void rdzvd_job_recovery_point(struct rdzvd_job *j, enum rdzv_recovery_point p, double t_now);
const char *rdzvd_job_move_name(enum rdzvd_job_move_kind kind);

/* Effects (rdzvd-job-effects.c): everything the machine's files do to the world, the only
 * place they call libuv or call the host's ops. No file of the machine reads a clock: the time
 * is the step's (rdzvd_job_now_ms, rdzvd_job_wall_s: rdzvd-job-world.h). The timers are due
 * times in the host's set (j->host.timers). */
/* A libuv error's text. */
const char *rdzvd_job_strerror(int err);
/* What comes back from the outbox on the machine's side: an NCCL_REQUEST it could not queue,
 * a store's answer (the inputs NCCL_UNSENT and STORE_OPENED, queued by rdzvd-job-effects.c and
 * stepped by input once the Ready is carried out); and the job's memory to free once its timer
 * is closed. One table, rdzvd-job-step.c's. */
struct rdzvd_job_handlers {
    void (*freed)(struct rdzvd_job *j);
    rdzvd_job_input_fn input;
    /* The network pre-flight's verdict (rdzvd-job-preflight.c, which the machine's steps call
     * down to): put m aside for reason kind why; close the round the check held. NULL: the
     * check runs, and decides nothing. */
    void (*put_aside)(struct rdzvd_member *m, unsigned why, const char *reason);
    void (*close_checked)(struct rdzvd_job *j);
};
/* The job's one timer (enum job_timer), due ms after the step's now: close once, then its
 * memory goes when the host reaps the closed timers (handlers->freed). */
void rdzvd_job_timer_init(struct rdzvd_job *j);
void rdzvd_job_timer_close(struct rdzvd_job *j);
void rdzvd_job_timer_start(struct rdzvd_job *j, enum job_timer kind, uint64_t ms);
void rdzvd_job_timer_stop(struct rdzvd_job *j);
uint64_t rdzvd_job_timer_due_in(const struct rdzvd_job *j);
/* A member's heartbeat deadline: set ms after the step's now; retry in 1 ms (one more loop turn,
 * its poll first); due: armed and passed. Close once, then freed(m) runs when the host reaps
 * the closed timers (m's job may be gone by then). */
void rdzvd_member_timer_init(struct rdzvd_member *m);
void rdzvd_member_timer_close(struct rdzvd_member *m, void (*freed)(struct rdzvd_member *m));
void rdzvd_member_deadline_set(struct rdzvd_member *m, uint64_t ms);
void rdzvd_member_deadline_retry(struct rdzvd_member *m);
/* When the first of ts's timers is due (0: none armed). */
uint64_t rdzvd_job_timers_first(const struct rdzvd_job_timers *ts);
/* The host's timers, for the step's TICK and REAP (and the unit tests). The one due first, if
 * it is due at now_ms (equal dues in the order they were armed): disarmed and made the input of
 * its step in *in (TIMER, or DEADLINE with the bytes waiting unread on the member's
 * connection); false: none due. */
bool rdzvd_job_timer_due(const struct rdzvd_job_host *h, uint64_t now_ms,
                         struct rdzvd_job_input *in);
/* The freeing of timers closed (rdzvd_job_timers_closing: rdzvd-job-sm.h). */
void rdzvd_job_timers_reap(const struct rdzvd_job_host *h);
bool rdzvd_member_deadline_due(const struct rdzvd_member *m);
/* To a member's agent (nothing when it has no connection; round and nccl_request need one),
 * queued in the outbox (rdzvd-job-sm.h). NCCL_REQUEST for the job's generation: count ids, and
 * with store its store (its clients from the host's store_allow): 0, or -ENOMEM (out of memory
 * for the outbox: nothing sent); one the connection cannot take when the outbox is carried out
 * comes back as the input NCCL_UNSENT. */
void rdzvd_member_send_event(struct rdzvd_member *m, const struct rdzv_event *e);
void rdzvd_member_send_joined(struct rdzvd_member *m, bool spare, bool resumed);
/* The same, with a line for its agent to say (NULL: none). */
void rdzvd_member_send_joined_warn(struct rdzvd_member *m, bool spare, bool resumed,
                                   const char *warning);
void rdzvd_member_send_round(struct rdzvd_member *m, struct rdzv_round *rd);
int rdzvd_member_send_nccl_request(struct rdzvd_member *m, int64_t count, bool store);
/* The host's ops on a peer (struct rdzvd_job_ops), and its flush. */
void rdzvd_job_peer_bind(const struct rdzvd_job *j, void *peer, struct rdzvd_member *m);
void rdzvd_job_peer_close(const struct rdzvd_job *j, void *peer, const char *why);
void rdzvd_job_peer_put_aside(const struct rdzvd_job *j, void *peer, const struct rdzv_event *e);
void rdzvd_job_flush(const struct rdzvd_job *j);
/* Open j's generation's store through the outbox (desc, state_name NULL: no journal, port 0:
 * any; fresh: a new generation's): its answer comes back as the input STORE_OPENED with ask.
 * 0, or -ENOMEM (nothing queued). Close store through the outbox (drop: its journal too). */
int rdzvd_job_store_ask(const struct rdzvd_job *j, uint64_t ask, const char *desc,
                        const char *state_name, uint16_t port, bool fresh);
void rdzvd_job_store_drop(const struct rdzvd_job *j, void *store, bool drop);
/* Delete the journal state_name of j's generation gen's store from the host's --state-dir
 * through the outbox (fresh: the stale journal of a new store, queued before its open). 0, or
 * -ENOMEM (nothing queued, logged: the journal stays). */
int rdzvd_job_journal_drop(const struct rdzvd_job *j, uint64_t gen, const char *state_name,
                           bool fresh);
/* What the host's tables must learn, as effects of the step under way, each only when the host
 * has the table (struct rdzvd_job_host): job j ended and goes (keep_ended, which reads j when
 * carried out: its memory outlives the step); how a job ended, as its record keeps it
 * (keep_end, at the step's time); run_id waits for its nodes since since_ms, its store's port
 * kept (keep_waiting); run_id's note of waiting goes (take_waiting); a member was lost before it
 * was done (lost). */
void rdzvd_job_tell_ended(const struct rdzvd_job *j);
void rdzvd_job_tell_end(const struct rdzvd_job_host *h, const struct rdzvd_job_end *end);
void rdzvd_job_tell_waiting(const struct rdzvd_job_host *h, const char *run_id,
                            uint64_t since_ms, uint16_t port);
void rdzvd_job_tell_taken(const struct rdzvd_job_host *h, const char *run_id);
void rdzvd_job_tell_lost(const struct rdzvd_job_host *h);
/* run_id's note of waiting for its nodes, as the input being stepped carries it (its waiting,
 * for a JOIN of run_id or a REBUILD that lists it), 0: none. */
uint64_t rdzvd_job_input_waiting(const struct rdzvd_job_host *h, const char *run_id);
/* The one store open still made within a step, for a JOIN whose answer depends on it (a job
 * rebuilt by the JOIN): the host's op, at once. */
int rdzvd_job_store_open_now(const struct rdzvd_job *j, const char *desc,
                             const char *state_name, uint16_t port, void **store,
                             uint16_t *port_out);
/* Record a status event of job j, and log it at info (warn when warn) with the job's context. */
void rdzvd_job_note(struct rdzvd_job *j, bool warn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* node_id as a text of j (a note, a cause, a summary) names it, after the words "node id ": as
 * rdzv_node_id_text writes it, one word that a reader without a token is shown "hidden" for
 * (rdzv_status_hide_node_ids). Valid until the call after next. */
const char *rdzvd_job_named(struct rdzvd_job *j, const char *node_id);
/* Put a mark of that kind on j's timeline, now, in its current generation (not logged: what
 * happened is noted too). */
void rdzvd_job_mark(struct rdzvd_job *j, enum rdzv_mark_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The state machine proper (rdzvd-job-members.c, rdzvd-job-round.c, rdzvd-job-live.c,
 * rdzvd-job-outcome.c). */
struct rdzvd_job *rdzvd_job_find(struct rdzv_list *jobs, const char *run_id);
/* A new job named by jn, with its --nnodes and --max-restarts, and the settings st (a rebuild's,
 * from the job's record) or, NULL, jn's own. NULL when out of memory (logged). */
struct rdzvd_job *rdzvd_job_new(const struct rdzvd_job_host *h, const struct rdzv_join *jn,
                               const struct rdzvd_job_settings *st,
                               const struct rdzvd_job_handlers *handlers);
/* The inputs rdzvd_job_step hands on: the job's timer ran out (by its timer_kind); m's heartbeat
 * deadline ran out (unread: bytes waiting on its connection); m's NCCL_REQUEST of generation gen
 * could not be queued on peer. And the job's memory, once its timer is closed. */
void rdzvd_job_fired(struct rdzvd_job *j);
void rdzvd_member_deadline(struct rdzvd_member *m, size_t unread);
void rdzvd_member_nccl_unsent(struct rdzvd_member *m, uint64_t gen, void *peer);
void rdzvd_job_freed(struct rdzvd_job *j);
void rdzvd_job_free(struct rdzvd_job *j);
void rdzvd_job_try_close(struct rdzvd_job *j);
/* The job is over: every member is told how it ended (EVENT type), the outcome is kept. */
void rdzvd_job_end(struct rdzvd_job *j, const char *type, int64_t exit_code, const char *summary);
/* The job succeeded when every node of the running generation has sent LEAVE succeeded
 * (rdzvd-job-outcome.c). */
void rdzvd_job_check_all_left(struct rdzvd_job *j);
/* The round is complete (NCCL ids and store in place): RUNNING, the record saved, and each
 * member of the generation sent its ROUND. */
void rdzvd_job_send_rounds(struct rdzvd_job *j);
/* m's ROUND of the running generation (it holds a node rank in it), and its start grace. */
void rdzvd_member_send_own_round(struct rdzvd_member *m);
/* No store could be opened for the generation (err): the job fails, saying so. */
void rdzvd_job_store_failed(struct rdzvd_job *j, int err);
/* uncounted: NULL for a failure (charged to the budget), else why it is not one. kind: the
 * timeline's mark for it (a failure, a node lost, a restart). */
void rdzvd_job_restart(struct rdzvd_job *j, enum rdzv_mark_kind kind, const char *uncounted,
                       int64_t exit_code, const char *summary);
/* rdzvd-job-ranks.c, the node rank tables. Make by_req and by_rank hold ranks 0..n-1 (n <= max).
 * 0 or -ENOMEM (tables unchanged). */
int rdzvd_job_ranks_reserve(struct rdzvd_job *j, int64_t n);
/* NULL for a rank outside 0..rank_cap-1. */
struct rdzvd_member *rdzvd_member_by_rank(struct rdzvd_job *j, int64_t rank);
struct rdzvd_member *rdzvd_member_by_req(struct rdzvd_job *j, int64_t rank);
/* rank < rank_cap (reserved by the caller); anything else is a bug and writes nothing. */
void rdzvd_member_set_rank(struct rdzvd_member *m, int64_t rank);
/* Take m out of the generation (node_rank -1). */
void rdzvd_member_unrank(struct rdzvd_member *m);
void rdzvd_member_set_ready(struct rdzvd_member *m, bool ready);
void rdzvd_member_hb_arm(struct rdzvd_member *m, uint64_t ms);
/* rdzvd-job-verdict.c: m's node is put aside (reason_kind RDZVD_ASIDE_CHECK: on its own word,
 * a failed health check; RDZVD_ASIDE_STRAGGLER: rdzvd's verdict), recorded, its agent told
 * (EVENT put_aside), and the job moves on without it. */
void rdzvd_member_put_aside(struct rdzvd_member *m, unsigned reason_kind, const char *reason);

/* rdzvd-job-preflight.c: the network pre-flight (its settings: rdzvd_job_settings_set). Hold
 * a round about to close while its ready nodes not yet checked measure their links: true when
 * held (the check closes the round once done: rdzvd_job_close_checked), false to close now.
 * Busy: a check runs (the round waits for it). A member's PREFLIGHT_REPORT; the job's timer
 * T_PREFLIGHT ran out; the job freed. */
bool rdzvd_job_pf_hold(struct rdzvd_job *j);
bool rdzvd_job_pf_busy(const struct rdzvd_job *j);
void rdzvd_member_pf_report(struct rdzvd_member *m, const struct rdzv_preflight_report *rep);
void rdzvd_job_pf_fired(struct rdzvd_job *j);
void rdzvd_job_pf_free(struct rdzvd_job *j);
/* rdzvd-job-round.c: after a check, the round closes over the ready members when MIN of them are
 * left, else waits as rdzvd_job_try_close says. */
void rdzvd_job_close_checked(struct rdzvd_job *j);
/* rdzvd-job-effects.c: queue PREFLIGHT p to m's agent. */
void rdzvd_member_send_preflight(struct rdzvd_member *m, const struct rdzv_preflight *p);
/* NULL when out of memory (logged). */
/* secret: the member's (minted and admitted, or proved by jn: rdzvd_job_admit). */
struct rdzvd_member *rdzvd_member_add(struct rdzvd_job *j, void *peer, const struct rdzv_join *jn,
                                      const char *secret);
/* Unlink m (and free the job with its last member); the caller deals with the consequences. */
void rdzvd_member_unlink(struct rdzvd_member *m);
bool rdzvd_job_ended_gives_way(struct rdzvd_job *j, int64_t age_ms);
/* j ended, and an agent says it started age_ms ago (0: it does not say): whether it started
 * after that end (its own clock against the step's: no two hosts' clocks are compared). */
bool rdzvd_job_started_after_end(const struct rdzvd_job *j, int64_t age_ms);
/* m is removed: lost (its connection closed, or it fell silent), or, with aside, put aside and
 * its agent told so by the EVENT aside. Move the job on (a restart, the next round). */
void rdzvd_member_remove(struct rdzvd_member *m, const char *why, const struct rdzv_event *aside);
/* rdzvd-job-stall.c. A message from m: input found waiting past its heartbeat deadline marks
 * a stall of rdzvd (rdzvd_member_mark_stall: on m, and on its job: rdzvd ran late). */
void rdzvd_member_check_stall(struct rdzvd_member *m);
void rdzvd_member_mark_stall(struct rdzvd_member *m);
/* Every member of the stopped generation is ready: form the next one (or end a cancelled job). */
void rdzvd_job_check_stopped(struct rdzvd_job *j);
/* j, stopping and cancelled, stops now: every member counts as stopped (rdzvd_job_check_stopped
 * then ends it). */
void rdzvd_job_stop_now(struct rdzvd_job *j);
/* Within a heartbeat timeout of a stall of rdzvd seen on m (its input read past its deadline,
 * or nothing read from it for a heartbeat timeout) or on any member of its job, or now (a
 * member's deadline passed unserved: rdzvd ran late): a close of its connection, or a second
 * connection of its agent, is its agent reconnecting. */
bool rdzvd_member_stalled(struct rdzvd_member *m);

/* rdzvd-job-round.c. rdzvd_job_backoff_start: the delay (ms) before the next generation of a
 * restart of j (counted: charged to the budget; the others, a scale-up, a node that left on a
 * signal, wait none): none for the first of a row, then RDZVD_JOB_BACKOFF_FIRST_MS doubling up
 * to the job's cap; a generation that ran RDZVD_JOB_BACKOFF_RESET_MS starts a new row. Sets
 * backoff_until_ms; no timer yet. rdzvd_job_backoff_left: how long the round must still wait
 * (ms), 0 once the backoff is over (then cleared) or with none. */
uint64_t rdzvd_job_backoff_start(struct rdzvd_job *j, bool counted);
uint64_t rdzvd_job_backoff_left(struct rdzvd_job *j);

/* rdzvd-job-history.c: the failure history (rdzvd_job_hist_find: rdzvd-job-sm.h). */
/* Nodes put aside, by reason (status, /metrics): the host's counts (struct rdzvd_job_counts,
 * put_aside). */
struct rdzv_status_job;
/* The nodes j put aside into sj (aside, n_aside, aside_total). */
void rdzvd_job_aside_status(const struct rdzvd_job *j, struct rdzv_status_job *sj);
/* m's node failed a health check (reason: the check's line): its entry is marked put aside. */
void rdzvd_job_node_unhealthy(struct rdzvd_member *m, const char *reason);
/* The same for why (RDZVD_ASIDE_CHECK, or RDZVD_ASIDE_STRAGGLER: rdzvd's verdict, reason its
 * figures); only nodes put aside on their own word are bounded (RDZVD_JOB_ASIDE_CHECK_MAX). */
void rdzvd_job_node_aside(struct rdzvd_member *m, unsigned why, const char *reason);
/* rdzvctl release: the entries put aside whose node id or host is node are taken back (their
 * failures forgotten, their GPUs with them); node a GPU UUID: that GPU is taken out of the
 * entries put aside that hold it (their nodes stay put aside). Recorded first
 * (RDZVD_DECIDE_ASIDE). The number of entries changed (0: none such), or a negative errno with
 * err set (nothing changed). */
int rdzvd_job_release(struct rdzvd_job *j, const char *node, char *err, size_t errlen);
/* The history of a rebuilt job: rec's, taken over (rec's left empty). */
void rdzvd_job_hist_take(struct rdzvd_job *j, struct rdzvd_job_record *rec);
/* A JOIN of node_id on host with gpus to run_id, whose history is hist[0..n_hist): -EACCES with
 * err saying why when the job put that node id aside, or (host not NULL or "") a node of that
 * host, or (gpus not NULL) a node with one of these GPUs: a bad host's next agent is a new
 * process with a new node id, maybe under a new host name (a container, a host re-imaged, a GPU
 * moved), and is refused all the same. Else 0. Only the joining node is refused: nothing here
 * changes any entry. */
int rdzvd_job_check_aside(const struct rdzvd_job_record_hist *hist, unsigned n_hist,
                          const char *run_id, const char *node_id, const char *host,
                          const struct rdzv_gpu_set *gpus, char *err, size_t errlen);
/* m's workers failed (f: the failure, its ms 0: now; summary: the root cause so far): kept in
 * the history. It counts against the node unless the same rank (or, the ranks renumbered since,
 * the same local rank) failed on another node within the window: then both are the job's, and
 * summary says so. NOW: m is to be put aside: it failed --bad-node-failures times within
 * --bad-node-window, the budget allows the restart, and the job can form without it (a spare,
 * or more than MIN nodes), or those failures were all start-up failures (f.startup) and no other
 * node's failure counts (the job then waits for a node); its entry is marked, summary says so.
 * NO_CHOICE: it would be, but the job has only MIN nodes and no spare. */
enum rdzvd_aside { RDZVD_ASIDE_NOT, RDZVD_ASIDE_NO_CHOICE, RDZVD_ASIDE_NOW };
enum rdzvd_aside rdzvd_job_node_failed(struct rdzvd_member *m, struct rdzvd_job_record_fail f,
                                       char *summary, size_t len);
/* m's workers failed at start-up too, reported after another node's failure stopped the
 * generation (formed at since_ms, unix ms): a failure of every rank alike is the job's. The
 * start-up failures charged since then to the other nodes not put aside are taken back (their
 * node flag cleared, their count lowered); m is charged nothing. The number taken back; the
 * caller records the history when any was. */
int rdzvd_job_fails_alike(struct rdzvd_member *m, int64_t since_ms);
/* m goes (rdzvd_member_remove). A node lost before it ran (placed in the running generation,
 * its agent never answered the ROUND, or lost within the start-up window by rdzvd's clock,
 * whatever steps it claimed), or whose JOIN scaled the job up and that goes before it
 * ran, cost the job a restart: that is charged to its node id and host in the history, as a
 * failure with world size RDZVD_FAIL_UNRAN (a host charged --bad-node-failures times is put
 * aside; a lost scale-up's is recorded now), never to the budget. True when the restart that
 * follows is not the job's failure (placed, running, not ran). */
#define RDZVD_FAIL_UNRAN 0
bool rdzvd_member_lost_unran(struct rdzvd_member *m);
/* m reports a worker failure (WORKER_EXIT) of the running generation. True when m joined late
 * (joined_late: after a generation of the job formed here) and rdzvd has not seen it run, within
 * the job's bound on restarts not counted (P8): the restart is not counted; it is charged to m's
 * node id and host as rdzvd_member_lost_unran charges a node lost before it ran, unless killed
 * from outside (outside: charged nothing, P1); startup: at start-up, a charge that every node
 * failing alike takes back (rdzvd_job_fails_alike). False: it counts (a node of the first
 * generation, one seen running, or past the bound: logged). */
bool rdzvd_member_exit_unran(struct rdzvd_member *m, bool outside, bool startup);
/* m's JOIN, below MAX while the job runs with --scale-up now: false when m's host lost a node
 * before it ran (within --bad-node-window): it waits as a spare for the next restart (logged).
 * Otherwise m is marked scaled_up (the caller restarts the job to take it in). */
bool rdzvd_member_scale_up_now(struct rdzvd_member *m);
/* The bound on the restarts not charged to the budget (RDZVD_JOB_UNCOUNTED_RESTARTS within
 * RDZVD_JOB_UNCOUNTED_WINDOW_MS, the job's, whoever caused them). rdzvd_job_uncounted_spent: the
 * job took them all (a restart not counted would be charged; a node that never ran is not placed
 * when the job can form without it). rdzvd_job_uncounted_scale_up: a scale-up may restart it now
 * (within the bound, and RDZVD_JOB_UNCOUNTED_GAP_MS doubling after the last); when not, why is
 * logged once. */
bool rdzvd_job_uncounted_spent(struct rdzvd_job *j);
bool rdzvd_job_uncounted_scale_up(struct rdzvd_job *j);
/* The bound's parts that a generation's life uses (rdzvd-job-round.c): uncounted_bench, while
 * forming after a restart with the bound spent, whether the job forms without the nodes that
 * never ran (*ready, *members: the counts without them); uncounted_say, the bound's reason, once
 * until there is room again; uncounted_keep, a restart not counted happens now.
 * member_seen_running: rdzvd sees m run now; member_never_ran: m never ran in its job, as rdzvd saw
 * it. */
bool uncounted_bench(struct rdzvd_job *j, int64_t *ready, int64_t *members);
void uncounted_say(struct rdzvd_job *j, const char *what);
void uncounted_keep(struct rdzvd_job *j);
bool member_seen_running(const struct rdzvd_member *m);
bool member_never_ran(const struct rdzvd_member *m);
/* rdzvd-job-outcome.c: the generation stopped (every member ready): the members whose node is put
 * aside and pending go (EVENT put_aside), before the next round forms. True when the job went
 * with its last member (j is gone). */
bool rdzvd_job_tell_aside_pending(struct rdzvd_job *j);
/* The job's outcome to m; one that succeeded, to a node that never held a place, says it ran
 * nothing (it is no success of that node's, nor a failure). */
void rdzvd_member_send_outcome(struct rdzvd_member *m);
/* m is put aside (its history says why): its agent is told (EVENT put_aside), and it leaves the
 * job. The caller moves the job on. */
void rdzvd_member_tell_aside(struct rdzvd_member *m);

/* rdzvd-job-persist.c: the generation's store; rdzvd-job-records.c: the job's record in
 * --state-dir. */
void rdzvd_job_store_journal_name(const struct rdzvd_job *j, uint64_t gen, char *buf, size_t len);
/* Ask for generation j->generation's store on port (0: any), then going on with then: 0, or a
 * negative errno (nothing asked). now: opened within the step, for a JOIN that rebuilds j. */
int rdzvd_job_open_store(struct rdzvd_job *j, uint16_t port, bool fresh,
                         enum rdzvd_store_then then);
int rdzvd_job_open_store_now(struct rdzvd_job *j, uint16_t port);
/* A rebuilt generation's store could not reopen on port (err): noted on j's timeline
 * (rdzvd-job-round.c). */
void store_not_reopened(struct rdzvd_job *j, uint16_t port, int err);
/* The store goes (an open under way too: its store closes when it comes). */
void rdzvd_job_close_store(struct rdzvd_job *j);
/* The journal of generation gen's store goes (--state-dir), unless rdzvd shuts down or the job
 * goes back to its record: a store let go of before it reopened. */
void rdzvd_job_drop_journal(struct rdzvd_job *j, uint64_t gen);
/* A new generation's store: rdzvd's own, unless node rank 0's agent m0 is to host it (then
 * nothing opens now: NCCL_REQUEST asks for it). Returns 1 when m0 is to be asked, 0 when rdzvd
 * asked for its own (going on with then), or a negative errno (the caller ends the job). */
int rdzvd_job_choose_store(struct rdzvd_job *j, const struct rdzvd_member *m0,
                           enum rdzvd_store_then then);
/* After node rank 0 answered: rdzvd asks for its own store if the agent named none. 0 (not
 * needed), 1 (asked: the ROUNDs go once it is open) or a negative errno (the caller ends the
 * job). */
int rdzvd_job_store_fallback(struct rdzvd_job *j);
/* The answer to j's store open ask (the input STORE_OPENED): not wanted any more
 * (another ask since, or the job went), its store closes; else the job goes on. */
void rdzvd_job_store_opened(struct rdzvd_job *j, uint64_t ask, uint64_t gen, void *store,
                            uint16_t port, int err);
/* Node rank 0 is asked for want ids (and with store, to host the store). */
void rdzvd_job_ask_rank0(struct rdzvd_job *j, int64_t want, bool store);
/* Decide the job's generation in its record (running: the generation's workers run, and a
 * restarted rdzvd waits for their agents; restart_count: the job's once the decision is applied).
 * 0 (also with no job table), or the negative errno of a decision the job table refused
 * (logged): the job must not move, and nothing of it may be sent. Only for what is no move (a
 * resume claim becoming the record): a move records through rdzvd_job_move. */
int rdzvd_job_save(struct rdzvd_job *j, bool running, int64_t restart_count);
/* Decide only the job's history (RDZVD_DECIDE_ASIDE): as rdzvd_job_save, for a node put aside
 * with no restart. */
int rdzvd_job_save_aside(struct rdzvd_job *j);
/* Decide the job's end (RDZVD_DECIDE_ENDED: its record and its nodes' secrets go). 0 (also with
 * no table) or the table's negative errno (logged). */
int rdzvd_job_decide_ended(struct rdzvd_job *j);
/* The job's first member since its agents all left: the time its record keeps of their leaving
 * goes (RDZVD_DECIDE_WAITING, 0), so that its next leaving counts --abandon-after afresh.
 * Nothing without a job table or a time kept; a refusal is logged. */
void rdzvd_job_save_back(struct rdzvd_job *j);
/* The job's last agent left now (it had one since it was made): recorded (RDZVD_DECIDE_WAITING,
 * the wall clock now), whatever an earlier leaving left in the record. Nothing without a job
 * table; a refusal is logged. */
void rdzvd_job_save_leaving(struct rdzvd_job *j);
/* Decide node rank node_rank of j's running generation done (RDZVD_DECIDE_DONE: its member
 * went after its LEAVE succeeded, R17b), so that the generation rebuilt from the record counts
 * it as back and done. 0 or a negative errno (logged: the job goes on as decided). */
int rdzvd_job_save_done(struct rdzvd_job *j, int64_t node_rank);
/* rdzvd_job_decide(t, kind, rec) as the machine decides, for a job of h: in the job table whose
 * records h's steps keep, the change is held and its record made by rdzvd_job_record_new
 * before the change: -ENOMEM when there is no memory for it (nothing changed). */
int rdzvd_job_host_decide(const struct rdzvd_job_host *h, struct rdzvd_store *t,
                          enum rdzvd_decision_kind kind, const struct rdzvd_job_record *rec);
/* A decision of kind that what the step decides after it waits on (a move or a JOIN: FORMED,
 * STOPPED, ASIDE, ADMITTED): its record not written, nothing the step sent after it goes, and
 * its job is told (the input UNRECORDED). The others are only logged. */
bool rdzvd_decision_holds(enum rdzvd_decision_kind kind);
/* rdzvd_job_move's only way to the job table: decide kind, the decision the move mv needs (its
 * row of the table in rdzvd-job-move.c), from j as it is before the move (FORMED: the round
 * closed, running; STOPPED: restart count + mv->counted; ENDED). 0 (also with no job table), or
 * the negative errno of a decision refused (logged): the move is not made. */
int rdzvd_job_record_move(struct rdzvd_job *j, enum rdzvd_decision_kind kind,
                          const struct rdzvd_job_move *mv);
/* node_id's first JOIN in j: keep the hash of its new secret in the host's secret table (a
 * decision, written before JOINED leaves). When it would take the job's node ids past the bound,
 * the oldest that promise nothing (neither a member's nor of the generation j was rebuilt from;
 * those with no failure history first) are forgotten first (FORGOTTEN each). 0 (also with no
 * table), -ENOSPC (the members' and that generation's alone fill it) or a negative errno. */
int rdzvd_job_admit(struct rdzvd_job *j, const char *node_id, const char *secret);
/* m leaves its job (not at rdzvd's shutdown): its node id goes from the secret table
 * (FORGOTTEN) when it promises nothing any more, i.e. m never held a place in a generation
 * (rdzvd_member_held_place): a spare or a new node that came and went, whose agent has no
 * workers to resume. So the job's node ids hold its members and the nodes that ran, not every
 * node that ever came: a job can always take a replacement. Refused (logged): the id stays. */
void rdzvd_member_forget(struct rdzvd_member *m);
/* A job's settings (rdzvd-job-record.h): a JOIN's, j's own, and j's set from them. */
void rdzvd_job_settings_of_join(const struct rdzv_join *jn, struct rdzvd_job_settings *st);
void rdzvd_job_settings_get(const struct rdzvd_job *j, struct rdzvd_job_settings *st);
void rdzvd_job_settings_set(struct rdzvd_job *j, const struct rdzvd_job_settings *st);
/* The record of run_id (h's job table, else its --state-dir): 0, or -ENOENT when there is none
 * or it cannot be read (logged). */
int rdzvd_job_record_load(const struct rdzvd_job_host *h, const char *run_id,
                          struct rdzvd_job_record *rec);

/* rdzvd-job-progress.c: ranks' progress. The ranks of j's current generation that reported, as
 * sj->ranks (by rank; past RDZV_STATUS_MAX_RANKS the longest silent, the rest counted in
 * sj->ranks_left_out); now is rdzv_now_ms(). 0 or -ENOMEM. */
struct rdzv_status_job;
int rdzvd_job_progress_status(const struct rdzvd_job *j, uint64_t now, struct rdzv_status_job *sj);
/* Free m's progress (with m). */
void rdzvd_member_progress_free(struct rdzvd_member *m);
/* Whether m's local rank reported progress in the job's current generation. */
bool rdzvd_member_rank_progressed(const struct rdzvd_member *m, int64_t local_rank);
/* The slowest compute time (ms) of m's ranks in the job's generation (each rank's the median of
 * its window), or -1 when none said one (full: unless every rank's window is full: the first
 * steps of a generation are not scored). */
int64_t rdzvd_member_compute_ms(const struct rdzvd_member *m, bool full);
/* Since when m has been slow, on rdzv_now_ms()'s clock: of its ranks whose median is at or above
 * threshold_ms, the earliest report of their last run of samples at or above it (the oldest
 * sample kept when the whole window is slow). A median moves only once half its window is slow,
 * some steps after the node slowed: the window of --straggler-window counts from the first slow
 * step reported, not from the median's move. now when no rank is slow at its last sample. */
uint64_t rdzvd_member_slow_since_ms(const struct rdzvd_member *m, double threshold_ms,
                                    uint64_t now);
/* The slowest of m's ranks' last samples (ms) in the job's generation, or -1 when none. */
int64_t rdzvd_member_last_compute_ms(const struct rdzvd_member *m);


/* rdzvd-job-status.c needs nothing more; rdzvd-job-join.c holds the JOIN side (rdzvd_job_join). */
