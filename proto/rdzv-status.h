/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-status.h: the daemon's status as one C struct: its counters and, per job, its state,
 * generation, restarts, nodes and recent events. rdzvd fills it (daemon/job/rdzvd-job-status.c);
 * the STATUS_REPLY body and /status.json are its JSON encoding (rdzv_status_to_json); the HTTP
 * page, /metrics and rdzvctl render from the struct. Field names of the JSON are the wire
 * format (proto/RENDEZVOUS.md, STATUS).
 *
 * Ownership: a struct rdzv_status owns its jobs array and each job's nodes array (heap, calloc);
 * rdzv_status_free releases them (the struct itself is the caller's). No I/O, no logging, no
 * state: any thread may call these. Errors are negative errnos. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-msg.h"

struct rdzv_buf;

#define RDZV_STATUS_MAX_JOBS 4096  /* decoding refuses more (a reply is at most RDZV_MAX_MSG) */
#define RDZV_STATUS_MAX_NODES 8192 /* per job, decoding */
#define RDZV_STATUS_EVENTS 16      /* recent events per job */
#define RDZV_STATUS_TEXT_MAX 199   /* event text */
#define RDZV_STATUS_NAME_MAX 15    /* state names, outcome type, "rdzvd" */
#define RDZV_STATUS_VERSION_MAX 63
#define RDZV_STATUS_ASIDE 8         /* per job: nodes put aside listed (the rest counted) */
#define RDZV_STATUS_REASON_MAX 255  /* why a node was put aside */
#define RDZV_STATUS_ASIDE_GPUS 16   /* per node put aside: GPU UUIDs listed (the rest counted) */
/* Per job: rdzvd lists at most this many ranks (the longest silent), counting the rest in
 * ranks_left_out; decoding refuses more. */
#define RDZV_STATUS_MAX_RANKS 4096
/* Per job: rdzvd lists at most this many members (the generation's first), counting the rest in
 * members_left_out (~1,900 spares added by anyone would otherwise make STATUS too large to
 * send). */
#define RDZV_STATUS_SHOW_MEMBERS 256
/* The status document is at most this many bytes (compact JSON), so that a STATUS_REPLY always
 * fits one frame (RDZV_MAX_MSG): jobs that do not fit are counted in jobs_left_out; a job that
 * does not fit with its nodes and ranks is listed without them (counted in members_left_out and
 * ranks_left_out). */
#define RDZV_STATUS_JSON_MAX ((1u << 20) - 4096)

struct rdzv_status_node {
    char host[RDZV_HOST_MAX + 1];
    char node_id[RDZV_ID_MAX + 1];
    int64_t node_rank; /* -1: not in the current generation */
    int64_t workers;
    double last_heartbeat_age_s, age_s;
    /* the failures charged to it (as --bad-node-failures counts them: not a signal from outside,
     * nor a rank that failed on another node first) */
    int64_t failures;
    bool spare, connected;
    char state[RDZV_STATUS_NAME_MAX + 1]; /* running, stopped, waiting, spare, stopping */
    /* (optional) its slowest rank's compute time (ms, as the ranks'); -1: none */
    int64_t compute_ms;
    /* (optional) its compute time over the job's median (rdzvd's straggler score; 0: not
     * scored), and whether rdzvd called it a straggler in this generation */
    double straggler_score;
    bool straggler;
    /* (optional, 1.21) its agent's longest event loop stall since it started (s); -1: none said */
    double loop_stall_max_s;
    /* (optional, 1.23) its fastest link in the network pre-flight (MB/s); -1: not checked */
    double preflight_mbps;
};

/* A rank's last progress report: only ranks of the current generation that reported. */
struct rdzv_status_rank {
    int64_t rank; /* global: the node's rank offset + local rank */
    int64_t node_rank;
    char host[RDZV_HOST_MAX + 1];
    int64_t step; /* the last step it reported */
    double age_s; /* since it reported (rdzvd's clock, from the agent's age at the time) */
    /* (optional) its agent's --progress-timeout for it (auto: its own); 0: none */
    double timeout_s;
    /* (optional) the median of its last steps' compute times (ms); -1: none said */
    int64_t compute_ms;
};

struct rdzv_status_event {
    double time; /* unix seconds */
    char text[RDZV_STATUS_TEXT_MAX + 1];
};

/* A node the job put aside (its failure history). */
struct rdzv_status_aside {
    char node_id[RDZV_ID_MAX + 1];
    char host[RDZV_HOST_MAX + 1];
    int64_t failures;
    char reason[RDZV_STATUS_REASON_MAX + 1];
    /* Its GPUs put aside with it ("gpu_uuids" in JSON, absent when none or from an older rdzvd):
     * n_gpus listed, gpus_left_out more ("gpu_uuids_left_out", absent when 0). */
    unsigned n_gpus;
    struct rdzv_gpu_uuid gpus[RDZV_STATUS_ASIDE_GPUS];
    int64_t gpus_left_out;
};

/* A job's timeline (the status page draws it): its generations as bands, what happened as marks,
 * and its steps per second over time. Fixed size, so that a job's costs no more after a week than
 * after a minute: the newest RDZV_STATUS_BANDS generations and RDZV_STATUS_MARKS marks are kept,
 * and the rate samples cover the whole job at an interval that doubles whenever they fill. */
#define RDZV_STATUS_BANDS 32
#define RDZV_STATUS_MARKS 32
#define RDZV_STATUS_RATES 120
/* The first jobs listed carry a timeline; the rest are listed without (its memory bounded). */
#define RDZV_STATUS_TIMELINES 256

enum rdzv_mark_kind {
    RDZV_MARK_FAILURE,   /* a worker failed: the job restarts (its root cause) */
    RDZV_MARK_RESTART,   /* a restart not charged to the budget (scale-up) */
    RDZV_MARK_NODE_LOST, /* a node's agent disconnected or fell silent */
    RDZV_MARK_PUT_ASIDE, /* a node put aside */
    RDZV_MARK_SPARE,     /* spare nodes promoted into a generation */
    RDZV_MARK_LEADER,    /* the job rebuilt from its record: a leader change or rdzvd restart */
    RDZV_MARK_END,       /* the job ended (succeeded, failed, cancelled) */
    RDZV_MARK_STRAGGLER, /* a node called a straggler (and put aside, by policy) */
    _RDZV_MARK_MAX,
};
/* "failure", "restart", "node_lost", "put_aside", "spare", "leader", "end", "straggler" */
extern const char *const rdzv_mark_names[_RDZV_MARK_MAX];

struct rdzv_status_band {
    uint64_t generation;
    double start, end; /* unix seconds; end 0: it runs */
    int64_t world_size, nodes;
};

struct rdzv_status_mark {
    double time; /* unix seconds */
    uint64_t generation;
    enum rdzv_mark_kind kind;
    char text[RDZV_STATUS_TEXT_MAX + 1];
};

/* A recovery: from a running generation stopped (a failure, a node lost or put aside, a
 * restart) to the next generation's first step, as rdzvd saw it, point by point. */
enum rdzv_recovery_point {
    RDZV_RECOVERY_DETECTED,   /* rdzvd decided to stop the generation */
    RDZV_RECOVERY_STOPPED,    /* every member's workers stopped (or kept, in place) */
    RDZV_RECOVERY_RENDEZVOUS, /* the next generation's members and ranks decided */
    RDZV_RECOVERY_SENT,       /* its ranks (and NCCL ids) sent to every member */
    RDZV_RECOVERY_FIRST_STEP, /* a rank of the next generation reported a step */
    _RDZV_RECOVERY_POINTS,
};
/* "detected", "stopped", "rendezvous", "sent", "first_step" */
extern const char *const rdzv_recovery_point_names[_RDZV_RECOVERY_POINTS];
/* The phases: phase i runs from point i to point i + 1, and the last, "total", from the first
 * point to the last. "stop", "rendezvous", "nccl", "first_step", "total". */
enum { RDZV_RECOVERY_TOTAL = _RDZV_RECOVERY_POINTS - 1, _RDZV_RECOVERY_PHASES };
extern const char *const rdzv_recovery_phase_names[_RDZV_RECOVERY_PHASES];
/* The newest recoveries a timeline keeps. */
#define RDZV_STATUS_RECOVERIES 16

struct rdzv_status_recovery {
    uint64_t generation;    /* the generation that stopped */
    enum rdzv_mark_kind kind; /* its cause: failure, restart, node_lost or put_aside */
    bool inplace;           /* the job recovers in place (--recovery inplace) */
    double t[_RDZV_RECOVERY_POINTS]; /* unix seconds; 0: not reached (yet) */
};

/* Seconds of recovery rc's phase ph, or -1 when it has not completed. */
double rdzv_recovery_phase_s(const struct rdzv_status_recovery *rc, unsigned ph);

/* A histogram of seconds (Prometheus' cumulative buckets are made when it is written). */
#define RDZV_HIST_BUCKETS 12
extern const double rdzv_hist_bounds_s[RDZV_HIST_BUCKETS]; /* 0.05 s .. 120 s, then +Inf */
struct rdzv_hist {
    uint64_t in[RDZV_HIST_BUCKETS + 1]; /* in[i]: at most bounds[i] and above bounds[i - 1] */
    uint64_t count;
    double sum;
};
/* Count x seconds (negative counts as 0). */
void rdzv_hist_add(struct rdzv_hist *h, double x);

struct rdzv_status_timeline {
    unsigned n_bands; /* oldest first */
    struct rdzv_status_band bands[RDZV_STATUS_BANDS];
    unsigned n_marks; /* oldest first */
    struct rdzv_status_mark marks[RDZV_STATUS_MARKS];
    /* Steps per second of rank 0: sample i covers [rate_start + i * rate_interval_s, + one
     * interval); the last one is the interval under way (its rate so far). */
    double rate_start, rate_interval_s;
    unsigned n_rates;
    double rates[RDZV_STATUS_RATES];
    unsigned n_recoveries; /* the newest, oldest first */
    struct rdzv_status_recovery recoveries[RDZV_STATUS_RECOVERIES];
    /* Over the job's whole life: recoveries begun, and each phase's seconds summed over the
     * recoveries that completed it. */
    int64_t recoveries_total;
    double phase_sum_s[_RDZV_RECOVERY_PHASES];
    /* What failures cost the job (rdzv_cost): when it began (its first member; unix seconds, 0:
     * unknown), the detection of its recoveries summed (from each failure, as its report dates
     * it, to rdzvd's decision), and the time rank 0 spent on steps done before (after a restart
     * from a checkpoint, until it passed the step reached before); first_step_s: rank 0's
     * first report (0: none yet); first_failure_s: the first failure's (0: none yet);
     * first_band_s: the first generation's start (0: none yet); cut_s: the recoveries that a
     * failure cut short, from their last point to it; open_since_s: the last point of the
     * recovery under way (0: none); rebuilt: the job was rebuilt from its record (an rdzvd
     * restart, a new leader), and the figures count from then. */
    double start_s, first_step_s, first_failure_s, first_band_s, detect_sum_s, redo_s, cut_s,
        open_since_s;
    bool rebuilt;
    /* What failures cost the job, as rdzvd computed it from the above (rdzv_cost_format): to
     * its end, or so far; "" when unknown. JSON: the job's "cost" (absent: unknown). */
    char cost[RDZV_COST_MAX + 1];
};

/* What failures cost a job, from its timeline, at time t_end (its end, or now): the wall time
 * from its first member, the start-up (to rank 0's first step, or to the first failure when it
 * came before; without progress reports, to its first generation's start), the time lost to
 * recoveries (detection, then each phase to the next generation's first step, and the part of
 * one that the next failure or the end cut short), and the rest, training (of which redo_s
 * redid steps done before). startup + trained + lost = wall. Without progress reports a
 * recovery ends when the next generation's ranks went out. */
struct rdzv_cost {
    double wall_s, startup_s, trained_s, redo_s, lost_s, detect_s;
    double phase_s[RDZV_RECOVERY_TOTAL]; /* stop, rendezvous, nccl, first_step: summed */
    double cut_s; /* recoveries cut short by the next failure, or by the end */
    int64_t recoveries;
    bool rebuilt; /* counted from the job's rebuild (rdzv_status_timeline.rebuilt) */
    /* No step was reported: where the start-up ends is not known, so startup_s and trained_s
     * are guesses (to the first generation's start, and the rest), their sum only is known;
     * and a recovery's first step (phase_s[3], 0 then) is not known either: it ended, as far
     * as rdzvd could see, when its ranks went out. Said "?" rather than a figure. */
    bool no_steps;
};
/* 0, or -ENODATA when the timeline has no start. */
int rdzv_cost_of(const struct rdzv_status_timeline *tl, double t_end, struct rdzv_cost *c);
/* One line for people: "wall 62.3 s: start-up 4.1 s (7%), training 50.2 s (81%; 9.3 s of it
 * redoing steps done before), 3 recoveries 8.0 s (13%: detect 0.1, stop 0.3, rendezvous 0.0,
 * nccl 0.0, first step 7.6)"; with no step reported, what was not seen is not given a figure:
 * "wall 4.0 s: start-up ?, training ? (no step reported: 3.9 s, 97%, between them), 1 recovery
 * 0.1 s (3%: detect 0.0, stop 0.0, rendezvous 0.0, nccl 0.0, first step ?)". The length, or
 * -ENOSPC. */
int rdzv_cost_format(const struct rdzv_cost *c, char *buf, size_t len);

struct rdzv_status_job {
    char run_id[RDZV_ID_MAX + 1];
    char state[RDZV_STATUS_NAME_MAX + 1]; /* forming, nccl, running, stopping, ended */
    uint64_t generation;
    int64_t restart_count, max_restarts, min_nodes, max_nodes, nodes_in_generation, world_size;
    double age_s;
    int store_port; /* 0: none open */
    size_t n_nodes;
    struct rdzv_status_node *nodes; /* n_nodes, owned */
    size_t n_ranks;                 /* 0..RDZV_STATUS_MAX_RANKS, by rank */
    struct rdzv_status_rank *ranks; /* n_ranks, owned (NULL when none) */
    int64_t ranks_left_out;         /* ranks that reported but did not fit */
    int64_t members_left_out;       /* members (nodes) not listed in nodes */
    unsigned n_events;              /* oldest first */
    struct rdzv_status_event events[RDZV_STATUS_EVENTS];
    bool ended; /* the outcome below is set ("outcome" in JSON) */
    char outcome_type[RDZV_STATUS_NAME_MAX + 1];
    int64_t outcome_exit_code;
    char outcome_summary[RDZV_SUMMARY_MAX + 1];
    /* Ended: how long the job ran (created to ended) and how long ago it ended; -1 when not
     * known (an rdzvd before protocol 1.4 sends neither). */
    double duration_s, ended_age_s;
    /* The nodes the job put aside: n_aside listed ("put_aside" in JSON, absent from older
     * rdzvds), aside_total in all. */
    unsigned n_aside;
    struct rdzv_status_aside aside[RDZV_STATUS_ASIDE];
    int64_t aside_total;
    /* Rank 0's steps per second now (over rdzvd's last rate window), when rate_known (a rank 0
     * reported progress; "steps_per_second" absent in JSON otherwise). */
    bool rate_known;
    double steps_per_second;
    struct rdzv_status_timeline *timeline; /* owned; NULL: none ("timeline" absent in JSON) */
};

struct rdzv_status {
    char daemon[RDZV_STATUS_NAME_MAX + 1]; /* "rdzvd" */
    char version[RDZV_STATUS_VERSION_MAX + 1];
    int64_t port;
    double uptime_s;
    int64_t connections, accepted, rejected, protocol_errors, requests, main_store_keys;
    /* Connections closed with more output due than twice --max-outbuf ("outbuf_closes" in the
     * JSON's stats once there is one; absent, as from older rdzvds: 0). */
    int64_t outbuf_closes;
    /* What the stores hold for clients, and --max-store-bytes ("store_bytes" in JSON, absent
     * from older rdzvds: 0 and 0). */
    int64_t store_held, store_limit;
    /* The jobs rdzvd holds (in memory, and waiting for their nodes in their records), those
     * waiting, and --max-jobs ("jobs_held" in JSON, absent from older rdzvds and where there is
     * no bound: 0, 0 and 0). */
    int64_t jobs_held, jobs_waiting, jobs_limit;
    /* Descriptors held for clients and --max-conns, input buffered and --max-input-bytes
     * ("descriptors" and "input_bytes" in JSON, {held, limit}; absent from older rdzvds: 0). */
    int64_t fds_held, fds_limit, input_held, input_limit;
    size_t n_jobs;
    struct rdzv_status_job *jobs; /* n_jobs, owned */
    int64_t jobs_left_out;        /* jobs not listed in jobs (they did not fit) */
    /* Nodes put aside since rdzvd started, by reason: their workers' failures, a failed health
     * check ("nodes_put_aside" in JSON, absent from older rdzvds: 0). */
    int64_t put_aside_failures, put_aside_check, put_aside_straggler, put_aside_network;
    /* Every recovery's phases since rdzvd started, by cause (not in JSON: /metrics). */
    struct rdzv_hist recovery[_RDZV_MARK_MAX][_RDZV_RECOVERY_PHASES];
};

/* What a reader who proved no token is shown (rdzv-status-hide.c): every node id of st blanked,
 * "" in nodes and put_aside, and RDZV_STATUS_HIDDEN_ID in every text (events, timeline marks,
 * the outcome's summary, put_aside reasons) for what follows the words "node id ": to the closing
 * quote when quoted, else one word of the bytes rdzv_node_id_text writes an id with. A text
 * names a node id only so. Nothing else in a text is touched; each is read once. */
#define RDZV_STATUS_HIDDEN_ID "hidden"
void rdzv_status_hide_node_ids(struct rdzv_status *st);
/* id as a text names it, after "node id ": id itself, or where it holds a byte that would end it
 * (a space, a control byte, one of ,();'"%, or a colon at its end) a copy in buf with each such
 * byte as %XX (lowercase hex). buf: RDZV_NODE_ID_TEXT_MAX + 1 bytes. */
#define RDZV_NODE_ID_TEXT_MAX (3 * RDZV_ID_MAX)
const char *rdzv_node_id_text(const char *id, char *buf, size_t cap);

/* Give st room for n jobs (zeroed), or job j room for n nodes or n ranks: 0 or -ENOMEM. Replaces
 * (frees) what was there. No limit here: the daemon may have more than a decoder accepts. */
int rdzv_status_alloc_jobs(struct rdzv_status *st, size_t n);
int rdzv_status_alloc_nodes(struct rdzv_status_job *j, size_t n);
int rdzv_status_alloc_ranks(struct rdzv_status_job *j, size_t n);

/* The peak of j's steps per second as a reader shows it: the highest of its timeline's newest
 * n samples and of its rate now (when known), so never below the rate shown beside it (the
 * samples are averages over their interval, the rate now over rdzvd's last 10 s); 0: none. */
double rdzv_status_rate_peak(const struct rdzv_status_job *j, unsigned n);

/* The lowest and highest step of j's ranks (both 0 when it has none). */
void rdzv_status_step_range(const struct rdzv_status_job *j, int64_t *lo, int64_t *hi);

/* A new array (free() it) of pointers to j's n_ranks ranks, the oldest report first (ties by
 * rank): where a hung rank shows. NULL when j has no ranks or out of memory. */
const struct rdzv_status_rank **rdzv_status_ranks_oldest(const struct rdzv_status_job *j);

/* Free the arrays st owns and zero it. Accepts a zeroed struct. */
void rdzv_status_free(struct rdzv_status *st);
/* Give j a zeroed timeline (replacing any): 0 or -ENOMEM. */
int rdzv_status_alloc_timeline(struct rdzv_status_job *j);
/* Free j's nodes, ranks and timeline (none left: a flat struct a plain copy may duplicate). */
void rdzv_status_job_free_arrays(struct rdzv_status_job *j);

/* The status document: a new reference, or NULL when out of memory. A node or event whose
 * strings are not valid UTF-8 is left out (as jansson refuses it). At most RDZV_STATUS_JSON_MAX
 * bytes: jobs in order while they fit, each with its nodes and ranks or, when those do not fit,
 * without (counted in its "members_left_out" and "ranks_left_out"), the others counted in
 * "jobs_left_out" (st->jobs_left_out included). */
json_t *rdzv_status_to_json(const struct rdzv_status *st);

/* Append a STATUS_REPLY frame carrying the document. 0, -ENOMEM or -EMSGSIZE. */
int rdzv_status_put_reply(struct rdzv_buf *b, const struct rdzv_status *st);

/* Decode a STATUS_REPLY body into *st (zeroed first; free it with rdzv_status_free whatever the
 * result). Every member the encoder writes must be there with its type (but "ranks",
 * "ranks_left_out", "jobs_left_out" and "members_left_out", which older daemons do not write: 0
 * when absent); strings longer than their field, counts past the limits and negative ranks, steps
 * or ages are refused. 0, -ENOMEM, or -EBADMSG with a one-line reason in err[0..errlen). */
int rdzv_status_parse(const uint8_t *body, size_t len, struct rdzv_status *st, char *err,
                      size_t errlen);
/* A timeline's recoveries as the status document has them: {"total", "phase_sum_s": {phase:
 * s}, "list": [{"generation", "kind", "inplace", point: t, ...}]}; a new reference, or NULL when
 * out of memory (rdzv-status-recovery.c). */
json_t *rdzv_status_recoveries_to_json(const struct rdzv_status_timeline *tl);
/* rdzv-status-limits.c: what rdzvd holds for clients against its limits ("store_bytes",
 * "descriptors", "input_bytes", "jobs_held"; each only with a limit). put: 0 or -ENOMEM; parse:
 * 0, or -EBADMSG with err set (a malformed or negative figure). */
int rdzv_status_limits_put(json_t *root, const struct rdzv_status *st);
int rdzv_status_limits_parse(json_t *root, struct rdzv_status *st, char *err, size_t errlen);
