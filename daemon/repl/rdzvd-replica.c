/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-replica.c: one member of a replicated rdzvd on libraft (see the header). */
#include "daemon/repl/rdzvd-replica.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <raft.h>
#include <raft/uv.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-disk.h"
#include "daemon/data/rdzvd-record.h"
#include "daemon/repl/rdzvd-repl-net.h"
#include "daemon/repl/rdzvd-repl.h"

struct rdzvd_replica {
    const struct rdzvd_peers *peers;
    struct rdzvd_store *store;
    struct rdzvd_store *jobs; /* the job table, or NULL */
    const struct rdzvd_replica_hooks *hooks;
    void *ud;
    char dir[4096];
    struct raft raft;
    struct raft_io io;
    struct raft_uv_transport tr;
    struct rdzvd_repl_fsm fsm;
    bool raft_ready; /* raft_init done */
    bool closing, closed;
    bool failed;             /* a change could not be recorded, or an entry's fate is unknown */
    struct rdzv_buf pending; /* records of the changes not proposed yet */
    uint64_t npending;
    bool inflight; /* req is with libraft */
    uint64_t inflight_changes;
    struct raft_apply req;
    bool barrier_inflight;
    raft_term barrier_term;
    raft_term served_term; /* the term in which this replica's barrier completed */
    raft_term told_term;   /* the last served_term hooks->leading was told of */
    struct raft_barrier barrier;
    char leader_ep[RDZVD_ENDPOINT_LEN]; /* rdzvd_replica_leader's answer when derived */
    /* A membership change (rdzvd_replica_change). */
    struct raft_change change;
    bool changing;
    unsigned change_id;
    rdzvd_replica_change_cb change_cb;
    void *change_ud;
    bool shutdown_pending; /* this leader's shutdown entry is proposed or pending */
    bool shutdown_done;
    uv_check_t unavailable; /* after each turn: has libraft given up (RAFT_UNAVAILABLE)? */
    bool check_open;
    /* rdzvd_replica_bound: the state directory's free space the store's changes may take. */
    struct rdzvd_disk *disk;
    bool refusing;            /* a change was refused for want of room, and not logged since */
    bool room_barrier_wanted; /* a refusal asked for a snapshot: a barrier entry brings it */
    bool room_barrier_inflight;
    struct raft_barrier room_barrier;
};

#define SHUTDOWN_KEY "shutdown" /* a key of the job table: the cluster decided to end */

static unsigned self_raft_id(const struct rdzvd_replica *r)
{
    return r->peers->join_id ? r->peers->join_id : r->peers->self + 1;
}

/* ---- --peers ---- */

__attribute__((format(printf, 3, 4))) static int peers_bad(char *err, size_t errlen,
                                                           const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* Whether sa is an address of this machine: loopback, or on one of its interfaces. */
static bool is_local(const struct sockaddr *sa)
{
    struct ifaddrs *ifs, *i;
    bool local = false;

    if (sa->sa_family == AF_INET &&
        (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127)
        return true;
    if (sa->sa_family == AF_INET6 &&
        IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr))
        return true;
    if (getifaddrs(&ifs) < 0)
        return false;
    for (i = ifs; i && !local; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family)
            continue;
        if (sa->sa_family == AF_INET)
            local = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                    ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
        else
            local =
                memcmp(&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                       &((const struct sockaddr_in6 *)sa)->sin6_addr, sizeof(struct in6_addr)) == 0;
    }
    freeifaddrs(ifs);
    return local;
}

/* One entry "HOST:PORT" or "[V6]:PORT" of --peers into out's slot i. *local: its host is this
 * machine's. */
