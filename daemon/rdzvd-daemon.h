/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-daemon.h: a whole daemon: the server (rdzvd-server.h) with the job layer's registry
 * (rdzvd-job.h) plugged into it. What rdzvd's main() and rdzv-agent --standalone start.
 *
 * Ownership: the caller owns struct rdzvd_daemon (opaque; rdzvd_daemon_free), which owns its
 * server and its job registry. Errors: negative errno. Threads: the loop's only. */
#pragma once
#include <uv.h>

#include "rdzvd-config.h"

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
struct rdzvd_jobs *rdzvd_daemon_jobs(const struct rdzvd_daemon *d);
