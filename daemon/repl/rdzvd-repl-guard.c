/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-repl-guard.c: an inbound replica link, checked message by message before libraft reads
 * it (rdzvd-repl-guard.h). */
#include "daemon/repl/rdzvd-repl-guard.h"

#include <errno.h>
#include <raft.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/rdzv-util.h"

enum { G_PREAMBLE, G_HEADER, G_ENTRY, G_CHANGE, G_DATA, G_SKIP };

static void read_again(struct rdzvd_repl_guard *g);

/* Bytes passed to libraft in one turn: one write. */
struct fwd {
    uv_write_t w;
    struct rdzvd_repl_guard *g;
    size_t len, cap;
    uint8_t data[];
};

static void guard_maybe_freed(struct rdzvd_repl_guard *g)
{
    if (g->ours_open || g->tcp_open || g->queued > 0)
        return;
    if (g->started)
        g->hooks->closed(g->ud, g);
    free(g->hdr);
    free(g->chg);
    free(g->pending);
    free(g);
}

static void tcp_closed(uv_handle_t *h)
{
    struct rdzvd_repl_guard *g = h->data;

    raft_free(h);
    g->tcp_open = false;
    guard_maybe_freed(g);
}

static void ours_closed(uv_handle_t *h)
{
    struct rdzvd_repl_guard *g = h->data;

    g->ours_open = false;
    guard_maybe_freed(g);
}

void rdzvd_repl_guard_close(struct rdzvd_repl_guard *g)
{
    if (g->closing)
        return;
    g->closing = true;
    if (g->tcp) {
        uv_close((uv_handle_t *)g->tcp, tcp_closed);
        g->tcp = NULL;
    }
    if (g->ours_open)
        uv_close((uv_handle_t *)&g->ours, ours_closed);
    else
        guard_maybe_freed(g);
}

static void write_cb(uv_write_t *w, int status)
{
    struct fwd *f = w->data;
    struct rdzvd_repl_guard *g = f->g;

    (void)status; /* a failed write: libraft's end is gone, and its read callback closes us */
    g->queued -= f->len;
    free(f);
    if (g->closing) {
        guard_maybe_freed(g);
        return;
    }
    if (!g->reading && g->queued < RDZVD_REPL_GUARD_QUEUE_LOW && g->tcp)
        read_again(g);
}

/* Keep n bytes of p to pass on at the end of this turn. */
static int put(struct rdzvd_repl_guard *g, const uint8_t *p, size_t n)
{
    struct fwd *f = g->pending;

    if (n == 0)
        return 0;
    if (!f || f->cap - f->len < n) {
        size_t cap = (f ? f->len : 0) + n;
        struct fwd *nf;

        cap = cap < RDZVD_REPL_GUARD_READ ? RDZVD_REPL_GUARD_READ : cap;
        nf = realloc(f, sizeof(*nf) + cap);
        if (!nf)
            return -ENOMEM;
        if (!f)
            nf->len = 0;
        nf->cap = cap;
        f = g->pending = nf;
    }
    memcpy(f->data + f->len, p, n);
    f->len += n;
    return 0;
}

/* Write what this turn passed. */
static int flush(struct rdzvd_repl_guard *g)
{
    struct fwd *f = g->pending;
    uv_buf_t b;

    if (!f)
        return 0;
    g->pending = NULL;
    f->g = g;
    f->w.data = f;
    b = uv_buf_init((char *)f->data, (unsigned)f->len);
    if (uv_write(&f->w, (uv_stream_t *)&g->ours, &b, 1, write_cb) < 0) {
        free(f);
        return -EIO;
    }
    g->queued += f->len;
    g->st.bytes += f->len;
    return 0;
}

static void message_done(struct rdzvd_repl_guard *g)
{
    free(g->hdr);
    g->hdr = NULL;
    g->st.messages++;
    g->state = G_PREAMBLE;
    g->got = 0;
}

/* The next entry of an AppendEntries, or the message's end. */
static int next_entry(struct rdzvd_repl_guard *g)
{
    while (g->entry < g->msg.n_entries) {
        unsigned type;
        uint64_t len;

        rdzv_raft_entry(g->hdr, g->entry++, &type, &len); /* never empty: checked */
        if (type == RDZV_RAFT_CHANGE) {
            if (!(g->chg = malloc((size_t)len)))
                return -ENOMEM;
            g->need = (size_t)len;
            g->got = 0;
            g->state = G_CHANGE;
        } else {
            g->left = len;
            g->state = G_ENTRY;
        }
        return 0;
    }
    message_done(g);
    return 0;
}

