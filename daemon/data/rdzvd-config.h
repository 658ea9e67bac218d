/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-config.h: what a daemon is told at start (struct rdzvd_config), the counters its layers
 * bump (struct rdzvd_stats), and what every session of one daemon shares (struct rdzvd_env).
 * Plain data, no functions. The server owns all three; the sessions and the transport borrow
 * pointers that stay valid until rdzvd_server_free(). One thread: the loop's. No functions, so
 * no errors. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "proto/rdzv-proto.h"
#include "daemon/data/rdzvd-acl.h"
#include "daemon/data/rdzvd-journal.h"

/* The free space of --state-dir that TCPStore clients' journals leave to the job table at least
 * (rdzvd-disk.h: 4 times the job table's journal when that is more). A store's record that would
 * take the free space below it is refused, as one past --max-store-bytes. */
#define RDZVD_STATE_RESERVE (8u << 20)
/* Replicated (--peers): more reserve for the Raft log's next segment, which libraft allocates
 * whole (8 MiB) before the job table's entries can go to it. */
#define RDZVD_REPL_SEGMENT_RESERVE (8u << 20)

/* The per-turn budget of one connection: requests of at most this many bytes, and at most this many
 * requests, are served for it in one turn of the loop; the rest waits for later turns (its reading
 * paused meanwhile), so that no peer holds the loop while others wait. One request is always
 * served, however large (its size is bounded by --max-frame or by rdzv_msg_max_body()). */
#define RDZVD_TURN_BYTES (64u << 10)
#define RDZVD_TURN_FRAMES 64u
/* A listener accepts at most this many connections before it lets the loop serve one turn of
 * its other events (rdzvd-accept-pace.h). libuv accepts until accept(2) has nothing left; a client
 * that reconnects as fast as rdzvd closes its connections kept that going, and no other socket
 * was read meanwhile. The rest wait in the kernel's backlog. */
#define RDZVD_TURN_ACCEPTS 64u
/* The silence bound of connections before their handshake (rdzvd-transport.h,
 * rdzvd_transport_shed_handshaking): no connection younger than this is ever closed to make room
 * for another, whatever the newcomer's address. PyTorch ranks that connect at once, thousands per
 * host and several hosts at a time, are silent while they import (0.5 s and more) or are
 * descheduled between connect() and send(); none of them is reset for it. Past their budget
 * (--max-handshaking-bytes of what they cost, and --max-handshaking connections if set) a
 * newcomer takes the slot of one silent this long, the oldest first, else the pool runs over the
 * budget, bounded by --max-conns. */
#define RDZVD_HS_SHED_AGE_MS 3000u
/* Connections before their handshake are counted per address (an IPv6 address by its /64) in
 * this many buckets of a keyed hash: a bucket's count bounds its addresses' from above. */
#define RDZVD_HS_ADDR_BUCKETS 4096u
/* The last slots under --max-conns: the least of RDZVD_HS_SPARE_BASE, half of --max-conns and
 * --max-handshaking (if set), divided by RDZVD_HS_SPARE_DIV (none under it, as a tiny --max-conns
 * has). An address takes one of them only while it holds fewer connections before their handshake
 * than slots are left, so that one address that fills the rest with young idle connections (which
 * nothing closes before RDZVD_HS_SHED_AGE_MS) cannot keep a token holder on another out. */
#define RDZVD_HS_SPARE_DIV 8u
#define RDZVD_HS_SPARE_BASE 1024u

/* The HTTP status server (--metrics-port, daemon/front/rdzvd-http.h). Requests: at most
 * RDZVD_HTTP_MAX_REQ bytes, whole within RDZVD_HTTP_TIMEOUT_MS; an answer not read by its client
 * within RDZVD_HTTP_WRITE_TIMEOUT_MS loses its connection; RDZVD_HTTP_MAX_CONNS at once, past
 * which a newcomer takes the slot of the oldest connection still writing an answer (its client
 * does not read) or still without a whole request after RDZVD_HTTP_EVICT_AFTER_MS, so that a
 * Prometheus scrape gets through while browsers hog the rest. */
