/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-hosted.c: hosted replicas, recruited from the agents (rdzvd-job-hosted.h): the
 * candidates among the jobs' agents, the leader's request to host a replica and its answer, the
 * Raft changes that add, promote and remove voters, and REPLICAS to the agents. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-msg.h"
#include "daemon/data/rdzvd-acl.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/repl/rdzvd-replica.h"
#include "daemon/server/rdzvd-conn.h"
#include "daemon/server/rdzvd-server.h"
#include "daemon/job/rdzvd-job-hosted.h"

#define TRIED_MAX 64 /* hosts that failed a request, not asked again */
/* How many times a voter its agent saw exit is looked at again while it still seems to answer
 * (libraft's view lags by up to an election timeout); each look is two election timeouts. */
#define VOTERS_EXITED_LOOKS 4

struct cand {
    struct rdzv_list node;
    struct rdzvd_conn *c;
    char host[64]; /* the address its connection comes from */
};

struct rdzvd_voters {
    struct rdzvd_server *srv;
    const struct rdzvd_replica_ops *ops;
    unsigned target; /* --replicas */
    uint16_t port;   /* the leader's: the one a recruit listens on */
    struct rdzv_list cands;
    uv_timer_t timer;  /* the pending request's deadline */
    uv_timer_t kick;   /* work deferred out of libraft's callbacks, or a re-check */
    unsigned open;     /* timers not closed back */
    bool closing;
    /* The request in flight: to ask (a connection), with the id it is for. */
    struct rdzvd_conn *ask;
    unsigned ask_id;
    char ask_host[64];
    unsigned next_id;  /* past every id asked for (an id is never given twice) */
    bool changing;     /* a Raft change is under way */
    bool changed;      /* one ended well: tell the agents (from the kick) */
    unsigned promote;  /* added, to be made a voter (0: none) */
    bool check_lost;   /* a member was lost: look for a voter whose host is gone */
    unsigned suspect[RDZVD_REPLICAS_MAX * 2]; /* voters found unresponsive once, re-checked */
    unsigned nsuspect;
    /* Servers whose host's agent said they exited: removed without waiting for that host's
     * agents to go (they stay), once unresponsive at two looks. */
    unsigned exited[RDZVD_REPLICAS_MAX * 2];
    unsigned nexited, exited_looks;
    struct rdzvd_ratelimit exit_lines; /* "says replica N exited", from every agent together */
    char tried[TRIED_MAX][64];
    unsigned ntried;
};

/* The host part of "HOST:PORT" or "[V6]:PORT" into out. */
static void host_of(const char *ep, char *out, size_t len)
{
    uint16_t port;

    if (rdzv_parse_hostport(ep, out, len, &port) < 0)
        snprintf(out, len, "%.*s", (int)(len - 1), ep); /* not an address: matches no host */
}

static struct rdzvd_replica *leader_replica(struct rdzvd_voters *v)
{
    struct rdzvd_replica *rep = rdzvd_server_replica(v->srv, &v->ops);

    return rep && v->ops->role(rep) == RDZVD_ROLE_LEADER ? rep : NULL;
}

static struct cand *cand_find(struct rdzvd_voters *v, const struct rdzvd_conn *c)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &v->cands)
    {
        struct cand *k = rdzv_container_of(pos, struct cand, node);

        if (k->c == c)
            return k;
    }
    return NULL;
}

static bool host_connected(struct rdzvd_voters *v, const char *host)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &v->cands)
    {
        if (strcmp(rdzv_container_of(pos, struct cand, node)->host, host) == 0)
            return true;
    }
    return false;
}

static bool host_tried(const struct rdzvd_voters *v, const char *host)
{
    for (unsigned i = 0; i < v->ntried; i++)
        if (strcmp(v->tried[i], host) == 0)
            return true;
    return false;
}

