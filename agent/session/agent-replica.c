/* SPDX-License-Identifier: Apache-2.0 */
/* agent-replica.c: start a replica of rdzvd that the leader asked for, and watch its readiness
 * (agent-replica.h). */
#include "agent/session/agent-replica.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rdzv-util.h"
#include "agent/session/agent-host.h"

#define STR_(x) #x
#define STR(x) STR_(x)

struct agent_replica {
    uv_pipe_t pipe; /* the read end of rdzvd's --ready-fd: EOF when it exits */
    uv_timer_t timer;
    unsigned open; /* handles not closed yet */
    bool reported, freed;
    bool listening; /* done(0) was said: the pipe is watched for its exit */
    agent_replica_done_fn done;
    agent_replica_gone_fn gone;
    void *ud;
    char endpoint[96];
    char dir[PATH_MAX]; /* its --state-dir, made for it */
    char log_path[PATH_MAX];
    char buf[16];
    size_t n;
};

static void closed_cb(uv_handle_t *h)
{
    struct agent_replica *r = h->data;

    if (--r->open == 0 && r->freed)
        free(r);
}

static void close_handles(struct agent_replica *r)
{
    if (!uv_is_closing((uv_handle_t *)&r->pipe))
        uv_close((uv_handle_t *)&r->pipe, closed_cb);
    if (!uv_is_closing((uv_handle_t *)&r->timer))
        uv_close((uv_handle_t *)&r->timer, closed_cb);
}

static void report(struct agent_replica *r, int status, const char *what)
{
    if (r->reported)
        return;
    r->reported = true;
    if (status == 0 && !r->freed) {
        /* It listens: the pipe stays open, and its EOF says when it exits (gone). */
        r->listening = true;
        if (!uv_is_closing((uv_handle_t *)&r->timer))
            uv_close((uv_handle_t *)&r->timer, closed_cb);
        r->done(r->ud, 0, what);
        return;
    }
    close_handles(r);
    if (!r->freed) {
        r->freed = true; /* the caller forgets r in done: it goes once its handles closed */
        r->done(r->ud, status, what);
    }
}

/* The replica that listened exited: the caller forgets r in gone. */
static void report_gone(struct agent_replica *r)
{
    close_handles(r);
    if (!r->freed) {
        r->freed = true;
        log_warn("the replica of rdzvd this agent hosts (%s) exited (see %s)", r->endpoint,
                 r->log_path);
        if (r->gone)
            r->gone(r->ud);
    }
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct agent_replica *r = h->data;

    (void)suggested;
    *buf = uv_buf_init(r->buf + r->n, (unsigned)(sizeof(r->buf) - 1 - r->n));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct agent_replica *r = s->data;
    char why[PATH_MAX + 64];

    (void)buf;
    if (r->listening) {
        if (nread < 0)
            report_gone(r); /* it writes nothing more: EOF (or an error) is its exit */
        else
            r->n = 0;
        return;
    }
    if (nread < 0 || (nread == 0 && r->n == sizeof(r->buf) - 1)) {
        /* It is gone (it held the pipe's only write end): so is the directory made for it,
         * its log with it; its last line says why. */
        char last[300];

        agent_host_log_tail(r->log_path, last, sizeof(last));
        if (nread == UV_EOF)
            (void)rdzv_rmtree(r->dir);
        snprintf(why, sizeof(why), "it exited before listening: %s", last);
        report(r, -EIO, why);
        return;
    }
    r->n += (size_t)nread;
    if (memchr(r->buf, '\n', r->n) || r->n == sizeof(r->buf) - 1) {
        log_info("hosting replica of rdzvd at %s (it outlives this agent; log %s)", r->endpoint,
                 r->log_path);
        report(r, 0, r->endpoint);
    }
}

static void timer_cb(uv_timer_t *t)
{
    struct agent_replica *r = t->data;
    char why[PATH_MAX + 64];

    snprintf(why, sizeof(why), "not listening within %d ms (see %s)", AGENT_HOST_READY_MS,
             r->log_path);
    report(r, -ETIMEDOUT, why);
}

