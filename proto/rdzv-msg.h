/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-msg.h: rendezvous message bodies (JSON through jansson) <-> C structs, one struct per
 * message of proto/RENDEZVOUS.md. No I/O, no logging, no state: any thread may call these.
 *
 * Encoders rdzv_msg_put_X(b, const struct X *) append one whole frame (header + JSON body) to b;
 * they return 0, -ENOMEM or -EMSGSIZE (callers drop b then). The caller keeps the struct.
 * Decoders rdzv_msg_parse_X(body, len, struct X *, err, errlen) check everything the receiver
 * relies on (types, lengths, ranges, hex ids), so a handler can act on the struct directly; they
 * return 0, or -EBADMSG with a one-line reason in err[0..errlen) (the struct is then undefined).
 * Unknown members are ignored; JSON with duplicate keys is refused. Field names and the order
 * in which encoders write them are the wire format: see RENDEZVOUS.md before changing either. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-gpu.h"
#include "proto/rdzv-preflight.h"

struct rdzv_buf;

#define RDZV_ID_MAX 128       /* run_id, node_id */
#define RDZV_NPROC_MAX 1024   /* JOIN nproc: workers on one node */
/* The words of rdzvd's ERROR for a JOIN naming a node id its job knows, without its secret: an
 * agent that never got one (its JOINED lost) joins again under a new node id. */
#define RDZV_ERROR_NODE_ID_KNOWN "belongs to a member of job"
#define RDZV_SECRET_HEX 64    /* a member's secret (JOINED, JOIN): 32 bytes as lowercase hex */
#define RDZV_GENERATION_MAX ((1ull << 53) - 1) /* exact as a JSON number anywhere; never wraps */
#define RDZV_HOST_MAX 255
#define RDZV_STORE_ADDR_MAX 63 /* NCCL_ID store_addr: a numeric IPv4 or IPv6 address */
#define RDZV_STORE_ALLOW_MAX 255 /* NCCL_REQUEST store_allow: rdzvd's --allow-store-from */
#define RDZV_NCCL_ID_BYTES 128
#define RDZV_NCCL_HEX_LEN (2 * RDZV_NCCL_ID_BYTES)
#define RDZV_MAX_NCCL_IDS 64  /* one root per 128 ranks: 8192 ranks */
#define RDZV_SUMMARY_MAX 1023
#define RDZV_COST_MAX 511
#define RDZV_WARNING_MAX 511 /* JOINED's and HEARTBEAT's warning (1.17) */
#define RDZV_REASON_MAX 255   /* WORKER_EXIT's optional reason */
#define RDZV_ERROR_MAX 511    /* ERROR text and NCCL_ID error: cut (UTF-8-safe) past this */
#define RDZV_HEARTBEAT_TIMEOUT_MS 5000 /* default: silence after which a node counts as lost */
#define RDZV_JOIN_TIMEOUT_MS 600000    /* default: wait for replacements below min (torchrun's) */
/* An agent's longest wait between two reconnect attempts (agent-client.h's backoff, jittered):
 * a job rdzvd rebuilds at its start or election waits this long more for its agents. */
#define RDZV_RECONNECT_WAIT_MAX_MS 3000
/* With --recovery inplace a job ends succeeded once every survivor has left succeeded (R17a).
 * A newcomer's agent told so while its fresh workers run gives them this long to end on their
 * own (an honest one trained beside the survivors and ends about when they do), then stops them:
 * they wait for peers that are done (agent-policy A19a). */
#define RDZV_NEWCOMER_WAIT_MS 30000
#define RDZV_BAD_NODE_FAILURES_MAX 1000 /* JOIN bad_node_failures */
#define RDZV_BAD_NODE_WINDOW_MAX 2592000 /* JOIN bad_node_window (seconds): 30 days */
/* JOIN bad_node_failures with a bad_node_window: the failures rdzvd keeps per node */
#define RDZV_BAD_NODE_WINDOWED_MAX 32
#define RDZV_RESTART_BACKOFF_MAX 3600 /* JOIN restart_backoff (seconds) */
#define RDZV_AGE_MS_MAX 31536000000LL /* JOIN age_ms: a year */
#define RDZV_INCARNATION_MAX 9007199254740991LL /* JOINED incarnation: 2^53 - 1, exact in JSON */
/* JOIN straggler: factor in (1, RDZV_STRAGGLER_FACTOR_MAX], window_ms in the range below */
#define RDZV_STRAGGLER_FACTOR_MAX 100.0
#define RDZV_STRAGGLER_WINDOW_MIN_MS 1000
#define RDZV_STRAGGLER_WINDOW_MAX_MS 86400000
#define RDZV_COMMAND_HEX 16 /* JOIN command: a 64-bit fingerprint, hex */
#define RDZV_EXIT_PUT_ASIDE 69 /* EVENT put_aside's exit_code: the agent's exit status for it */

