/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-http.c: --metrics-port: Prometheus metrics, status JSON and a plain HTML status page,
 * served from a thread of their own; the bodies made from the jobs are asked of the store's
 * loop. */
#include "daemon/front/rdzvd-http.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-msg.h"
#include "daemon/data/rdzvd-acl.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/front/rdzvd-http-page.h"

/* What a request needs made from the jobs, on the store's loop. */
enum http_kind { HTTP_PAGE, HTTP_METRICS, HTTP_STATUS, HTTP_JOB };
#define HTTP_SHARED_KINDS HTTP_JOB /* the kinds before it: one ask serves every request */

static const char *const kind_ctype[] = {
    "text/html; charset=utf-8", "text/plain; version=0.0.4; charset=utf-8", "application/json",
    "text/html; charset=utf-8"};

/* A body asked of the store's loop. The HTTP thread's, but while in h->asks or h->answers, and
 * while the store's loop makes it (taken), where the store's loop writes err and body only. */
struct http_ask {
    struct rdzv_list node; /* in h->asks, then in h->answers (h->mu) */
    uint64_t seq;          /* the requests waiting for it have it in ask_seq */
    enum http_kind kind;
    bool taken;            /* the store's loop took it (h->mu): a new request asks anew */
    int err;               /* 0, -ENOENT (HTTP_JOB: no such job) or -ENOMEM */
    char *body;            /* malloc'd */
    char run_id[RDZV_ID_MAX + 1];
};

struct http_body;

struct rdzvd_http {
    /* The store's loop's. */
    uv_async_t store_async; /* asks wait */
    uv_idle_t store_idle;   /* one ask made per turn while asks wait */
    const struct rdzvd_jobs *jobs;
    int store_closes;
    bool stopped;
    /* Both threads', under mu. */
    uv_mutex_t mu;
    struct rdzv_list asks;    /* oldest first */
    struct rdzv_list answers; /* made, not yet answered */
    bool stop;
    /* The HTTP thread's. */
    uv_thread_t thread;
    uv_loop_t loop;
    uv_tcp_t tcp;
    uv_idle_t idle;   /* while requests wait in queue */
    uv_async_t async; /* answers made, or stop */
    struct rdzv_list conns;   /* oldest first */
    struct rdzv_list queue;   /* connections with a whole request, not answered yet */
    struct rdzv_list waiting; /* connections waiting for an ask */
    unsigned nconns;
    unsigned nasks;                            /* asked and not answered */
    struct http_ask *open[HTTP_SHARED_KINDS]; /* the last of each kind, NULL once answered */
    uint64_t seq;
    unsigned turn_accepts; /* this turn (RDZVD_HTTP_TURN_ACCEPTS) */
    size_t turn_bytes;     /* answered this turn (RDZVD_HTTP_TURN_BYTES) */
    bool accept_waiting;   /* a connection left in the backlog until the next turn */
    bool stopping;
    struct http_body *page; /* the status page last made, at page_ms */
    uint64_t page_ms;
    struct rdzvd_ratelimit bad; /* log lines about refused requests (anyone can send them) */
};

enum http_state {
    HTTP_READING, /* its request (RDZVD_HTTP_TIMEOUT_MS) */
    HTTP_QUEUED,  /* a whole request (or its answer made), in h->queue */
    HTTP_ASKED,   /* its body asked of the store's loop, in h->waiting */
    HTTP_WRITING, /* its answer (RDZVD_HTTP_WRITE_TIMEOUT_MS), then closed */
};

struct http_conn {
    uv_tcp_t tcp; /* first */
    uv_timer_t timer;
    uv_write_t wr;
    struct rdzv_list node;  /* in h->conns */
    struct rdzv_list qnode; /* in h->queue while HTTP_QUEUED, h->waiting while HTTP_ASKED */
    struct rdzvd_http *h;
    enum http_state state;
    uint64_t since_ms; /* accepted */
    char req[RDZVD_HTTP_MAX_REQ];
    size_t len;
    struct rdzv_buf out; /* the answer's header */
    struct http_body *body;
    uint64_t ask_seq;        /* HTTP_ASKED: the ask it waits for */
    bool answered;           /* its answer is made: code, ctype, answer (NULL: a 500) */
    int code;
    const char *ctype;
    struct http_body *answer;
    int closes;
    bool head; /* a HEAD request: the reply has no body (RFC 9110 9.3.2) */
};

