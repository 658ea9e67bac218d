/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-record.h: a job's record in the job table: what a job must not forget across a daemon
 * restart or a change of leader (its identity, its last generation and restart count, whether
 * that generation's workers may still run, and who they are). A restarted rdzvd (or the next
 * leader) rebuilds the job from this record before it places anyone, so a spare that reconnects
 * before the members never starts the job over, and generation numbers and the restart count
 * never go backwards.
 *
 * The records live in the job table (rdzvd_server_job_table), key "job/<run_id>", a JSON object
 * that names the run id it belongs to. Below the job state machine (the store's layer): the
 * journal's replay and Raft's apply reach it without the job layer (rdzvd-job-journals.h keeps what
 * only that layer uses).
 *
 * Decisions. The job state machine changes a record only by a decision: a
 * generation formed (its size, nodes by node rank, NCCL ids, store), a generation stopped (a
 * restart charged to the budget, or not), the job ended. A decision is one record of the job
 * table's changes (RDZVD_CHANGE_DECISION, rdzvd-record.h), and one function, rdzvd_decision_apply,
 * turns it into the record, wherever it runs: the deciding rdzvd (rdzvd_job_decide encodes the
 * decision and applies those very bytes), a single rdzvd's journal replay, and every replica's
 * Raft apply. That function also keeps what every replica must agree on: a job's generation and
 * restart count never go backwards, and its --nnodes and --max-restarts never change; a decision
 * that would break either is refused (-ESTALE) the same way everywhere, and changes nothing.
 * What is not decided here is soft state, rebuilt after a restart or a failover: members'
 * connections and heartbeat clocks, waits, the spares, the generation stores' contents (their own
 * journals).
 *
 * A node's identity. The first JOIN of a node id in a job gets a random secret
 * (JOINED), and its hash is decided (ADMITTED) before JOINED leaves: a JOIN that names a node id
 * the table knows must carry that secret, after a restart or a change of leader too. The hashes
 * live beside the record, under their own keys (rdzvd-job-ids.h: "sec/" run_id NUL node_id: the
 * hash; "ids/" run_id: the job's node ids, each NUL-terminated, at most the table's
 * ids_bytes_max: struct rdzvd_job_bounds), so that a
 * JOIN costs what one node id costs, not the whole list; ENDED deletes them with the record,
 * FORGOTTEN one node's (a node that left without holding a place: no table fills from them).
 * A record of an older rdzvd has none: its nodes are new to it (their next JOIN mints a secret).
 *
 * Ownership: the caller owns the record struct; these functions keep nothing but what get
 * allocates in it (rdzvd_job_record_clear). Loop thread only. Errors are negative errnos. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-msg.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/data/rdzvd-store.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-ids.h"

/* A node of a running generation, at its node rank: what the generation formed, so that a new
 * leader (or a restarted rdzvd) knows who holds each node rank, not only how many there were. Its
 * global ranks are rank_offset .. rank_offset + nproc - 1, rank_offset the sum of the nproc of the
 * node ranks below it (as rdzvd forms a round). */
struct rdzvd_job_record_node {
    char node_id[RDZV_ID_MAX + 1];
    int64_t nproc;
    /* A newcomer of the generation (R17a: placed from no place, no step reported by its
     * workers). In the record as "newcomers", [node_rank, ...] beside "nodes": an rdzvd that
     * predates it reads the rest. */
    bool newcomer;
    /* Gone after its LEAVE succeeded (job-policy R17b): accounted for, as back and done, in the
     * generation rebuilt from the record. In the record as "done", [node_rank, ...], as
     * "newcomers" is; a DONE decision sets it. */
    bool done;
};

/* One failure of a node's workers: when (rdzvd's wall clock, unix ms), which rank, and whether
 * it counts against the node (false: the job's, e.g. it followed its rank from another node). */
struct rdzvd_job_record_fail {
    int64_t ms;
    int64_t rank, local_rank, world_size; /* -1: not known (dated from an older record) */
    bool node;
    bool startup; /* its worker exited while starting (no progress, within seconds) */
};