/* REPLICAS to one candidate (k) or, k NULL, to every one. */
static void send_replicas(struct rdzvd_voters *v, struct rdzvd_replica *rep, struct cand *k)
{
    struct rdzvd_voter vs[RDZVD_REPLICAS_MAX * 2];
    struct rdzv_replicas msg = {0};
    unsigned n = v->ops->voters(rep, vs, RDZVD_REPLICAS_MAX * 2);
    struct rdzv_list *pos, *tmp;

    for (unsigned i = 0; i < n && i < RDZVD_REPLICAS_MAX * 2; i++)
        if (vs[i].voter && vs[i].endpoint[0] && msg.n < RDZV_REPLICAS_LIST_MAX)
            snprintf(msg.endpoint[msg.n++], sizeof(msg.endpoint[0]), "%s", vs[i].endpoint);
    if (msg.n == 0)
        return;
    rdzv_list_for_each_safe(pos, tmp, &v->cands)
    {
        struct cand *c = rdzv_container_of(pos, struct cand, node);
        struct rdzv_buf *out;

        if (k && c != k)
            continue;
        out = rdzvd_conn_out(c->c);
        if (out && rdzv_msg_put_replicas(out, &msg) < 0)
            log_error("conn %" PRIu64 ": out of memory sending REPLICAS", rdzvd_conn_id(c->c));
    }
    rdzvd_conn_flush_pending(v->srv);
}

static void tick(struct rdzvd_voters *v);
static void kick_cb(uv_timer_t *t);

/* Run tick (and tell the agents of a change) on the loop's next turn, or after ms: never from
 * inside libraft (its callbacks) or a caller's state change. */
static void kick(struct rdzvd_voters *v, uint64_t ms)
{
    if (!v->closing)
        (void)uv_timer_start(&v->kick, kick_cb, ms, 0);
}

/* libraft's word on the change (called from inside libraft: only note it). */
static void change_done_cb(void *ud, int status)
{
    struct rdzvd_voters *v = ud;

    v->changing = false;
    if (v->closing) {
        if (v->open == 0)
            free(v);
        return;
    }
    if (status == 0) {
        v->changed = true;
        v->ntried = 0; /* a new configuration: hosts that failed may be asked again */
    } else {
        v->promote = 0; /* a stuck non-voter is removed by tick */
    }
    kick(v, 0);
}

static bool in_list(const unsigned *list, unsigned n, unsigned id)
{
    for (unsigned i = 0; i < n; i++)
        if (list[i] == id)
            return true;
    return false;
}

static bool suspected(const struct rdzvd_voters *v, unsigned id)
{
    return in_list(v->suspect, v->nsuspect, id);
}

/* After a member was lost: a voter (not this one) on a host from which no agent is connected
 * (or whose host's agent said it exited), and that has not answered the leader's heartbeats in
 * two looks an election timeout apart, is removed. Returns true when a change started or a
 * look is pending. */
static bool remove_lost(struct rdzvd_voters *v, struct rdzvd_replica *rep,
                        const struct rdzvd_voter *vs, unsigned n)
{
    bool pending = false;

    for (unsigned i = 0; i < n; i++) {
        char host[64];

        if (vs[i].self || !vs[i].voter)
            continue;
        host_of(vs[i].raft, host, sizeof(host));
        if (host_connected(v, host) && !in_list(v->exited, v->nexited, vs[i].id))
            continue;
        if (v->ops->responsive(rep, vs[i].id)) {
            /* One its agent saw exit answered within the last election timeout: look again
             * (a bounded number of times). */
            if (in_list(v->exited, v->nexited, vs[i].id) &&
                v->exited_looks < VOTERS_EXITED_LOOKS) {
                v->exited_looks++;
                pending = true;
            }
            continue;
        }
        if (!suspected(v, vs[i].id)) {
            if (v->nsuspect < RDZVD_REPLICAS_MAX * 2)
                v->suspect[v->nsuspect++] = vs[i].id;
            pending = true;
            continue;
        }
        log_warn("replication: replica %u (%s) answers no heartbeat and %s: removing it from "
                 "the configuration, to replace it",
                 vs[i].id, vs[i].endpoint,
                 in_list(v->exited, v->nexited, vs[i].id) ? "its host's agent saw it exit"
                                                          : "no agent is connected from its host");
        if (v->ops->change(rep, RDZVD_CHANGE_REMOVE, vs[i].id, NULL, change_done_cb, v) == 0)
            v->changing = true;
        return true; /* -EBUSY: tried again after the change under way */
    }
    if (pending)
        kick(v, 2 * RDZVD_REPL_ELECTION_MS);
    return pending;
}

