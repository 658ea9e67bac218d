/* SPDX-License-Identifier: Apache-2.0 */
/* agent-workers.c: the local worker group: spawn, torchrun environment, output relay, stop. */
#include "agent-workers.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../common/rdzv-buf.h"
#include "../common/rdzv-list.h"
#include "../common/rdzv-log.h"
#include "../common/rdzv-util.h"
#include "agent-reaper.h"

extern char **environ;

#define SINK_HIGH (1u << 20)     /* queued relay bytes that pause reading from the workers */
#define SINK_LOW (256u << 10)    /* ... and that resume it */
#define SINK_KEEP_CAP (4u << 20) /* an emptied queue larger than this gives its memory back */
#define REAPER_RESTART_MS 1000   /* most time before reconnecting to a reaper that is gone */

enum group_state {
    GROUP_IDLE,     /* no start active: every worker handle is closed */
    GROUP_ACTIVE,   /* a start's processes or output pipes are open */
    GROUP_STOPPING, /* ACTIVE, and a stop was asked for: kill_timer is armed */
    GROUP_FREEING,  /* agent_group_free(): closing everything */
    _GROUP_STATE_MAX,
};

static const char *const group_state_names[] = {"idle", "active", "stopping", "freeing"};

enum { OUT_STDOUT, OUT_STDERR, _OUT_MAX };

static const char *const out_names[] = {"stdout", "stderr"};

/* Where relayed lines go: the agent's stdout or stderr (or cfg->out_fd/err_fd). */
struct out_sink {
    uv_poll_t poll; /* queued mode only: writable events on fd */
    struct agent_group *g;
    int fd;         /* what we write to */
    bool queued;    /* fd is non-blocking: bytes that don't fit wait in q */
    bool own_fd;    /* fd is our private open file description: close it */
    bool is_socket; /* write with send(MSG_DONTWAIT), the description stays blocking */
    bool poll_open; /* poll initialised, uv_close not yet called */
    bool polling;
    bool failed; /* a write failed: this sink's output is dropped from now on */
    struct rdzv_buf q;
};

/* One output pipe of one worker: the read end, the partial line, the raw log file. */
struct worker_out {
    uv_pipe_t pipe; /* first: callbacks recover us via container_of */
    struct agent_worker *w;
    unsigned which; /* OUT_STDOUT or OUT_STDERR */
    bool open;      /* initialised, uv_close not yet called */
    int log_fd;     /* <dir>/stdout.log or stderr.log, or -1 */
    size_t len;     /* bytes of an unfinished line in line[] */
    char *line;     /* AGENT_MAX_LINE bytes, allocated at the first read: most workers of a
                     * large job never write, and 8 GPUs' worth would be a 1 MiB calloc */
};

struct agent_worker {
    uv_process_t proc; /* first */
    struct agent_group *g;
    unsigned local_rank;
    unsigned rank;     /* global rank of the current start */
    int pid;           /* also the worker's process group and session id */
    bool proc_open;    /* initialised by uv_spawn, uv_close not yet called */
    bool running;      /* spawned (or failed to exec, until that is reported), exit not yet seen */
    bool listed;       /* its process group may be alive: the reaper has it ("+pid") */
    bool group_killed; /* SIGKILL was sent to its process group */
    char *error_file;  /* TORCHELASTIC_ERROR_FILE of the current start */
    char prefix[32];   /* "[rank<N>]: " */
    size_t prefix_len;
    struct worker_out out[_OUT_MAX];
};

/* Our connection to the host's reaper (agent-reaper.h); on the heap, replaced when it is gone. */
struct reaper {
    uv_pipe_t sock; /* first; lines out, "ok <pid>" in, then EOF when the reaper is gone */
    struct agent_group *g;
    int pid;    /* the reaper's, once acked */
    bool acked; /* "ok" received */
    size_t len;
    char rbuf[64];
};

struct agent_group {
    struct agent_group_cfg cfg;
    enum group_state state;
    struct agent_worker *workers; /* cfg.nproc of them */
    unsigned running;             /* workers spawned and not exited */
    unsigned worker_handles;      /* process and pipe handles of this start not yet closed back */
    unsigned pipes_open;          /* worker_out with open == true */
    unsigned handles;             /* every handle of the group not yet closed back */
    uv_timer_t kill_timer;        /* STOPPING: grace period, then SIGKILL */
    uv_timer_t drain_timer;       /* after the last exit: silence on output still open */
    uv_timer_t notify_timer;      /* on_all_exited for a stop on an idle group or a failed start */
    int stop_signal;
    bool paused; /* a sink is over SINK_HIGH: worker pipes are not read */
    struct out_sink sink[_OUT_MAX];
    struct rdzv_buf scratch;    /* one line, for blocking sinks */
    char *tmp_dir;              /* private directory for error files when there is no log_dir */
    struct reaper *reaper;      /* connected as far as we know; NULL before a reconnection */
    uv_process_t *reaper_spawn; /* a reaper we started, until it has daemonized */
    uv_timer_t reaper_timer;    /* reconnection after the reaper is gone */
    char reaper_name[AGENT_REAPER_NAME_MAX + 1];
    bool reaper_lost;        /* a reaper that had acked us is gone: say so when one is back */
    unsigned reaper_unacked; /* connections in a row that ended before their "ok" */
    char token[AGENT_TOKEN_LEN + 1]; /* RDZV_AGENT_TOKEN of this group's workers */
    bool stdin_open;                 /* fd 0 was open at agent_group_new(): workers inherit it */
    bool omp_told;
    void (*done)(void *ud);
    void *done_ud;
};

/* Variables this module sets; inherited copies are dropped so none appears twice. */
static const char *const env_owned[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
    "RDZV_NCCL_UNIQUE_ID",
    "RDZV_GENERATION",
    "RDZV_ENDPOINT",
    AGENT_TOKEN_ENV,
};
#define ENV_EXTRA 1 /* CUDA_VISIBLE_DEVICES */

static void group_maybe_finish(struct agent_group *g);
static void group_update_pause(struct agent_group *g);
static void worker_unlist_if_gone(struct agent_worker *w);
static void reaper_timer_cb(uv_timer_t *t);

static void group_set_state(struct agent_group *g, enum group_state st)
{
    assert(st < _GROUP_STATE_MAX);
    log_trace("workers: %s -> %s", group_state_names[g->state], group_state_names[st]);
    g->state = st;
}

static bool group_active(const struct agent_group *g)
{
    return g->state == GROUP_ACTIVE || g->state == GROUP_STOPPING;
}

/* Write all of p, waiting in poll() if fd happens to be non-blocking. Returns 0 or -errno. */
static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;

    while (n > 0) {
        ssize_t k = write(fd, c, n);

        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};

                (void)poll(&pfd, 1, -1);
                continue;
            }
            return -errno;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ---- sinks: relayed lines to the agent's stdout / stderr ---- */

static void sink_fail(struct out_sink *s, int r)
{
    log_warn_errno(r, "cannot write worker output to fd %d, dropping it from now on", s->fd);
    s->failed = true;
    rdzv_buf_free(&s->q);
}

static void sink_poll_cb(uv_poll_t *p, int status, int events);