/* An AppendEntries with entries, or an InstallSnapshot, of a term older than ours: libraft only
 * answers it with our term, but would first allocate and read the whole payload the header
 * claims (gigabytes a link). libraft gets the answerable part, an AppendEntries of that term and
 * no entries (from the snapshot's last index and term for an InstallSnapshot), and the payload is
 * read and dropped here. Terms only grow: stale now is stale when libraft processes it. */
static int stale(struct rdzvd_repl_guard *g)
{
    uint8_t pre[RDZV_RAFT_PREAMBLE_LEN], h[48] = {0};
    int r;

    memcpy(h, g->hdr, 32); /* term, prev index and term (last index and term), commit */
    if (g->msg.type == RDZV_RAFT_INSTALL_SNAPSHOT)
        memset(h + 24, 0, 8);
    rdzv_set_u64(pre, RDZV_RAFT_APPEND_ENTRIES);
    rdzv_set_u64(pre + 8, sizeof(h));
    if ((r = put(g, pre, sizeof(pre))) < 0 || (r = put(g, h, sizeof(h))) < 0)
        return r;
    g->st.stale++;
    g->left = g->msg.payload_len;
    g->state = G_SKIP;
    return 0;
}

/* Take up to n bytes of p; *used says how many. 0, -EBADMSG (*why set) or -ENOMEM. */
static int step(struct rdzvd_repl_guard *g, const uint8_t *p, size_t n, size_t *used,
                const char **why)
{
    struct rdzv_raft_view v;
    size_t take;
    int r;

    switch (g->state) {
    case G_PREAMBLE:
        take = RDZV_RAFT_PREAMBLE_LEN - g->got < n ? RDZV_RAFT_PREAMBLE_LEN - g->got : n;
        memcpy(g->pre + g->got, p, take);
        *used = take;
        if ((g->got += take) < RDZV_RAFT_PREAMBLE_LEN)
            return 0;
        if ((r = rdzv_raft_check_preamble(g->pre, &g->msg, why)) < 0)
            return r;
        if (!(g->hdr = malloc(g->msg.header_len)))
            return -ENOMEM;
        g->state = G_HEADER;
        g->got = 0;
        return 0;
    case G_HEADER:
        take = g->msg.header_len - g->got < n ? g->msg.header_len - g->got : n;
        memcpy(g->hdr + g->got, p, take);
        *used = take;
        if ((g->got += take) < g->msg.header_len)
            return 0;
        g->hooks->view(g->ud, g->peer, &v);
        if ((r = rdzv_raft_check_header(g->hdr, &v, &g->msg, why)) < 0)
            return r;
        if (g->msg.payload_len > 0 && rdzv_get_u64(g->hdr) < v.term)
            return stale(g);
        if ((r = put(g, g->pre, sizeof(g->pre))) < 0 || (r = put(g, g->hdr, g->msg.header_len)) < 0)
            return r;
        if (g->msg.type == RDZV_RAFT_APPEND_ENTRIES) {
            g->entry = 0;
            return next_entry(g);
        }
        if (g->msg.payload_len > 0) {
            g->left = g->msg.payload_len;
            g->state = G_DATA;
            return 0;
        }
        message_done(g);
        return 0;
    case G_SKIP:
        take = g->left < n ? (size_t)g->left : n;
        *used = take;
        if ((g->left -= take) == 0)
            message_done(g);
        return 0;
    case G_ENTRY:
    case G_DATA:
        take = g->left < n ? (size_t)g->left : n;
        *used = take;
        if ((r = put(g, p, take)) < 0)
            return r;
        if ((g->left -= take) > 0)
            return 0;
        if (g->state == G_ENTRY)
            return next_entry(g);
        message_done(g);
        return 0;
    case G_CHANGE:
        take = g->need - g->got < n ? g->need - g->got : n;
        memcpy(g->chg + g->got, p, take);
        *used = take;
        if ((g->got += take) < g->need)
            return 0;
        r = rdzv_raft_check_conf(g->chg, g->need, why);
        if (r == 0)
            r = put(g, g->chg, g->need);
        free(g->chg);
        g->chg = NULL;
        return r < 0 ? r : next_entry(g);
    default:
        *why = "guard state";
        return -EBADMSG;
    }
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rdzvd_repl_guard *g = h->data;

    (void)suggested;
    *buf = uv_buf_init(g->rbuf, sizeof(g->rbuf));
}