/* ---- answers ---- */

/* An answer's body, shared by the connections that write it (the cached status page); the HTTP
 * thread's only (a body made on the store's loop comes over as an ask's malloc'd string). */
struct http_body {
    unsigned refs;
    bool owned; /* data is malloc'd (else a string literal) */
    size_t len;
    char *data;
};

static struct http_body *body_new(char *data, bool owned)
{
    struct http_body *b;

    if (!data)
        return NULL;
    b = calloc(1, sizeof(*b));
    if (!b) {
        if (owned)
            free(data);
        return NULL;
    }
    b->refs = 1;
    b->owned = owned;
    b->data = data;
    b->len = strlen(data);
    return b;
}

static struct http_body *body_ref(struct http_body *b)
{
    if (b)
        b->refs++;
    return b;
}

static void body_unref(struct http_body *b)
{
    if (!b || --b->refs > 0)
        return;
    if (b->owned)
        free(b->data);
    free(b);
}

/* ---- connections ---- */
/* ---- connections (the HTTP thread) ---- */

static void http_conn_close_cb(uv_handle_t *hd)
{
    struct http_conn *c = hd->data;

    if (--c->closes > 0)
        return;
    rdzv_buf_free(&c->out);
    body_unref(c->body);
    body_unref(c->answer);
    free(c);
}

static void http_conn_close(struct http_conn *c)
{
    if (c->closes)
        return;
    c->closes = 2;
    if (c->state == HTTP_QUEUED || c->state == HTTP_ASKED)
        rdzv_list_del(&c->qnode);
    rdzv_list_del(&c->node);
    c->h->nconns--;
    uv_close((uv_handle_t *)&c->timer, http_conn_close_cb);
    uv_close((uv_handle_t *)&c->tcp, http_conn_close_cb);
}

static void http_write_cb(uv_write_t *req, int status)
{
    (void)status;
    http_conn_close(req->data);
}

/* A request refused (400, 405, 413), cut off (no whole request in time) or an answer its client
 * did not read: one warning with the peer's address, rate-limited like every log line a stranger
 * can cause. */
static void http_note_bad(struct http_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void http_note_bad(struct http_conn *c, const char *fmt, ...)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char addr[INET6_ADDRSTRLEN] = "?", more[64] = "", what[128];
    uint64_t suppressed = 0;
    int port = 0;
    va_list ap;

    if (!rdzvd_ratelimit_ok(&c->h->bad, uv_now(c->tcp.loop), &suppressed))
        return;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            (void)uv_ip6_name((struct sockaddr_in6 *)&ss, addr, sizeof(addr));
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else if (ss.ss_family == AF_INET) {
            (void)uv_ip4_name((struct sockaddr_in *)&ss, addr, sizeof(addr));
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    if (suppressed)
        snprintf(more, sizeof(more), " (%" PRIu64 " similar lines suppressed)", suppressed);
    log_warn("status page: %s port %d: %s; closed%s", addr, port, what, more);
}

static void http_timeout_cb(uv_timer_t *t);

/* Answer with body (its reference taken; NULL: out of memory, a 500), then close. The client has
 * RDZVD_HTTP_WRITE_TIMEOUT_MS to read it. */
static void http_respond(struct http_conn *c, int code, const char *ctype, struct http_body *body)
{
    const char *reason = code == 200   ? "OK"
                         : code == 404 ? "Not Found"
                         : code == 405 ? "Method Not Allowed"
                         : code == 400 ? "Bad Request"
                         : code == 413 ? "Content Too Large"
                                       : "Internal Server Error";
    uv_buf_t ub[2];
    int r;

    if (!body) {
        code = 500;
        reason = "Internal Server Error";
        ctype = "text/plain; charset=utf-8";
        body = body_new("out of memory\n", false);
        if (!body) {
            http_conn_close(c);
            return;
        }
    }
    c->body = body;
    c->state = HTTP_WRITING;
    uv_read_stop((uv_stream_t *)&c->tcp);
    r = rdzv_buf_printf(&c->out,
                "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
                "Connection: close\r\n\r\n",
                code, reason, ctype, body->len);
    if (r < 0 || uv_timer_start(&c->timer, http_timeout_cb, RDZVD_HTTP_WRITE_TIMEOUT_MS, 0) < 0) {
        http_conn_close(c);
        return;
    }
    c->h->turn_bytes += c->out.len + (c->head ? 0 : body->len);
    ub[0] = uv_buf_init((char *)c->out.data, (unsigned)c->out.len);
    ub[1] = uv_buf_init(body->data, (unsigned)body->len);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, ub, c->head ? 1 : 2, http_write_cb) < 0)
        http_conn_close(c);
}