/* Write what the socket or pipe takes now; poll for the rest. */
static void sink_flush(struct out_sink *s)
{
    bool want;
    int r;

    while (!s->failed && rdzv_buf_avail(&s->q) > 0) {
        ssize_t n;

        if (s->is_socket)
            n = send(s->fd, rdzv_buf_head(&s->q), rdzv_buf_avail(&s->q),
                     MSG_DONTWAIT | MSG_NOSIGNAL);
        else
            n = write(s->fd, rdzv_buf_head(&s->q), rdzv_buf_avail(&s->q));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                sink_fail(s, -errno);
            break;
        }
        rdzv_buf_consume(&s->q, (size_t)n);
    }
    if (rdzv_buf_avail(&s->q) == 0 && s->q.cap > SINK_KEEP_CAP)
        rdzv_buf_free(&s->q);
    want = !s->failed && rdzv_buf_avail(&s->q) > 0;
    if (want && !s->polling) {
        r = uv_poll_start(&s->poll, UV_WRITABLE, sink_poll_cb);
        if (r < 0)
            sink_fail(s, r);
        else
            s->polling = true;
    } else if (!want && s->polling) {
        (void)uv_poll_stop(&s->poll);
        s->polling = false;
    }
    group_update_pause(s->g);
}

static bool group_queued(const struct agent_group *g)
{
    for (unsigned i = 0; i < _OUT_MAX; i++)
        if (rdzv_buf_avail(&g->sink[i].q) > 0)
            return true;
    return false;
}

static void sink_poll_cb(uv_poll_t *p, int status, int events)
{
    struct out_sink *s = rdzv_container_of(p, struct out_sink, poll);

    if (status < 0)
        sink_fail(s, status);
    sink_flush(s);
    /* The end of a start may have been waiting for this queue to empty. */
    if (!group_queued(s->g))
        group_maybe_finish(s->g);
}

/* At free: write what is still queued, blocking until the deadline (monotonic ms) at most. A
 * synchronous end keeps free() from leaving handles open that a caller's uv_walk() might close. */
static void sink_flush_sync(struct out_sink *s, uint64_t deadline)
{
    while (!s->failed && rdzv_buf_avail(&s->q) > 0) {
        struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
        uint64_t now = rdzv_now_ms();

        if (now >= deadline) {
            log_warn("dropping %zu bytes of worker output that fd %d did not take in %d ms",
                     rdzv_buf_avail(&s->q), s->fd, AGENT_FLUSH_MS);
            break;
        }
        if (poll(&pfd, 1, (int)(deadline - now)) < 0 && errno != EINTR)
            break;
        sink_flush(s);
    }
}

/* Relay one line: prefix, bytes, newline. */
static void sink_line(struct out_sink *s, const char *prefix, size_t plen, const char *p, size_t n)
{
    struct rdzv_buf *b = s->queued ? &s->q : &s->g->scratch;
    int r;

    if (s->failed)
        return;
    if (!s->queued)
        b->len = b->off = 0;
    r = rdzv_buf_reserve(b, plen + n + 1);
    if (r < 0) {
        log_warn_errno(r, "relaying a worker line of %zu bytes, dropping it", n);
        return;
    }
    (void)rdzv_buf_put(b, prefix, plen);
    (void)rdzv_buf_put(b, p, n);
    (void)rdzv_buf_put_u8(b, '\n');
    if (!s->queued) {
        /* One write per line: concurrent writers interleave by line, not by fragment. */
        r = write_all(s->fd, rdzv_buf_head(b), rdzv_buf_avail(b));
        if (r < 0)
            sink_fail(s, r);
        return;
    }
    if (!s->polling)
        sink_flush(s);
    else if (rdzv_buf_avail(&s->q) > SINK_HIGH)
        group_update_pause(s->g);
}

/* Pick how to write fd without ever blocking the loop on it; falls back to blocking writes for
 * regular files (they don't stall) and for anything we cannot open or poll privately. Setting
 * O_NONBLOCK on fd itself is not an option: the open file description is shared with stdio, the
 * logger and the agent's parent. */
static void sink_setup(struct agent_group *g, struct out_sink *s, int fd)
{
    char path[64];
    struct stat st;
    int flags = -1, nfd = -1, r;

    s->g = g;
    s->fd = fd;
    if (fstat(fd, &st) < 0 || S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode))
        return;
    if (S_ISSOCK(st.st_mode)) {
        flags = fcntl(fd, F_GETFL);
        if (flags < 0)
            return;
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        s->is_socket = true;
    } else {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        nfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    }
    if (nfd < 0)
        goto out_blocking;
    r = uv_poll_init(g->cfg.loop, &s->poll, nfd);
    if (r < 0)
        goto out_blocking;
    /* uv_poll_init set O_NONBLOCK on the shared socket description; send() doesn't need it. */
    if (s->is_socket)
        (void)fcntl(nfd, F_SETFL, flags);
    s->poll.data = g;
    g->handles++;
    s->poll_open = true;
    s->fd = nfd;
    s->own_fd = true;
    s->queued = true;
    log_debug("workers: relaying to fd %d through private fd %d", fd, nfd);
    return;

out_blocking:
    if (nfd >= 0)
        close(nfd);
    s->is_socket = false;
    log_debug("workers: relaying to fd %d with blocking writes", fd);
}

/* ---- worker output pipes ---- */

static void worker_out_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void worker_out_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct worker_out *o = rdzv_container_of(h, struct worker_out, pipe);

    /* worker_out_lines() never leaves the buffer full, so there is always room. No memory: a
     * zero-length buffer, which libuv reports to the read callback as UV_ENOBUFS. */
    if (!o->line)
        o->line = malloc(AGENT_MAX_LINE);
    buf->base = o->line ? o->line + o->len : NULL;
    buf->len = o->line ? AGENT_MAX_LINE - o->len : 0;
}

static void relay_line(struct worker_out *o, const char *p, size_t n)
{
    struct agent_worker *w = o->w;

    sink_line(&w->g->sink[o->which], w->prefix, w->prefix_len, p, n);
}

/* Relay every complete line in line[0..len) and keep the tail; scan_from bytes are known to hold
 * no newline. A full buffer without a newline is relayed as one (split) line. */
static void worker_out_lines(struct worker_out *o, size_t scan_from)
{
    char *start = o->line, *end = o->line + o->len, *p = o->line + scan_from, *nl;
    size_t rest;

    while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        relay_line(o, start, (size_t)(nl - start));
        start = p = nl + 1;
    }
    rest = (size_t)(end - start);
    if (rest == AGENT_MAX_LINE) {
        relay_line(o, start, rest);
        rest = 0;
    } else if (start != o->line && rest > 0) {
        memmove(o->line, start, rest);
    }
    o->len = rest;
}

static void worker_handle_close_cb(uv_handle_t *h)
{
    struct agent_group *g = h->data;

    assert(g->worker_handles > 0 && g->handles > 0);
    g->worker_handles--;
    g->handles--;
    group_maybe_finish(g);
}

/* Relay an unfinished last line, close the log file and the pipe. */
static void worker_out_close(struct worker_out *o)
{
    struct agent_group *g = o->w->g;

    if (!o->open)
        return;
    if (o->len > 0) {
        relay_line(o, o->line, o->len);
        o->len = 0;
    }
    if (o->log_fd >= 0) {
        close(o->log_fd);
        o->log_fd = -1;
    }
    o->open = false;
    g->pipes_open--;
    uv_close((uv_handle_t *)&o->pipe, worker_handle_close_cb);
    /* A descendant that held the pipe after the worker's exit may just have gone with it. */
    worker_unlist_if_gone(o->w);
}