int agent_replica_start(uv_loop_t *loop, const struct agent_replica_cfg *cfg,
                        agent_replica_done_fn done, agent_replica_gone_fn gone, void *ud,
                        struct agent_replica **ret)
{
    const char *tmp = getenv("TMPDIR");
    char rdzvd[PATH_MAX], dir[PATH_MAX], token[PATH_MAX], key[PATH_MAX], peers[96], port[8];
    char state[PATH_MAX + 8];
    char id[16], nrep[8], *argv[28];
    struct agent_replica *r;
    int ready[2], rc;
    unsigned n = 0;

    if (agent_host_find_rdzvd(cfg->self_exe, rdzvd, sizeof(rdzvd)) < 0)
        return log_error_errno(-ENOENT, "hosting a replica: rdzvd is not installed beside %s "
                                        "nor in PATH", cfg->self_exe);
    if (cfg->token_file && !realpath(cfg->token_file, token))
        return log_error_errno(-errno, "hosting a replica: --token-file %s", cfg->token_file);
    if (cfg->replica_key_file && !realpath(cfg->replica_key_file, key))
        return log_error_errno(-errno, "hosting a replica: --replica-key-file %s",
                               cfg->replica_key_file);
    tmp = tmp && *tmp ? tmp : "/tmp";
    snprintf(dir, sizeof(dir), "%s/rdzvd-replica-%u-%u-XXXXXX", tmp, cfg->port, cfg->id);
    if (!mkdtemp(dir))
        return log_error_errno(-errno, "hosting a replica: cannot create %s", dir);
    r = calloc(1, sizeof(*r));
    if (!r)
        return log_error_errno(-ENOMEM, "hosting a replica");
    r->done = done;
    r->gone = gone;
    r->ud = ud;
    snprintf(r->dir, sizeof(r->dir), "%s", dir);
    if (agent_host_log_path(r->log_path, sizeof(r->log_path), cfg->log_dir, dir,
                            "rdzvd-replica-%u-%u.log", cfg->port, cfg->id) < 0) {
        free(r);
        (void)rdzv_rmtree(dir);
        return -EIO;
    }
    snprintf(state, sizeof(state), "%s/state", dir);
    rdzv_format_hostport(peers, sizeof(peers), cfg->addr, cfg->port);
    snprintf(r->endpoint, sizeof(r->endpoint), "%s", peers);
    snprintf(port, sizeof(port), "%u", cfg->port);
    snprintf(id, sizeof(id), "%u", cfg->id);
    snprintf(nrep, sizeof(nrep), "%u", cfg->replicas);
    argv[n++] = rdzvd;
    argv[n++] = "--bind";
    argv[n++] = (char *)cfg->addr;
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "--peers";
    argv[n++] = peers;
    argv[n++] = "--join";
    argv[n++] = "--replica-id";
    argv[n++] = id;
    argv[n++] = "--replicas";
    argv[n++] = nrep;
    argv[n++] = "--state-dir";
    argv[n++] = state;
    argv[n++] = "--remove-dir"; /* made for this job only: gone with it */
    argv[n++] = dir;
    argv[n++] = "--exit-when-idle";
    argv[n++] = AGENT_HOST_IDLE;
    argv[n++] = "--ready-fd";
    argv[n++] = STR(AGENT_HOST_READY_FD);
    argv[n++] = "--log-level";
    argv[n++] = cfg->level >= RDZV_LOG_DEBUG ? "debug" : "info";
    if (cfg->token_file) {
        argv[n++] = "--token-file";
        argv[n++] = token;
    }
    if (cfg->replica_key_file) {
        argv[n++] = "--replica-key-file";
        argv[n++] = key;
    }
    argv[n] = NULL;
    if (pipe2(ready, O_CLOEXEC) < 0) {
        rc = log_error_errno(-errno, "hosting a replica: pipe");
        free(r);
        return rc;
    }
    rc = agent_host_spawn(argv, ready[1], r->log_path);
    close(ready[1]); /* rdzvd holds the only write end now: EOF when it exits */
    if (rc < 0) {
        close(ready[0]);
        free(r);
        (void)rdzv_rmtree(dir);
        return log_error_errno(rc, "hosting a replica: cannot start rdzvd");
    }
    rc = uv_pipe_init(loop, &r->pipe, 0);
    if (rc < 0) {
        close(ready[0]);
        free(r);
        return log_error_errno(rc, "hosting a replica: cannot watch rdzvd");
    }
    r->open++;
    r->pipe.data = r;
    rc = uv_pipe_open(&r->pipe, ready[0]);
    if (rc < 0) {
        close(ready[0]);
        r->freed = r->reported = true;
        uv_close((uv_handle_t *)&r->pipe, closed_cb); /* frees r */
        return log_error_errno(rc, "hosting a replica: cannot watch rdzvd");
    }
    uv_timer_init(loop, &r->timer);
    r->open++;
    r->timer.data = r;
    rc = uv_read_start((uv_stream_t *)&r->pipe, alloc_cb, read_cb);
    if (rc == 0)
        rc = uv_timer_start(&r->timer, timer_cb, AGENT_HOST_READY_MS, 0);
    if (rc < 0) {
        r->freed = r->reported = true;
        close_handles(r); /* frees r */
        return log_error_errno(rc, "hosting a replica: cannot watch rdzvd");
    }
    log_info("starting replica %u of rdzvd at %s (log %s)", cfg->id, r->endpoint, r->log_path);
    *ret = r;
    return 0;
}

