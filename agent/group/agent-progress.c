/* SPDX-License-Identifier: Apache-2.0 */
/* agent-progress.c: the workers' progress channel: one pipe per worker, read on the
 * agent's loop as reports come ("step N\n"), the last step and its time kept per worker, and one
 * timer per group set to the earliest deadline of a running worker, which reports a silent worker
 * through on_hang (agent-workers.h). No polling: a report only updates two fields; the timer
 * re-arms itself when it fires early. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-worker.h"
#include "agent/group/agent-workers-int.h"

/* The deadline of w's progress (loop time), or UINT64_MAX when none applies. A worker that says
 * it is blocked on its peers ("wait", repeated every AGENT_PROGRESS_WAIT_DIV-th of the timeout
 * while it is) is a victim of a hang, not its cause: it is failed only when those lines stop
 * too (it is stopped or dead) or after AGENT_PROGRESS_WAIT_MAX timeouts without a step (the
 * collective itself hangs everywhere). So the rank that hangs is the one failed first. */
/* The silence after a report that fails w: --progress-timeout, or with auto its own. */
static uint64_t worker_timeout(const struct agent_worker *w)
{
    const struct agent_group_cfg *c = &w->g->cfg;

    if (!c->progress_auto)
        return c->progress_timeout_ms;
    return w->progress.auto_ms ? w->progress.auto_ms
                               : c->progress_timeout_ms * AGENT_PROGRESS_AUTO_MULT;
}

static uint64_t progress_deadline(const struct agent_worker *w)
{
    const struct worker_progress *p = &w->progress;
    uint64_t limit = p->reported ? worker_timeout(w) : w->g->cfg.progress_grace_ms;
    uint64_t d;

    if (!w->running || !p->open || p->hung || p->done || limit == 0)
        return UINT64_MAX;
    if (p->slow_until > p->t_ms + limit && !p->waiting)
        return p->slow_until; /* announced: a step that may take this long */
    if (!p->reported || !p->waiting)
        return p->t_ms + limit;
    d = p->alive_ms + limit;
    return d < p->t_ms + AGENT_PROGRESS_WAIT_MAX * limit ? d
                                                       : p->t_ms + AGENT_PROGRESS_WAIT_MAX * limit;
}

static void progress_timer_cb(uv_timer_t *t);

void agent_progress_arm(struct agent_group *g)
{
    uint64_t next = UINT64_MAX, now = uv_now(g->cfg.loop);

    if (g->state == GROUP_ACTIVE)
        for (unsigned i = 0; i < g->cfg.nproc; i++) {
            uint64_t d = progress_deadline(&g->workers[i]);

            if (d < next)
                next = d;
        }
    if (next == UINT64_MAX)
        (void)uv_timer_stop(&g->progress_timer);
    else
        (void)uv_timer_start(&g->progress_timer, progress_timer_cb, next > now ? next - now : 0, 0);
}

static void progress_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;
    uint64_t now = uv_now(g->cfg.loop);

    for (unsigned i = 0; i < g->cfg.nproc && g->state == GROUP_ACTIVE; i++) {
        struct agent_worker *w = &g->workers[i];
        struct worker_progress *p = &w->progress;

        if (progress_deadline(w) > now)
            continue;
        p->hung = true;
        if (p->reported)
            log_warn("worker rank %u (local rank %u, pid %d) made no progress for %" PRIu64
                     " ms after step %" PRIu64,
                     w->rank, w->local_rank, w->pid, now - p->t_ms, p->step);
        else
            log_warn("worker rank %u (local rank %u, pid %d) reported no progress in the %" PRIu64
                     " ms after its start",
                     w->rank, w->local_rank, w->pid, now - p->t_ms);
        if (g->cfg.on_hang)
            g->cfg.on_hang(g, w->local_rank, p->reported, p->step, now - p->t_ms, g->cfg.ud);
    }
    if (g->state == GROUP_ACTIVE)
        agent_progress_arm(g);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