static void worker_out_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct worker_out *o = rdzv_container_of(st, struct worker_out, pipe);
    struct agent_worker *w = o->w;
    struct agent_group *g = w->g;
    size_t old;
    int r;

    if (nread < 0) {
        if (nread != UV_EOF)
            log_warn("worker rank %u: reading %s: %s, closing it", w->rank, out_names[o->which],
                     uv_strerror((int)nread));
        worker_out_close(o);
        return;
    }
    if (nread == 0)
        return;
    if (o->log_fd >= 0) {
        r = write_all(o->log_fd, buf->base, (size_t)nread);
        if (r < 0) {
            log_warn_errno(r, "worker rank %u: writing %s.log, no more log file for it", w->rank,
                           out_names[o->which]);
            close(o->log_fd);
            o->log_fd = -1;
        }
    }
    old = o->len;
    o->len += (size_t)nread;
    worker_out_lines(o, old);
    /* After the last exit the drain deadline counts silence, not total time; when stopping it is
     * firm, or a descendant outside the process groups could keep the stop from completing. */
    if (g->state == GROUP_ACTIVE && g->running == 0 && uv_is_active((uv_handle_t *)&g->drain_timer))
        (void)uv_timer_again(&g->drain_timer);
}

static void group_update_pause(struct agent_group *g)
{
    size_t queued = 0;
    bool pause;

    for (unsigned i = 0; i < _OUT_MAX; i++)
        if (rdzv_buf_avail(&g->sink[i].q) > queued)
            queued = rdzv_buf_avail(&g->sink[i].q);
    pause = g->paused ? queued > SINK_LOW : queued > SINK_HIGH;
    if (pause == g->paused)
        return;
    g->paused = pause;
    log_debug("workers: %zu relay bytes queued, %s reading worker output", queued,
              pause ? "pausing" : "resuming");
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        for (unsigned k = 0; k < _OUT_MAX; k++) {
            struct worker_out *o = &g->workers[i].out[k];

            if (!o->open)
                continue;
            if (pause)
                (void)uv_read_stop((uv_stream_t *)&o->pipe);
            else
                (void)uv_read_start((uv_stream_t *)&o->pipe, worker_out_alloc_cb,
                                    worker_out_read_cb);
        }
}

/* ---- the reaper: kills the workers' process groups if the agent dies (agent-reaper.h) ---- */

struct reaper_line {
    uv_write_t req;
    char text[24];
};

static void reaper_write_cb(uv_write_t *req, int status)
{
    free(rdzv_container_of(req, struct reaper_line, req));
}

/* Send one line ("+<pgid>", "-<pgid>", "q"). Without a reaper (it is gone, a restart is pending)
 * the line is dropped: reaper_start() lists every listed worker again. */
static void reaper_send(struct agent_group *g, const char *text)
{
    struct reaper_line *l;
    size_t n = strlen(text);
    uv_buf_t b;
    int r;

    if (!g->reaper)
        return;
    b = uv_buf_init((char *)text, (unsigned)n);
    /* Nearly always written at once: the reaper reads as fast as it can. */
    r = uv_try_write((uv_stream_t *)&g->reaper->sock, &b, 1);
    if (r == (int)n)
        return;
    if (r < 0 && r != UV_EAGAIN)
        goto out_fail; /* it is gone (EPIPE): the EOF on our end restarts it */
    /* The socket is full or has a queue: queue the rest behind it, in order. */
    l = malloc(sizeof(*l));
    if (!l) {
        r = -ENOMEM;
        goto out_fail;
    }
    if (r < 0)
        r = 0;
    memcpy(l->text, text + r, n - (size_t)r);
    b = uv_buf_init(l->text, (unsigned)(n - (size_t)r));
    r = uv_write(&l->req, (uv_stream_t *)&g->reaper->sock, &b, 1, reaper_write_cb);
    if (r == 0)
        return;
    free(l);
out_fail:
    log_debug("workers: cannot tell the reaper %.*s: %s", (int)n - 1, text, uv_strerror(r));
}

static void reaper_send_pgid(struct agent_group *g, char op, int pgid)
{
    char text[24];

    snprintf(text, sizeof(text), "%c%d\n", op, pgid);
    reaper_send(g, text);
}

static void reaper_close_cb(uv_handle_t *h)
{
    struct reaper *rp = h->data;
    struct agent_group *g = rp->g;

    free(rp);
    assert(g->handles > 0);
    g->handles--;
    if (g->state != GROUP_FREEING && !g->reaper) {
        /* Closed before its "ok": it was exiting as we came (its last agent had just gone); try
         * again at once. Else it died: connect again (or start one) after a random delay of up to
         * REAPER_RESTART_MS, so that the agents of a job whose reaper died do not all start one at
         * the same moment. */
        (void)uv_timer_start(&g->reaper_timer, reaper_timer_cb,
                             g->reaper_unacked == 1 ? 0 : rdzv_random_u64() % REAPER_RESTART_MS, 0);
    }
    group_maybe_finish(g);
}

static void reaper_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct reaper *rp = h->data;

    buf->base = rp->rbuf + rp->len;
    buf->len = sizeof(rp->rbuf) - rp->len;
}

/* "ok <pid>" once; then EOF (or a reset) when the reaper is gone. */
static void reaper_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct reaper *rp = st->data;
    struct agent_group *g = rp->g;
    char *nl;

    if (nread > 0) {
        rp->len += (size_t)nread;
        nl = memchr(rp->rbuf, '\n', rp->len);
        if (!rp->acked && nl && strncmp(rp->rbuf, "ok ", 3) == 0) {
            *nl = '\0';
            rp->pid = atoi(rp->rbuf + 3);
            rp->acked = true;
            if (g->reaper_lost)
                log_warn("the worker reaper is back (pid %d)", rp->pid);
            else
                log_debug("workers: reaper pid %d has us", rp->pid);
            g->reaper_lost = false;
            g->reaper_unacked = 0;
        }
        if (nl || rp->len == sizeof(rp->rbuf))
            rp->len = 0;
        return;
    }
    if (nread == 0)
        return;
    assert(g->reaper == rp);
    g->reaper = NULL;
    if (!rp->acked)
        g->reaper_unacked++;
    /* Without an "ok" it closed as we came (its last agent had just gone): no news. */
    if (rp->acked) {
        log_warn("the worker reaper (pid %d) is gone (%s); starting another (until then, "
                 "workers would outlive a SIGKILLed agent)",
                 rp->pid, uv_strerror((int)nread));
        g->reaper_lost = true;
    }
    uv_close((uv_handle_t *)&rp->sock, reaper_close_cb);
}

static void reaper_spawn_close_cb(uv_handle_t *h)
{
    struct agent_group *g = h->data;

    free(h);
    assert(g->handles > 0);
    g->handles--;
    group_maybe_finish(g);
}

/* The process we spawned daemonized (or failed): its handle has done its job. */
static void reaper_spawn_exit_cb(uv_process_t *p, int64_t exit_status, int term_signal)
{
    struct agent_group *g = p->data;

    if (exit_status != 0 || term_signal != 0)
        log_warn("the worker reaper %s exited with status %" PRId64 " (signal %d) as it started",
                 g->cfg.self_exe, exit_status, term_signal);
    g->reaper_spawn = NULL;
    p->data = g;
    uv_close((uv_handle_t *)p, reaper_spawn_close_cb);
}

/* environ without RDZV_AGENT_TOKEN, for the reaper: it is the host's, not an agent's worker.
 * Returns a heap array of borrowed strings, or NULL. */
static char **reaper_env(void)
{
    size_t n = 0, k = 0;
    char **v;

    while (environ && environ[n])
        n++;
    v = calloc(n + 1, sizeof(*v));
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], AGENT_TOKEN_ENV "=", sizeof(AGENT_TOKEN_ENV)) != 0)
            v[k++] = environ[i];
    return v;
}