static int peer_parse(const char *ent, unsigned i, struct rdzvd_peers *out, uint16_t *port,
                      bool *local, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    char host[RDZVD_ENDPOINT_LEN], num[INET6_ADDRSTRLEN];
    const char *portstr;
    uint64_t p;
    int r;

    /* "[]:PORT" gets as far as the resolver, which says what is wrong with it. */
    if (strlen(ent) >= RDZVD_ENDPOINT_LEN ||
        rdzv_split_hostport(ent, host, sizeof(host), &portstr) < 0 || !portstr ||
        (!host[0] && ent[0] != '['))
        return peers_bad(err, errlen, "--peers: '%s' is not HOST:PORT", ent);
    if (rdzv_parse_u64(portstr, &p) < 0 || p == 0 || p > RDZV_REPLICA_PORT_MAX)
        return peers_bad(err, errlen,
                         "--peers: '%s': the port must be 1..65534 (its Raft link is PORT+1)", ent);
    r = getaddrinfo(host, NULL, &hints, &res);
    if (r != 0 || !res)
        return peers_bad(err, errlen, "--peers: cannot resolve '%s': %s", host, gai_strerror(r));
    r = getnameinfo(res->ai_addr, res->ai_addrlen, num, sizeof(num), NULL, 0, NI_NUMERICHOST);
    *local = r == 0 && is_local(res->ai_addr);
    if (r == 0)
        rdzv_format_hostport(out->raft[i], sizeof(out->raft[i]), num, rdzv_raft_port(p));
    freeaddrinfo(res);
    if (r != 0)
        return peers_bad(err, errlen, "--peers: cannot use the address of '%s'", host);
    snprintf(out->endpoint[i], sizeof(out->endpoint[i]), "%s", ent);
    *port = (uint16_t)p;
    return 0;
}

int rdzvd_peers_parse(const char *list, unsigned self_id, uint16_t port, struct rdzvd_peers *out,
                      char *err, size_t errlen)
{
    char buf[RDZVD_REPLICAS_MAX * RDZVD_ENDPOINT_LEN], *save = NULL, *ent;
    unsigned found = 0;
    int r;

    memset(out, 0, sizeof(*out));
    if (strlen(list) >= sizeof(buf))
        return peers_bad(err, errlen, "--peers: too long (at most %d replicas)",
                         RDZVD_REPLICAS_MAX);
    snprintf(buf, sizeof(buf), "%s", list);
    for (ent = strtok_r(buf, ",", &save); ent; ent = strtok_r(NULL, ",", &save)) {
        uint16_t p = 0;
        bool local = false;

        if (out->n == RDZVD_REPLICAS_MAX)
            return peers_bad(err, errlen, "--peers: at most %d replicas", RDZVD_REPLICAS_MAX);
        r = peer_parse(ent, out->n, out, &p, &local, err, errlen);
        if (r < 0)
            return r;
        for (unsigned k = 0; k < out->n; k++)
            if (strcmp(out->raft[k], out->raft[out->n]) == 0)
                return peers_bad(err, errlen, "--peers: '%s' is listed twice", ent);
        if (!self_id && local && p == port) {
            found++;
            out->self = out->n;
        }
        out->n++;
    }
    if (out->n == 0)
        return peers_bad(err, errlen, "--peers: no replica listed (HOST:PORT,HOST:PORT,...)");
    if (self_id) {
        if (self_id > out->n)
            return peers_bad(err, errlen, "--replica-id %u: --peers lists %u replicas", self_id,
                             out->n);
        out->self = self_id - 1;
    } else if (found != 1) {
        return peers_bad(err, errlen,
                         "--peers: %s entry is this machine with port %u (--port); give "
                         "--replica-id N (1-based, in the order of --peers)",
                         found ? "more than one" : "no", port);
    }
    return 0;
}

/* ---- changes, entries, commits ---- */

/* A change of table made by this process (as the leader): to the next entry. */
static void record_change(struct rdzvd_replica *r, enum rdzvd_table table, enum rdzvd_change what,
                          const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    uint8_t h[RDZVD_RECORD_HDR_LEN];
    bool first = r->npending == 0;

    if (r->fsm.applying || r->closing)
        return; /* the log's own change, or no longer replicating */
    if (rdzvd_record_header_in(h, table, what, key, klen, val, vlen) < 0 ||
        rdzv_buf_put(&r->pending, h, sizeof(h)) < 0 || rdzv_buf_put(&r->pending, key, klen) < 0 ||
        (vlen && rdzv_buf_put(&r->pending, val, vlen) < 0)) {
        log_error("replication: out of memory recording a change of the store");
        r->failed = true;
    }
    r->npending++;
    r->fsm.local_ahead = true;
    if (first && !r->inflight)
        r->hooks->pending(r->ud);
}

static void change_cb(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                      const uint8_t *val, size_t vlen)
{
    record_change(ud, RDZVD_TABLE_STORE, what, key, klen, val, vlen);
}