/* A node's history within the job: its workers' failures, and whether the job put it aside
 * (then why). A node put aside takes no place in the job again until an operator releases it.
 * failures counts those charged to the node; fails keeps the newest n_fails of them, and of
 * those the job was charged with (a record of an older rdzvd has none: "history_fails"). */
struct rdzvd_job_record_hist {
    char node_id[RDZV_ID_MAX + 1];
    char host[RDZV_HOST_MAX + 1]; /* its agent's --host when last counted */
    int64_t failures;
    bool aside;
    char reason[RDZVD_ASIDE_REASON_MAX + 1]; /* "" unless aside */
    /* Aside only: its GPUs (JOIN gpu_uuids) that no other node of the job reported when it was
     * put aside (rdzvd-job-history.c); a node sharing one is refused as its host is. In the
     * record as "aside_gpus", [[node_id, [uuid, ...]], ...] beside "history", so that an rdzvd
     * that predates them reads the record (without them). */
    struct rdzv_gpu_set gpus;
    unsigned n_fails;
    struct rdzvd_job_record_fail fails[RDZVD_JOB_FAILS_KEPT]; /* oldest first */
};

/* A job's own settings, which its first agent's JOIN gave it (every agent of a job is started
 * with the same options; later JOINs are checked for --nnodes, --max-restarts and --recovery
 * only): kept in its record (as "settings", with the JOIN's names) from its first decision on,
 * so that the job rebuilt after an rdzvd restart or a change of leader runs by them, not by
 * those of whichever agent comes back first. */
struct rdzvd_job_settings {
    int64_t last_call_ms, heartbeat_timeout_ms, join_timeout_ms;
    bool scale_up_now, inplace;
    int64_t bad_node_failures, bad_node_window_s, restart_backoff_s;
    double straggler_factor; /* 0: nobody is scored (then the next two are 0 too) */
    int64_t straggler_window_ms;
    bool straggler_aside;
    double preflight_fraction; /* --preflight net's fraction of the median; 0: no pre-flight */
    /* The fingerprint of the command its agents run (JOIN command); "": not known (an older
     * agent's job, or an older rdzvd's record), and no agent is compared. */
    char command[RDZV_COMMAND_HEX + 1];
};

struct rdzvd_job_record {
    char run_id[RDZV_ID_MAX + 1];
    int64_t min, max, max_restarts; /* the job's --nnodes MIN:MAX and --max-restarts */
    /* The rest of its settings; a record of an older rdzvd has none (has_settings false: the
     * job rebuilt from it takes the settings of the agent that comes back first). */
    bool has_settings;
    struct rdzvd_job_settings settings;
    uint64_t generation;            /* the last generation sent to agents (0: none yet) */
    int64_t restart_count;          /* restarts used so far */
    bool running;                   /* generation's workers may still run: wait for them */
    int64_t nnodes, world_size;     /* of generation (running only) */
    uint16_t store_port;            /* generation's store port (running only) */
    /* Where node rank 0's agent hosts that store (a replicated rdzvd); "": rdzvd's own. */
    char store_addr[RDZV_STORE_ADDR_MAX + 1];
    /* The generation's nodes by node rank, nnodes of them (running only), or NULL: a record of
     * an rdzvd before membership was recorded, or one made from an agent's claim. put reads the
     * caller's; get allocates them (rdzvd_job_record_clear frees them). */
    struct rdzvd_job_record_node *nodes;
    /* The node ids of the generation stopped, by node rank (STOPPED only): n_stopped of them,
     * "" where no member held that rank when it stopped; 0: none known. The job restored from
     * the record waits a rebuild window for them before it forms the next generation
     * (job-policy W2). In the record as "stopped_nodes", which an rdzvd that predates it
     * skips. Owned as nodes is. */
    int64_t n_stopped;
    char (*stopped)[RDZV_ID_MAX + 1];
    /* The generation's NCCL unique ids, hex (running only): n_ids of them (0: none). Owned as
     * nodes is. */
    unsigned n_ids;
    char (*ids)[RDZV_NCCL_HEX_LEN + 1];
    /* The job's failure history, any decision's: n_hist (at most RDZVD_JOB_HISTORY_MAX) nodes,
     * each named once. Owned as nodes is. */
    unsigned n_hist;
    struct rdzvd_job_record_hist *hist;
    /* When the job's last restarts not charged to the budget were (unix ms, oldest first):
     * n_uncounted of them, as "free_restarts" (rdzvd-job-history.c bounds them per window). */
    unsigned n_uncounted;
    int64_t uncounted_ms[RDZVD_JOB_UNCOUNTED_RESTARTS];
    /* ADMITTED only: the node admitted (never part of the record itself). */
    struct rdzvd_job_record_admitted admitted;
    /* DONE only: the node rank of generation gone after its LEAVE succeeded. */
    int64_t done_rank;
    /* WAITING only: since when (rdzvd's wall clock, unix ms) none of its agents is connected;
     * 0: one is back. */
    int64_t waiting_since_ms;
    /* WAITING only ("left"): the record drops its stopped_nodes (W2). No rdzvd decides it any
     * more: agents whose connections all closed may be reconnecting. Applied as written, so
     * that a journal or a leader that holds one replays alike. */
    bool agents_left;
    /* ENDED only: how the job ended, kept when has_end (a job that never formed, forgotten
     * with its last member, has none). */
    bool has_end;
    struct rdzvd_job_end end;
};

