/* SPDX-License-Identifier: Apache-2.0 */
/* agent-client.h: the agent's connection to rdzvd: connect (retrying while the daemon is not up
 * yet), HELLO, JOIN, then frames in both directions, encoded and decoded by proto/rdzv-msg.h.
 * Everything here runs on the loop thread (main() and libuv callbacks); callbacks fire from the
 * loop. The client owns its socket, timers and buffers; it is freed asynchronously by
 * agent_client_close(). Functions that can fail return 0 or a negative errno. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../proto/rdzv-msg.h"

struct agent_client;

struct agent_client_cbs {
    /* The round closed: this node's assignment. */
    void (*on_round)(struct agent_client *c, const struct rdzv_round *r, void *ud);
    /* The daemon asks this (node rank 0) agent for count NCCL ids. */
    void (*on_nccl_request)(struct agent_client *c, uint64_t generation, unsigned count, void *ud);
    /* The job's outcome. */
    void (*on_event)(struct agent_client *c, const struct rdzv_event *e, void *ud);
    /* The daemon refused us (ERROR) or could not be reached; msg says why. No more callbacks
     * follow. */
    void (*on_error)(struct agent_client *c, const char *msg, void *ud);
    /* Once joined, the connection was lost: closed, reset, or rdzvd sent nothing for the
     * silence timeout. No more callbacks follow; the caller may start a new client (reconnect).
     * NULL: reported through on_error. */
    void (*on_lost)(struct agent_client *c, const char *msg, void *ud);
    /* JOINED: spare is true when the job runs without this node for now. */
    void (*on_joined)(struct agent_client *c, bool spare, bool resumed, void *ud);
};

/* Connect to host:port, retrying for up to connect_timeout_ms while nothing listens, then send
 * HELLO and JOIN (j is copied). Callbacks fire on loop. Returns 0 or -errno. */
int agent_client_start(uv_loop_t *loop, const char *host, uint16_t port,
                       uint64_t connect_timeout_ms, const struct rdzv_join *j,
                       const struct agent_client_cbs *cbs, void *ud, struct agent_client **ret);

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
int agent_client_send_ready(struct agent_client *c, const struct rdzv_ready *r);
int agent_client_send_leave(struct agent_client *c, const struct rdzv_leave *l);
int agent_client_send_worker_exit(struct agent_client *c, const struct rdzv_worker_exit *w);
int agent_client_send_nccl_id(struct agent_client *c, const struct rdzv_nccl_id *n);

/* Close the connection (asynchronous); done(ud) runs once its memory is released. */
void agent_client_close(struct agent_client *c, void (*done)(void *ud), void *ud);