static void shutdown_now(struct rdzvd_replica *r)
{
    if (r->shutdown_done || r->closing || !r->hooks->shutdown)
        return;
    r->shutdown_done = true;
    r->hooks->shutdown(r->ud);
}

static void jobs_change_cb(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                           const uint8_t *val, size_t vlen)
{
    struct rdzvd_replica *r = ud;
    bool shutdown = what == RDZVD_CHANGE_SET && klen == strlen(SHUTDOWN_KEY) &&
                    memcmp(key, SHUTDOWN_KEY, klen) == 0;

    if (shutdown && r->fsm.applying) {
        log_info("replication: the cluster decided to end (the leader's --exit-when-idle)");
        shutdown_now(r);
        return;
    }
    if (shutdown)
        r->shutdown_pending = true;
    record_change(ud, RDZVD_TABLE_JOBS, what, key, klen, val, vlen);
}

static void apply_cb(struct raft_apply *req, int status, void *result)
{
    struct rdzvd_replica *r = req->data;

    (void)result;
    r->inflight = false;
    if (status != 0) {
        log_error("replication: an entry of %" PRIu64 " change(s) was not committed (%s); this "
                  "replica's store holds them and cannot follow the log any more",
                  r->inflight_changes, raft_strerror(status));
        r->failed = true;
        r->hooks->settled(r->ud, -ESTALE);
        return;
    }
    if (r->npending == 0)
        r->fsm.local_ahead = false;
    r->hooks->settled(r->ud, 0);
    if (r->shutdown_pending && !r->inflight)
        shutdown_now(r);
}

int rdzvd_replica_flush(struct rdzvd_replica *r)
{
    struct raft_buffer buf;
    int rc;

    if (r->failed)
        return -ESTALE;
    if (r->inflight || r->npending == 0)
        return 0;
    rc = rdzvd_repl_batch(&buf, r->fsm.origin, rdzv_buf_head(&r->pending),
                          rdzv_buf_avail(&r->pending));
    if (rc < 0) {
        log_error("replication: out of memory proposing %" PRIu64 " change(s)", r->npending);
        r->failed = true;
        return -ESTALE;
    }
    r->req.data = r;
    rc = raft_apply(&r->raft, &r->req, &buf, 1, apply_cb);
    if (rc != 0) {
        raft_free(buf.base);
        log_error("replication: cannot propose %" PRIu64 " change(s): %s (this replica is no "
                  "longer the leader, and its store holds them)",
                  r->npending, raft_strerror(rc));
        r->failed = true;
        return -ESTALE;
    }
    r->inflight = true;
    r->inflight_changes = r->npending;
    r->npending = 0;
    rdzv_buf_free(&r->pending);
    return 0;
}

bool rdzvd_replica_busy(const struct rdzvd_replica *r)
{
    return r->inflight || r->npending > 0;
}

/* ---- the bound on disk ---- */

/* The store's room hook (rdzvd_replica_bound): as a journal's (rdzvd-journal.h), a change whose
 * record would take the log past its bound, or the disk into its reserve or below as much free
 * as the log holds, is refused before it is made (-EDQUOT). The log holds the entries applied
 * since the last snapshot, that snapshot, and the changes not committed yet. A refusal asks for
 * a snapshot, which gives back what deleted keys held. Never refused: the log's own changes
 * (every replica applies them) and the job table's (no room hook). */
static int room_cb(void *ud, uint64_t bytes)
{
    struct rdzvd_replica *r = ud;
    uint64_t len = RDZVD_RECORD_HDR_LEN + bytes;
    uint64_t held = r->fsm.log_bytes + r->fsm.snap_bytes + rdzv_buf_avail(&r->pending);
    struct rdzvd_store_room rm;
    uint64_t bound;
    int rc = -EDQUOT;

    if (r->fsm.applying || r->closing)
        return 0;
    rm = rdzvd_store_room(r->store);
    bound = rdzvd_disk_bound(rm.share < rm.max ? rm.share : rm.max);
    if (held + len <= bound)
        rc = rdzvd_disk_take(r->disk, len, held + len);
    /* Refused, or taken while the next record of this size would not be: a snapshot, so that
     * the next finds the room. */
    if (!r->fsm.want_snapshot &&
        (rc < 0 || held + 2 * len > bound || rdzvd_disk_take(r->disk, 0, held + 3 * len) < 0) &&
        rdzvd_repl_fsm_want_snapshot(&r->fsm))
        r->room_barrier_wanted = true; /* after this turn (never inside libraft) */
    if (rc == 0) {
        r->refusing = false;
        return 0;
    }
    if (!r->refusing) {
        r->refusing = true;
        log_warn("replication: refusing the store's changes: no room on disk for a record of "
                 "%" PRIu64 " bytes (the log holds about %" PRIu64 " bytes; %s keeps %" PRIu64
                 " bytes free for the job table)",
                 len, held, r->disk ? r->disk->dir : r->dir,
                 r->disk ? rdzvd_disk_reserve(r->disk) : 0);
    }
    return rc;
}