/* Free what rdzvd_job_record_get allocated in rec (nodes, stopped, ids, hist), and set them
 * NULL. */
void rdzvd_job_record_clear(struct rdzvd_job_record *rec);

/* The record of run_id in the job table t. A replica's put or del goes to the log with its
 * turn's other changes, and no reply of that turn leaves before it commits (a single rdzvd's,
 * to its journal before put returns): a decision an agent sees (a generation formed, a restart
 * charged, the job's end) is on a majority (on disk) first, and a new leader rebuilds the job
 * from it, not from what agents claim.
 * A record's nodes, when present, are exactly nnodes, their nproc 1..RDZV_NPROC_MAX summing to
 * world_size; its ids at most RDZV_MAX_NCCL_IDS hex strings of RDZV_NCCL_HEX_LEN digits: put
 * refuses anything else (-EINVAL), get reads it as not a record (-EBADMSG).
 * put: 0, -EINVAL, -ENOMEM or the store's error; get: 0, -ENOENT (none), -EBADMSG (not a record
 * of run_id), -ENOMEM;
 * del: 0 (also when there was none) or the store's error. */
int rdzvd_job_record_put(struct rdzvd_store *t, const struct rdzvd_job_record *rec);
int rdzvd_job_record_get(struct rdzvd_store *t, const char *run_id, struct rdzvd_job_record *rec);
int rdzvd_job_record_del(struct rdzvd_store *t, const char *run_id);

/* What a decision decides. */
enum rdzvd_decision_kind {
    RDZVD_DECIDE_FORMED,  /* generation formed: the record becomes rec (running, its nodes) */
    RDZVD_DECIDE_STOPPED, /* generation's workers stop: rec's generation and restart count, not
                           * running (a restart, charged or not, decided) */
    RDZVD_DECIDE_ENDED,   /* the job is over: its record goes; how it ended (has_end) is
                           * kept (rdzvd-job-ends.h) */
    RDZVD_DECIDE_ASIDE,   /* only the history changes (a node put aside, no restart): the
                           * record keeps the rest; with none, rec (not running) is made */
    RDZVD_DECIDE_ADMITTED, /* a node id's first JOIN: rec->admitted's hash is kept, the record
                            * (if any) unchanged; -EEXIST when the node id has one already,
                            * -ENOSPC when the job's node ids fill RDZVD_JOB_IDS_BYTES_MAX */
    RDZVD_DECIDE_WAITING,  /* the job's last agent left (rec->waiting_since_ms), or one is back
                            * (0): kept beside the record ("wait/" run_id), which is unchanged,
                            * so that --abandon-after runs from the leaving across restarts and
                            * leaders; ENDED deletes it */
    RDZVD_DECIDE_FORGOTTEN, /* a node id that promises nothing any more (a node that left
                             * without holding a place): rec->admitted.node_id's hash goes, and
                             * its bytes of the job's node ids; the record unchanged */
    RDZVD_DECIDE_DONE,      /* the node at rec->done_rank of the running generation
                             * rec->generation went after its LEAVE succeeded: the record's node
                             * there is done; another generation's record (or none) unchanged */
};

