/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-daemon.c: the server wired to the job layer. The only file that includes both. */
#include "rdzvd-daemon.h"

#include <errno.h>
#include <stdlib.h>

#include "../common/rdzv-log.h"
#include "rdzvd-job.h"
#include "rdzvd-peer.h"
#include "rdzvd-server.h"

struct rdzvd_daemon {
    struct rdzvd_server *srv;
    struct rdzvd_jobs *jobs;
};

static const struct rdzvd_peer_handler job_handler = {
    .msg = rdzvd_job_msg,
    .closed = rdzvd_job_conn_closed,
    .shutdown = rdzvd_jobs_shutdown,
};

int rdzvd_daemon_new(uv_loop_t *loop, const struct rdzvd_config *cfg, struct rdzvd_daemon **ret)
{
    struct rdzvd_daemon *d;
    int r;

    d = calloc(1, sizeof(*d));
    if (!d)
        return log_error_errno(-ENOMEM, "init");
    r = rdzvd_server_new(loop, cfg, &d->srv);
    if (r < 0)
        goto out_free;
    r = rdzvd_jobs_new(d->srv, &d->jobs);
    if (r < 0) {
        log_error_errno(r, "init");
        goto out_free;
    }
    rdzvd_server_set_peer_handler(d->srv, &job_handler, d->jobs);
    *ret = d;
    return 0;

out_free:
    rdzvd_daemon_free(d);
    return r;
}

struct rdzvd_daemon *rdzvd_daemon_free(struct rdzvd_daemon *d)
{
    if (!d)
        return NULL;
    d->srv = rdzvd_server_free(d->srv);
    d->jobs = rdzvd_jobs_free(d->jobs);
    free(d);
    return NULL;
}

struct rdzvd_server *rdzvd_daemon_server(const struct rdzvd_daemon *d)
{
    return d->srv;
}

struct rdzvd_jobs *rdzvd_daemon_jobs(const struct rdzvd_daemon *d)
{
    return d->jobs;
}