/* --progress-timeout auto: one more step time of w; once warmed up, its timeout follows them. */
static void auto_sample(struct agent_worker *w, uint64_t ms)
{
    struct worker_progress *p = &w->progress;
    uint32_t sorted[AGENT_PROGRESS_AUTO_WINDOW];
    uint64_t floor = w->g->cfg.progress_timeout_ms, p99, t;
    unsigned n;

    p->iv[p->iv_pos] = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
    p->iv_pos = (p->iv_pos + 1) % AGENT_PROGRESS_AUTO_WINDOW;
    if (p->niv < AGENT_PROGRESS_AUTO_WINDOW)
        p->niv++;
    if (p->niv < AGENT_PROGRESS_AUTO_WARMUP)
        return;
    n = p->niv;
    memcpy(sorted, p->iv, n * sizeof(sorted[0]));
    qsort(sorted, n, sizeof(sorted[0]), cmp_u32);
    p99 = sorted[(n * 99 + 99) / 100 - 1];
    t = p99 * AGENT_PROGRESS_AUTO_MULT;
    if (t < floor)
        t = floor;
    /* Said when set, and when it moves by a quarter or more. */
    if (!p->auto_ms || t * 4 > p->auto_ms * 5 || t * 5 < p->auto_ms * 4)
        log_info("worker rank %u (local rank %u): progress timeout %.1f s (%u x the 99th "
                 "percentile of its last %u step times, %.3f s; at least %.1f s)",
                 w->rank, w->local_rank, (double)t / 1000, AGENT_PROGRESS_AUTO_MULT, n,
                 (double)p99 / 1000, (double)floor / 1000);
    p->auto_ms = t;
}

/* One line of the channel: "step N", "wait" (alive, blocked on its peers since its last step),
 * "stacks", "control", "slow N", "done" (exiting: not watched from now) or "error TEXT" (what it
 * dies of). Anything else is the worker's mistake, not ours. */
_Static_assert(RDZV_PROGRESS_ERROR_MAX <= AGENT_ERROR_MAX, "an error line fits its worker's");

static void progress_line(struct agent_worker *w, char *line, size_t n)
{
    struct worker_progress *p = &w->progress;
    bool first = !p->reported;
    struct rdzv_progress_line pl;

    line[n] = '\0';
    if (rdzv_progress_parse(line, n, &pl) < 0) {
        log_debug("worker rank %u: ignoring progress line '%.*s'", w->rank, (int)n, line);
        return;
    }
    if (pl.kind == RDZV_PROGRESS_STACKS) {
        p->stacks = !p->done;
        return;
    }
    if (pl.kind == RDZV_PROGRESS_CONTROL) {
        p->control = true;
        return;
    }
    if (pl.kind == RDZV_PROGRESS_ERROR) { /* the error it dies of, in its own words */
        memcpy(w->said, pl.text, pl.text_len); /* checked: no control character, bounded */
        w->said[pl.text_len] = '\0';
        rdzv_utf8_trim(w->said);
        w->error_s = rdzv_wall_s();
        return;
    }
    if (pl.kind == RDZV_PROGRESS_DONE) {
        /* Exiting: its handler may be gone, and a stacks signal would end it. */
        p->done = true;
        p->stacks = false;
        agent_progress_arm(w->g);
        return;
    }
    if (pl.kind == RDZV_PROGRESS_SLOW) {
        p->slow_until = uv_now(w->g->cfg.loop) + pl.step * 1000;
        p->slow_step = true;
        agent_progress_arm(w->g);
        return;
    }
    if (pl.kind == RDZV_PROGRESS_WAIT) {
        p->waiting = true;
        p->alive_ms = uv_now(w->g->cfg.loop);
        return;
    }
    if (p->reported && !p->slow_step && w->g->cfg.progress_auto)
        auto_sample(w, uv_now(w->g->cfg.loop) - p->t_ms);
    p->slow_step = false;
    p->slow_until = 0;
    p->step = pl.step;
    p->has_compute = pl.has_compute;
    p->compute_ms = pl.compute_ms;
    if (pl.has_compute && p->compute_n < UINT32_MAX) {
        p->compute_sum += pl.compute_ms;
        p->compute_n++;
        if (pl.compute_ms > p->compute_max)
            p->compute_max = pl.compute_ms;
    }
    p->t_ms = uv_now(w->g->cfg.loop);
    p->reported = true;
    p->waiting = false;
    /* The timer may wait for a long grace deadline: the shorter timeout applies from now. */
    if (first)
        agent_progress_arm(w->g);
    if (w->g->cfg.on_step)
        w->g->cfg.on_step(w->g, w->local_rank, w->g->cfg.ud);
}