static void http_respond_text(struct http_conn *c, int code, const char *text)
{
    http_respond(c, code, "text/plain; charset=utf-8", body_new((char *)text, false));
}

/* The run id of path "/job/ID" (percent-decoded) into id: 0, -EINVAL (bad encoding) or -ENOENT
 * (no run id can be this: too long, or a NUL). */
static int job_path_run_id(const char *enc, char *id, size_t size)
{
    size_t n = 0;

    for (; *enc; enc++) {
        unsigned v;
        char hex[3];

        if (n + 1 >= size)
            return -ENOENT;
        if (*enc != '%') {
            id[n++] = *enc;
            continue;
        }
        if (!isxdigit((unsigned char)enc[1]) || !isxdigit((unsigned char)enc[2]))
            return -EINVAL;
        memcpy(hex, enc + 1, 2);
        hex[2] = '\0';
        v = (unsigned)strtoul(hex, NULL, 16);
        if (v == 0)
            return -ENOENT;
        id[n++] = (char)v;
        enc += 2;
    }
    id[n] = '\0';
    return n > 0 ? 0 : -ENOENT;
}

/* Ask the store's loop for a body of kind (HTTP_JOB: of run_id) for c, or join the ask of that
 * kind it has not taken yet (the status page, which may be RDZVD_PAGE_TTL_MS old: the one not
 * answered yet): 0, or -EAGAIN (nothing done) at RDZVD_HTTP_MAX_ASKS. */
static int http_ask(struct http_conn *c, enum http_kind kind, const char *run_id)
{
    struct rdzvd_http *h = c->h;
    struct http_ask *a = NULL;
    uint64_t seq = 0;

    if (kind < HTTP_SHARED_KINDS && h->open[kind]) {
        uv_mutex_lock(&h->mu);
        if (kind == HTTP_PAGE || !h->open[kind]->taken)
            seq = h->open[kind]->seq;
        uv_mutex_unlock(&h->mu);
    }
    if (!seq) {
        if (h->nasks >= RDZVD_HTTP_MAX_ASKS)
            return -EAGAIN;
        a = calloc(1, sizeof(*a));
        if (!a) {
            http_respond(c, 500, kind_ctype[kind], NULL);
            return 0;
        }
        a->seq = seq = ++h->seq;
        a->kind = kind;
        if (run_id)
            snprintf(a->run_id, sizeof(a->run_id), "%s", run_id);
        uv_mutex_lock(&h->mu);
        rdzv_list_add_tail(&h->asks, &a->node);
        uv_mutex_unlock(&h->mu);
        h->nasks++;
        if (kind < HTTP_SHARED_KINDS)
            h->open[kind] = a;
        (void)uv_async_send(&h->store_async);
    }
    c->ask_seq = seq;
    c->state = HTTP_ASKED;
    rdzv_list_add_tail(&h->waiting, &c->qnode);
    return 0;
}

