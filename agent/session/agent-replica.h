/* SPDX-License-Identifier: Apache-2.0 */
/* agent-replica.h: host a replica of rdzvd when the leader asks (REPLICA, protocol 1.5; rdzvd
 * --replicas). The real rdzvd binary (found as agent-host.h finds it) is started detached, as a
 * hosted rdzvd is, with
 *   rdzvd --bind ADDR --port PORT --peers ADDR:PORT --join --replica-id ID --replicas N
 *         --state-dir D/state --remove-dir D --exit-when-idle 5:180 --ready-fd 3
 *         [--token-file F]
 * with D a new $TMPDIR/rdzvd-replica-PORT-ID-XXXXXX (stdout and stderr appended to D/rdzvd.log,
 * or to <--log-dir>/rdzvd-replica-PORT-ID.log, kept; rdzvd deletes D when it ends normally),
 * where ADDR is the address
 * this agent reaches the leader from. It starts outside the configuration and waits for the
 * leader to add it; it ends when the cluster decides to (the leader's --exit-when-idle), or on
 * its own when no leader has been known for 180 s. Its readiness is read from the --ready-fd
 * pipe on the loop (no blocking): done(ud, 0, "ADDR:PORT") once it listens, or done(ud, -errno,
 * why) when it exited first or AGENT_HOST_READY_MS passed. Once it listens the pipe stays
 * watched: its EOF (the replica exited: it holds the only write end) calls gone(ud).
 *
 * Ownership: the caller's until done fires with an error, or gone fires (after either r frees
 * itself and must be forgotten), or agent_replica_free (neither fires after it; the replica
 * itself goes on). Strings in cfg are copied. Threads: the loop's. Errors: negative errno,
 * logged. */
#pragma once
#include <stdint.h>
#include <uv.h>

#include "common/rdzv-log.h"
#include "proto/rdzv-msg.h"

struct agent_replica;

struct agent_replica_cfg {
    const char *self_exe;   /* rdzv-agent's path: rdzvd is looked for beside it */
    const char *addr;       /* numeric address to bind (this agent's towards the leader) */
    uint16_t port;          /* 1..65534; the Raft link is port + 1 */
    unsigned id;            /* its Raft id, given by the leader */
    unsigned replicas;      /* the cluster's size, kept once it leads (rdzvd --replicas) */
    const char *token_file; /* passed on, or NULL */
    const char *replica_key_file; /* passed on (rdzvd --replica-key-file), or NULL */
    const char *log_dir;          /* --log-dir: the log goes there; NULL: in its directory */
    enum rdzv_log_level level;
};

typedef void (*agent_replica_done_fn)(void *ud, int status, const char *what);
typedef void (*agent_replica_gone_fn)(void *ud);

/* Start the replica; done reports the outcome later, gone (may be NULL) its exit after it
 * listened. 0, or a negative errno (nothing started). */
int agent_replica_start(uv_loop_t *loop, const struct agent_replica_cfg *cfg,
                        agent_replica_done_fn done, agent_replica_gone_fn gone, void *ud,
                        struct agent_replica **ret);
/* Stop watching (the replica itself goes on). NULL: no-op. */
void agent_replica_free(struct agent_replica *r);

/* What an agent's session keeps to answer the leader's REPLICA requests, one at a time. */
struct agent_replica_host {
    uv_loop_t *loop;
    const char *self_exe, *token_file, *replica_key_file, *log_dir; /* borrowed */
    enum rdzv_log_level level;
    /* The answer (REPLICA with endpoint, or error) to the connection of the moment. */
    void (*send)(void *ud, const struct rdzv_replica *ans);
    /* The report that the replica exited (sent unasked), until agent_replica_joined sends it
     * again. */
    struct rdzv_replica gone;
    bool gone_pending;
    void *ud;
    struct agent_replica *replica; /* the one started (being started, or listening), or NULL */
    int64_t id;
};

/* The leader's request q, arrived on a connection from the numeric address local (its
 * v4-mapped form is given plainly, as rdzvd shows its peers; "": unknown). Starts the replica
 * and answers once it listens or failed; a request while one is started here, or one that
 * cannot start, is answered with an error at once. When the replica exits later (while this
 * agent runs), the leader is sent REPLICA {id, error: "replica ID exited"} unasked: it replaces
 * that voter (rdzvd-job-hosted.h), and this host may be asked again. */
void agent_replica_request(struct agent_replica_host *h, const char *local,
                           const struct rdzv_replica *q);
/* The session joined a leader (JOINED): a report that the replica exited goes to it too (the
 * replica that exited may have been the last leader: its successor must hear it; told twice is
 * harmless). */
void agent_replica_joined(struct agent_replica_host *h);