void rdzvd_replica_bound(struct rdzvd_replica *r, struct rdzvd_disk *disk)
{
    r->disk = disk;
    rdzvd_store_set_room_cb(r->store, room_cb, r);
}

static void room_barrier_cb(struct raft_barrier *req, int status)
{
    struct rdzvd_replica *r = req->data;

    (void)status;
    r->room_barrier_inflight = false;
    r->room_barrier_wanted = r->fsm.want_snapshot; /* the next one, after this turn */
}

/* A refusal asked for a snapshot: barrier entries, one after another, take the log to the index
 * it needs even when no client changes anything any more. */
static void room_barrier_start(struct rdzvd_replica *r)
{
    r->room_barrier_wanted = false;
    if (!r->fsm.want_snapshot || r->room_barrier_inflight ||
        raft_state(&r->raft) != RAFT_LEADER)
        return;
    r->room_barrier.data = r;
    r->room_barrier_inflight = raft_barrier(&r->raft, &r->room_barrier, room_barrier_cb) == 0;
}

/* ---- roles ---- */

static void barrier_cb(struct raft_barrier *req, int status)
{
    struct rdzvd_replica *r = req->data;

    r->barrier_inflight = false;
    if (status == 0) {
        r->served_term = r->barrier_term;
        log_info("replication: replica %u of %u leads (term %" PRIu64 "): serving",
                 self_raft_id(r), rdzvd_replica_count(r), (uint64_t)r->barrier_term);
    } else {
        log_warn("replication: replica %u lost the leadership before it could serve (%s)",
                 self_raft_id(r), raft_strerror(status));
    }
    r->hooks->settled(r->ud, 0);
}

enum rdzvd_role rdzvd_replica_role(struct rdzvd_replica *r)
{
    if (r->closing || r->failed || !r->raft_ready)
        return RDZVD_ROLE_STOPPED;
    if (raft_state(&r->raft) != RAFT_LEADER)
        return RDZVD_ROLE_FOLLOWER;
    if (r->served_term == r->raft.current_term)
        return RDZVD_ROLE_LEADER;
    if (!r->barrier_inflight) {
        r->barrier.data = r;
        r->barrier_term = r->raft.current_term;
        if (raft_barrier(&r->raft, &r->barrier, barrier_cb) != 0)
            return RDZVD_ROLE_FOLLOWER;
        r->barrier_inflight = true;
    }
    return RDZVD_ROLE_SYNCING;
}

int rdzvd_replica_endpoint_of(const char *raft, char *out, size_t len)
{
    char host[RDZVD_ENDPOINT_LEN];
    uint16_t p = 0;

    if (rdzv_parse_hostport(raft, host, sizeof(host), &p) < 0 || p < 2)
        return -EINVAL;
    return rdzv_format_hostport(out, len, host, p - 1U) < 0 ? -EINVAL : 0;
}

const char *rdzvd_replica_leader(struct rdzvd_replica *r)
{
    raft_id id = 0;
    const char *addr = NULL;

    if (!r->raft_ready)
        return NULL;
    raft_leader(&r->raft, &id, &addr);
    if (!id || !addr)
        return NULL;
    for (unsigned i = 0; i < r->peers->n; i++) /* a founding replica: as --peers names it */
        if (!r->peers->join_id && id == i + 1 && strcmp(addr, r->peers->raft[i]) == 0)
            return r->peers->endpoint[i];
    return rdzvd_replica_endpoint_of(addr, r->leader_ep, sizeof(r->leader_ep)) == 0
               ? r->leader_ep
               : NULL;
}

