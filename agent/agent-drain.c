/* SPDX-License-Identifier: Apache-2.0 */
/* agent-drain.c: --on-bad-node drain (agent-drain.h). */
#include "agent/agent-drain.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "common/rdzv-log.h"
#include "agent/session/agent-sched.h"

#define DRAIN_REASON_MAX 200 /* Slurm keeps a reason of any length; a short one reads better */

struct drain {
    uv_process_t proc;
    uv_timer_t timer;
    int64_t status;
    int sig;
    bool exited, timed_out;
};

static void drain_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct drain *d = p->data;

    d->status = status;
    d->sig = sig;
    d->exited = true;
    uv_close((uv_handle_t *)&d->timer, NULL);
    uv_close((uv_handle_t *)p, NULL);
}

static void drain_timer_cb(uv_timer_t *t)
{
    struct drain *d = t->data;

    d->timed_out = true;
    (void)uv_process_kill(&d->proc, SIGKILL);
}

int agent_sched_node_name(char *name, size_t len)
{
    const char *node = getenv("SLURMD_NODENAME");
    char hn[256] = "";
    char *dot;

    if (node && *node) {
        if (strlen(node) >= len)
            return -ENAMETOOLONG;
        snprintf(name, len, "%s", node);
        return 0;
    }
    if (gethostname(hn, sizeof(hn) - 1) < 0)
        return -errno;
    if ((dot = strchr(hn, '.')))
        *dot = '\0';
    if (!hn[0] || strlen(hn) >= len)
        return -ENAMETOOLONG;
    snprintf(name, len, "%s", hn);
    return 0;
}

int agent_drain_node(const char *reason, double timeout_s)
{
    char why[DRAIN_REASON_MAX + 8], name_arg[1024], reason_arg[DRAIN_REASON_MAX + 16];
    char host[256];
    char *argv[8] = {0};
    const char *pe;
    int64_t rank, nhosts;
    struct drain d = {0};
    uv_loop_t loop;
    int r;

    snprintf(why, sizeof(why), "rdzv: %.*s", DRAIN_REASON_MAX, reason);
    if ((r = agent_sched_node_name(host, sizeof(host))) < 0) {
        log_error_errno(r, "--on-bad-node drain: cannot name this node as the scheduler does; it "
                           "is not drained");
        return r;
    }
    if (getenv("SLURMD_NODENAME") || getenv("SLURM_JOB_ID")) {
        snprintf(name_arg, sizeof(name_arg), "NodeName=%s", host);
        snprintf(reason_arg, sizeof(reason_arg), "Reason=%s", why);
        argv[0] = "scontrol";
        argv[1] = "update";
        argv[2] = name_arg;
        argv[3] = "State=DRAIN";
        argv[4] = reason_arg;
    } else if (getenv("PBS_JOBID")) {
        snprintf(name_arg, sizeof(name_arg), "%s", host);
        argv[0] = "pbsnodes";
        argv[1] = "-o";
        argv[2] = "-C";
        argv[3] = why;
        argv[4] = name_arg;
    } else if (agent_sge_job() && (pe = getenv("PE_HOSTFILE")) &&
               agent_sge_host(pe, host, &rank, &nhosts, name_arg, sizeof(name_arg)) == 0) {
        /* Grid Engine: every queue instance of this host in PE_HOSTFILE ("all.q@node1", one a
         * line) is disabled, so that no queue of the job's still schedules the host; qmod takes
         * no reason: the agent's log and rdzvd's say it. */
        log_warn("--on-bad-node drain: disabling Grid Engine queue instance%s %s (%s)",
                 strchr(name_arg, ',') ? "s" : "", name_arg, why);
        argv[0] = "qmod";
        argv[1] = "-d";
        argv[2] = name_arg;
    } else {
        log_warn("--on-bad-node drain: neither Slurm, PBS nor Grid Engine (with a PE_HOSTFILE "
                 "that names it) runs this job: node %s is not drained", host);
        return -ENOENT;
    }
    r = uv_loop_init(&loop);
    if (r < 0)
        goto out_log;
    d.proc.data = d.timer.data = &d;
    (void)uv_timer_init(&loop, &d.timer);
    r = uv_spawn(&loop, &d.proc,
                 &(uv_process_options_t){.file = argv[0], .args = argv, .exit_cb = drain_exit_cb});
    if (r < 0) {
        uv_close((uv_handle_t *)&d.proc, NULL);
        uv_close((uv_handle_t *)&d.timer, NULL);
    } else {
        (void)uv_timer_start(&d.timer, drain_timer_cb, (uint64_t)(timeout_s * 1000), 0);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&loop);
    if (r == 0 && (d.timed_out || d.sig || d.status != 0))
        r = -EIO;
out_log:
    if (r == 0)
        log_warn("--on-bad-node drain: %s %s %s: done", argv[0], argv[1], argv[2]);
    else if (d.timed_out)
        log_error("--on-bad-node drain: %s did not finish within %g s; node %s may not be "
                  "drained", argv[0], timeout_s, host);
    else if (d.exited)
        log_error("--on-bad-node drain: %s exited with %s %" PRId64 "; node %s is not drained",
                  argv[0], d.sig ? "signal" : "code", d.sig ? (int64_t)d.sig : d.status, host);
    else
        log_error("--on-bad-node drain: cannot run %s: %s; node %s is not drained", argv[0],
                  uv_strerror(r), host);
    return r;
}