#define RDZVD_HTTP_MAX_REQ 8192
#define RDZVD_HTTP_TIMEOUT_MS 5000
#define RDZVD_HTTP_WRITE_TIMEOUT_MS 5000
#define RDZVD_HTTP_MAX_CONNS 64
#define RDZVD_HTTP_EVICT_AFTER_MS 2000
/* The HTTP server's share of one turn of its loop (its own thread's): it accepts at most
 * RDZVD_HTTP_TURN_ACCEPTS connections and answers requests until RDZVD_HTTP_TURN_BYTES are
 * written (one answer at least); the rest wait for the next turn. A body made from the jobs is
 * asked of the store's loop, which makes one per turn of its own; at most RDZVD_HTTP_MAX_ASKS
 * asks wait there at once (the requests past them wait in the HTTP server's queue). */
#define RDZVD_HTTP_TURN_ACCEPTS 4u
#define RDZVD_HTTP_TURN_BYTES (64u << 10)
#define RDZVD_HTTP_MAX_ASKS RDZVD_HTTP_MAX_CONNS
/* The HTTP thread's nice value (rdzvd's own plus this; Linux keeps one per thread): where the
 * CPUs are short, the store's loop runs first. */
#define RDZVD_HTTP_NICE 10
/* What the status page (/) renders, whatever the number of jobs: the first RDZVD_PAGE_FULL live
 * jobs in full, RDZVD_PAGE_ROWS more as one line each, the newest RDZVD_PAGE_ENDED jobs that ended
 * as one line each, the rest counted; at most RDZVD_PAGE_MAX bytes (a job that does not fit is
 * counted instead). A job in full is at /job/RUN_ID (same byte cap). The page is made at most
 * once per RDZVD_PAGE_TTL_MS and shared by the requests meanwhile, and at most one page of any
 * kind (/, /job/..., /metrics, /status.json) is made per turn of the store's loop: its clients
 * wait for no more than one. */
#define RDZVD_PAGE_FULL 4
#define RDZVD_PAGE_ROWS 100
#define RDZVD_PAGE_ENDED 10
#define RDZVD_PAGE_MAX (256u << 10)
#define RDZVD_PAGE_TTL_MS 250

/* --request-timeout's default: a request begun and not complete after this long closes its
 * connection (its bytes are held meanwhile, under --max-input-bytes). */
#define RDZVD_REQUEST_TIMEOUT_MS 30000

/* --keep-ended and --keep-ended-max: how long, and how many of them at most, jobs that ended stay
 * in STATUS, the status page and /metrics (their outcome, root cause, restarts, duration). */
#define RDZVD_KEEP_ENDED_MS (3600u * 1000)
#define RDZVD_KEEP_ENDED_MAX 100u
#define RDZVD_KEEP_ENDED_MAX_LIMIT 10000u

/* --max-jobs and --abandon-after: the jobs rdzvd holds at once (in memory, and waiting for their
 * nodes in their records), and how long a job's record waits with no member before the job ends
 * as abandoned. */
#define RDZVD_MAX_JOBS 1024u
#define RDZVD_MAX_JOBS_LIMIT 1000000u
#define RDZVD_ABANDON_AFTER_MS (6u * 3600 * 1000)

/* A job's own timers. Node rank 0's agent has this long to send the NCCL ids of a round; past
 * it the job fails, naming that node. */
#define RDZVD_JOB_NCCL_ID_TIMEOUT_MS 60000
/* After a ROUND, while workers start (CUDA and NCCL init can take a while), a member's heartbeat
 * may be this many heartbeat timeouts late before the member is lost. */
#define RDZVD_JOB_INIT_GRACE_FACTOR 3
/* The recent events kept per job for STATUS and the status page. */
#define RDZVD_JOB_EVENTS 16
/* A job's failure history (rdzvd-job-record.h): the nodes it keeps (those whose workers failed, or
 * that it put aside) and how long a reason it keeps for one put aside. Past the first, the
 * entry of a node not put aside with the fewest failures makes room. */
#define RDZVD_JOB_HISTORY_MAX 256
/* Of them, the nodes put aside on their own word (a failed health check, UNHEALTHY): past this
 * many the oldest is forgotten. Such a node fails its check again before it joins, so little is
 * lost, and nodes that say so cannot fill the history and stop the job counting failures. */