static void tcp_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rdzvd_repl_guard *g = s->data;
    const uint8_t *p = (const uint8_t *)buf->base;
    size_t n = nread > 0 ? (size_t)nread : 0;
    const char *why = NULL;
    int r = 0;

    while (n > 0 && r == 0) {
        size_t used = 0;

        r = step(g, p, n, &used, &why);
        p += used;
        n -= used;
    }
    /* What passed before a bad message still goes: it was whole and checked. */
    if (flush(g) < 0 && r == 0)
        r = -EIO;
    if (r < 0 || nread < 0) {
        if (r == -EBADMSG)
            g->hooks->refused(g->ud, g, why);
        else if (r < 0)
            g->hooks->refused(g->ud, g, "out of memory");
        rdzvd_repl_guard_close(g);
        return;
    }
    if (g->queued >= RDZVD_REPL_GUARD_QUEUE_MAX) {
        (void)uv_read_stop(s);
        g->reading = false;
    }
}

static void read_again(struct rdzvd_repl_guard *g)
{
    if (uv_read_start((uv_stream_t *)g->tcp, alloc_cb, tcp_read_cb) == 0)
        g->reading = true;
    else
        rdzvd_repl_guard_close(g);
}

/* libraft never writes to a link it receives on: its end closing is all there is to read. */
static void ours_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char sink[64];

    (void)h;
    (void)suggested;
    *buf = uv_buf_init(sink, sizeof(sink));
}

static void ours_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    if (nread < 0)
        rdzvd_repl_guard_close(s->data);
}

static void raft_free_cb(uv_handle_t *h)
{
    raft_free(h);
}

int rdzvd_repl_guard_start(uv_loop_t *loop, uv_tcp_t *tcp, uint64_t peer, const char *where,
                           const struct rdzvd_repl_guard_hooks *hooks, void *ud,
                           struct rdzvd_repl_guard **ret, uv_stream_t **raft_end)
{
    struct rdzvd_repl_guard *g = calloc(1, sizeof(*g));
    uv_pipe_t *theirs = NULL;
    int fds[2], r;

    if (!g) {
        uv_close((uv_handle_t *)tcp, raft_free_cb);
        return -ENOMEM;
    }
    g->peer = peer;
    snprintf(g->where, sizeof(g->where), "%s", where);
    g->hooks = hooks;
    g->ud = ud;
    g->tcp = tcp;
    g->tcp_open = true;
    g->state = G_PREAMBLE;
    tcp->data = g;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) {
        r = -errno;
        goto out_close;
    }
    (void)uv_pipe_init(loop, &g->ours, 0);
    g->ours.data = g;
    g->ours_open = true;
    if ((r = uv_pipe_open(&g->ours, fds[0])) < 0) {
        close(fds[0]);
        close(fds[1]);
        goto out_close;
    }
    if (!(theirs = raft_malloc(sizeof(*theirs)))) {
        close(fds[1]);
        r = -ENOMEM;
        goto out_close;
    }
    (void)uv_pipe_init(loop, theirs, 0);
    if ((r = uv_pipe_open(theirs, fds[1])) < 0) {
        close(fds[1]);
        goto out_close_theirs;
    }
    if ((r = uv_read_start((uv_stream_t *)&g->ours, ours_alloc_cb, ours_read_cb)) < 0 ||
        (r = uv_read_start((uv_stream_t *)tcp, alloc_cb, tcp_read_cb)) < 0)
        goto out_close_theirs;
    g->reading = true;
    g->started = true;
    *ret = g;
    *raft_end = (uv_stream_t *)theirs;
    return 0;

out_close_theirs:
    uv_close((uv_handle_t *)theirs, raft_free_cb);
out_close:
    rdzvd_repl_guard_close(g); /* frees g once its handles are closed; no hook runs */
    return r;
}