/* The network pre-flight (1.23, docs/design/preflight.md). */
#define RDZV_PF_TOKEN_HEX 32     /* a link check's token: 16 bytes as lowercase hex */
#define RDZV_PF_BOUND_MAX_MS 10000 /* PREFLIGHT bound_ms: 1..this */
#define RDZV_PF_ID_MAX 9007199254740991LL

/* JOIN "preflight" (1.23, sent with --preflight net): where this agent's link check listens
 * (a numeric address, the one its workers use, and a port), the token a probe must show there,
 * and (job-wide, from the first JOIN) the fraction of the job's median below which a link is
 * slow. on false (absent, an older agent): no check. */
struct rdzv_join_preflight {
    bool on;
    char addr[RDZV_STORE_ADDR_MAX + 1];
    int64_t port;                       /* 1..65535 */
    char token[RDZV_PF_TOKEN_HEX + 1];  /* lowercase hex */
    double fraction;                    /* in (0, 1) */
};

/* PREFLIGHT (1.23, daemon -> agent): measure the link to the peer's listener at addr:port,
 * showing token, each way within bound_ms; answer with PREFLIGHT_REPORT naming id. full (absent:
 * false): a full probe, the whole window each way (the pre-flight's confirmation). */
struct rdzv_preflight {
    int64_t id; /* 1..RDZV_PF_ID_MAX */
    char addr[RDZV_STORE_ADDR_MAX + 1];
    int64_t port;
    char token[RDZV_PF_TOKEN_HEX + 1];
    int64_t bound_ms; /* 1..RDZV_PF_BOUND_MAX_MS */
    bool full;
};

/* PREFLIGHT_REPORT (1.23, agent -> daemon): the figures of PREFLIGHT id, MB/s each way (up:
 * the agent to its peer), or -1: unreachable. */
struct rdzv_preflight_report {
    int64_t id;
    double up, down; /* -1, or 0..RDZV_PF_MBPS_MAX */
};

enum rdzv_nccl_mode { RDZV_NCCL_OFF, RDZV_NCCL_AUTO, RDZV_NCCL_REQUIRED };

/* What a reconnecting agent says about the generation its workers are running (JOIN "resume"):
 * lets a restarted daemon rebuild the job, and a daemon that moved on tell the agent to stop. */
struct rdzv_resume {
    uint64_t generation; /* 0: none (a fresh join) */
    int64_t node_rank, nnodes, rank_offset, world_size;
    int64_t restart_count;
    int64_t master_port;
    bool left;           /* its workers all exited 0 and it had sent LEAVE */
    /* 1.18: the incarnation of the rdzvd that last JOINED the agent (JOINED incarnation); 0
     * (absent: an older agent, or an older rdzvd's JOINED): unknown. */
    uint64_t incarnation;
};