unsigned rdzvd_replica_id(const struct rdzvd_replica *r)
{
    return self_raft_id(r);
}

unsigned rdzvd_replica_count(const struct rdzvd_replica *r)
{
    unsigned n = 0;

    if (!r->raft_ready || r->raft.configuration.n == 0)
        return r->peers->join_id ? 0 : r->peers->n;
    for (unsigned i = 0; i < r->raft.configuration.n; i++)
        n += r->raft.configuration.servers[i].role == RAFT_VOTER;
    return n;
}

unsigned rdzvd_replica_voters(struct rdzvd_replica *r, struct rdzvd_voter *out, unsigned max)
{
    const struct raft_configuration *c = &r->raft.configuration;

    if (!r->raft_ready)
        return 0;
    for (unsigned i = 0; i < c->n && i < max; i++) {
        struct rdzvd_voter *v = &out[i];

        memset(v, 0, sizeof(*v));
        v->id = (unsigned)c->servers[i].id;
        v->voter = c->servers[i].role == RAFT_VOTER;
        v->self = c->servers[i].id == self_raft_id(r);
        snprintf(v->raft, sizeof(v->raft), "%s", c->servers[i].address);
        if (rdzvd_replica_endpoint_of(v->raft, v->endpoint, sizeof(v->endpoint)) < 0)
            v->endpoint[0] = '\0';
    }
    return c->n;
}

static void membership_cb(struct raft_change *req, int status)
{
    struct rdzvd_replica *r = req->data;
    rdzvd_replica_change_cb cb = r->change_cb;

    r->changing = false;
    r->change_cb = NULL;
    if (status != 0)
        log_warn("replication: the change of replica %u failed: %s", r->change_id,
                 raft_strerror(status));
    else
        log_info("replication: the configuration has %u voter(s) now", rdzvd_replica_count(r));
    if (cb)
        cb(r->change_ud, status ? -EIO : 0);
}

int rdzvd_replica_change(struct rdzvd_replica *r, enum rdzvd_change_kind kind, unsigned id,
                         const char *raft, rdzvd_replica_change_cb cb, void *ud)
{
    static const char *const what[] = {"add", "promote", "remove"};
    int rc;

    if (r->changing)
        return -EBUSY;
    if (rdzvd_replica_role(r) != RDZVD_ROLE_LEADER)
        return -ENOTCONN;
    r->change.data = r;
    r->change_id = id;
    r->change_cb = cb;
    r->change_ud = ud;
    switch (kind) {
    case RDZVD_CHANGE_ADD:
        rc = raft_add(&r->raft, &r->change, id, raft, membership_cb);
        break;
    case RDZVD_CHANGE_PROMOTE:
        rc = raft_assign(&r->raft, &r->change, id, RAFT_VOTER, membership_cb);
        break;
    default:
        rc = raft_remove(&r->raft, &r->change, id, membership_cb);
        break;
    }
    if (rc != 0) {
        log_warn("replication: cannot %s replica %u: %s", what[kind], id, raft_strerror(rc));
        r->change_cb = NULL;
        return rc == RAFT_CANTCHANGE ? -EBUSY : rc == RAFT_NOTLEADER ? -ENOTCONN : -EINVAL;
    }
    r->changing = true;
    log_info("replication: %s replica %u%s%s", kind == RDZVD_CHANGE_ADD ? "adding" :
             kind == RDZVD_CHANGE_PROMOTE ? "promoting (once caught up)" : "removing",
             id, raft ? " at " : "", raft ? raft : "");
    return 0;
}

bool rdzvd_replica_responsive(struct rdzvd_replica *r, unsigned id)
{
    const struct raft_configuration *c = &r->raft.configuration;

    if (!r->raft_ready || raft_state(&r->raft) != RAFT_LEADER || !r->raft.leader_state.progress)
        return true;
    for (unsigned i = 0; i < c->n; i++)
        if (c->servers[i].id == id)
            return r->raft.leader_state.progress[i].recent_recv;
    return true;
}

int rdzvd_replica_shutdown(struct rdzvd_replica *r)
{
    if (rdzvd_replica_role(r) != RDZVD_ROLE_LEADER || !r->jobs)
        return -ENOTCONN;
    return rdzvd_store_set(r->jobs, SHUTDOWN_KEY, strlen(SHUTDOWN_KEY), "1", 1);
}