/* Answer c's request, or ask for its body: 0, or -EAGAIN (nothing done) when it cannot ask yet. */
static int http_serve(struct http_conn *c)
{
    struct rdzvd_http *h = c->h;
    char method[8], path[512], id[RDZV_ID_MAX + 1];
    int r;

    if (c->answered) {
        struct http_body *b = c->answer;

        c->answer = NULL;
        http_respond(c, c->code, c->ctype, b);
        return 0;
    }
    if (sscanf(c->req, "%7s %511s HTTP/1.%*c", method, path) != 2) {
        http_note_bad(c, "not an HTTP request line (400)");
        http_respond_text(c, 400, "bad request\n");
        return 0;
    }
    c->head = strcmp(method, "HEAD") == 0;
    if (strcmp(method, "GET") && !c->head) {
        http_note_bad(c, "a method other than GET or HEAD (405)");
        http_respond_text(c, 405, "only GET\n");
        return 0;
    }
    if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0) {
        /* The status page is made at most once per RDZVD_PAGE_TTL_MS and shared meanwhile. */
        if (h->page && uv_now(&h->loop) - h->page_ms < RDZVD_PAGE_TTL_MS) {
            http_respond(c, 200, kind_ctype[HTTP_PAGE], body_ref(h->page));
            return 0;
        }
        return http_ask(c, HTTP_PAGE, NULL);
    }
    if (strlen(path) >= sizeof(path) - 1 ||
        (strcmp(path, "/metrics") && strcmp(path, "/status.json") && strncmp(path, "/job/", 5))) {
        http_respond_text(c, 404, "not found: try /, /metrics or /status.json (a job: "
                                  "/job/RUN_ID)\n");
        return 0;
    }
    if (strncmp(path, "/job/", 5))
        return http_ask(c, strcmp(path, "/metrics") == 0 ? HTTP_METRICS : HTTP_STATUS, NULL);
    r = job_path_run_id(path + 5, id, sizeof(id));
    if (r == -EINVAL) {
        http_note_bad(c, "a job path with a bad percent-encoding (400)");
        http_respond_text(c, 400, "bad request: a run id is percent-encoded\n");
        return 0;
    }
    if (r == -ENOENT) {
        http_respond_text(c, 404, "no such job: / lists the jobs rdzvd knows\n");
        return 0;
    }
    return http_ask(c, HTTP_JOB, id);
}

static void http_listen_cb(uv_stream_t *s, int status);

/* Once per turn of the HTTP loop while requests or a connection wait: accept the connection, and
 * answer the requests in order until RDZVD_HTTP_TURN_BYTES are written; the others wait for the
 * next turn (or, past RDZVD_HTTP_MAX_ASKS, for an answer from the store's loop). */
static void http_idle_cb(uv_idle_t *idle)
{
    struct rdzvd_http *h = idle->data;

    h->turn_accepts = 0;
    h->turn_bytes = 0;
    if (h->accept_waiting) {
        h->accept_waiting = false;
        http_listen_cb((uv_stream_t *)&h->tcp, 0); /* its uv_accept() resumes the listener */
    }
    while (!rdzv_list_empty(&h->queue) && h->turn_bytes < RDZVD_HTTP_TURN_BYTES) {
        struct http_conn *c = rdzv_container_of(h->queue.next, struct http_conn, qnode);

        rdzv_list_del(&c->qnode);
        c->state = HTTP_WRITING;
        if (http_serve(c) == -EAGAIN) { /* back at the head, until an ask is answered */
            c->state = HTTP_QUEUED;
            rdzv_list_add_tail(h->queue.next, &c->qnode);
            if (!h->accept_waiting)
                uv_idle_stop(&h->idle);
            return;
        }
    }
    if (rdzv_list_empty(&h->queue) && !h->accept_waiting)
        uv_idle_stop(&h->idle);
}

/* The ask a made by the store's loop: its waiting connections go back in queue with their answer
 * (the status page is kept, for RDZVD_PAGE_TTL_MS), and a is freed. */
static void http_answered(struct rdzvd_http *h, struct http_ask *a)
{
    struct http_body *body = a->err == 0 ? body_new(a->body, true) : NULL;
    struct rdzv_list *pos, *tmp;

    if (a->err)
        free(a->body);
    h->nasks--;
    if (a->kind < HTTP_SHARED_KINDS && h->open[a->kind] == a)
        h->open[a->kind] = NULL;
    if (a->kind == HTTP_PAGE && body) {
        body_unref(h->page);
        h->page = body_ref(body);
        h->page_ms = uv_now(&h->loop);
    }
    rdzv_list_for_each_safe(pos, tmp, &h->waiting)
    {
        struct http_conn *c = rdzv_container_of(pos, struct http_conn, qnode);

        if (c->ask_seq != a->seq)
            continue;
        rdzv_list_del(&c->qnode);
        c->answered = true;
        c->code = 200;
        c->ctype = kind_ctype[a->kind];
        if (a->err == -ENOENT) {
            c->code = 404;
            c->ctype = "text/plain; charset=utf-8";
            c->answer = body_new("no such job: / lists the jobs rdzvd knows\n", false);
        } else {
            c->answer = body_ref(body);
        }
        c->state = HTTP_QUEUED;
        rdzv_list_add_tail(&h->queue, &c->qnode);
    }
    body_unref(body);
    free(a);
}