static void progress_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct worker_progress *p = rdzv_container_of((uv_pipe_t *)h, struct worker_progress, pipe);

    /* progress_read_cb never leaves the buffer full; one byte is kept for the NUL */
    buf->base = p->line + p->len;
    buf->len = sizeof(p->line) - 1 - p->len;
}

/* n new bytes were read at line + len: handle the complete lines, keep the rest. */
static void progress_feed(struct worker_progress *p, size_t n)
{
    char *start = p->line, *end = p->line + p->len + n, *nl;

    while ((nl = memchr(start, '\n', (size_t)(end - start))) != NULL) {
        if (!p->skip)
            progress_line(p->w, start, (size_t)(nl - start));
        p->skip = false;
        start = nl + 1;
    }
    p->len = (size_t)(end - start);
    if (p->len == sizeof(p->line) - 1) {
        log_debug("worker rank %u: ignoring a progress line over %zu bytes", p->w->rank, p->len);
        p->skip = true;
        p->len = 0;
    } else if (p->len > 0 && start != p->line) {
        memmove(p->line, start, p->len);
    }
}

static void progress_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct worker_progress *p = rdzv_container_of((uv_pipe_t *)st, struct worker_progress, pipe);

    if (nread < 0) {
        if (nread != UV_EOF)
            log_debug("worker rank %u: reading its progress channel: %s", p->w->rank,
                      uv_strerror((int)nread));
        agent_progress_close(p->w);
        return;
    }
    progress_feed(p, (size_t)nread);
}

/* Read what the pipe still holds (non-blocking), so that the last report before an exit counts. */
static void progress_read_rest(struct worker_progress *p)
{
    uv_os_fd_t fd;
    ssize_t n;

    if (uv_fileno((uv_handle_t *)&p->pipe, &fd) < 0)
        return;
    while ((n = read(fd, p->line + p->len, sizeof(p->line) - 1 - p->len)) > 0)
        progress_feed(p, (size_t)n);
}

int agent_progress_open(struct agent_worker *w, int *ret_child_fd)
{
    struct worker_progress *p = &w->progress;
    int r = agent_group_pipe_open(w->g, &p->pipe, ret_child_fd);

    if (r < 0)
        return r;
    p->w = w;
    p->open = true;
    p->reported = p->hung = p->skip = p->waiting = p->stacks = p->slow_step = p->done = false;
    p->control = false;
    p->slow_until = 0;
    p->step = 0;
    p->len = 0;
    return 0;
}

void agent_progress_start(struct agent_worker *w)
{
    struct worker_progress *p = &w->progress;

    /* From the spawn, not from the start of this loop iteration (spawns take time). */
    uv_update_time(w->g->cfg.loop);
    p->t_ms = uv_now(w->g->cfg.loop);
    p->compute_sum = p->stopped_ms = 0;
    p->compute_n = p->compute_max = 0;
    p->stopped = false;
    (void)uv_read_start((uv_stream_t *)&p->pipe, progress_alloc_cb, progress_read_cb);
}

void agent_progress_stops(uv_signal_t *h, int signum)
{
    struct agent_group *g = h->data;
    uint64_t now = uv_now(g->cfg.loop);

    (void)signum;
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];
        struct worker_progress *p = &w->progress;

        /* A stop and a continue are one state each, the newest kept: two reads at most. A stop
         * that was over before this ran is not seen (it counts as no stop). */
        for (int k = 0; k < 2 && w->running && w->pid > 0; k++) {
            siginfo_t si = {0};

            if (waitid(P_PID, (id_t)w->pid, &si, WSTOPPED | WCONTINUED | WNOHANG) < 0 ||
                si.si_pid == 0)
                break;
            if (si.si_code == CLD_STOPPED && !p->stopped) {
                p->stopped = true;
                p->stopped_since = now;
            } else if (si.si_code == CLD_CONTINUED && p->stopped) {
                p->stopped = false;
                p->stopped_ms += now - p->stopped_since;
            }
        }
    }
}