/* Nobody serves the name: start `self_exe --reaper <name>` with one end of a socket pair as its
 * first connection. Returns the other end in *ret_fd, or a negative errno. */
static int reaper_spawn(struct agent_group *g, int *ret_fd)
{
    char *args[] = {(char *)g->cfg.self_exe, "--reaper", g->reaper_name, NULL};
    uv_process_options_t opts = {0};
    uv_stdio_container_t stdio[3];
    uv_process_t *p;
    char **env;
    int sv[2], r;

    if (g->reaper_spawn)
        return -EBUSY; /* the one we started is still starting */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    p = calloc(1, sizeof(*p));
    env = reaper_env();
    if (!p || !env) {
        r = -ENOMEM;
        goto out_free;
    }
    stdio[0].flags = UV_INHERIT_FD;
    stdio[0].data.fd = sv[1];
    stdio[1].flags = stdio[2].flags = UV_IGNORE;
    opts.file = g->cfg.self_exe;
    opts.args = args;
    opts.env = env;
    opts.stdio = stdio;
    opts.stdio_count = 3;
    opts.exit_cb = reaper_spawn_exit_cb;
    /* Its own session: a signal for the agent's process group (Ctrl-C) does not reach it. */
    opts.flags = UV_PROCESS_DETACHED;
    r = uv_spawn(g->cfg.loop, p, &opts);
    free(env);
    env = NULL;
    close(sv[1]);
    sv[1] = -1;
    p->data = g;
    g->handles++;
    if (r < 0) {
        uv_close((uv_handle_t *)p, reaper_spawn_close_cb);
        p = NULL;
        goto out_free;
    }
    uv_unref((uv_handle_t *)p);
    g->reaper_spawn = p;
    *ret_fd = sv[0];
    return 0;

out_free:
    free(env);
    free(p);
    close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    return r;
}

/* The host's reaper, if one of our user listens on the name. Returns the socket or -errno. */
static int reaper_connect(const char *name)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    struct ucred cr;
    socklen_t len = sizeof(cr);
    int fd, r;

    memcpy(sa.sun_path + 1, name, n); /* abstract: sun_path[0] == '\0' */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0) {
        r = -errno;
        goto out_close;
    }
    /* Anyone may bind an abstract name: serve only with one of ours. */
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.uid != geteuid() ||
        cr.pid <= 0) {
        r = -EPERM;
        goto out_close;
    }
    return fd;

out_close:
    close(fd);
    return r;
}

/* "=<token> <pid>", with our stderr, where the reaper reports what it kills for us. */
static int reaper_register(struct agent_group *g, int fd)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } cm;
    struct msghdr msg = {0};
    struct iovec iov;
    char text[AGENT_TOKEN_LEN + 32];
    int err = STDERR_FILENO;

    iov.iov_base = text;
    iov.iov_len = (size_t)snprintf(text, sizeof(text), "=%s %ld\n", g->token, (long)getpid());
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fcntl(err, F_GETFD) >= 0) {
        memset(&cm, 0, sizeof(cm));
        msg.msg_control = cm.buf;
        msg.msg_controllen = sizeof(cm.buf);
        cm.h.cmsg_level = SOL_SOCKET;
        cm.h.cmsg_type = SCM_RIGHTS;
        cm.h.cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(&cm.h), &err, sizeof(err));
    }
    while (sendmsg(fd, &msg, MSG_NOSIGNAL) < 0)
        if (errno != EINTR)
            return -errno;
    return 0;
}

/* Connect to the host's reaper (or start one), register, and list every worker whose group may be
 * alive. Returns 0 or a negative errno. */
static int reaper_start(struct agent_group *g)
{
    struct reaper *rp;
    int fd, r;

    assert(!g->reaper);
    fd = reaper_connect(g->reaper_name);
    if (fd < 0) {
        r = reaper_spawn(g, &fd);
        if (r < 0)
            return r;
    }
    r = reaper_register(g, fd);
    rp = r < 0 ? NULL : calloc(1, sizeof(*rp));
    if (!rp) {
        close(fd);
        return r < 0 ? r : -ENOMEM;
    }
    (void)uv_pipe_init(g->cfg.loop, &rp->sock, 0);
    rp->sock.data = rp;
    rp->g = g;
    g->handles++;
    r = uv_pipe_open(&rp->sock, fd);
    if (r < 0)
        close(fd);
    else
        r = uv_read_start((uv_stream_t *)&rp->sock, reaper_alloc_cb, reaper_read_cb);
    if (r < 0) {
        uv_close((uv_handle_t *)&rp->sock, reaper_close_cb);
        return r;
    }
    /* The reaper alone must not keep the loop running. */
    uv_unref((uv_handle_t *)&rp->sock);
    g->reaper = rp;
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        if (g->workers[i].listed)
            reaper_send_pgid(g, '+', g->workers[i].pid);
    return 0;
}

static void reaper_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;
    int r;

    r = reaper_start(g);
    if (r < 0) {
        log_error_errno(r, "cannot reach or start the worker reaper, retrying in %d ms",
                        REAPER_RESTART_MS);
        (void)uv_timer_start(t, reaper_timer_cb, REAPER_RESTART_MS, 0);
    }
}

/* At free: every listed group is gone or SIGKILLed. "q": no need to look for our token. */
static void reaper_stop(struct agent_group *g)
{
    struct reaper *rp = g->reaper;

    (void)uv_timer_stop(&g->reaper_timer);
    if (g->reaper_spawn) {
        /* Still starting: it gets the EOF of our end like any agent's. */
        uv_close((uv_handle_t *)g->reaper_spawn, reaper_spawn_close_cb);
        g->reaper_spawn = NULL;
    }
    if (!rp)
        return;
    /* Running workers whose groups were SIGKILLed are doomed: nothing left for it to do. */
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        if (w->listed && w->group_killed) {
            w->listed = false;
            reaper_send_pgid(g, '-', w->pid);
        }
    }
    reaper_send(g, "q\n");
    g->reaper = NULL;
    uv_close((uv_handle_t *)&rp->sock, reaper_close_cb);
}

static bool group_gone(int pgid)
{
    return kill(-pgid, 0) < 0 && errno == ESRCH;
}

/* Unlist w's group ("-pid") once it is known gone: its worker reaped and no process left in it,
 * or SIGKILL sent to it (its processes are doomed, and the id cannot be reused before the last of
 * them is gone). An exited worker's group that still has processes (a lingering descendant)
 * stays listed: it is checked again when the worker's pipes close and at the end of the start. */
static void worker_unlist_if_gone(struct agent_worker *w)
{
    if (!w->listed || w->running)
        return;
    if (!w->group_killed && !group_gone(w->pid))
        return;
    w->listed = false;
    reaper_send_pgid(w->g, '-', w->pid);
}

/* The end of a start (or free): processes left in the groups of exited workers are SIGKILLed,
 * as torchrun ends each worker's process group. The workers' slots are then free for the next
 * start. */
static void group_kill_leftovers(struct agent_group *g)
{
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        if (!w->listed || w->running)
            continue;
        if (!w->group_killed && !group_gone(w->pid)) {
            log_info("worker rank %u (pid %d) exited, but its process group still has "
                     "processes: killing them",
                     w->rank, w->pid);
            (void)kill(-w->pid, SIGKILL);
        }
        w->listed = false;
        reaper_send_pgid(g, '-', w->pid);
    }
}

/* ---- timers and completion ---- */

/* Signal the process group of each worker that may still have one: running, or exited with
 * processes left in its group (listed). */
