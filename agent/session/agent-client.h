/* SPDX-License-Identifier: Apache-2.0 */
/* agent-client.h: the agent's connection to rdzvd: connect (retrying while the daemon is not up
 * yet), HELLO, JOIN, then frames in both directions, encoded and decoded by proto/rdzv-msg.h.
 * Everything here runs on the loop thread (main() and libuv callbacks); callbacks fire from the
 * loop. The client owns its socket, timers and buffers; it is freed asynchronously by
 * agent_client_close(). Functions that can fail return 0 or a negative errno. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/rdzv-msg.h"

struct agent_client;

/* The rdzvd endpoints an agent may talk to: one, or the replicas of a replicated rdzvd
 * (--endpoint A,B,C). The client tries them in turn and follows a follower's redirect to the
 * leader (protocol 1.3), which may add one more (a leader not in the list). */
#define AGENT_ENDPOINTS_MAX 8
/* The agent's exit status when no rdzvd answered at any endpoint within --connect-timeout
 * (sysexits' EX_NOHOST; 69, EX_UNAVAILABLE, is a node put aside). */
#define AGENT_EXIT_NO_RDZVD 68
/* With several endpoints, a connect not accepted this long moves to the next one (a replica's
 * host that is gone keeps a SYN unanswered for minutes; one that is up answers in a
 * millisecond). */
#define AGENT_CONNECT_ATTEMPT_MS 1000
/* Before JOINED, one line this often says what the agent waits for and how long it still will. */
#define AGENT_WAIT_NOTE_MS 10000
/* Once joined, rdzvd is silent (the link lost) when it sent nothing for the silence timeout
 * and a HEARTBEAT has waited for its answer for at least that timeout / this. */
#define AGENT_SILENCE_ANSWER_DIV 2
/* Reconnecting: the first wait, doubled after each failed round of endpoints up to the cap,
 * each wait jittered over [wait / 2, wait * 3 / 2] so that a thousand agents do not retry in
 * step. */
#define AGENT_BACKOFF_FIRST_MS 50
#define AGENT_BACKOFF_MAX_MS 2000
_Static_assert(AGENT_BACKOFF_MAX_MS * 3 / 2 <= RDZV_RECONNECT_WAIT_MAX_MS,
               "rdzvd's rebuild window allows for an agent's longest reconnect wait");
/* Redirects to the leader followed at once since the last JOINED; each later one waits. */
#define AGENT_REDIRECTS_AT_ONCE 3
#define AGENT_REDIRECT_WAIT_MS 200
struct agent_endpoint {
    char host[256];
    uint16_t port;
};
struct agent_endpoints {
    unsigned n;
    struct agent_endpoint ep[AGENT_ENDPOINTS_MAX + 1];
    /* How the user named them, for messages ("--master_addr/--master_port"); NULL: --endpoint.
     * Borrowed: it must outlive every copy. */
    const char *flag;
};

/* The name of eps in a message: as the user named it, else "--endpoint". */
static inline const char *agent_endpoints_flag(const struct agent_endpoints *eps)
{
    return eps->flag ? eps->flag : "--endpoint";
}

/* "HOST:PORT[,HOST:PORT...]" (at most AGENT_ENDPOINTS_MAX) into *out. 0 or -EINVAL. */
int agent_endpoints_parse(const char *list, struct agent_endpoints *out);
/* The index of "HOST:PORT" in eps, added at the end when it is not there yet (one slot past
 * AGENT_ENDPOINTS_MAX is kept for a leader named by a redirect); -1 when it does not parse or
 * the list is full. */
int agent_endpoints_add(struct agent_endpoints *eps, const char *hostport);

