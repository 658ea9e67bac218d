/* SPDX-License-Identifier: Apache-2.0 */
/* agent-workers-control.c: the control channel agent -> worker (recovery in place):
 * one pipe per worker, the worker's read end inherited as AGENT_CONTROL_FD (RDZV_CONTROL_FD), our
 * write end non-blocking and outside the loop (no handle: we only ever write whole lines below
 * PIPE_BUF, which the kernel takes whole or refuses with EAGAIN, so nothing is ever queued here
 * and a worker that stops reading costs the agent nothing). What the lines say:
 * train/INPLACE.md. */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "agent/group/agent-workers-int.h"

int agent_control_open(struct agent_worker *w, int *ret_child_fd)
{
    uv_file fds[2];
    int r = uv_pipe(fds, 0, UV_NONBLOCK_PIPE); /* both close-on-exec; uv_spawn dup2s the child's */

    if (r < 0)
        return r;
    w->control_fd = fds[1];
    *ret_child_fd = fds[0];
    return 0;
}

void agent_control_close(struct agent_worker *w)
{
    if (w->control_fd < 0)
        return;
    close(w->control_fd);
    w->control_fd = -1;
}

/* One line and its newline, in one writev: all of it, or -errno (-EAGAIN: the pipe is full). */
static int control_write(struct agent_worker *w, const char *line, size_t len)
{
    struct iovec iov[2] = {{(void *)line, len}, {"\n", 1}};
    ssize_t n;

    if (!w->running || w->control_fd < 0)
        return -ENOTCONN;
    do
        n = writev(w->control_fd, iov, 2);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EPIPE ? -ENOTCONN : -errno;
    /* Below PIPE_BUF a pipe write is all or nothing. */
    return n == (ssize_t)len + 1 ? 0 : -EIO;
}

int agent_group_control_send(struct agent_group *g, unsigned local_rank, const char *line,
                             size_t len)
{
    unsigned sent = 0;
    int r;

    if (len == 0 || len + 1 > AGENT_CONTROL_LINE || memchr(line, '\n', len) ||
        (local_rank != AGENT_ALL_LOCAL_RANKS && local_rank >= g->cfg.nproc))
        return -EINVAL;
    if (local_rank != AGENT_ALL_LOCAL_RANKS) {
        r = control_write(&g->workers[local_rank], line, len);
        return r < 0 ? r : 1;
    }
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        r = control_write(w, line, len);
        if (r == 0)
            sent++;
        else if (r != -ENOTCONN)
            log_warn_errno(r, "worker rank %u (pid %d): control line not sent", w->rank, w->pid);
    }
    return (int)sent;
}
