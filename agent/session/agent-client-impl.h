/* SPDX-License-Identifier: Apache-2.0 */
/* agent-client-impl.h: PRIVATE to the rdzvd client's two files. agent-connect.c reaches a peer
 * that speaks rdzvd's protocol: endpoints, resolving, connecting, backoff, a follower's redirect,
 * the silence timer, a peer that is not rdzvd (agent-probe.h), and one line every
 * AGENT_WAIT_NOTE_MS while it waits. agent-client.c speaks to it: HELLO, AUTH, JOIN, the frames
 * both ways, the client's start and close. Calls go one way: agent-client.c -> agent-connect.c,
 * which reaches back only through c->connected (set by agent_client_start) and the
 * agent_client_cbs. Nothing else includes it; the rest of the agent goes through agent-client.h.
 * Threads: the loop's only. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agent/session/agent-client.h"
#include "agent/session/agent-probe.h"
#include "common/rdzv-auth.h"
#include "common/rdzv-buf.h"
#include "proto/rdzv-msg.h"

/* CL_HELLO: HELLO sent (and JOIN, without a token); CL_AUTH: AUTH sent, waiting for AUTH_OK;
 * CL_PROBING: the peer did not answer like rdzvd, and a probe asks what it is (agent-probe.h). */
enum client_state {
    CL_RESOLVING,
    CL_CONNECTING,
    CL_HELLO,
    CL_AUTH,
    CL_JOINED,
    CL_DEAD,
    CL_PROBING
};

struct agent_client {
    uv_loop_t *loop;
    uv_tcp_t tcp;
    uv_timer_t retry;
    uv_timer_t silence;       /* no frame from rdzvd for silence_ms: the link is dead */
    uv_timer_t note;          /* every AGENT_WAIT_NOTE_MS before JOINED: still waiting, how long */
    struct agent_probe *probe; /* CL_PROBING */
    /* --preflight net (agent-client-pf.c): the link check's listener, the probe rdzvd asked
     * for (PREFLIGHT id pf_id), and whether JOIN names the address rdzvd is reached from. */
    struct agent_pf_server *pf_server;
    struct agent_pf_probe *pf_probe;
    int64_t pf_id;
    bool pf_addr_auto;
    /* How agent-client-pf.c sends its frames (agent-client.c's write, set with the client). */
    int (*pf_write)(struct agent_client *c, struct rdzv_buf *b);
    bool framed;              /* this connection's peer sent one of rdzvd's frames */
    bool told_end;            /* rdzvd told this agent an end (not a restart) before JOINED */
    char why[300];            /* what the last failed attempt met ("connection refused") */
    bool why_peer;            /* why says what the peer did ("closed the connection ...") */
    /* What the last attempt at each endpoint met ("connection refused", "timed out: ..."), for
     * the line that gives up, and whether rdzvd's frames came on it (a follower's redirect). */
    char ep_why[AGENT_ENDPOINTS_MAX + 1][80];
    bool ep_answered[AGENT_ENDPOINTS_MAX + 1];
    bool unanswered; /* it gave up with no rdzvd answering (agent_client_unanswered) */
    enum agent_peer seen;     /* CL_PROBING: what the peer did on the connection given up */
    struct sockaddr_storage peer; /* the address that accepted the connection */
    uint64_t silence_ms;
    /* rdzv_now_ms() of the first HEARTBEAT sent since rdzvd's last frame (0: none is waiting
     * for its answer), and whether the silence was extended once with none waiting. */
    uint64_t asked_ms;
    bool silence_extended;
    uv_getaddrinfo_t gai;
    uv_connect_t connect_req;
    bool tcp_open;
    int closes_pending;
    enum client_state state;
    struct agent_endpoints eps;
    unsigned cur;         /* eps.ep[cur] is host:port */
    unsigned round_start; /* where this round of endpoints began: back there, back off */
    unsigned redirects;   /* followers' redirects since the last JOINED */
    char host[256];
    char port[8];
    char name[300]; /* "host:port" */
    uint64_t deadline_ms;
    uint64_t timeout_ms; /* --connect-timeout */
    uint64_t backoff_ms;
    struct rdzv_join join;
    uint64_t started_ms;  /* rdzv_now_ms() when the agent started (join.age_ms > 0), else 0 */
    uint64_t incarnation; /* the last JOINED's (1.18; 0: none said) */
    struct agent_client_cbs cbs;
    void *ud;
    struct rdzv_buf in;
    void (*done)(void *ud);
    void *done_ud;
    bool closing;
    bool numeric; /* host is an IP address: connect without the resolver */
    const struct rdzv_token *token; /* prove it to rdzvd (and make rdzvd prove it); NULL: none */
    bool join_sent;
    uint8_t sn[RDZV_NONCE_BYTES], cn[RDZV_NONCE_BYTES];
    /* The connection was accepted (CL_HELLO): agent-client.c says HELLO and starts reading. */
    void (*connected)(struct agent_client *c);
};

/* Every change of c->state goes through here. */
void agent_client_set_state(struct agent_client *c, enum client_state s);
/* The client is dead: report msg through on_lost when the connection had been established and
 * the caller can reconnect (lost), else through on_error. */
void agent_client_end(struct agent_client *c, bool lost, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void agent_client_end(struct agent_client *c, bool lost, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define client_fail(c, ...) agent_client_end(c, false, __VA_ARGS__)
#define client_lost(c, ...) agent_client_end(c, true, __VA_ARGS__)

/* What the attempt at the current endpoint met, for the line that gives up (printf format). */
void agent_client_note(struct agent_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Talk to c->eps.ep[i] from now on. */
void agent_client_use(struct agent_client *c, unsigned i);
/* Start reaching rdzvd: the wait's notes, then the first endpoint. */
void agent_client_begin(struct agent_client *c);
/* Resolve and connect to the current endpoint (again). */
void agent_client_try(struct agent_client *c);
/* Drop the connection before JOINED and try again: at endpoint idx at once (a follower named
 * its leader), or (idx < 0) at the next one. */
void agent_client_move(struct agent_client *c, int idx, const char *why);
/* Before any frame the peer went silent or closed the connection (seen): ask what it is. */
void agent_client_probe(struct agent_client *c, enum agent_peer seen);
/* The peer is not rdzvd, by what it did (k; p, n: its first bytes): stop, or try again. */
void agent_client_not_rdzvd(struct agent_client *c, enum agent_peer k, const uint8_t *p,
                            size_t n);
/* A frame arrived: the silence starts over. */
void agent_client_silence_heard(struct agent_client *c);
void agent_client_silence_rearm(struct agent_client *c);
/* One of the closes agent_client_close() waits for is done; the last one frees c. */
void agent_client_unref(struct agent_client *c);

/* agent-client-pf.c: --preflight net. Open the link check's listener and fill JOIN's
 * "preflight" (port, token); 0 or a negative errno. Name the address rdzvd is reached from in
 * it, when the workers' is not numeric (before each JOIN). Run PREFLIGHT's probe, whose figures
 * go back as PREFLIGHT_REPORT. Close both (with the client). */
int agent_client_pf_open(struct agent_client *c);
void agent_client_pf_addr(struct agent_client *c);
void agent_client_pf_handle(struct agent_client *c, const uint8_t *body, size_t len);
void agent_client_pf_close(struct agent_client *c);