/* ---- life ---- */

/* After each loop turn (a uv_check handle: it runs only when the loop woke for something else,
 * libraft's messages and timers among them, and never inside a libraft callback: libraft 0.15
 * has no callback for a change of state, and calling it from one crashed it): a replica just
 * elected starts its barrier, and the turn after the barrier is done tells its owner; and
 * libraft 0.15 turns RAFT_UNAVAILABLE for good when it cannot go on (an AppendEntries that
 * contradicts a committed entry, a failed disk write), logs nothing and serves nothing, with the
 * process up: no supervisor would restart it, so this ends the replica as a failed entry does:
 * the owner stops and rdzvd exits 75, to be restarted on its --state-dir. */
static void unavailable_cb(uv_check_t *c)
{
    struct rdzvd_replica *r = c->data;

    if (r->closing || r->failed)
        return;
    if (r->room_barrier_wanted)
        room_barrier_start(r);
    /* Elected in this turn: the barrier starts now, not at the first request; the turn after
     * its end, the owner is told it leads (hooks->leading) and takes over the jobs. */
    if (raft_state(&r->raft) == RAFT_LEADER && r->served_term != r->raft.current_term) {
        (void)rdzvd_replica_role(r);
        return;
    }
    if (raft_state(&r->raft) == RAFT_LEADER && r->told_term != r->served_term) {
        r->told_term = r->served_term;
        if (r->hooks->leading)
            r->hooks->leading(r->ud);
        return;
    }
    if (raft_state(&r->raft) != RAFT_UNAVAILABLE)
        return;
    log_error("replication: replica %u is unavailable (libraft gave up: its log contradicts "
              "a message it took, or its disk failed); stopping so that a restart on its "
              "--state-dir follows the log again",
              self_raft_id(r));
    r->failed = true;
    r->hooks->settled(r->ud, -ESTALE);
}

int rdzvd_replica_new(uv_loop_t *loop, const struct rdzvd_peers *peers, const char *dir,
                      const struct rdzv_token *token, struct rdzvd_store *store,
                      struct rdzvd_store *jobs, const struct rdzvd_replica_hooks *hooks, void *ud,
                      struct rdzvd_replica **ret)
{
    struct rdzvd_replica *r;
    unsigned self = peers->self;
    uint64_t origin = 0;
    int rc;

    r = calloc(1, sizeof(*r));
    if (!r)
        return log_error_errno(-ENOMEM, "replication");
    r->peers = peers;
    r->store = store;
    r->jobs = jobs;
    r->hooks = hooks;
    r->ud = ud;
    snprintf(r->dir, sizeof(r->dir), "%s", dir);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        rc = log_error_errno(-errno, "replication: cannot create %s", dir);
        goto out_free;
    }
    /* Entries this process proposes carry a random origin: after a restart they are applied. */
    while (origin == 0)
        if (getrandom(&origin, sizeof(origin), 0) != sizeof(origin)) {
            rc = log_error_errno(-errno, "replication: getrandom");
            goto out_free;
        }
    rdzvd_repl_fsm_init(&r->fsm, store, jobs);
    r->fsm.origin = origin;
    rc = rdzvd_repl_net_init(&r->tr, loop, token, peers->key, 0);
    if (rc < 0) {
        log_error_errno(rc, "replication: links");
        goto out_free;
    }
    rc = raft_uv_init(&r->io, loop, r->dir, &r->tr);
    if (rc != 0) {
        log_error("replication: cannot open its log in %s: %s", r->dir, raft_strerror(rc));
        r->tr.close(&r->tr, NULL);
        rc = -EIO;
        goto out_free;
    }
    rc = raft_init(&r->raft, &r->io, &r->fsm.fsm, self_raft_id(r), peers->raft[self]);
    if (rc != 0) {
        log_error("replication: %s", raft_strerror(rc));
        raft_uv_close(&r->io);
        r->tr.close(&r->tr, NULL); /* raft_init does not close it (test-repl-net found the leak) */
        rc = -EIO;
        goto out_free;
    }
    r->raft_ready = true;
    rdzvd_repl_fsm_snapshots(&r->fsm, &r->raft);
    rdzvd_repl_net_check_against(&r->tr, &r->raft);
    if (uv_check_init(loop, &r->unavailable) == 0) {
        r->unavailable.data = r;
        r->check_open = uv_check_start(&r->unavailable, unavailable_cb) == 0;
        uv_unref((uv_handle_t *)&r->unavailable);
    }
    raft_set_election_timeout(&r->raft, RDZVD_REPL_ELECTION_MS);
    raft_set_heartbeat_timeout(&r->raft, RDZVD_REPL_HEARTBEAT_MS);
    /* A replica cut off from the others runs pre-votes, which raise no term: healed, it does not
     * depose the leader the majority elected meanwhile (its term would have been the highest). */
    raft_set_pre_vote(&r->raft, true);
    rdzvd_store_set_change_cb(store, change_cb, r);
    if (jobs)
        rdzvd_store_set_change_cb(jobs, jobs_change_cb, r);
    if (!token && !peers->key)
        log_warn("replication: the links between replicas are not authenticated (no "
                 "--token-file): run replicas on a trusted network only");
    else if (!peers->key)
        log_warn("replication: the links between replicas prove the agents' token (no "
                 "--replica-key-file): every agent-token holder can reach them; give the "
                 "replicas a key of their own");
    *ret = r;
    return 0;