static void http_alloc_cb(uv_handle_t *hd, size_t suggested, uv_buf_t *buf)
{
    struct http_conn *c = hd->data;

    (void)suggested;
    *buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - 1 - c->len));
}

static void http_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *c = s->data;

    (void)buf;
    if (nread < 0) {
        http_conn_close(c);
        return;
    }
    c->len += (size_t)nread;
    c->req[c->len] = '\0';
    if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
        uv_read_stop(s);
        c->state = HTTP_QUEUED;
        rdzv_list_add_tail(&c->h->queue, &c->qnode);
        if (uv_idle_start(&c->h->idle, http_idle_cb) < 0)
            http_conn_close(c);
    } else if (c->len >= sizeof(c->req) - 1) {
        http_note_bad(c, "a request past %d bytes (413)", RDZVD_HTTP_MAX_REQ);
        http_respond_text(c, 413, "request too large\n");
    }
}

static void http_timeout_cb(uv_timer_t *t)
{
    struct http_conn *c = t->data;

    if (c->state == HTTP_WRITING)
        http_note_bad(c, "its answer not read within %d ms", RDZVD_HTTP_WRITE_TIMEOUT_MS);
    else if (c->state == HTTP_READING)
        http_note_bad(c, "no whole request within %d ms", RDZVD_HTTP_TIMEOUT_MS);
    else
        http_note_bad(c, "no answer made within %d ms", RDZVD_HTTP_TIMEOUT_MS);
    http_conn_close(c);
}

/* At RDZVD_HTTP_MAX_CONNS, the slot a newcomer may take: the oldest connection whose client does
 * not read its answer, or that has sent no whole request for RDZVD_HTTP_EVICT_AFTER_MS. NULL:
 * none (the newcomer is refused). */
static struct http_conn *http_victim(struct rdzvd_http *h, uint64_t now)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &h->conns)
    {
        struct http_conn *c = rdzv_container_of(pos, struct http_conn, node);

        if (c->state == HTTP_WRITING ||
            (c->state == HTTP_READING && now - c->since_ms >= RDZVD_HTTP_EVICT_AFTER_MS))
            return c;
    }
    return NULL;
}

static void http_listen_cb(uv_stream_t *s, int status)
{
    struct rdzvd_http *h = s->data;
    struct http_conn *c, *victim;

    if (status < 0 || h->stopping)
        return;
    if (h->turn_accepts >= RDZVD_HTTP_TURN_ACCEPTS) {
        /* Not accepted: libuv stops watching the listener until the idle callback accepts. */
        h->accept_waiting = true;
        if (uv_idle_start(&h->idle, http_idle_cb) == 0)
            return;
    }
    h->turn_accepts++;
    c = calloc(1, sizeof(*c));
    if (!c || uv_tcp_init(s->loop, &c->tcp) < 0) {
        free(c);
        return;
    }
    c->h = h;
    c->tcp.data = c;
    if (uv_timer_init(s->loop, &c->timer) < 0) {
        c->closes = 1; /* only the TCP handle to close; c is freed in its close callback */
        uv_close((uv_handle_t *)&c->tcp, http_conn_close_cb);
        return;
    }
    c->timer.data = c;
    c->since_ms = uv_now(s->loop);
    if (h->nconns >= RDZVD_HTTP_MAX_CONNS && (victim = http_victim(h, c->since_ms))) {
        http_note_bad(victim, "its slot given to a new connection (%d at once)",
                      RDZVD_HTTP_MAX_CONNS);
        http_conn_close(victim);
    }
    rdzv_list_add_tail(&h->conns, &c->node);
    h->nconns++;
    if (uv_accept(s, (uv_stream_t *)&c->tcp) < 0 || h->nconns > RDZVD_HTTP_MAX_CONNS) {
        http_conn_close(c);
        return;
    }
    if (uv_timer_start(&c->timer, http_timeout_cb, RDZVD_HTTP_TIMEOUT_MS, 0) < 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, http_alloc_cb, http_read_cb) < 0)
        http_conn_close(c);
}