static void ask_timer_cb(uv_timer_t *t);

/* Ask a candidate on a host with no voter to host one. */
static void recruit(struct rdzvd_voters *v, const struct rdzvd_voter *vs, unsigned n,
                    unsigned voters)
{
    struct rdzv_list *pos, *tmp;

    for (unsigned i = 0; i < n; i++)
        if (vs[i].id >= v->next_id)
            v->next_id = vs[i].id + 1;
    rdzv_list_for_each_safe(pos, tmp, &v->cands)
    {
        struct cand *k = rdzv_container_of(pos, struct cand, node);
        struct rdzv_replica q = {.id = v->next_id, .port = v->port, .replicas = v->target};
        struct rdzv_buf *out;
        bool taken = false;

        for (unsigned i = 0; i < n && !taken; i++) {
            char host[64];

            host_of(vs[i].raft, host, sizeof(host));
            taken = strcmp(host, k->host) == 0;
        }
        if (taken || host_tried(v, k->host) || rdzvd_conn_closing(k->c))
            continue;
        out = rdzvd_conn_out(k->c);
        if (!out || rdzv_msg_put_replica(out, &q) < 0)
            continue;
        v->ask = k->c;
        v->ask_id = v->next_id++;
        snprintf(v->ask_host, sizeof(v->ask_host), "%s", k->host);
        log_info("replication: %u of %u voters: asking the agent at %s to host replica %u",
                 voters, v->target, k->host, v->ask_id);
        (void)uv_timer_start(&v->timer, ask_timer_cb, RDZVD_VOTERS_ASK_MS, 0);
        rdzvd_conn_flush_pending(v->srv);
        return;
    }
}

static void tick(struct rdzvd_voters *v)
{
    struct rdzvd_voter vs[RDZVD_REPLICAS_MAX * 2];
    struct rdzvd_replica *rep;
    unsigned n, voters = 0;

    /* Replicas started by hand (no --replicas) are never recruited nor removed here. */
    if (v->closing || !v->target || v->ask || v->changing || !(rep = leader_replica(v)))
        return;
    n = v->ops->voters(rep, vs, RDZVD_REPLICAS_MAX * 2);
    if (n > RDZVD_REPLICAS_MAX * 2)
        n = RDZVD_REPLICAS_MAX * 2;
    if (v->promote) {
        unsigned id = v->promote;

        v->promote = 0;
        if (v->ops->change(rep, RDZVD_CHANGE_PROMOTE, id, NULL, change_done_cb, v) == 0) {
            v->changing = true;
            return;
        }
    }
    /* A server that is no voter (a promotion given up, or left by a deposed leader) is removed:
     * its host is asked again. */
    for (unsigned i = 0; i < n; i++)
        if (!vs[i].voter && !vs[i].self) {
            log_warn("replication: replica %u (%s) is not voting: removing it", vs[i].id,
                     vs[i].endpoint);
            if (v->ops->change(rep, RDZVD_CHANGE_REMOVE, vs[i].id, NULL, change_done_cb, v) == 0)
                v->changing = true;
            return;
        }
    if (v->check_lost) {
        if (remove_lost(v, rep, vs, n))
            return;
        v->check_lost = false;
        v->nsuspect = 0;
        v->nexited = v->exited_looks = 0;
    }
    for (unsigned i = 0; i < n; i++)
        voters += vs[i].voter;
    if (voters < v->target)
        recruit(v, vs, n, voters);
}