static void group_kill(struct agent_group *g, int signum)
{
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        if (!w->listed)
            continue;
        if (kill(-w->pid, signum) < 0 && errno != ESRCH)
            log_warn_errno(-errno, "worker rank %u: kill(-%d, %d)", w->rank, w->pid, signum);
        else if (signum == SIGKILL)
            w->group_killed = true;
    }
}

static void kill_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;

    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        if (w->running)
            log_warn("worker rank %u (pid %d) still running %" PRIu64
                     " ms after signal %d, sending SIGKILL to its process group",
                     w->rank, w->pid, g->cfg.grace_ms, g->stop_signal);
    }
    group_kill(g, SIGKILL);
}

static void drain_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;

    /* A stalled reader of our own output is not the workers' fault: wait for it, unless we are
     * stopping (then the deadline holds). */
    if (g->paused && g->state != GROUP_STOPPING) {
        (void)uv_timer_again(t);
        return;
    }
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        for (unsigned k = 0; k < _OUT_MAX; k++) {
            struct worker_out *o = &g->workers[i].out[k];

            if (!o->open)
                continue;
            if (g->paused)
                log_warn("worker rank %u: stopping, dropping its %s that nobody reads from "
                         "the agent",
                         g->workers[i].rank, out_names[k]);
            else
                log_warn("worker rank %u exited but its %s is still open after %d ms of "
                         "silence (a child process holds it), closing it",
                         g->workers[i].rank, out_names[k], AGENT_DRAIN_MS);
            worker_out_close(o);
        }
}

static void notify_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;

    if (g->state != GROUP_IDLE)
        group_maybe_finish(g); /* a stop that need not wait for queued output */
    else if (g->cfg.on_all_exited)
        g->cfg.on_all_exited(g, g->cfg.ud);
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    /* Not remove(): its unlink() of a directory fails only after locking the parent, which for
     * the top directory is $TMPDIR, shared with every agent of the host. */
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) < 0)
        log_debug("workers: remove %s: %s", path, strerror(errno));
    return 0;
}

static void group_destroy(struct agent_group *g)
{
    void (*done)(void *) = g->done;
    void *ud = g->done_ud;

    if (g->tmp_dir) {
        (void)nftw(g->tmp_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(g->tmp_dir);
    }
    for (unsigned i = 0; i < _OUT_MAX; i++) {
        if (g->sink[i].own_fd)
            close(g->sink[i].fd);
        rdzv_buf_free(&g->sink[i].q);
    }
    rdzv_buf_free(&g->scratch);
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        free(g->workers[i].error_file);
        for (unsigned k = 0; k < _OUT_MAX; k++)
            free(g->workers[i].out[k].line);
    }
    free(g->workers);
    free(g);
    if (done)
        done(ud);
}

/* Called from callbacks only (close, poll, timer): reports the end of a start, or finishes a
 * free. A start ends when its handles are closed and, unless it is being stopped, its relayed
 * output has left the queues too (a stop doesn't wait for a slow reader: free() flushes). */
static void group_maybe_finish(struct agent_group *g)
{
    if (g->state == GROUP_FREEING) {
        if (g->handles == 0)
            group_destroy(g);
        return;
    }
    if (!group_active(g) || g->worker_handles > 0)
        return;
    if (g->state == GROUP_ACTIVE && group_queued(g))
        return;
    group_kill_leftovers(g);
    (void)uv_timer_stop(&g->kill_timer);
    (void)uv_timer_stop(&g->drain_timer);
    group_set_state(g, GROUP_IDLE);
    log_debug("workers: all exited and output drained");
    if (g->cfg.on_all_exited)
        g->cfg.on_all_exited(g, g->cfg.ud);
}

static void group_handle_close_cb(uv_handle_t *h)
{
    struct agent_group *g = h->data;

    assert(g->handles > 0);
    g->handles--;
    group_maybe_finish(g);
}

/* ---- processes ---- */

/* A worker is over: reaped, or its command could not be executed (then exit_status is 127). */
static void worker_exited(struct agent_worker *w, int64_t exit_status, int term_signal)
{
    struct agent_group *g = w->g;

    assert(w->running && g->running > 0);
    w->running = false;
    g->running--;
    worker_unlist_if_gone(w);
    if (g->state == GROUP_FREEING)
        return; /* killed by agent_group_free(): nobody to tell */
    if (g->running == 0 && g->pipes_open > 0)
        (void)uv_timer_start(&g->drain_timer, drain_timer_cb, AGENT_DRAIN_MS, AGENT_DRAIN_MS);
    if (g->cfg.on_exit)
        g->cfg.on_exit(g, w->local_rank, exit_status, term_signal, g->cfg.ud);
}

static void worker_exit_cb(uv_process_t *p, int64_t exit_status, int term_signal)
{
    struct agent_worker *w = rdzv_container_of(p, struct agent_worker, proc);

    if (term_signal)
        log_info("worker rank %u (local rank %u, pid %d) was killed by signal %d (%s)", w->rank,
                 w->local_rank, w->pid, term_signal, strsignal(term_signal));
    else
        log_info("worker rank %u (local rank %u, pid %d) exited with status %" PRId64, w->rank,
                 w->local_rank, w->pid, exit_status);
    w->proc_open = false;
    uv_close((uv_handle_t *)&w->proc, worker_handle_close_cb);
    worker_exited(w, exit_status, term_signal);
}

/* The process handle of a worker whose command could not be executed is closed: report the exit
 * (127) now, from the loop, as if a wrapper had tried the exec and failed. */
static void worker_noexec_close_cb(uv_handle_t *h)
{
    struct agent_worker *w = rdzv_container_of((uv_process_t *)h, struct agent_worker, proc);
    struct agent_group *g = w->g;

    assert(g->worker_handles > 0 && g->handles > 0);
    g->worker_handles--;
    g->handles--;
    worker_exited(w, 127, 0);
    group_maybe_finish(g);
}

/* growable, NULL-terminated environment; entries from index n_borrowed on are ours to free */
struct envb {
    char **v;
    size_t n, cap, n_borrowed;
};