/* The HTTP thread's end: every connection, the listener and the handles closed; its loop then
 * ends, and so does the thread (rdzvd_http_stop joins it). */
static void http_shutdown(struct rdzvd_http *h)
{
    h->stopping = true;
    while (!rdzv_list_empty(&h->conns))
        http_conn_close(rdzv_container_of(h->conns.next, struct http_conn, node));
    uv_close((uv_handle_t *)&h->idle, NULL);
    uv_close((uv_handle_t *)&h->tcp, NULL);
    uv_close((uv_handle_t *)&h->async, NULL);
}

/* Asks answered by the store's loop, or the order to stop. */
static void http_async_cb(uv_async_t *as)
{
    struct rdzvd_http *h = as->data;

    for (;;) {
        struct http_ask *a = NULL;
        bool stop;

        uv_mutex_lock(&h->mu);
        stop = h->stop;
        if (!stop && !rdzv_list_empty(&h->answers)) {
            a = rdzv_container_of(h->answers.next, struct http_ask, node);
            rdzv_list_del(&a->node);
        }
        uv_mutex_unlock(&h->mu);
        if (stop) {
            http_shutdown(h);
            return;
        }
        if (!a)
            break;
        http_answered(h, a);
    }
    if (!rdzv_list_empty(&h->queue))
        (void)uv_idle_start(&h->idle, http_idle_cb);
}

static void http_thread(void *arg)
{
    struct rdzvd_http *h = arg;

    (void)pthread_setname_np(pthread_self(), "rdzvd-http"); /* for top -H, gdb, tests */
    /* Below the store's loop: where the CPUs are short, the store's clients go first. */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(),
                      getpriority(PRIO_PROCESS, (id_t)gettid()) + RDZVD_HTTP_NICE);
    (void)uv_run(&h->loop, UV_RUN_DEFAULT);
}

/* ---- the store's loop ---- */

/* Make a's body from the jobs. */
static void http_make(const struct rdzvd_jobs *jobs, struct http_ask *a)
{
    switch (a->kind) {
    case HTTP_PAGE:
        a->body = rdzvd_http_page(jobs);
        break;
    case HTTP_METRICS:
        a->body = rdzvd_http_metrics(jobs);
        break;
    case HTTP_STATUS:
        a->body = rdzvd_http_status_json(jobs);
        break;
    case HTTP_JOB:
        a->err = rdzvd_http_job_page(jobs, a->run_id, &a->body);
        return;
    }
    a->err = a->body ? 0 : -ENOMEM;
}

/* Once per turn of the store's loop while asks wait: make the oldest (the store's clients wait
 * for no more than one body) and hand it to the HTTP thread. */
static void store_idle_cb(uv_idle_t *idle)
{
    struct rdzvd_http *h = idle->data;
    struct http_ask *a = NULL;
    bool more;

    uv_mutex_lock(&h->mu);
    if (!rdzv_list_empty(&h->asks)) {
        a = rdzv_container_of(h->asks.next, struct http_ask, node);
        rdzv_list_del(&a->node);
        a->taken = true;
    }
    more = !rdzv_list_empty(&h->asks);
    uv_mutex_unlock(&h->mu);
    if (!more)
        uv_idle_stop(idle);
    if (!a)
        return;
    http_make(h->jobs, a);
    uv_mutex_lock(&h->mu);
    rdzv_list_add_tail(&h->answers, &a->node);
    uv_mutex_unlock(&h->mu);
    (void)uv_async_send(&h->async);
}

static void store_async_cb(uv_async_t *as)
{
    struct rdzvd_http *h = as->data;

    (void)uv_idle_start(&h->store_idle, store_idle_cb);
}

static void free_asks(struct rdzv_list *l)
{
    while (!rdzv_list_empty(l)) {
        struct http_ask *a = rdzv_container_of(l->next, struct http_ask, node);

        rdzv_list_del(&a->node);
        free(a->body);
        free(a);
    }
}

static void store_close_cb(uv_handle_t *hd)
{
    struct rdzvd_http *h = hd->data;

    if (--h->store_closes > 0)
        return;
    uv_mutex_destroy(&h->mu);
    free(h);
}