struct rdzv_join {
    char run_id[RDZV_ID_MAX + 1];
    char node_id[RDZV_ID_MAX + 1];
    char host[RDZV_HOST_MAX + 1];
    int64_t nproc;
    int64_t node_rank; /* -1: none asked for */
    int64_t min, max;
    int64_t last_call_ms;
    int64_t max_restarts;
    enum rdzv_nccl_mode nccl;
    int64_t nccl_ids;
    bool rank_hint;               /* node_rank came from the scheduler: a preference, no demand */
    int64_t heartbeat_timeout_ms; /* job-wide, from the first JOIN */
    int64_t join_timeout_ms;      /* how long survivors below min wait for a replacement */
    bool scale_up_now;            /* a node joining a running job below max restarts it at once */
    bool inplace;                 /* "recovery":"inplace" (absent: "restart"): job-wide, must
                                   * agree with the job's first JOIN */
    struct rdzv_resume resume;
    /* The secret JOINED gave this agent (1.2): sent on every JOIN after the first, it proves the
     * agent is the member it reconnects as (a resume, a takeover). "" when none. */
    char secret[RDZV_SECRET_HEX + 1];
    /* 1.4: this agent can host the generation's store (NCCL_REQUEST "store"); sent when set. */
    bool host_store;
    /* 1.5: this agent can host a replica of rdzvd (REPLICA), and takes REPLICAS; sent when set. */
    bool host_replica;
    /* Job-wide, from the first JOIN: a node whose workers failed this many times within the
     * job is put aside (EVENT put_aside) when the job can form without it; 0 (absent, an older
     * agent): never. 0..RDZV_BAD_NODE_FAILURES_MAX. */
    int64_t bad_node_failures;
    /* 1.8: the UUIDs of the GPUs this node's workers use (rdzv-gpu.h); sent when there are any.
     * A job refuses a node that shares one with a node it put aside. */
    struct rdzv_gpu_set gpus;
    /* 1.8, job-wide as bad_node_failures: only failures within this many seconds (rdzvd's
     * clock) count; 0 (absent, an older agent): every failure within the job counts.
     * 0..RDZV_BAD_NODE_WINDOW_MAX; with a window, bad_node_failures is at most
     * RDZV_BAD_NODE_WINDOWED_MAX. */
    int64_t bad_node_window_s;
    /* 1.8, job-wide: the longest delay rdzvd puts before a restart's next generation (the first
     * restart none, then 1 s, doubling up to this); 0 (absent, an older agent): none.
     * 0..RDZV_RESTART_BACKOFF_MAX seconds. */
    int64_t restart_backoff_s;
    /* Job-wide, from the first JOIN ("straggler", 1.11): a node whose slowest rank's compute
     * time stays at or above straggler_factor times the job's median for straggler_window_ms
     * is called a straggler, and with straggler_aside put aside when the job can do without it.
     * straggler_factor 0 (absent, an older agent): nobody is scored. */
    double straggler_factor;
    int64_t straggler_window_ms;
    bool straggler_aside;
    /* 1.12: how long ago this agent started, in ms by its own clock (1..RDZV_AGE_MS_MAX); 0
     * (absent, an older agent): unknown. An rdzvd that serves one run (--exit-when-idle: an
     * agent hosted it) starts a job that ended afresh for an agent that started after it ended. */
    int64_t age_ms;
    /* 1.14: the fingerprint of the command the agent's workers run (RDZV_COMMAND_HEX lowercase
     * hex; "": not sent, an older agent). Job-wide, from the first JOIN: an agent with another
     * command is refused at once, not made a spare that never runs it. */
    char command[RDZV_COMMAND_HEX + 1];
    /* 1.23: --preflight net's listener (rdzv_join_preflight). */
    struct rdzv_join_preflight preflight;
    /* 1.20: on a JOIN without a resume from an agent whose workers ran a generation of the job
     * (stopped since: its READY went, and it waits for the next ROUND), the incarnation of the
     * rdzvd that sent its last ROUND (the JOINED's before it; 1..RDZV_INCARNATION_MAX); 0
     * (absent: an older agent, or none ran): none. */
    uint64_t ran_incarnation;
};

struct rdzv_round {
    uint64_t generation;
    int64_t node_rank, nnodes;
    int64_t rank_offset, world_size;
    char master_addr[RDZV_HOST_MAX + 1];
    int64_t master_port;
    int64_t restart_count, max_restarts;
    unsigned n_ids;
    char ids[RDZV_MAX_NCCL_IDS][RDZV_NCCL_HEX_LEN + 1]; /* last: parsing leaves ids[n_ids..] as
                                                         * they were */
};

struct rdzv_worker_exit {
    uint64_t generation;
    int64_t rank, local_rank;
    int64_t exit_code; /* 128+N for signal N */
    int64_t signal;
    double time;       /* unix seconds */
    char host[RDZV_HOST_MAX + 1];
    /* Optional (empty: none; sent only when set, ignored by daemons that predate it): why the
     * agent failed the worker when it did not fail by itself, e.g. "made no progress for 60 s after
     * step 1234" (--progress-timeout). The daemon's root cause then says this instead of the
     * exit. */
    char reason[RDZV_REASON_MAX + 1];
    /* Optional (1.19; empty: none, as from an older agent): the last non-empty line the worker
     * wrote to its stderr, e.g. "RuntimeError: boom" (cut past RDZV_REASON_MAX, no control
     * characters). rdzvd's root cause says it, and compares it across nodes at start-up. */
    char error[RDZV_REASON_MAX + 1];
};