static int env_add(struct envb *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int env_add(struct envb *e, const char *fmt, ...)
{
    va_list ap;
    char *s;
    int r;

    assert(e->n + 1 < e->cap);
    va_start(ap, fmt);
    r = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (r < 0)
        return -ENOMEM;
    e->v[e->n++] = s;
    e->v[e->n] = NULL;
    return 0;
}

/* Drop the entries we added, keep the inherited ones. */
static void env_reset(struct envb *e)
{
    for (size_t i = e->n_borrowed; i < e->n; i++)
        free(e->v[i]);
    e->n = e->n_borrowed;
    e->v[e->n] = NULL;
}

static void env_free(struct envb *e)
{
    if (!e->v)
        return;
    env_reset(e);
    free(e->v);
    e->v = NULL;
}

static bool env_is(const char *entry, const char *name)
{
    size_t n = strlen(name);

    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* The inherited environment minus what we set. Entries are borrowed from environ, which must not
 * change until env_free(). */
static int env_inherit(const struct agent_group *g, struct envb *e)
{
    size_t n = 0;

    while (environ && environ[n])
        n++;
    e->cap = n + RDZV_ARRAY_SIZE(env_owned) + ENV_EXTRA + 1;
    e->v = calloc(e->cap, sizeof(*e->v));
    if (!e->v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        bool drop = g->cfg.devices && env_is(environ[i], "CUDA_VISIBLE_DEVICES");

        for (size_t k = 0; !drop && k < RDZV_ARRAY_SIZE(env_owned); k++)
            drop = env_is(environ[i], env_owned[k]);
        if (!drop)
            e->v[e->n++] = environ[i];
    }
    e->n_borrowed = e->n;
    return 0;
}

/* torchrun's per-worker variables (proto/TCPSTORE.md section 8) plus rdzv's own. */
static int env_worker(const struct agent_group *g, const struct agent_worker *w,
                      const struct agent_assignment *a, struct envb *e)
{
    const char *v;
    int r = 0;

    r |= env_add(e, "RANK=%u", w->rank);
    r |= env_add(e, "LOCAL_RANK=%u", w->local_rank);
    r |= env_add(e, "WORLD_SIZE=%u", a->world_size);
    r |= env_add(e, "LOCAL_WORLD_SIZE=%u", g->cfg.nproc);
    r |= env_add(e, "GROUP_RANK=%u", a->node_rank);
    r |= env_add(e, "GROUP_WORLD_SIZE=%u", a->nnodes);
    r |= env_add(e, "ROLE_NAME=%s", g->cfg.role);
    r |= env_add(e, "ROLE_RANK=%u", w->rank);
    r |= env_add(e, "ROLE_WORLD_SIZE=%u", a->world_size);
    r |= env_add(e, "MASTER_ADDR=%s", a->master_addr);
    r |= env_add(e, "MASTER_PORT=%u", a->master_port);
    r |= env_add(e, "TORCHELASTIC_RESTART_COUNT=%u", a->restart_count);
    r |= env_add(e, "TORCHELASTIC_MAX_RESTARTS=%u", g->cfg.max_restarts);
    r |= env_add(e, "TORCHELASTIC_RUN_ID=%s", g->cfg.run_id);
    r |= env_add(e, "TORCHELASTIC_USE_AGENT_STORE=True");
    r |= env_add(e, "TORCHELASTIC_ERROR_FILE=%s", w->error_file);
    v = getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
    r |= env_add(e, "TORCH_NCCL_ASYNC_ERROR_HANDLING=%s", v ? v : "1");
    v = getenv("NCCL_ASYNC_ERROR_HANDLING");
    r |= env_add(e, "NCCL_ASYNC_ERROR_HANDLING=%s", v ? v : "1");
    v = getenv("OMP_NUM_THREADS");
    if (v || g->cfg.nproc > 1)
        r |= env_add(e, "OMP_NUM_THREADS=%s", v ? v : "1");
    if (a->nccl_id_hex)
        r |= env_add(e, "RDZV_NCCL_UNIQUE_ID=%s", a->nccl_id_hex);
    r |= env_add(e, "RDZV_GENERATION=%" PRIu64, a->generation);
    /* Appended to the list of the agents above ours (agent-reaper.h). */
    v = getenv(AGENT_TOKEN_ENV);
    r |= env_add(e, AGENT_TOKEN_ENV "=%s%s%s", v && *v ? v : "", v && *v ? "," : "", g->token);
    if (g->cfg.endpoint)
        r |= env_add(e, "RDZV_ENDPOINT=%s", g->cfg.endpoint);
    if (g->cfg.devices)
        r |= env_add(e, "CUDA_VISIBLE_DEVICES=%s", g->cfg.devices[w->local_rank]);
    return r < 0 ? -ENOMEM : 0;
}

/* mkdir -p, 0755, from the leaf up: parents that exist are not touched. A mkdir() locks the parent
 * directory, and 256 agents starting their workers at once would queue on the lock of /tmp or of
 * a shared log directory. buf (PATH_MAX) is modified and restored. */
static int mkdir_up(char *buf, size_t n)
{
    char *slash;
    int r;

    if (mkdir(buf, 0755) == 0 || errno == EEXIST)
        return 0;
    if (errno != ENOENT)
        return -errno;
    slash = memrchr(buf, '/', n);
    if (!slash || slash == buf)
        return -ENOENT;
    *slash = '\0';
    r = mkdir_up(buf, (size_t)(slash - buf));
    *slash = '/';
    if (r < 0)
        return r;
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static int mkdir_parents(const char *path)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);

    if (n >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    return mkdir_up(buf, n);
}

/* Without log_dir, error files go to a private directory: <TMPDIR>/rdzv-<run_id>-XXXXXX. */
static int group_make_tmp_dir(struct agent_group *g)
{
    const char *tmp = getenv("TMPDIR");
    int r;

    if (!tmp || !*tmp)
        tmp = "/tmp";
    if (asprintf(&g->tmp_dir, "%s/rdzv-%s-XXXXXX", tmp, g->cfg.run_id) < 0) {
        g->tmp_dir = NULL;
        return -ENOMEM;
    }
    if (!mkdtemp(g->tmp_dir)) {
        r = -errno;
        log_error_errno(r, "cannot create a directory for error files like %s", g->tmp_dir);
        free(g->tmp_dir);
        g->tmp_dir = NULL;
        return r;
    }
    return 0;
}

/* The worker's error file of this attempt (a stale one removed) and, with log_dir, its directory
 * and logs: <log_dir>/<run_id>/attempt_<k>/<local_rank>/{error.json,stdout.log,stderr.log}.
 * Without log_dir the error files lie flat in the private directory, as
 * attempt_<k>_<local_rank>.error.json: no directory to make per worker and attempt. */
static int worker_prepare_dir(struct agent_group *g, struct agent_worker *w, unsigned attempt)
{
    char dir[PATH_MAX], path[PATH_MAX];
    int n, r;

    if (!g->cfg.log_dir) {
        if (!g->tmp_dir) {
            r = group_make_tmp_dir(g);
            if (r < 0)
                return r;
        }
        free(w->error_file);
        if (asprintf(&w->error_file, "%s/attempt_%u_%u.error.json", g->tmp_dir, attempt,
                     w->local_rank) < 0) {
            w->error_file = NULL;
            return -ENOMEM;
        }
        if (unlink(w->error_file) < 0 && errno != ENOENT)
            log_warn_errno(-errno, "cannot remove stale %s", w->error_file);
        return 0;
    }
    n = snprintf(dir, sizeof(dir), "%s/%s/attempt_%u/%u", g->cfg.log_dir, g->cfg.run_id, attempt,
                 w->local_rank);
    if (n < 0 || (size_t)n + sizeof("/stdout.log") > sizeof(dir))
        return log_error_errno(-ENAMETOOLONG, "worker log directory under %s", g->cfg.log_dir);
    r = mkdir_parents(dir);
    if (r < 0)
        return log_error_errno(r, "cannot create %s", dir);

    free(w->error_file);
    if (asprintf(&w->error_file, "%s/error.json", dir) < 0) {
        w->error_file = NULL;
        return -ENOMEM;
    }
    /* torchrun gets a fresh directory per attempt; ours is fixed, so a leftover error file would
     * be taken for this attempt's. */
    if (unlink(w->error_file) < 0 && errno != ENOENT)
        log_warn_errno(-errno, "cannot remove stale %s", w->error_file);

    for (unsigned k = 0; k < _OUT_MAX; k++) {
        if (snprintf(path, sizeof(path), "%s/%s.log", dir, out_names[k]) >= (int)sizeof(path))
            return log_error_errno(-ENAMETOOLONG, "--log-dir path too long: %s", dir);
        w->out[k].log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
        if (w->out[k].log_fd < 0)
            return log_error_errno(-errno, "cannot open %s", path);
    }
    return 0;
}

static void worker_close_logs(struct agent_worker *w)
{
    for (unsigned k = 0; k < _OUT_MAX; k++)
        if (w->out[k].log_fd >= 0) {
            close(w->out[k].log_fd);
            w->out[k].log_fd = -1;
        }
}

/* Make one output pipe: our end non-blocking in a uv_pipe_t, the worker's end blocking (it is
 * the worker's stdout or stderr). On failure nothing is left open. */
static int worker_out_open(struct worker_out *o, int *ret_child_fd)
{
    struct agent_group *g = o->w->g;
    uv_file fds[2];
    int r;

    r = uv_pipe(fds, UV_NONBLOCK_PIPE, 0);
    if (r < 0)
        return r;
    r = uv_pipe_init(g->cfg.loop, &o->pipe, 0);
    if (r < 0)
        goto out_close_fds;
    o->pipe.data = g;
    o->open = true;
    o->len = 0;
    g->pipes_open++;
    g->worker_handles++;
    g->handles++;
    r = uv_pipe_open(&o->pipe, fds[0]);
    if (r < 0) {
        close(fds[0]);
        close(fds[1]);
        worker_out_close(o);
        return r;
    }
    *ret_child_fd = fds[1];
    return 0;

out_close_fds:
    close(fds[0]);
    close(fds[1]);
    return r;
}

/* Errors of uv_spawn() that are the system's, not the command's: the start fails. Any other
 * (ENOENT, EACCES, ENOEXEC, ...) comes from execvp() in the child: the worker "exits" 127. */
static bool spawn_error_is_resources(int r)
{
    return r == UV_EAGAIN || r == UV_ENOMEM || r == UV_EMFILE || r == UV_ENFILE || r == UV_ENOSYS;
}

/* The command cannot be executed: say so on the worker's stderr (relayed and logged, as a wrapper
 * that failed to exec it would have), then close its pipes. */
static void worker_cannot_run(struct agent_worker *w, int err)
{
    struct worker_out *o = &w->out[OUT_STDERR];
    char msg[PATH_MAX + 128];
    int n;

    n = snprintf(msg, sizeof(msg), "rdzv-agent: cannot run '%s': %s\n", w->g->cfg.argv[0],
                 strerror(-err));
    if (n < 0)
        n = 0;
    else if ((size_t)n >= sizeof(msg))
        n = (int)sizeof(msg) - 1;
    if (o->log_fd >= 0)
        (void)write_all(o->log_fd, msg, (size_t)n);
    if (n > 0)
        relay_line(o, msg, (size_t)n - 1);
    for (unsigned k = 0; k < _OUT_MAX; k++)
        worker_out_close(&w->out[k]);
}

static int worker_spawn(struct agent_group *g, struct agent_worker *w,
                        const struct agent_assignment *a, struct envb *env)
{
    uv_process_options_t opts = {0};
    uv_stdio_container_t stdio[3];
    int child_fd[_OUT_MAX] = {-1, -1};
    int r;

    w->rank = a->rank_offset + w->local_rank;
    w->prefix_len = (size_t)snprintf(w->prefix, sizeof(w->prefix), "[rank%u]: ", w->rank);
    w->pid = 0;
    w->listed = w->group_killed = false;
    r = worker_prepare_dir(g, w, a->restart_count);
    if (r < 0)
        goto out_close_logs;
    r = env_worker(g, w, a, env);
    if (r < 0)
        goto out_free_env;

    for (unsigned k = 0; k < _OUT_MAX; k++) {
        r = worker_out_open(&w->out[k], &child_fd[k]);
        if (r < 0) {
            log_error_errno(r, "worker rank %u: cannot create its %s pipe", w->rank, out_names[k]);
            goto out_close_pipes;
        }
    }
    /* stdin is inherited, as torchrun does (its own session has no controlling terminal); if the
     * agent has none, fd 0 may now be one of our pipes: give /dev/null instead. */
    stdio[0].flags = g->stdin_open ? UV_INHERIT_FD : UV_IGNORE;
    stdio[0].data.fd = 0;
    for (unsigned k = 0; k < _OUT_MAX; k++) {
        stdio[1 + k].flags = UV_INHERIT_FD;
        stdio[1 + k].data.fd = child_fd[k];
    }
    opts.exit_cb = worker_exit_cb;
    opts.file = g->cfg.argv[0];
    opts.args = g->cfg.argv;
    opts.env = env->v;
    opts.stdio = stdio;
    opts.stdio_count = 3;
    opts.flags = UV_PROCESS_DETACHED; /* setsid(): the worker leads its own process group */
    r = uv_spawn(g->cfg.loop, &w->proc, &opts);
    /* uv_spawn initialises the handle even when it fails: it must be closed either way. */
    w->proc.data = g;
    g->worker_handles++;
    g->handles++;
    if (r >= 0) {
        w->pid = w->proc.pid;
        w->listed = true;
        reaper_send_pgid(g, '+', w->pid);
        w->proc_open = true;
    } else if (spawn_error_is_resources(r)) {
        log_error_errno(r, "worker rank %u: cannot spawn %s", w->rank, g->cfg.argv[0]);
        uv_close((uv_handle_t *)&w->proc, worker_handle_close_cb);
        goto out_close_pipes;
    }
    w->running = true;
    g->running++;
    for (unsigned k = 0; k < _OUT_MAX; k++)
        close(child_fd[k]);
    if (r < 0) {
        log_debug("workers: rank %u: cannot run %s: %s", w->rank, g->cfg.argv[0], uv_strerror(r));
        worker_cannot_run(w, r);
        uv_close((uv_handle_t *)&w->proc, worker_noexec_close_cb);
        env_reset(env);
        return 0;
    }
    for (unsigned k = 0; k < _OUT_MAX; k++)
        if (!g->paused)
            (void)uv_read_start((uv_stream_t *)&w->out[k].pipe, worker_out_alloc_cb,
                                worker_out_read_cb);
    log_info("started worker rank %u (local rank %u, pid %d): %s", w->rank, w->local_rank, w->pid,
             g->cfg.argv[0]);
    env_reset(env);
    return 0;

out_close_pipes:
    for (unsigned k = 0; k < _OUT_MAX; k++) {
        if (child_fd[k] >= 0)
            close(child_fd[k]);
        worker_out_close(&w->out[k]);
    }
out_free_env:
    env_reset(env);
out_close_logs:
    worker_close_logs(w);
    return r;
}

/* ---- public API ---- */

int agent_group_new(const struct agent_group_cfg *cfg, struct agent_group **ret)
{
    uint8_t rnd[AGENT_TOKEN_LEN / 2];
    struct agent_group *g;
    int r;

    if (!cfg->loop || !cfg->argv || !cfg->argv[0] || !cfg->self_exe || cfg->nproc == 0)
        return -EINVAL;
    if (cfg->run_id && (!*cfg->run_id || strchr(cfg->run_id, '/') ||
                        strcmp(cfg->run_id, ".") == 0 || strcmp(cfg->run_id, "..") == 0))
        return -EINVAL;
    if (cfg->devices)
        for (unsigned i = 0; i < cfg->nproc; i++)
            if (!cfg->devices[i])
                return -EINVAL;
    g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->workers = calloc(cfg->nproc, sizeof(*g->workers));
    if (!g->workers) {
        free(g);
        return -ENOMEM;
    }
    g->cfg = *cfg;
    g->stdin_open = fcntl(STDIN_FILENO, F_GETFD) >= 0;
    if (!g->cfg.role)
        g->cfg.role = "default";
    if (!g->cfg.run_id)
        g->cfg.run_id = "none";
    if (g->cfg.out_fd <= 0)
        g->cfg.out_fd = STDOUT_FILENO;
    if (g->cfg.err_fd <= 0)
        g->cfg.err_fd = STDERR_FILENO;
    for (unsigned i = 0; i < cfg->nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        w->g = g;
        w->local_rank = i;
        for (unsigned k = 0; k < _OUT_MAX; k++) {
            w->out[k].w = w;
            w->out[k].which = k;
            w->out[k].log_fd = -1;
        }
    }
    for (size_t i = 0; i < sizeof(rnd); i += 8) {
        uint64_t v = rdzv_random_u64();

        memcpy(rnd + i, &v, sizeof(v));
    }
    rdzv_hex(rnd, sizeof(rnd), g->token);
    g->token[AGENT_TOKEN_LEN] = '\0';
    if (cfg->reaper_name)
        r = snprintf(g->reaper_name, sizeof(g->reaper_name), "%s", cfg->reaper_name) >=
                    (int)sizeof(g->reaper_name)
                ? -ENAMETOOLONG
                : 0;
    else
        r = agent_reaper_default_name(g->cfg.run_id, g->reaper_name, sizeof(g->reaper_name));
    if (r < 0) {
        free(g->workers);
        free(g);
        return r;
    }
    (void)uv_timer_init(cfg->loop, &g->kill_timer);
    (void)uv_timer_init(cfg->loop, &g->drain_timer);
    (void)uv_timer_init(cfg->loop, &g->notify_timer);
    (void)uv_timer_init(cfg->loop, &g->reaper_timer);
    g->kill_timer.data = g->drain_timer.data = g->notify_timer.data = g->reaper_timer.data = g;
    uv_unref((uv_handle_t *)&g->reaper_timer);
    g->handles += 4;
    sink_setup(g, &g->sink[OUT_STDOUT], g->cfg.out_fd);
    sink_setup(g, &g->sink[OUT_STDERR], g->cfg.err_fd);
    /* Now, not when the workers start: a connect() to the host's reaper, or starting one. */
    r = reaper_start(g);
    if (r < 0) {
        log_error_errno(r, "cannot start the worker reaper %s", cfg->self_exe);
        agent_group_free(g, NULL, NULL);
        return r;
    }
    /* The private directory of error files: made while the agent waits for the rendezvous;
     * 256 agents starting their workers at once would all queue on /tmp. A failure here is
     * reported by the start, which tries again. */
    if (!g->cfg.log_dir)
        (void)group_make_tmp_dir(g);
    *ret = g;
    return 0;
}

int agent_group_start(struct agent_group *g, const struct agent_assignment *a)
{
    struct envb env = {0};
    unsigned started = 0;
    int r;

    if (g->state != GROUP_IDLE)
        return -EBUSY;
    if (!a->master_addr || (uint64_t)a->rank_offset + g->cfg.nproc > a->world_size ||
        a->node_rank >= a->nnodes)
        return -EINVAL;
    (void)uv_timer_stop(&g->notify_timer);
    r = env_inherit(g, &env);
    if (r < 0)
        return r;
    if (g->cfg.nproc > 1 && !getenv("OMP_NUM_THREADS") && !g->omp_told) {
        log_info("OMP_NUM_THREADS is not set: each worker gets OMP_NUM_THREADS=1 (as with "
                 "torchrun); set it to tune performance");
        g->omp_told = true;
    }
    group_set_state(g, GROUP_ACTIVE);
    g->stop_signal = 0;
    log_info("starting %u workers (ranks %u..%u of %u, generation %" PRIu64 ", attempt %u)",
             g->cfg.nproc, a->rank_offset, a->rank_offset + g->cfg.nproc - 1, a->world_size,
             a->generation, a->restart_count);
    for (; started < g->cfg.nproc; started++) {
        r = worker_spawn(g, &g->workers[started], a, &env);
        if (r < 0)
            break;
    }
    env_free(&env);
    if (r >= 0)
        return 0;

    log_error("started %u of %u workers, stopping them", started, g->cfg.nproc);
    if (g->worker_handles == 0) {
        group_set_state(g, GROUP_IDLE);
        (void)uv_timer_start(&g->notify_timer, notify_timer_cb, 0, 0);
    } else {
        agent_group_stop(g, SIGTERM);
    }
    return r;
}

void agent_group_signal(struct agent_group *g, int signum)
{
    if (!group_active(g))
        return;
    log_info("forwarding signal %d to %u workers", signum, g->running);
    group_kill(g, signum);
}

void agent_group_stop(struct agent_group *g, int signum)
{
    switch (g->state) {
    case GROUP_IDLE:
        (void)uv_timer_start(&g->notify_timer, notify_timer_cb, 0, 0);
        return;
    case GROUP_ACTIVE:
        group_set_state(g, GROUP_STOPPING);
        g->stop_signal = signum;
        /* The grace period counts from now, not from the start of this loop iteration. */
        uv_update_time(g->cfg.loop);
        (void)uv_timer_start(&g->kill_timer, kill_timer_cb, g->cfg.grace_ms, 0);
        /* Workers all gone, only waiting for a slow reader of their output: end now. */
        if (g->worker_handles == 0)
            (void)uv_timer_start(&g->notify_timer, notify_timer_cb, 0, 0);
        log_info("stopping %u workers with signal %d, SIGKILL in %" PRIu64 " ms", g->running,
                 signum, g->cfg.grace_ms);
        break;
    case GROUP_STOPPING:
        log_info("stopping %u workers with signal %d", g->running, signum);
        break;
    case GROUP_FREEING:
    case _GROUP_STATE_MAX:
        return;
    }
    group_kill(g, signum);
}

unsigned agent_group_running(const struct agent_group *g)
{
    return g->running;
}

int agent_group_reaper_pid(const struct agent_group *g)
{
    return g->reaper && g->reaper->acked ? g->reaper->pid : 0;
}

const char *agent_group_error_file(const struct agent_group *g, unsigned local_rank)
{
    if (local_rank >= g->cfg.nproc)
        return NULL;
    return g->workers[local_rank].error_file;
}

void agent_group_free(struct agent_group *g, void (*done)(void *ud), void *ud)
{
    uint64_t deadline;

    if (!g)
        return;
    assert(g->state != GROUP_FREEING);
    /* Running workers' handles are closed by worker_exit_cb once the SIGKILL lands: closing a
     * process handle here could pull it out of a batch of exits libuv is reporting right now
     * (free() called from on_exit), and would leave the worker unreaped. */
    if (g->running > 0) {
        log_warn("freeing the worker group with %u workers running, killing them", g->running);
        group_kill(g, SIGKILL);
    }
    group_kill_leftovers(g);
    /* Every listed group is gone or SIGKILLed: the reaper has nothing left to do. */
    reaper_stop(g);
    g->done = done;
    g->done_ud = ud;
    group_set_state(g, GROUP_FREEING);
    uv_close((uv_handle_t *)&g->kill_timer, group_handle_close_cb);
    uv_close((uv_handle_t *)&g->notify_timer, group_handle_close_cb);
    uv_close((uv_handle_t *)&g->reaper_timer, group_handle_close_cb);
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        for (unsigned k = 0; k < _OUT_MAX; k++)
            worker_out_close(&w->out[k]);
    }
    /* Everything read is in the sinks now (closing relayed the unfinished lines). */
    deadline = rdzv_now_ms() + AGENT_FLUSH_MS;
    for (unsigned i = 0; i < _OUT_MAX; i++) {
        struct out_sink *s = &g->sink[i];

        sink_flush_sync(s, deadline);
        if (s->poll_open) {
            s->poll_open = false;
            s->polling = false;
            uv_close((uv_handle_t *)&s->poll, group_handle_close_cb);
        }
    }
    uv_close((uv_handle_t *)&g->drain_timer, group_handle_close_cb);
}