static void kick_cb(uv_timer_t *t)
{
    struct rdzvd_voters *v = t->data;
    struct rdzvd_replica *rep;

    if (v->changed && (rep = leader_replica(v))) {
        v->changed = false;
        send_replicas(v, rep, NULL);
    }
    tick(v);
}

/* The request failed (an error, no answer, the agent gone): try another host. */
static void ask_failed(struct rdzvd_voters *v, const char *why)
{
    log_warn("replication: the agent at %s did not start replica %u: %s", v->ask_host, v->ask_id,
             why);
    if (v->ntried < TRIED_MAX)
        snprintf(v->tried[v->ntried++], sizeof(v->tried[0]), "%s", v->ask_host);
    v->ask = NULL;
    (void)uv_timer_stop(&v->timer);
    kick(v, 0);
}

static void ask_timer_cb(uv_timer_t *t)
{
    struct rdzvd_voters *v = t->data;

    if (v->ask)
        ask_failed(v, "no answer in time");
}

/* An agent says the replica it hosts exited (REPLICA {id, error}, unasked): when that server is
 * in the configuration on the agent's own host, it is checked as a lost host's voter is (and
 * removed once it answers no heartbeat), then replaced. Anything else is a late answer. */
static void replica_exited(struct rdzvd_voters *v, struct rdzvd_conn *c,
                           const struct rdzv_replica *a)
{
    struct rdzvd_voter vs[RDZVD_REPLICAS_MAX * 2];
    struct rdzvd_replica *rep = leader_replica(v);
    struct cand *k = cand_find(v, c);
    uint64_t dropped = 0;
    unsigned n;

    if (!rep || !k || a->id <= 0)
        return;
    n = v->ops->voters(rep, vs, RDZVD_REPLICAS_MAX * 2);
    for (unsigned i = 0; i < n && i < RDZVD_REPLICAS_MAX * 2; i++) {
        char host[64];

        if (vs[i].id != (unsigned)a->id || vs[i].self)
            continue;
        host_of(vs[i].raft, host, sizeof(host));
        if (strcmp(host, k->host) != 0)
            return; /* not its replica: nothing to believe */
        if (in_list(v->exited, v->nexited, vs[i].id))
            return; /* said before, being checked: once is enough (an agent that kept saying
                     * it made 5,432 lines in 60 s) */
        if (rdzvd_ratelimit_ok(&v->exit_lines, rdzv_now_ms(), &dropped))
            log_warn("replication: the agent at %s says replica %u exited (%s)%s", k->host,
                     vs[i].id, a->error, dropped ? " (more such lines dropped)" : "");
        if (v->nexited < RDZVD_REPLICAS_MAX * 2)
            v->exited[v->nexited++] = vs[i].id;
        v->check_lost = true;
        kick(v, 0);
        return;
    }
}

