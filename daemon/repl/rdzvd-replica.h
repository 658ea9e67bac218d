/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-replica.h: one member of a replicated rdzvd (rdzvd --peers): libraft on rdzvd's
 * own loop, its log in --state-dir/raft, the authenticating links of rdzvd-repl-net.h, and the
 * main store as its state machine (rdzvd-repl.h).
 *
 * The leader serves TCPStore clients from its store as a single rdzvd does. Every change a
 * request makes is captured (the store's change hook), and the changes of one loop turn go to the
 * log as one entry, proposed by rdzvd_replica_flush(). None of them may reach a client before
 * that entry commits: from hooks->pending (the first change) until hooks->settled the owner holds
 * every reply back and serves no new request. A follower's store changes only by the log; its
 * clients are refused with the leader's address.
 *
 * A leader that loses its leadership while an entry is in flight cannot know whether it will
 * commit, and its store already holds its changes: settled() reports -ESTALE and the owner must
 * stop; restarted on the same directory it replays the log and follows.
 *
 * Replica i (0-based) of --peers HOST:PORT,... has Raft id i + 1 and its Raft link on PORT + 1.
 * A replica started with --join (join_id) is in no configuration yet: it does not bootstrap, and
 * waits for a leader to add it (rdzvd_replica_change, which hosted replicas use: rdzvd
 * --replicas). Whatever the configuration holds, a replica's agents' endpoint is its Raft
 * link's address with PORT (its port minus one).
 *
 * Ownership: the caller owns the replica (rdzvd_replica_close, then rdzvd_replica_free once the
 * loop has run the close through); the store and the token are borrowed and must outlive it.
 * Threads: the loop's only. Errors: negative errno, with the reason logged. Built without
 * libraft (rdzvd-replica-none.c), rdzvd_replica_new fails -ENOTSUP. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/rdzv-auth.h"
#include "daemon/data/rdzvd-store.h"

#define RDZVD_REPLICAS_MAX 7
#define RDZVD_ENDPOINT_LEN 128
/* Raft's timing: a new leader within about a second of the old one's death. */
#define RDZVD_REPL_ELECTION_MS 300
#define RDZVD_REPL_HEARTBEAT_MS 50

/* --peers: the replicas, in the same order on each. */
struct rdzv_token;

struct rdzvd_peers {
    unsigned n;                                            /* 1..RDZVD_REPLICAS_MAX */
    unsigned self;                                         /* this rdzvd's index */
    char endpoint[RDZVD_REPLICAS_MAX][RDZVD_ENDPOINT_LEN]; /* HOST:PORT as given (agents' view) */
    char raft[RDZVD_REPLICAS_MAX][64];                     /* numeric ADDR:PORT+1, its Raft link */
    /* --join: this replica's Raft id (n is then 1: itself); it starts outside the cluster's
     * configuration and waits to be added. 0: a founding replica (id self + 1). */
    unsigned join_id;
    /* --replica-key-file: the replicas' own secret, which agents do not hold; their links prove
     * it, bound to each side's Raft id and address. NULL: the links prove the token (any
     * agent-token holder gets past them) or nothing. */
    const struct rdzv_token *key;
};

/* One server of the configuration now (rdzvd_replica_voters). */
struct rdzvd_voter {
    unsigned id;
    bool voter; /* false: being added (caught up before it votes) */
    bool self;
    char raft[64];                      /* its Raft link, ADDR:PORT+1 */
    char endpoint[RDZVD_ENDPOINT_LEN];  /* the agents' ADDR:PORT */
};

/* The "ADDR:PORT" agents use for the Raft link raft ("ADDR:PORT+1"), into out. 0 or -EINVAL. */
int rdzvd_replica_endpoint_of(const char *raft, char *out, size_t len);

/* Parse list (HOST:PORT,HOST:PORT,... hosts resolved now) into *out and find this rdzvd in it:
 * entry self_id (1-based) when self_id > 0, else the one entry whose port is port and whose host
 * is an address of this machine. 0, or -EINVAL with a one-line reason in err. */
int rdzvd_peers_parse(const char *list, unsigned self_id, uint16_t port, struct rdzvd_peers *out,
                      char *err, size_t errlen);

enum rdzvd_role {
    RDZVD_ROLE_FOLLOWER, /* another replica leads, or none is known */
    RDZVD_ROLE_SYNCING,  /* this one leads, but has not applied its predecessors' log yet */
    RDZVD_ROLE_LEADER,   /* this one leads and may serve */
    RDZVD_ROLE_STOPPED,  /* closing, or failed */
};

struct rdzvd_replica_hooks {
    /* The first change of the store since the last flush: hold replies back from now on. */
    void (*pending)(void *ud);
    /* What was flushed is committed (status 0; so is a new leader's barrier, after which it may
     * serve), or its fate is unknown (-ESTALE: this replica must stop). */
    void (*settled)(void *ud, int status);
    /* The replica finished closing (after rdzvd_replica_close). */
    void (*closed)(void *ud);
    /* The cluster decided to end (rdzvd_replica_shutdown, on whichever replica called it, once
     * committed; on the others when they apply it): the owner stops. NULL: ignored. */
    void (*shutdown)(void *ud);
    /* Optional (NULL: not told). This replica leads and may serve: its barrier completed, told
     * once per term, after the loop turn (never from inside libraft: the owner may call it). */
    void (*leading)(void *ud);
};

/* A membership change is done (status 0) or failed (a negative errno, logged). */
typedef void (*rdzvd_replica_change_cb)(void *ud, int status);

struct rdzvd_replica;

/* A replica of peers (borrowed, must outlive it) with its Raft directory dir (created 0700),
 * replicating store and the job table jobs (NULL: none; borrowed like store). The leader's
 * changes of either go to the log as described above. token: NULL for links without
 * authentication (a warning is logged). Call rdzvd_replica_start once the loop runs. 0 or a
 * negative errno (logged). */
int rdzvd_replica_new(uv_loop_t *loop, const struct rdzvd_peers *peers, const char *dir,
                      const struct rdzv_token *token, struct rdzvd_store *store,
                      struct rdzvd_store *jobs, const struct rdzvd_replica_hooks *hooks, void *ud,
                      struct rdzvd_replica **ret);
/* Bootstrap the cluster's configuration (first start only) and start Raft. 0 or -errno. */
int rdzvd_replica_start(struct rdzvd_replica *r);
/* The role now. A leader that has not applied the log up to its own term yet starts a barrier
 * and answers RDZVD_ROLE_SYNCING; hooks->settled(0) tells when it may serve. */
enum rdzvd_role rdzvd_replica_role(struct rdzvd_replica *r);
/* The leader's endpoint as --peers gives it, or NULL when no leader is known. */
const char *rdzvd_replica_leader(struct rdzvd_replica *r);
/* This replica's Raft id and the number of voters in the configuration. */
unsigned rdzvd_replica_id(const struct rdzvd_replica *r);
unsigned rdzvd_replica_count(const struct rdzvd_replica *r);
/* The servers of the configuration into out[0..max): how many there are (may exceed max). */
unsigned rdzvd_replica_voters(struct rdzvd_replica *r, struct rdzvd_voter *out, unsigned max);
/* A membership change, as the leader: ADD the replica id at Raft link raft ("ADDR:PORT+1",
 * not voting yet), PROMOTE it to a voter once it has caught up, or REMOVE it. One change at a
 * time: -EBUSY while one is under way; -ENOTCONN when not the leader; otherwise cb(ud, status)
 * when it is done: from inside libraft, so cb must not call libraft (defer to the loop). */
enum rdzvd_change_kind { RDZVD_CHANGE_ADD, RDZVD_CHANGE_PROMOTE, RDZVD_CHANGE_REMOVE };
int rdzvd_replica_change(struct rdzvd_replica *r, enum rdzvd_change_kind kind, unsigned id,
                         const char *raft, rdzvd_replica_change_cb cb, void *ud);
/* As the leader: whether server id answered it lately (its heartbeats, within the last one or
 * two election timeouts; libraft's check-quorum view). True when unknown (not the leader). */
bool rdzvd_replica_responsive(struct rdzvd_replica *r, unsigned id);
/* Decide, through the log, that the cluster ends (hooks->shutdown everywhere once committed).
 * The leader's; 0 or -ENOTCONN. The entry goes with the turn's other changes (flush). */
int rdzvd_replica_shutdown(struct rdzvd_replica *r);
/* Bound the log on disk from now on, as a store's journal is (rdzvd-journal.h): the store's
 * changes whose records have no room in disk (borrowed, must outlive r) are refused (-EDQUOT),
 * and snapshots follow the log's bytes, not only its entries. */
struct rdzvd_disk;
void rdzvd_replica_bound(struct rdzvd_replica *r, struct rdzvd_disk *disk);
/* Changes wait to be flushed, or an entry is in flight. */
bool rdzvd_replica_busy(const struct rdzvd_replica *r);
/* Propose the changes made since the last flush, unless an entry is in flight (then they go
 * when it settles). 0; -ESTALE when this replica can no longer commit them (not the leader). */
int rdzvd_replica_flush(struct rdzvd_replica *r);
/* Stop Raft (asynchronous: hooks->closed follows). Safe twice. */
void rdzvd_replica_close(struct rdzvd_replica *r);
/* Free r after it closed and the loop ran. NULL: no-op. */
void rdzvd_replica_free(struct rdzvd_replica *r);

/* The functions above as a table: the server calls a replica only through the one its config
 * names (rdzvd_config.replica_ops), so that programs that embed a single rdzvd (rdzv-agent
 * --standalone) link neither this file nor libraft. */
struct rdzvd_replica_ops {
    int (*create)(uv_loop_t *loop, const struct rdzvd_peers *peers, const char *dir,
                  const struct rdzv_token *token, struct rdzvd_store *store,
                  struct rdzvd_store *jobs, const struct rdzvd_replica_hooks *hooks, void *ud,
                  struct rdzvd_replica **ret);
    int (*start)(struct rdzvd_replica *r);
    enum rdzvd_role (*role)(struct rdzvd_replica *r);
    const char *(*leader)(struct rdzvd_replica *r);
    unsigned (*id)(const struct rdzvd_replica *r);
    unsigned (*count)(const struct rdzvd_replica *r);
    unsigned (*voters)(struct rdzvd_replica *r, struct rdzvd_voter *out, unsigned max);
    int (*change)(struct rdzvd_replica *r, enum rdzvd_change_kind kind, unsigned id,
                  const char *raft, rdzvd_replica_change_cb cb, void *ud);
    bool (*responsive)(struct rdzvd_replica *r, unsigned id);
    int (*shutdown)(struct rdzvd_replica *r);
    void (*bound)(struct rdzvd_replica *r, struct rdzvd_disk *disk);
    bool (*busy)(const struct rdzvd_replica *r);
    int (*flush)(struct rdzvd_replica *r);
    void (*close)(struct rdzvd_replica *r);
    void (*destroy)(struct rdzvd_replica *r);
};

/* This build's: libraft's, or (built without it) one whose create fails -ENOTSUP. */
extern const struct rdzvd_replica_ops rdzvd_replica_ops;
