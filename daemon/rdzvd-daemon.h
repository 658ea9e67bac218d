/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-daemon.h: a whole daemon: the server with the job layer plugged into it. What rdzvd's
 * main() and rdzv-agent --standalone start. Ownership as rdzvd_server_init (the caller owns srv;
 * the handler table is static). Errors: negative errno. Threads: the loop's only. */
#pragma once
#include <uv.h>

#include "rdzvd-server.h"

/* rdzvd_server_init(srv, loop, cfg), then register the job layer (rdzvd-job.h) as the handler of
 * rendezvous messages, of agent connections that close, and of shutdown. Then call
 * rdzvd_server_listen / _stop / _done as for a bare server. Logs its own errors. Returns 0 or a
 * negative errno (nothing to undo but running the loop once, as after rdzvd_server_init). */
int rdzvd_daemon_init(struct rdzvd_server *srv, uv_loop_t *loop, const struct rdzvd_config *cfg);