struct rdzv_event {
    char type[16]; /* "failed", "succeeded": the job ended; "restart": stop the workers of
                    * generation, send READY, a new round follows */
    uint64_t generation;
    int64_t exit_code;
    char summary[RDZV_SUMMARY_MAX + 1];
    /* The job's end (1.16, optional both ways): what failures cost it, one line for people
     * (rdzv_cost_format); "" when absent. */
    char cost[RDZV_COST_MAX + 1];
    /* restart (1.17, optional both ways): the root cause failed at start-up; an agent whose
     * workers have not reported a step yet lets them run up to this long before stopping them,
     * so that a failure of the job's own (every node failing alike) shows as one. 0: none;
     * a longer one is read as RDZV_STARTUP_GRACE_MAX_MS, a negative one refused. */
    int64_t startup_grace_ms;
};
#define RDZV_STARTUP_GRACE_MAX_MS 60000

/* JOINED (daemon -> agent): the JOIN was accepted. Every member is optional on the wire (only
 * spare and resumed are acted on). */
struct rdzv_joined {
    char run_id[RDZV_ID_MAX + 1];
    int64_t waiting;     /* members the job has, this one included */
    bool spare;          /* the job runs without this node for now */
    bool resumed;        /* the agent's generation goes on (a resume was accepted) */
    uint64_t generation; /* the job's generation */
    /* The job's recovery, "restart" or "inplace"; "" when absent: a daemon that predates
     * recovery in place (protocol 1.1), which an agent that asked for it must refuse. The
     * encoder writes the member only when it is set. */
    char recovery[16];
    /* The member's secret (1.2; "" when absent: an older daemon): the agent sends it back in
     * every later JOIN, as its proof. */
    char secret[RDZV_SECRET_HEX + 1];
    /* (1.17) A line for people that the agent says at warn ("" when none): another agent of the
     * job runs on this host under the same name. Cut to fit. */
    char warning[RDZV_WARNING_MAX + 1];
    /* (1.18) This rdzvd's incarnation: drawn at its start, 1..RDZV_INCARNATION_MAX; 0 when
     * absent (an older daemon). The agent sends it back in its resume, so that an rdzvd that
     * never restarted tells it the job is over instead of rebuilding the job from its word. */
    uint64_t incarnation;
};

/* NCCL_REQUEST (daemon -> node-rank-0 agent): make count ids for generation, and (1.4) with
 * store, open the generation's store. */
struct rdzv_nccl_request {
    uint64_t generation;
    unsigned count; /* 1..RDZV_MAX_NCCL_IDS; 0 only with store */
    bool store;     /* host the generation's TCPStore and say where (NCCL_ID store_*) */
    /* With store: the addresses its TCPStore clients may come from, as rdzvd's --allow-store-from
     * ("CIDR[,CIDR...]"); "": anywhere. Printable ASCII. */
    char store_allow[RDZV_STORE_ALLOW_MAX + 1];
};

/* NCCL_ID (agent -> daemon): the ids, or why there are none; (1.4) where the store it opened
 * for the generation listens, in either form. */
struct rdzv_nccl_id {
    uint64_t generation;
    bool failed;                       /* "error" form: error set, no ids */
    char error[RDZV_ERROR_MAX + 1];
    char store_addr[RDZV_STORE_ADDR_MAX + 1]; /* numeric address; "" with store_port 0: none */
    int64_t store_port;                /* 1..65535, or 0: no store */
    unsigned n_ids;                    /* 1..RDZV_MAX_NCCL_IDS unless failed or a store is given
                                        * (then 0 too) */
    char ids[RDZV_MAX_NCCL_IDS][RDZV_NCCL_HEX_LEN + 1]; /* last: parsing leaves ids[n_ids..] */
};

