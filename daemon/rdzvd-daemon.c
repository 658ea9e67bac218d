/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-daemon.c: the server wired to the job layer. The only file that includes both. */
#include "rdzvd-daemon.h"

#include "rdzvd-job.h"
#include "rdzvd-peer.h"

static const struct rdzvd_peer_handler job_handler = {
    .msg = rdzvd_job_msg,
    .closed = rdzvd_job_conn_closed,
    .shutdown = rdzvd_jobs_shutdown,
};

int rdzvd_daemon_init(struct rdzvd_server *srv, uv_loop_t *loop, const struct rdzvd_config *cfg)
{
    int r;

    r = rdzvd_server_init(srv, loop, cfg);
    if (r < 0)
        return r;
    rdzvd_server_set_peer_handler(srv, &job_handler);
    return 0;
}