#define RDZVD_JOB_ASIDE_CHECK_MAX 32
/* Stragglers (daemon/job/rdzvd-job-verdict.c): the job's median compute time is made again
 * at most this often (a node is scored at each of its heartbeats), and a median under this
 * many milliseconds scores nobody (a job with no compute to speak of). */
#define RDZVD_STRAGGLER_MEDIAN_MS 1000
#define RDZVD_STRAGGLER_MEDIAN_MIN_MS 1
#define RDZVD_ASIDE_REASON_MAX 255
/* The network pre-flight (daemon/job/rdzvd-job-preflight.c): each way of a link within this
 * bound (PREFLIGHT bound_ms, as the agents' own), and a slot's figures within twice it and this
 * margin: an agent that has not answered by then counts as unreachable. */
#define RDZVD_PF_BOUND_MS 3000
#define RDZVD_PF_SLOT_MARGIN_MS 2000
/* Of each node, its newest failures kept with their dates and ranks (--bad-node-window counts
 * them; a failure that follows a rank to another node is found among them): as many as a
 * windowed --bad-node-failures may ask for. */
#define RDZVD_JOB_FAILS_KEPT RDZV_BAD_NODE_WINDOWED_MAX
/* A worker that exits this soon after its generation formed, with no progress reported, failed at
 * start-up: a node whose workers only fail so is put aside even with no spare waiting. */
#define RDZVD_JOB_STARTUP_FAIL_MS 5000
/* A start-up failure's EVENT restart lets the other nodes' workers still starting run as long
 * again as the failed one did, within these bounds, before they are stopped: a failure of the
 * job's own (a script bug) then fails every node alike and puts none aside (1.17). */
#define RDZVD_JOB_STARTUP_GRACE_MIN_MS 2000
#define RDZVD_JOB_STARTUP_GRACE_MAX_MS RDZVD_JOB_STARTUP_FAIL_MS
/* Restarts back off (JOIN restart_backoff, the cap): the first restart's generation forms at
 * once, each next one 1 s, 2 s, 4 s ... after its restart was decided; a generation that ran
 * this long before its failure starts the count over. */
#define RDZVD_JOB_BACKOFF_FIRST_MS 1000
#define RDZVD_JOB_BACKOFF_RESET_MS 60000
/* The restarts a job takes that its budget is not charged for (a scale-up, a re-form around a
 * node lost before it ran, a node that left on a signal, a straggler put aside): at most
 * RDZVD_JOB_UNCOUNTED_RESTARTS within any RDZVD_JOB_UNCOUNTED_WINDOW_MS, counted on the job,
 * whatever the names and node ids of the nodes behind them (a host name is only a claim). Past it a
 * scale-up waits, a node that never ran in the job is not placed when the job can form without it,
 * and any other such restart is charged to the budget. Each restart stops every worker of the job
 * and costs a checkpoint's reload: 4 in 10 minutes is already most of those minutes. */
#define RDZVD_JOB_UNCOUNTED_RESTARTS 4
#define RDZVD_JOB_UNCOUNTED_WINDOW_MS (10 * 60 * 1000)
/* Scale-ups are spaced: after k such restarts within the window the next waits this long times
 * 2^(k - 1) after the last (30 s, 60 s, 120 s), so nodes that come close together are taken in
 * by one restart, and the four fit in the first 3.5 minutes of a job's growth. */
#define RDZVD_JOB_UNCOUNTED_GAP_MS 30000
/* A job's timeline (rdzvd-timeline.h): its first rate sample's interval (the resolution of a
 * job's first RDZV_STATUS_RATES seconds; it doubles each time the samples fill), the window of
 * the current steps per second (the status's and /metrics'), and how far past its first report a
 * report may be (a clock far off is ignored). */
#define RDZVD_TIMELINE_FIRST_INTERVAL_S 1.0
#define RDZVD_TIMELINE_RATE_WINDOW_S 10.0
#define RDZVD_TIMELINE_SPAN_MAX_S (3650.0 * 86400)
/* Ended jobs kept for status keep their timelines, the newest this many (the rest without). */
#define RDZVD_ENDED_TIMELINES 16
/* --replicas: how long an agent may take to start the replica it was asked to host before the
 * next candidate is asked (rdzvd-job-hosted.h). */