/* HEARTBEAT "progress" entries: at most JOIN's nproc limit (one per local rank). */
#define RDZV_PROGRESS_MAX 1024
#define RDZV_PROGRESS_AGE_MAX_MS INT64_C(31536000000) /* a year: older reads as a bad value */
/* The most a step's compute time may be (proto/WORKER.md): an hour, in milliseconds. */
#define RDZV_COMPUTE_MS_MAX 3600000
/* The most a HEARTBEAT's loop_stall_ms may be: a day, in milliseconds. */
#define RDZV_LOOP_STALL_MAX_MS 86400000

/* One local rank's last progress report, as its agent saw it. */
struct rdzv_rank_progress {
    int64_t local_rank; /* 0..RDZV_PROGRESS_MAX-1, distinct within a message */
    int64_t step;       /* >= 0 */
    int64_t age_ms;     /* how long before the message it came: 0..RDZV_PROGRESS_AGE_MAX_MS */
    /* (1.5, optional) the silence after which its agent fails it (--progress-timeout, auto: its
     * own), 1..RDZV_PROGRESS_AGE_MAX_MS; 0: none (not sent). */
    int64_t timeout_ms;
    /* (1.10, optional) its last step's compute time (proto/WORKER.md), 0..RDZV_COMPUTE_MS_MAX:
     * sent only when has_compute; older daemons ignore it, older agents never send it. */
    bool has_compute;
    int64_t compute_ms;
};

/* (1.15) What the agent's job waits for, in rdzvd's answer to its HEARTBEAT ("wait"), so that
 * the agent can say so while it waits. */
enum rdzv_wait_for {
    RDZV_WAIT_NONE,    /* nothing: the member is absent */
    RDZV_WAIT_NODES,   /* "nodes": the job forms, nodes of min..max joined */
    RDZV_WAIT_REBUILD, /* "rebuild": a rebuilt generation's nodes, nodes of need back */
    RDZV_WAIT_BACKOFF, /* "backoff": the next generation after a restart's backoff */
};
#define RDZV_WAIT_LEFT_MAX_MS 31536000000 /* a year */
struct rdzv_wait {
    enum rdzv_wait_for what;
    int64_t nodes, need, max; /* 0..100000 each (--nnodes' bound); need: MIN, or the generation's */
    int64_t left_ms;          /* until the join timeout, the window's or the backoff's end;
                               * -1: none (0..RDZV_WAIT_LEFT_MAX_MS) */
};

/* HEARTBEAT (both ways): the generation and (agent -> daemon, optional) the progress of the
 * local ranks that have reported; n_progress 0 writes no "progress" member (as agents that
 * predate it, and the daemon's answer); (1.15, daemon -> agent, optional) what its job waits for
 * (wait.what RDZV_WAIT_NONE: no member; a "for" the reader does not know reads as none). READY
 * (agent -> daemon, after EVENT restart): one generation. */
struct rdzv_heartbeat {
    uint64_t generation;
    struct rdzv_wait wait;
    char warning[RDZV_WARNING_MAX + 1]; /* daemon -> agent (1.17), as JOINED's; "": none */
    /* (1.21, agent -> daemon, optional) the longest its event loop ran without waiting since the
     * agent started (ms, 0..RDZV_LOOP_STALL_MAX_MS): sent only when has_loop_stall */
    bool has_loop_stall;
    int64_t loop_stall_ms;
    unsigned n_progress;                                   /* 0..RDZV_PROGRESS_MAX */
    struct rdzv_rank_progress progress[RDZV_PROGRESS_MAX]; /* last: parsing leaves
                                                            * progress[n_progress..] as it was */
};

struct rdzv_ready {
    uint64_t generation; /* the generation whose local workers have all exited */
};

/* LEAVE (agent -> daemon): every local worker of generation is done. */
struct rdzv_leave {
    uint64_t generation;
    bool succeeded; /* "status":"succeeded"; any other status string reads as false */
};

/* UNHEALTHY (1.6, agent -> daemon): the agent's node failed a health check (rdzv-agent
 * --health-*): reason is the check's one line. rdzvd puts the node aside. */
struct rdzv_unhealthy {
    char reason[RDZV_REASON_MAX + 1];
};