void agent_progress_close(struct agent_worker *w)
{
    struct worker_progress *p = &w->progress;

    if (!p->open)
        return;
    progress_read_rest(p);
    p->open = false;
    uv_close((uv_handle_t *)&p->pipe, agent_group_worker_close_cb);
}

uint64_t agent_group_progress_timeout(const struct agent_group *g, unsigned local_rank)
{
    if (local_rank >= g->cfg.nproc || !g->cfg.on_hang)
        return 0;
    return g->workers[local_rank].progress.reported ? worker_timeout(&g->workers[local_rank])
                                                    : 0;
}

int agent_group_hang_info(const struct agent_group *g, unsigned local_rank, int *pid,
                          bool *stacks)
{
    const struct agent_worker *w;

    if (local_rank >= g->cfg.nproc)
        return -EINVAL;
    w = &g->workers[local_rank];
    if (!w->running || w->pid <= 0)
        return -ESRCH;
    *pid = w->pid;
    *stacks = w->progress.stacks;
    return 0;
}

int agent_group_progress(const struct agent_group *g, unsigned local_rank, uint64_t *step,
                         uint64_t *age_ms)
{
    const struct worker_progress *p;

    if (local_rank >= g->cfg.nproc)
        return -EINVAL;
    p = &g->workers[local_rank].progress;
    if (!p->reported)
        return -ENODATA;
    if (step)
        *step = p->step;
    if (age_ms)
        *age_ms = uv_now(g->cfg.loop) - p->t_ms;
    return 0;
}

int agent_group_compute_ms(const struct agent_group *g, unsigned local_rank, uint32_t *ret_ms)
{
    const struct worker_progress *p;

    if (local_rank >= g->cfg.nproc)
        return -EINVAL;
    p = &g->workers[local_rank].progress;
    if (!p->reported || !p->has_compute)
        return -ENODATA;
    *ret_ms = p->compute_ms;
    return 0;
}

int agent_group_compute_take(struct agent_group *g, unsigned local_rank, uint32_t *ret_ms)
{
    struct worker_progress *p;
    int r = agent_group_compute_ms(g, local_rank, ret_ms);

    if (r == -EINVAL)
        return r;
    p = &g->workers[local_rank].progress;
    if (p->stopped) { /* the stop under way counts up to now */
        uint64_t now = uv_now(g->cfg.loop);

        p->stopped_ms += now - p->stopped_since;
        p->stopped_since = now;
    }
    if (r == 0 && p->compute_n > 0) {
        uint64_t ms, stopped;

        if (p->compute_n >= AGENT_COMPUTE_TRIM_FROM) { /* the longest left out */
            uint32_t n = p->compute_n - 1;

            ms = (p->compute_sum - p->compute_max + n / 2) / n;
        } else {
            ms = (p->compute_sum + p->compute_n / 2) / p->compute_n;
        }
        /* Its stopped time, shared by the steps that came since, is time it made the others
         * wait, wherever in the step the stop landed; a stop within its compute is in the
         * compute time already. So the larger of the two, never their sum: at least what the
         * node cost, at most one of them short. Without a step the time waits for one. */
        stopped = (p->stopped_ms + p->compute_n / 2) / p->compute_n;
        if (stopped > ms)
            ms = stopped;
        *ret_ms = ms > RDZV_COMPUTE_MS_MAX ? RDZV_COMPUTE_MS_MAX : (uint32_t)ms;
        p->stopped_ms = 0;
    } else if (r != 0) {
        p->stopped_ms = 0; /* no compute time to judge it with: nothing to add it to */
    }
    p->compute_sum = 0;
    p->compute_n = p->compute_max = 0;
    return r;
}