static void close_walk_cb(uv_handle_t *hd, void *arg)
{
    (void)arg;
    if (!uv_is_closing(hd))
        uv_close(hd, NULL);
}

/* The HTTP thread's loop, its thread not running (ended, or never started): whatever is left
 * closed, and the loop with it. */
static void http_loop_close(struct rdzvd_http *h)
{
    uv_walk(&h->loop, close_walk_cb, NULL);
    (void)uv_run(&h->loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&h->loop);
    free_asks(&h->asks);
    free_asks(&h->answers);
    body_unref(h->page);
}

/* Listen on ss on the HTTP thread's loop (not running yet): 0 or -errno, *ret_port set. */
static int http_listen(struct rdzvd_http *h, struct sockaddr_storage *ss, uint16_t *ret_port)
{
    int len = sizeof(*ss), r;

    r = uv_async_init(&h->loop, &h->async, http_async_cb);
    if (r < 0)
        return r;
    h->async.data = h;
    (void)uv_idle_init(&h->loop, &h->idle);
    h->idle.data = h;
    r = uv_tcp_init(&h->loop, &h->tcp);
    if (r < 0)
        return r;
    h->tcp.data = h;
    r = uv_tcp_bind(&h->tcp, (const struct sockaddr *)ss, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)&h->tcp, 64, http_listen_cb);
    if (r == 0)
        r = uv_tcp_getsockname(&h->tcp, (struct sockaddr *)ss, &len);
    if (r == 0)
        *ret_port = ntohs(ss->ss_family == AF_INET6 ? ((struct sockaddr_in6 *)ss)->sin6_port
                                                    : ((struct sockaddr_in *)ss)->sin_port);
    return r;
}

/* The HTTP thread, with every signal blocked (the store's loop handles them). */
static int http_thread_start(struct rdzvd_http *h)
{
    sigset_t all, old;
    int r;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    r = uv_thread_create(&h->thread, http_thread, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

int rdzvd_http_start(uv_loop_t *loop, const struct rdzvd_jobs *jobs, const char *addr,
                     uint16_t port, uint16_t *ret_port, struct rdzvd_http **ret)
{
    struct sockaddr_storage ss;
    struct rdzvd_http *h;
    int r;

    if (uv_ip4_addr(addr, port, (struct sockaddr_in *)&ss) < 0 &&
        uv_ip6_addr(addr, port, (struct sockaddr_in6 *)&ss) < 0)
        return -EINVAL;
    h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->jobs = jobs;
    rdzv_list_init(&h->asks);
    rdzv_list_init(&h->answers);
    rdzv_list_init(&h->conns);
    rdzv_list_init(&h->queue);
    rdzv_list_init(&h->waiting);
    r = uv_mutex_init(&h->mu);
    if (r < 0)
        goto out_free;
    r = uv_loop_init(&h->loop);
    if (r < 0)
        goto out_mutex;
    r = http_listen(h, &ss, ret_port);
    if (r == 0)
        r = uv_async_init(loop, &h->store_async, store_async_cb);
    if (r < 0)
        goto out_loop;
    h->store_async.data = h;
    (void)uv_idle_init(loop, &h->store_idle);
    h->store_idle.data = h;
    h->store_closes = 2;
    r = http_thread_start(h);
    if (r < 0) {
        h->stopped = true;
        http_loop_close(h);
        uv_close((uv_handle_t *)&h->store_async, store_close_cb);
        uv_close((uv_handle_t *)&h->store_idle, store_close_cb);
        return r;
    }
    *ret = h;
    return 0;

out_loop:
    http_loop_close(h);
out_mutex:
    uv_mutex_destroy(&h->mu);
out_free:
    free(h);
    return r;
}

void rdzvd_http_stop(struct rdzvd_http *h)
{
    if (!h || h->stopped)
        return;
    h->stopped = true;
    uv_mutex_lock(&h->mu);
    h->stop = true;
    uv_mutex_unlock(&h->mu);
    (void)uv_async_send(&h->async);
    /* Closing the connections and the listener takes no wait on the store's loop. */
    uv_thread_join(&h->thread);
    http_loop_close(h);
    uv_close((uv_handle_t *)&h->store_async, store_close_cb);
    uv_close((uv_handle_t *)&h->store_idle, store_close_cb);
}