#define RDZVD_VOTERS_ASK_MS 15000

struct rdzv_token;
struct rdzvd_peer_handler;
struct rdzvd_peers;
struct rdzvd_replica_ops;
struct rdzvd_store;

struct rdzvd_config {
    const char *bind;          /* address to bind, NULL for dual-stack "::" then "0.0.0.0" */
    uint16_t port;             /* 0 picks a free port */
    enum rdzv_dialect legacy;  /* numbering for connections that do not open with VALIDATE */
    bool legacy_allowed;       /* false: such connections are closed */
    bool accept_thread;        /* accept(2) on a thread of its own (--accept-thread) */
    struct rdzv_limits lim;
    const char *state_dir;     /* journal directory (--state-dir); NULL: nothing persisted */
    enum rdzvd_fsync fsync;    /* when journal writes are fsynced (--fsync) */
    const struct rdzv_token *token;     /* rdzv peers must prove it (HELLO+AUTH); NULL: no auth */
    /* The operator's (--admin-token-file; needs token, and differs from it): a peer that proves
     * it instead may RELEASE and CANCEL_JOB, which agents may not. NULL: nobody may, when token
     * is set (without a token every peer is trusted alike, the operator's messages included). */
    const struct rdzv_token *admin_token;
    const struct rdzvd_acl *store_acl;  /* TCPStore clients' addresses; NULL: anyone */
    uint64_t handshake_timeout_ms;      /* close connections not through the handshake; 0: never */
    uint64_t keep_ended_ms;             /* ended jobs in status this long (--keep-ended; 0: none) */
    uint64_t keep_ended_max;            /* and at most this many (--keep-ended-max; 0: none) */
    uint64_t max_jobs;                  /* jobs held at once (--max-jobs; 0: no bound) */
    uint64_t abandon_after_ms;          /* a record with no member ends then (0: never) */
    uint64_t request_timeout_ms;        /* close connections with a request incomplete that long;
                                         * 0: never */
    /* A daemon embedded in rdzv-agent --standalone: connections accepted and closed, jobs
     * created, joined, formed and removed, and shutdown are logged at debug instead of info (the
     * agent reports its own view). Warnings and errors are unchanged. */
    bool embedded;
    /* --peers: the replicas, this rdzvd among them (rdzvd-replica.h); NULL: a single rdzvd. */
    const struct rdzvd_peers *peers;
    const struct rdzvd_replica_ops *replica_ops; /* how to run one (rdzvd_replica_ops) */
    /* How the job table replays a job's decision (a rdzvd_decision_fn of rdzvd-store.h: the job
     * layer's rdzvd_decision_apply, which rdzvd_daemon_new sets), called with ud NULL (the job
     * table's default bounds); NULL: it takes none. */
    int (*job_decisions)(void *ud, struct rdzvd_store *s, const uint8_t *key, size_t klen,
                         const uint8_t *val, size_t vlen);
    /* Called when replication fails and rdzvd must stop (the caller stops the server and exits
     * 75); NULL: the server stops itself. */
    void (*on_failure)(void *ud);
    /* Called when the cluster decided to end (rdzvd_replica_shutdown; the caller stops the
     * server and exits 0); NULL: the server stops itself. Both get failure_ud. */
    void (*on_shutdown)(void *ud);
    void *failure_ud;
    /* --replicas N: as the leader, ask the agents of its jobs to host replicas (one per host)
     * until the configuration has N voters, and replace one whose host was lost. 0: never. */
    unsigned replicas;
};

struct rdzvd_stats {
    uint64_t accepted, rejected, closed_proto, requests;
    uint64_t closed_outbuf; /* connections closed with output past twice --max-outbuf due */
};

/* Shared by the sessions of one server (rdzvd-tcpstore.c, rdzvd-peer.c, the first-bytes session
 * in rdzvd-server.c). */
struct rdzvd_env {
    const struct rdzvd_config *cfg;
    struct rdzvd_stats *stats;
    struct rdzvd_ratelimit *refusals;      /* log lines about refused peers */
    const struct rdzvd_peer_handler *peer; /* the job layer's entry points; NULL: none */
    void *peer_ud;                         /* passed to the peer handler's callbacks */
};