/* When run_id's agents all left, as WAITING recorded it in t (unix ms), or 0: none recorded
 * (an agent is back, or the job ran when rdzvd stopped). */
int64_t rdzvd_job_waiting_since(struct rdzvd_store *t, const char *run_id);


/* "formed", "stopped", "ended", "aside", "admitted", "waiting", "forgotten", "done". Never
 * NULL. */
const char *rdzvd_decision_name(enum rdzvd_decision_kind kind);

/* Decide kind for the job rec->run_id in the job table t: rec (the caller's: FORMED, a running
 * generation; STOPPED, not running; ENDED, only its run id counts) is encoded, and those bytes are
 * applied by rdzvd_decision_apply under t's bounds (rdzvd_job_bounds_of), t's change hook told
 * of the decision itself (a record of RDZVD_CHANGE_DECISION: to the journal, or to the next log
 * entry). The machine decides through rdzvd_job_host_decide: the store holds the change, and the
 * record is kept by the step under way until its Ready is carried out. 0, -EINVAL (rec is not what
 * kind takes, or not what put takes), -ESTALE (it would take the job back: nothing changed),
 * -ENOMEM, or the store's error. */
int rdzvd_job_decide(struct rdzvd_store *t, enum rdzvd_decision_kind kind,
                     const struct rdzvd_job_record *rec);

/* The job table's bounds, which its decisions read: the same on every replica and every replay,
 * so they are the table's, never a global's. A job table's decision replayer is
 * rdzvd_decision_apply with a struct rdzvd_job_bounds as its ud (rdzvd_store_set_decision_fn),
 * or NULL: the defaults. Only a test makes them smaller. */
struct rdzvd_job_bounds {
    size_t ids_bytes_max; /* a job's node ids (rdzvd-job-ids.h): RDZVD_JOB_IDS_BYTES_MAX */
    unsigned ends_kept;   /* the ends kept (rdzvd-job-ends.h): RDZVD_JOB_ENDS_KEPT */
};
#define RDZVD_JOB_BOUNDS_DEFAULT {RDZVD_JOB_IDS_BYTES_MAX, RDZVD_JOB_ENDS_KEPT}
/* t's bounds (its decision replayer's ud), or the defaults when t is NULL or has none. */
const struct rdzvd_job_bounds *rdzvd_job_bounds_of(const struct rdzvd_store *t);

/* Apply the decision val[0..vlen) (as rdzvd_job_decide encodes it) to the record under key in
 * t, under the bounds ud (a struct rdzvd_job_bounds; NULL: the defaults): the one function that
 * turns decisions into records (above), t's rdzvd_decision_fn. 0; -EBADMSG when val is no
 * decision, or not of the run id key names; -ESTALE when it would take the record back (a FORMED
 * of a generation not past the record's, a restart count below it, another --nnodes or
 * --max-restarts), nothing changed; -ENOMEM or the store's error. */
int rdzvd_decision_apply(void *ud, struct rdzvd_store *t, const uint8_t *key, size_t klen,
                         const uint8_t *val, size_t vlen);
/* The run id and kind of the decision val[0..vlen): 0, or -EBADMSG / -ENOMEM. */
int rdzvd_decision_peek(const uint8_t *val, size_t vlen, char run_id[RDZV_ID_MAX + 1],
                        enum rdzvd_decision_kind *kind);