void agent_replica_free(struct agent_replica *r)
{
    if (!r)
        return;
    r->freed = true;
    if (!r->reported || r->listening) {
        r->reported = true;
        close_handles(r);
    } else if (r->open == 0) {
        free(r);
    }
}

static void request_done(void *ud, int status, const char *what)
{
    struct agent_replica_host *h = ud;
    struct rdzv_replica ans = {.id = h->id};

    if (status < 0) {
        h->replica = NULL; /* it frees itself once reported */
        log_warn("cannot host replica %" PRId64 " of rdzvd: %s", h->id, what);
        ans.failed = true;
        snprintf(ans.error, sizeof(ans.error), "%s", what);
    } else {
        snprintf(ans.endpoint, sizeof(ans.endpoint), "%s", what); /* h->replica watches it */
    }
    h->send(h->ud, &ans);
}

/* The replica hosted here exited while this agent runs: the leader is told (REPLICA with the
 * error), so that it replaces the voter, and this agent may be asked again. */
static void request_gone(void *ud)
{
    struct agent_replica_host *h = ud;
    struct rdzv_replica ans = {.id = h->id, .failed = true};

    h->replica = NULL; /* it frees itself */
    snprintf(ans.error, sizeof(ans.error), "replica %" PRId64 " exited", h->id);
    h->gone = ans;
    h->gone_pending = true;
    h->send(h->ud, &ans);
}

void agent_replica_joined(struct agent_replica_host *h)
{
    if (h->gone_pending) {
        h->gone_pending = false;
        h->send(h->ud, &h->gone);
    }
}

void agent_replica_request(struct agent_replica_host *h, const char *local,
                           const struct rdzv_replica *q)
{
    struct rdzv_replica ans = {.id = q->id, .failed = true};
    char addr[64];
    int r = local[0] ? 0 : -ENOTCONN;

    if (h->replica) {
        snprintf(ans.error, sizeof(ans.error), "this agent hosts replica %" PRId64, h->id);
        h->send(h->ud, &ans);
        return;
    }
    snprintf(addr, sizeof(addr), "%s", strncmp(local, "::ffff:", 7) == 0 && strchr(local + 7, '.')
                                           ? local + 7 : local);
    if (r == 0)
        r = agent_replica_start(h->loop,
                                &(struct agent_replica_cfg){.self_exe = h->self_exe,
                                                            .addr = addr,
                                                            .port = (uint16_t)q->port,
                                                            .id = (unsigned)q->id,
                                                            .replicas = (unsigned)q->replicas,
                                                            .token_file = h->token_file,
                                                            .replica_key_file =
                                                                h->replica_key_file,
                                                            .log_dir = h->log_dir,
                                                            .level = h->level},
                                request_done, request_gone, h, &h->replica);
    if (r < 0) {
        snprintf(ans.error, sizeof(ans.error), "cannot start rdzvd: %s", strerror(-r));
        h->send(h->ud, &ans);
        return;
    }
    h->id = q->id;
}