/* CANCEL (1.6, agent -> daemon): the agent was stopped from outside by signal (SIGTERM, SIGINT:
 * scancel, a time limit, a preemption); reason says what it knows. rdzvd ends the job as
 * "cancelled" (exit code 128 + signal), charging nothing to the restart budget. sched_job (1.22,
 * optional: "" when absent) is the scheduler's job id when the agent knows that its scheduler is
 * ending that whole job (Slurm's squeue says it no longer runs; Grid Engine and PBS signal a
 * job's agents only to end it): rdzvd then ends the job as cancelled at once (job-policy.md R15a),
 * not as this node leaving. */
struct rdzv_cancel {
    int64_t signal; /* 1..64 */
    char reason[RDZV_REASON_MAX + 1];
    char sched_job[RDZV_ID_MAX + 1];
};

/* RELEASE (1.6, rdzvctl -> daemon): the job run_id takes back the nodes it put aside whose node
 * id or host is node. RELEASE_REPLY (daemon -> rdzvctl): how many it took back (0: none such),
 * or error when it could not. */
struct rdzv_release {
    char run_id[RDZV_ID_MAX + 1];
    char node[RDZV_HOST_MAX + 1];
};
struct rdzv_release_reply {
    int64_t released;
    char error[RDZV_ERROR_MAX + 1]; /* "" unless it failed */
    bool denied; /* 1.13: refused as not the operator's (rdzvctl exits 4); absent: false */
};

/* CANCEL_JOB (1.7, rdzvctl -> daemon): the operator (rdzvctl --admin-token-file) ends job run_id
 * as cancelled, for reason ("" for none); agents cannot. CANCEL_JOB_REPLY (daemon -> rdzvctl):
 * cancelled, or error saying why not (not the operator, no such job running here). */
struct rdzv_cancel_job {
    char run_id[RDZV_ID_MAX + 1];
    char reason[RDZV_REASON_MAX + 1];
};
struct rdzv_cancel_job_reply {
    bool cancelled;
    char error[RDZV_ERROR_MAX + 1]; /* "" unless it failed */
    bool denied; /* 1.13: refused as not the operator's (rdzvctl exits 4); absent: false */
};

/* ERROR (daemon -> peer): why the daemon closes the connection. A follower of a replicated
 * rdzvd (protocol 1.3) also says where the leader is: redirect is true, and leader is its
 * "HOST:PORT" ("" while no leader is elected: try again, elsewhere). */
#define RDZV_ENDPOINT_MAX 127
struct rdzv_error {
    char error[RDZV_ERROR_MAX + 1];
    bool redirect;
    char leader[RDZV_ENDPOINT_MAX + 1];
};

/* REPLICA (1.5). daemon -> agent: start replica id of the replicated rdzvd on port, at the
 * address this agent reaches rdzvd from (port set, no endpoint), keeping the cluster at replicas
 * voters once it leads. agent -> daemon: it listens at endpoint "ADDR:PORT", or (failed) it
 * could not, and error says why. */
#define RDZV_REPLICA_ID_MAX (1 << 30)
struct rdzv_replica {
    int64_t id;   /* 1..RDZV_REPLICA_ID_MAX */
    int64_t port; /* daemon -> agent: 1..65534 (its Raft link is port + 1); else 0 */
    int64_t replicas; /* daemon -> agent: 1..RDZV_REPLICAS_LIST_MAX; else 0 */
    char endpoint[RDZV_ENDPOINT_MAX + 1];
    bool failed;
    char error[RDZV_ERROR_MAX + 1];
};

/* REPLICAS (1.5, daemon -> agent): every replica's "HOST:PORT" now (the agent reconnects to
 * them when it loses the leader). 1..RDZV_REPLICAS_LIST_MAX entries. */
#define RDZV_REPLICAS_LIST_MAX 7
struct rdzv_replicas {
    unsigned n;
    char endpoint[RDZV_REPLICAS_LIST_MAX][RDZV_ENDPOINT_MAX + 1];
};

const char *rdzv_nccl_mode_name(enum rdzv_nccl_mode m);
int rdzv_nccl_mode_parse(const char *s, enum rdzv_nccl_mode *ret);

