/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-daemon.h: a whole daemon: the server (rdzvd-server.h) with the job layer's registry
 * (rdzvd-job.h) plugged into it. What rdzvd's main() and rdzv-agent --standalone start.
 * Also rdzvd's --exit-when-idle: it counts the rdzv peers connected (the peer session's
 * peer_up/peer_down hooks) and tells its caller when there have been none for a while.
 *
 * Ownership: the caller owns struct rdzvd_daemon (opaque; rdzvd_daemon_free), which owns its
 * server, its job registry and its idle timer. Errors: negative errno. Threads: the loop's only. */
#pragma once
#include <stdint.h>
#include <uv.h>

#include "daemon/data/rdzvd-config.h"

struct rdzvd_daemon; /* opaque: fields live in rdzvd-daemon.c */
struct rdzvd_jobs;
struct rdzvd_server;

/* A server on loop with cfg (rdzvd_server_new) and the job layer registered as the handler of
 * rendezvous messages, of agent connections that close, and of shutdown. Then call
 * rdzvd_server_listen / _stop on rdzvd_daemon_server(), and rdzvd_daemon_free once the loop has
 * finished. Logs its own errors. Returns 0 or a negative errno; either way the loop must run once
 * more before uv_loop_close, as after rdzvd_server_new. */
int rdzvd_daemon_new(uv_loop_t *loop, const struct rdzvd_config *cfg, struct rdzvd_daemon **ret);
/* Free d, its job registry and its server (rdzvd_server_free: the loop runs once more if it
 * never stopped). NULL: no-op. Returns NULL. */
struct rdzvd_daemon *rdzvd_daemon_free(struct rdzvd_daemon *d);
/* Its server (listen, stop, info) and its job registry (status); both d's. */
struct rdzvd_server *rdzvd_daemon_server(const struct rdzvd_daemon *d);

/* The same through d, for an embedder that sees no more of rdzvd than this header (rdzv-agent
 * --standalone): bind and listen (0 or a negative errno, logged), then, a single rdzvd with a
 * job table, rebuild the jobs whose records say a generation runs (rdzvd_jobs_lead; a replica
 * does when it leads); the main listener's port once
 * listening (0 before); stop accepting and close every connection (asynchronous, as
 * rdzvd_server_stop). */
int rdzvd_daemon_listen(struct rdzvd_daemon *d);
uint16_t rdzvd_daemon_port(const struct rdzvd_daemon *d);
void rdzvd_daemon_stop(struct rdzvd_daemon *d);
struct rdzvd_jobs *rdzvd_daemon_jobs(const struct rdzvd_daemon *d);
/* Serve d's status page, /metrics and /status.json on addr:port (0: a free port; *ret_port says
 * which), as rdzvd --metrics-port does; stopped with d (rdzvd_daemon_stop). 0 or a negative
 * errno. */
int rdzvd_daemon_serve_http(struct rdzvd_daemon *d, const char *addr, uint16_t port,
                            uint16_t *ret_port);

/* A store host for rdzv-agent (node rank 0's agent hosts a replicated rdzvd's generation stores): a
 * server on cfg without the job layer (an rdzv peer's messages are refused), listening once
 * rdzvd_daemon_listen() is called, whose stores the caller opens and closes; its TCPStore clients
 * allowed from allow_from ("CIDR[,CIDR...]" as rdzvd's --allow-store-from; NULL or "": anywhere, or
 * cfg->store_acl). Stopped and freed as any rdzvd_daemon. 0 or a negative errno (logged; -EINVAL:
 * allow_from does not parse). */
struct rdzvd_listener;
int rdzvd_daemon_new_stores(uv_loop_t *loop, const struct rdzvd_config *cfg,
                            const char *allow_from, struct rdzvd_daemon **ret);
/* A store with an empty key space and no journal on d's listening address, port chosen by the
 * kernel: 0 with *ret and *port_out set, or a negative errno. Closed (its connections too) by
 * rdzvd_daemon_store_close(), or with d. */
int rdzvd_daemon_store_open(struct rdzvd_daemon *d, const char *desc, struct rdzvd_listener **ret,
                            uint16_t *port_out);
void rdzvd_daemon_store_close(struct rdzvd_listener *l);

typedef void (*rdzvd_daemon_idle_cb)(void *data);

/* --exit-when-idle: cb(data) runs once no rdzv peer (a connection past HELLO, and AUTH with a
 * token; TCPStore clients do not count) has been connected for idle_ms, or, while none has come
 * since this call, for first_ms. cb is expected to stop the server (rdzvd_server_stop), which
 * closes the timer; until then it is re-armed each time the last peer goes. Call at most once,
 * after rdzvd_daemon_new, from the loop's thread. idle_ms, first_ms > 0. Returns 0 or a negative
 * errno (logged; nothing to undo). */
int rdzvd_daemon_exit_when_idle(struct rdzvd_daemon *d, uint64_t idle_ms, uint64_t first_ms,
                                rdzvd_daemon_idle_cb cb, void *data);