int rdzvd_voters_answer(struct rdzvd_voters *v, struct rdzvd_conn *c, const uint8_t *body,
                        uint32_t len, char *err, size_t errlen)
{
    struct rdzvd_replica *rep;
    struct rdzv_replica a;
    char host[64], raft[80], why[320];
    uint16_t port = 0;

    if (!v || !cand_find(v, c)) {
        snprintf(err, errlen, "REPLICA from an agent that was asked nothing");
        return -EPROTO;
    }
    if (rdzv_msg_parse_replica(body, len, &a, err, errlen) < 0)
        return -EBADMSG;
    if (a.failed && (c != v->ask || (unsigned)a.id != v->ask_id)) {
        replica_exited(v, c, &a);
        return 0;
    }
    if (c != v->ask || (unsigned)a.id != v->ask_id)
        return 0; /* an answer that came too late: the request was given up */
    if (a.failed || !a.endpoint[0]) {
        ask_failed(v, a.failed ? a.error : "no endpoint in its answer");
        return 0;
    }
    if (rdzv_parse_hostport(a.endpoint, host, sizeof(host), &port) < 0 ||
        strcmp(host, v->ask_host) != 0 || port != v->port) {
        snprintf(why, sizeof(why), "its endpoint %s is not its own address %s and port %u",
                 a.endpoint, v->ask_host, v->port);
        ask_failed(v, why);
        return 0;
    }
    rdzv_format_hostport(raft, sizeof(raft), host, rdzv_raft_port(port));
    v->ask = NULL;
    (void)uv_timer_stop(&v->timer);
    rep = leader_replica(v);
    if (!rep)
        return 0;
    log_info("replication: replica %u listens at %s: adding it", (unsigned)a.id, a.endpoint);
    if (v->ops->change(rep, RDZVD_CHANGE_ADD, (unsigned)a.id, raft, change_done_cb, v) == 0) {
        v->changing = true;
        v->promote = (unsigned)a.id;
    } else {
        kick(v, 0);
    }
    return 0;
}

void rdzvd_voters_joined(struct rdzvd_voters *v, struct rdzvd_conn *c, bool can_host)
{
    struct rdzvd_replica *rep;
    struct cand *k;

    if (!v || !can_host || cand_find(v, c))
        return;
    k = calloc(1, sizeof(*k));
    if (!k) {
        log_error("replication: out of memory noting an agent");
        return;
    }
    k->c = c;
    host_of(rdzvd_conn_peer(c), k->host, sizeof(k->host));
    rdzv_list_add_tail(&v->cands, &k->node);
    rep = leader_replica(v);
    if (rep)
        send_replicas(v, rep, k);
    kick(v, 0);
}

void rdzvd_voters_peer_down(struct rdzvd_voters *v, struct rdzvd_conn *c)
{
    struct cand *k = v ? cand_find(v, c) : NULL;

    if (!k)
        return;
    rdzv_list_del(&k->node);
    free(k);
    if (v->ask == c)
        ask_failed(v, "its connection closed");
}

void rdzvd_voters_member_lost(struct rdzvd_voters *v)
{
    if (!v)
        return;
    v->check_lost = true;
    kick(v, 0);
}

int rdzvd_voters_new(struct rdzvd_server *srv, struct rdzvd_voters **ret)
{
    const struct rdzvd_config *cfg = rdzvd_server_config(srv);
    struct rdzvd_voters *v;

    *ret = NULL;
    if (!cfg->peers)
        return 0;
    v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    v->srv = srv;
    v->target = cfg->replicas;
    v->port = cfg->port;
    v->next_id = 1;
    rdzv_list_init(&v->cands);
    if (uv_timer_init(rdzvd_server_loop(srv), &v->timer) < 0) {
        free(v);
        return -ENOMEM;
    }
    (void)uv_timer_init(rdzvd_server_loop(srv), &v->kick);
    v->timer.data = v->kick.data = v;
    v->open = 2;
    *ret = v;
    return 0;
}

static void voters_closed_cb(uv_handle_t *h)
{
    struct rdzvd_voters *v = h->data;

    if (--v->open == 0 && !v->changing) /* else when the change is done (the replica's close) */
        free(v);
}

void rdzvd_voters_close(struct rdzvd_voters *v)
{
    if (!v || v->closing)
        return;
    v->closing = true;
    while (!rdzv_list_empty(&v->cands)) {
        struct cand *k = rdzv_container_of(v->cands.next, struct cand, node);

        rdzv_list_del(&k->node);
        free(k);
    }
    v->ask = NULL;
    uv_close((uv_handle_t *)&v->timer, voters_closed_cb);
    uv_close((uv_handle_t *)&v->kick, voters_closed_cb);
}