/* Append a frame of op whose body is obj serialised. Steals obj (NULL -> -ENOMEM). */
int rdzv_msg_put(struct rdzv_buf *b, uint8_t op, json_t *obj);
int rdzv_msg_put_hello(struct rdzv_buf *b, const char *peer);
int rdzv_msg_put_join(struct rdzv_buf *b, const struct rdzv_join *j);
int rdzv_msg_put_round(struct rdzv_buf *b, const struct rdzv_round *r);
int rdzv_msg_put_worker_exit(struct rdzv_buf *b, const struct rdzv_worker_exit *w);
int rdzv_msg_put_event(struct rdzv_buf *b, const struct rdzv_event *e);
int rdzv_msg_put_joined(struct rdzv_buf *b, const struct rdzv_joined *j);
int rdzv_msg_put_nccl_request(struct rdzv_buf *b, const struct rdzv_nccl_request *q);
int rdzv_msg_put_nccl_id(struct rdzv_buf *b, const struct rdzv_nccl_id *n);
int rdzv_msg_put_heartbeat(struct rdzv_buf *b, const struct rdzv_heartbeat *h);
int rdzv_msg_put_ready(struct rdzv_buf *b, const struct rdzv_ready *r);
int rdzv_msg_put_leave(struct rdzv_buf *b, const struct rdzv_leave *l);
int rdzv_msg_put_unhealthy(struct rdzv_buf *b, const struct rdzv_unhealthy *u);
int rdzv_msg_put_release(struct rdzv_buf *b, const struct rdzv_release *r);
int rdzv_msg_put_cancel(struct rdzv_buf *b, const struct rdzv_cancel *c);
int rdzv_msg_put_release_reply(struct rdzv_buf *b, const struct rdzv_release_reply *r);
int rdzv_msg_put_cancel_job(struct rdzv_buf *b, const struct rdzv_cancel_job *c);
int rdzv_msg_put_cancel_job_reply(struct rdzv_buf *b, const struct rdzv_cancel_job_reply *r);
/* STATUS (rdzvctl -> daemon) has no members: the body is {}. The reply is STATUS_REPLY. */
int rdzv_msg_put_status(struct rdzv_buf *b);
/* ERROR from a printf format (the struct form is rdzv_msg_put_error(b, "%s", e->error)); the
 * text is cut to RDZV_ERROR_MAX bytes on a character boundary. */