struct agent_client_cbs {
    /* The round closed: this node's assignment. */
    void (*on_round)(struct agent_client *c, const struct rdzv_round *r, void *ud);
    /* The daemon asks this (node rank 0) agent for q->count NCCL ids, and (q->store) for the
     * generation's store. */
    void (*on_nccl_request)(struct agent_client *c, const struct rdzv_nccl_request *q, void *ud);
    /* The job's outcome. */
    void (*on_event)(struct agent_client *c, const struct rdzv_event *e, void *ud);
    /* The daemon refused us (ERROR) or could not be reached; msg says why. No more callbacks
     * follow. */
    void (*on_error)(struct agent_client *c, const char *msg, void *ud);
    /* Once joined, the connection was lost: closed, reset, or rdzvd sent nothing for the
     * silence timeout and left a HEARTBEAT unanswered (AGENT_SILENCE_ANSWER_DIV). No more
     * callbacks follow; the caller may start a new client (reconnect). NULL: reported through
     * on_error. */
    void (*on_lost)(struct agent_client *c, const char *msg, void *ud);
    /* JOINED: spare is true when the job runs without this node for now. */
    /* secret: the member's (JOINED, protocol 1.2; "" from an older rdzvd), to send back in
     * every later JOIN. */
    void (*on_joined)(struct agent_client *c, bool spare, bool resumed, const char *secret,
                      void *ud);
    /* REPLICA (1.5): host replica q->id of rdzvd on q->port; answer with
     * agent_client_send_replica. NULL: ignored. */
    void (*on_replica)(struct agent_client *c, const struct rdzv_replica *q, void *ud);
    /* REPLICAS (1.5): the replicas' endpoints, already added to the client's list (reconnects
     * go there); the caller may keep them for its next client. NULL: ignored. */
    void (*on_replicas)(struct agent_client *c, const struct rdzv_replicas *r, void *ud);
    /* Every answer to a HEARTBEAT: what the job waits for (1.15; RDZV_WAIT_NONE: nothing, or
     * an older rdzvd). NULL: ignored. */
    void (*on_wait)(struct agent_client *c, const struct rdzv_wait *w, void *ud);
    /* Nothing listens at the (single) endpoint: a connection was refused. Return true when the
     * caller started rdzvd there meanwhile, to try again at once. NULL: back off as usual. */
    bool (*on_refused)(struct agent_client *c, void *ud);
};

/* Connect to one of eps (copied), starting with eps->ep[first], retrying for up to
 * connect_timeout_ms while none answers (the next endpoint at once, a whole round of them with
 * backoff), then send HELLO and JOIN (j is copied). A follower's ERROR that names the leader
 * sends the client there; one that knows none, or a connection closed before JOINED, moves it to
 * the next endpoint. Callbacks fire on loop. Returns 0 or -errno. */
/* Whether c gave up (on_error) because no rdzvd answered at any endpoint within
 * --connect-timeout: every attempt refused, timed out or closed before any frame (the agent then
 * exits RDZV_EXIT_NO_RDZVD). */
bool agent_client_unanswered(const struct agent_client *c);
int agent_client_start(uv_loop_t *loop, const struct agent_endpoints *eps, unsigned first,
                       uint64_t connect_timeout_ms, const struct rdzv_join *j,
                       const struct agent_client_cbs *cbs, void *ud, struct agent_client **ret);
/* The endpoint c talks to (or tries now): its index in the list given to agent_client_start. */
unsigned agent_client_endpoint(const struct agent_client *c);
/* The incarnation of the rdzvd whose JOINED c read last (1.18); 0: none said. */
uint64_t agent_client_incarnation(const struct agent_client *c);
/* The numeric address of c's side of its connection (into buf, len >= 64). 0, -ENOTCONN when it
 * has none, or a negative errno. */
int agent_client_local_addr(const struct agent_client *c, char *buf, size_t len);

/* Authenticate with t (HELLO, AUTH, AUTH_OK checked, then JOIN); call right after
 * agent_client_start(). t must outlive the client. Without it, a daemon that asks for a token is
 * refused with on_error (as is, with it, a daemon that does not ask). */
struct rdzv_token;
void agent_client_set_token(struct agent_client *c, const struct rdzv_token *t);

/* Treat silence_ms without any frame from rdzvd (it answers heartbeats) as a lost connection.
 * 0 (the default) disables it. */
void agent_client_set_silence(struct agent_client *c, uint64_t silence_ms);

/* Send one message (encoded at once: the struct stays the caller's). Loop thread only. Returns 0
 * or -errno: -ENOTCONN before JOIN went out or once the connection is dead, -ENOMEM. */
int agent_client_send_heartbeat(struct agent_client *c, const struct rdzv_heartbeat *h);
/* A HEARTBEAT naming generation, sent as the agent takes its ROUND, before its workers start:
 * rdzvd learns that this node runs it. Its answer may be read only once they started (uv_spawn
 * holds the loop), so rdzvd's silence is not timed from it. */
int agent_client_send_round_ack(struct agent_client *c, uint64_t generation);
int agent_client_send_ready(struct agent_client *c, const struct rdzv_ready *r);
int agent_client_send_leave(struct agent_client *c, const struct rdzv_leave *l);
int agent_client_send_unhealthy(struct agent_client *c, const struct rdzv_unhealthy *u);
int agent_client_send_cancel(struct agent_client *c, const struct rdzv_cancel *cn);
int agent_client_send_worker_exit(struct agent_client *c, const struct rdzv_worker_exit *w);
int agent_client_send_nccl_id(struct agent_client *c, const struct rdzv_nccl_id *n);
int agent_client_send_replica(struct agent_client *c, const struct rdzv_replica *r);

/* Close the connection (asynchronous); done(ud) runs once its memory is released. */
void agent_client_close(struct agent_client *c, void (*done)(void *ud), void *ud);