out_free:
    free(r);
    return rc;
}

int rdzvd_replica_start(struct rdzvd_replica *r)
{
    struct raft_configuration conf;
    int rc = 0;

    raft_configuration_init(&conf);
    for (unsigned i = 0; i < r->peers->n && rc == 0 && !r->peers->join_id; i++)
        rc = raft_configuration_add(&conf, i + 1, r->peers->raft[i], RAFT_VOTER);
    if (rc == 0 && !r->peers->join_id) {
        rc = raft_bootstrap(&r->raft, &conf);
        if (rc == RAFT_CANTBOOTSTRAP)
            rc = 0; /* its log exists: it was started before */
    }
    raft_configuration_close(&conf);
    if (rc == 0)
        rc = raft_start(&r->raft);
    if (rc != 0) {
        /* The transport's own words say which port and why ("listen on A:P+1: address already
         * in use"); the link's port is PORT+1, which a burst's TIME_WAIT can hold too. */
        char why[512];

        if (r->tr.errmsg[0])
            snprintf(why, sizeof(why), "%s", r->tr.errmsg);
        else
            snprintf(why, sizeof(why), "on %s: %s", r->peers->raft[r->peers->self],
                     raft_errmsg(&r->raft)[0] ? raft_errmsg(&r->raft) : raft_strerror(rc));
        log_error("replication: cannot start replica %u: its Raft link (--port + 1): %s%s",
                  self_raft_id(r), why,
                  rc == RAFT_IOERR ? " (another process, or a recent connection's port in "
                                     "TIME_WAIT, holds it? pick another --port)"
                                   : "");
        return -EIO;
    }
    if (r->peers->join_id)
        log_info("replication: replica %u, Raft link on %s, log in %s: waiting for the leader "
                 "to add it", self_raft_id(r), r->peers->raft[r->peers->self], r->dir);
    else
        log_info("replication: replica %u of %u, Raft link on %s, log in %s", self_raft_id(r),
                 r->peers->n, r->peers->raft[r->peers->self], r->dir);
    return 0;
}

static void raft_closed_cb(struct raft *raft)
{
    struct rdzvd_replica *r = rdzv_container_of(raft, struct rdzvd_replica, raft);

    raft_uv_close(&r->io);
    r->closed = true;
    r->hooks->closed(r->ud);
}

void rdzvd_replica_close(struct rdzvd_replica *r)
{
    if (r->closing)
        return;
    r->closing = true;
    if (r->check_open) {
        uv_close((uv_handle_t *)&r->unavailable, NULL); /* closed before raft_close ends */
        r->check_open = false;
    }
    rdzvd_store_set_change_cb(r->store, NULL, NULL);
    if (r->jobs)
        rdzvd_store_set_change_cb(r->jobs, NULL, NULL);
    raft_close(&r->raft, raft_closed_cb);
}

void rdzvd_replica_free(struct rdzvd_replica *r)
{
    if (!r)
        return;
    rdzv_buf_free(&r->pending);
    free(r);
}