int rdzv_msg_put_error(struct rdzv_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A follower's ERROR (1.3): the text, and "leader": leader ("" when none is known yet). -EINVAL
 * when leader is longer than RDZV_ENDPOINT_MAX. */
int rdzv_msg_put_redirect(struct rdzv_buf *b, const char *leader, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* PREFLIGHT and PREFLIGHT_REPORT (1.23): every member checked (a numeric addr, port 1..65535,
 * token RDZV_PF_TOKEN_HEX lowercase hex, id and bound_ms in range, figures -1 or in range). */
int rdzv_msg_put_preflight(struct rdzv_buf *b, const struct rdzv_preflight *p);
int rdzv_msg_parse_preflight(const uint8_t *body, size_t len, struct rdzv_preflight *p, char *err,
                             size_t errlen);
int rdzv_msg_put_preflight_report(struct rdzv_buf *b, const struct rdzv_preflight_report *r);
int rdzv_msg_parse_preflight_report(const uint8_t *body, size_t len,
                                    struct rdzv_preflight_report *r, char *err, size_t errlen);

int rdzv_msg_put_replica(struct rdzv_buf *b, const struct rdzv_replica *r);
int rdzv_msg_put_replicas(struct rdzv_buf *b, const struct rdzv_replicas *r);
int rdzv_msg_parse_replica(const uint8_t *body, size_t len, struct rdzv_replica *r, char *err,
                           size_t errlen);
int rdzv_msg_parse_replicas(const uint8_t *body, size_t len, struct rdzv_replicas *r, char *err,
                            size_t errlen);

/* Parse a body into a JSON object (duplicates rejected). NULL with err set on failure. */
json_t *rdzv_msg_load(const uint8_t *body, size_t len, char *err, size_t errlen);
int rdzv_msg_parse_hello(const uint8_t *body, size_t len, char *err, size_t errlen);
int rdzv_msg_parse_join(const uint8_t *body, size_t len, struct rdzv_join *j, char *err,
                        size_t errlen);
int rdzv_msg_parse_round(const uint8_t *body, size_t len, struct rdzv_round *r, char *err,
                         size_t errlen);
int rdzv_msg_parse_worker_exit(const uint8_t *body, size_t len, struct rdzv_worker_exit *w,
                               char *err, size_t errlen);
int rdzv_msg_parse_event(const uint8_t *body, size_t len, struct rdzv_event *e, char *err,
                         size_t errlen);
int rdzv_msg_parse_joined(const uint8_t *body, size_t len, struct rdzv_joined *j, char *err,
                          size_t errlen);
int rdzv_msg_parse_nccl_request(const uint8_t *body, size_t len, struct rdzv_nccl_request *q,
                                char *err, size_t errlen);
/* Without "error", "ids" must be an array of 1..RDZV_MAX_NCCL_IDS valid hex ids; with it, ids
 * are not looked at and the error text is cut (not refused) past RDZV_ERROR_MAX bytes. */
int rdzv_msg_parse_nccl_id(const uint8_t *body, size_t len, struct rdzv_nccl_id *n, char *err,
                           size_t errlen);
/* The part of NCCL_ID a receiver checks before it knows whether the message is stale: an object
 * with an integer "generation" and, if present, a string "error" ("ids" not looked at). */
int rdzv_msg_parse_nccl_id_generation(const uint8_t *body, size_t len, uint64_t *ret, char *err,
                                      size_t errlen);
/* "progress" (optional) must be an array of at most RDZV_PROGRESS_MAX objects with integer
 * local_rank, step and age_ms in their ranges, local ranks distinct. */
int rdzv_msg_parse_heartbeat(const uint8_t *body, size_t len, struct rdzv_heartbeat *h, char *err,
                             size_t errlen);
int rdzv_msg_parse_ready(const uint8_t *body, size_t len, struct rdzv_ready *r, char *err,
                         size_t errlen);
int rdzv_msg_parse_leave(const uint8_t *body, size_t len, struct rdzv_leave *l, char *err,
                         size_t errlen);
/* CANCEL: "signal" 1..64, "reason" a string (cut past RDZV_REASON_MAX), an optional "sched_job"
 * string (cut past RDZV_ID_MAX). */
int rdzv_msg_parse_cancel(const uint8_t *body, size_t len, struct rdzv_cancel *c, char *err,
                          size_t errlen);
/* RELEASE: "run_id" and "node", non-empty strings that fit. RELEASE_REPLY: "released" >= 0, an
 * optional "error" (cut past RDZV_ERROR_MAX). */
int rdzv_msg_parse_release(const uint8_t *body, size_t len, struct rdzv_release *r, char *err,
                           size_t errlen);
int rdzv_msg_parse_release_reply(const uint8_t *body, size_t len, struct rdzv_release_reply *r,
                                 char *err, size_t errlen);
/* CANCEL_JOB: "run_id" a non-empty string that fits, "reason" a string (cut past
 * RDZV_REASON_MAX). CANCEL_JOB_REPLY: "cancelled" a boolean, an optional "error" (cut). */
int rdzv_msg_parse_cancel_job(const uint8_t *body, size_t len, struct rdzv_cancel_job *c,
                              char *err, size_t errlen);
int rdzv_msg_parse_cancel_job_reply(const uint8_t *body, size_t len,
                                    struct rdzv_cancel_job_reply *r, char *err, size_t errlen);
/* UNHEALTHY: "reason", a string; cut (not refused) past RDZV_REASON_MAX bytes. */
int rdzv_msg_parse_unhealthy(const uint8_t *body, size_t len, struct rdzv_unhealthy *u, char *err,
                             size_t errlen);
/* STATUS: the body must be a JSON object (its members are ignored). */
int rdzv_msg_parse_status(const uint8_t *body, size_t len, char *err, size_t errlen);
/* ERROR: "error" must be a string; it is cut (not refused) past RDZV_ERROR_MAX bytes. An optional
 * "leader" must be a string of at most RDZV_ENDPOINT_MAX bytes (then redirect is true). */
int rdzv_msg_parse_error(const uint8_t *body, size_t len, struct rdzv_error *e, char *err,
                         size_t errlen);

/* True if s is exactly RDZV_NCCL_HEX_LEN lowercase hex characters. */
bool rdzv_nccl_hex_valid(const char *s);
/* True if s is a member secret's form: exactly RDZV_SECRET_HEX lowercase hex characters. */
bool rdzv_msg_is_secret(const char *s);
/* s is RDZV_COMMAND_HEX lowercase hex characters (a JOIN's command). */
bool rdzv_msg_is_command(const char *s);
