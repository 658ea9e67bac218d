/* SPDX-License-Identifier: Apache-2.0 */
/* agent-client.c: the agent's rdzvd connection. */
#include "agent/session/agent-client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "common/rdzv-auth.h"
#include "proto/rdzv-auth-msg.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-proto.h"

/* CL_HELLO: HELLO sent (and JOIN, without a token); CL_AUTH: AUTH sent, waiting for AUTH_OK. */
enum client_state { CL_RESOLVING, CL_CONNECTING, CL_HELLO, CL_AUTH, CL_JOINED, CL_DEAD };

struct agent_client {
    uv_loop_t *loop;
    uv_tcp_t tcp;
    uv_timer_t retry;
    uv_timer_t silence;       /* no frame from rdzvd for silence_ms: the link is dead */
    uint64_t silence_ms;
    /* rdzv_now_ms() of the first HEARTBEAT sent since rdzvd's last frame (0: none is waiting
     * for its answer), and whether the silence was extended once with none waiting. */
    uint64_t asked_ms;
    bool silence_extended;
    uv_getaddrinfo_t gai;
    uv_connect_t connect_req;
    bool tcp_open;
    int closes_pending;
    enum client_state state;
    struct agent_endpoints eps;
    unsigned cur;         /* eps.ep[cur] is host:port */
    unsigned round_start; /* where this round of endpoints began: back there, back off */
    unsigned redirects;   /* followers' redirects since the last JOINED */
    char host[256];
    char port[8];
    char name[300]; /* "host:port" */
    uint64_t deadline_ms;
    uint64_t backoff_ms;
    struct rdzv_join join;
    struct agent_client_cbs cbs;
    void *ud;
    struct rdzv_buf in;
    void (*done)(void *ud);
    void *done_ud;
    bool closing;
    bool numeric; /* host is an IP address: connect without the resolver */
    const struct rdzv_token *token; /* prove it to rdzvd (and make rdzvd prove it); NULL: none */
    bool join_sent;
    uint8_t sn[RDZV_NONCE_BYTES], cn[RDZV_NONCE_BYTES];
};

struct client_write {
    uv_write_t req;
    struct rdzv_buf buf;
};

static const char *const client_state_names[] = {
    [CL_RESOLVING] = "resolving", [CL_CONNECTING] = "connecting", [CL_HELLO] = "hello",
    [CL_AUTH] = "auth",           [CL_JOINED] = "joined",         [CL_DEAD] = "dead",
};

/* Every change of c->state goes through here. */
static void client_set_state(struct agent_client *c, enum client_state s)
{
    if (c->state != s)
        log_debug("rdzvd link: %s -> %s", client_state_names[c->state], client_state_names[s]);
    c->state = s;
}

/* A failed attempt: the reconnect backoff starts (AGENT_BACKOFF_FIRST_MS) unless it runs. */
static void backoff_start(struct agent_client *c)
{
    if (!c->backoff_ms)
        c->backoff_ms = AGENT_BACKOFF_FIRST_MS;
}

static void client_try(struct agent_client *c);
static void retry_cb(uv_timer_t *t);
static void schedule_retry(struct agent_client *c, int err);
static void client_move(struct agent_client *c, int idx, const char *why);

int agent_endpoints_parse(const char *list, struct agent_endpoints *out)
{
    char buf[AGENT_ENDPOINTS_MAX * 300], *save = NULL, *ent;

    memset(out, 0, sizeof(*out));
    if (strlen(list) >= sizeof(buf))
        return -EINVAL;
    snprintf(buf, sizeof(buf), "%s", list);
    for (ent = strtok_r(buf, ",", &save); ent; ent = strtok_r(NULL, ",", &save)) {
        struct agent_endpoint *e = &out->ep[out->n];

        e->port = RDZV_DEFAULT_PORT;
        if (out->n == AGENT_ENDPOINTS_MAX ||
            rdzv_parse_hostport(ent, e->host, sizeof(e->host), &e->port) < 0 || e->port == 0)
            return -EINVAL;
        out->n++;
    }
    return out->n ? 0 : -EINVAL;
}

/* Talk to eps.ep[i] from now on. */
static void client_use(struct agent_client *c, unsigned i)
{
    c->cur = i;
    snprintf(c->host, sizeof(c->host), "%s", c->eps.ep[i].host);
    snprintf(c->port, sizeof(c->port), "%u", c->eps.ep[i].port);
    snprintf(c->name, sizeof(c->name), strchr(c->host, ':') ? "[%s]:%s" : "%s:%s", c->host,
             c->port);
}

unsigned agent_client_endpoint(const struct agent_client *c)
{
    return c->cur;
}

int agent_client_local_addr(const struct agent_client *c, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    int n = sizeof(ss), r;

    if (!c->tcp_open)
        return -ENOTCONN;
    r = uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ss, &n);
    if (r == 0)
        r = ss.ss_family == AF_INET6 ? uv_ip6_name((struct sockaddr_in6 *)&ss, buf, len)
                                     : uv_ip4_name((struct sockaddr_in *)&ss, buf, len);
    return r;
}

/* The endpoint "HOST:PORT" a follower named: its index, added when it is not in the list (-1
 * when it cannot be parsed or the list is full). */
int agent_endpoints_add(struct agent_endpoints *eps, const char *hostport)
{
    struct agent_endpoint e = {.port = RDZV_DEFAULT_PORT};

    if (rdzv_parse_hostport(hostport, e.host, sizeof(e.host), &e.port) < 0 || e.port == 0)
        return -1;
    for (unsigned i = 0; i < eps->n; i++)
        if (eps->ep[i].port == e.port && strcmp(eps->ep[i].host, e.host) == 0)
            return (int)i;
    if (eps->n > AGENT_ENDPOINTS_MAX)
        return -1;
    eps->ep[eps->n] = e;
    return (int)eps->n++;
}

static int endpoint_find_or_add(struct agent_client *c, const char *hostport)
{
    return agent_endpoints_add(&c->eps, hostport);
}

/* The client is dead: report msg through on_lost when the connection had been established and
 * the caller can reconnect (lost), else through on_error. */
static void client_end(struct agent_client *c, bool lost, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void client_end(struct agent_client *c, bool lost, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    if (c->state == CL_DEAD)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    client_set_state(c, CL_DEAD);
    uv_timer_stop(&c->silence);
    if (c->tcp_open)
        uv_read_stop((uv_stream_t *)&c->tcp);
    if (c->closing)
        return;
    if (lost && c->cbs.on_lost)
        c->cbs.on_lost(c, msg, c->ud);
    else if (c->cbs.on_error)
        c->cbs.on_error(c, msg, c->ud);
}

#define client_fail(c, ...) client_end(c, false, __VA_ARGS__)
#define client_lost(c, ...) client_end(c, true, __VA_ARGS__)

/* With several endpoints, one that does not answer before JOINED is left for the next: a
 * replica's host that is gone (its connect hangs in SYN retries for minutes) or stopped. */
static bool silence_moves_on(const struct agent_client *c)
{
    return c->eps.n > 1 && (c->state == CL_CONNECTING || c->state == CL_HELLO ||
                            c->state == CL_AUTH);
}

/* rdzvd answers every HEARTBEAT, so it is silent only when one waits unanswered. A loop that
 * was itself blocked (uv_spawn waits for the worker's exec, which a starved machine delays by
 * seconds) sent none meanwhile, and its due timers run before it polls the answer to the one
 * it sent on waking. Returns how much longer to wait: until the oldest unanswered HEARTBEAT is
 * silence_ms / AGENT_SILENCE_ANSWER_DIV old (the agent sends one every fifth of the timeout,
 * so a rdzvd that stopped answering is still declared lost at the usual time), or once that
 * long when none was sent; 0: rdzvd is silent. Before JOINED rdzvd owes an answer at once. */
static uint64_t silence_wait_more(struct agent_client *c)
{
    uint64_t grace = c->silence_ms / AGENT_SILENCE_ANSWER_DIV, age;

    if (c->state != CL_JOINED)
        return 0;
    if (!c->asked_ms) {
        if (c->silence_extended)
            return 0;
        c->silence_extended = true;
        return grace;
    }
    age = rdzv_now_ms() - c->asked_ms;
    return age < grace ? grace - age : 0;
}

static void silence_heard(struct agent_client *c)
{
    c->asked_ms = 0;
    c->silence_extended = false;
}

static void silence_cb(uv_timer_t *t)
{
    struct agent_client *c = t->data;
    char why[400];
    uint64_t more;

    if (silence_moves_on(c)) {
        if (c->state == CL_CONNECTING)
            snprintf(why, sizeof(why), "rdzvd at %s did not accept the connection within %.1f s",
                     c->name, (double)AGENT_CONNECT_ATTEMPT_MS / 1000);
        else
            snprintf(why, sizeof(why), "rdzvd at %s sent nothing for %.1f s", c->name,
                     (double)c->silence_ms / 1000);
        client_move(c, -1, why);
        return;
    }
    more = silence_wait_more(c);
    if (more) {
        (void)uv_timer_start(&c->silence, silence_cb, more, 0);
        return;
    }
    client_lost(c, "rdzvd at %s:%s sent nothing for %.1f s", c->host, c->port,
                (double)c->silence_ms / 1000);
}

static void silence_rearm(struct agent_client *c)
{
    uint64_t ms = c->silence_ms;

    if (c->state == CL_CONNECTING && ms > AGENT_CONNECT_ATTEMPT_MS)
        ms = AGENT_CONNECT_ATTEMPT_MS;
    if (ms && c->state != CL_DEAD && !c->closing)
        (void)uv_timer_start(&c->silence, silence_cb, ms, 0); /* fails only once closing */
}

void agent_client_set_silence(struct agent_client *c, uint64_t silence_ms)
{
    c->silence_ms = silence_ms;
    if (c->state == CL_HELLO || c->state == CL_AUTH || c->state == CL_JOINED ||
        silence_moves_on(c))
        silence_rearm(c);
}

static void write_cb(uv_write_t *req, int status)
{
    struct client_write *w = (struct client_write *)req;

    rdzv_buf_free(&w->buf);
    free(w);
    (void)status; /* a failed write shows up as a read error */
}

static int client_write(struct agent_client *c, struct rdzv_buf *b)
{
    struct client_write *w = calloc(1, sizeof(*w));
    uv_buf_t ub;
    int r;

    if (!w) {
        rdzv_buf_free(b);
        return -ENOMEM;
    }
    w->buf = *b;
    memset(b, 0, sizeof(*b));
    ub = uv_buf_init((char *)rdzv_buf_head(&w->buf), (unsigned)rdzv_buf_avail(&w->buf));
    r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &ub, 1, write_cb);
    if (r < 0) {
        rdzv_buf_free(&w->buf);
        free(w);
    }
    return r;
}

/* Queue the frame an encoder wrote to b; put is the encoder's result. b is consumed either way. */
static int client_send(struct agent_client *c, struct rdzv_buf *b, int put)
{
    if (put == 0 && c->state != CL_JOINED && (c->state != CL_HELLO || !c->join_sent))
        put = -ENOTCONN;
    if (put < 0) {
        rdzv_buf_free(b);
        return put;
    }
    return client_write(c, b);
}

int agent_client_send_heartbeat(struct agent_client *c, const struct rdzv_heartbeat *h)
{
    struct rdzv_buf b = {0};
    int r = client_send(c, &b, rdzv_msg_put_heartbeat(&b, h));

    if (r == 0 && !c->asked_ms)
        c->asked_ms = rdzv_now_ms(); /* the clock, not the loop's time: it may follow a block */
    return r;
}

/* The messages that are only encoded and queued: one definition each, the same body. */
#define CLIENT_SEND(name, type)                                                                    \
    int agent_client_send_##name(struct agent_client *c, const struct type *m)                     \
    {                                                                                              \
        struct rdzv_buf b = {0};                                                                   \
                                                                                                   \
        return client_send(c, &b, rdzv_msg_put_##name(&b, m));                                     \
    }
CLIENT_SEND(ready, rdzv_ready)
CLIENT_SEND(leave, rdzv_leave)
CLIENT_SEND(cancel, rdzv_cancel)
CLIENT_SEND(unhealthy, rdzv_unhealthy)
CLIENT_SEND(worker_exit, rdzv_worker_exit)
CLIENT_SEND(nccl_id, rdzv_nccl_id)
CLIENT_SEND(replica, rdzv_replica)
#undef CLIENT_SEND

void agent_client_set_token(struct agent_client *c, const struct rdzv_token *t)
{
    c->token = t;
}

static void client_send_join(struct agent_client *c)
{
    struct rdzv_buf b = {0};
    int r = rdzv_msg_put_join(&b, &c->join);

    if (r == 0)
        r = client_write(c, &b);
    else
        rdzv_buf_free(&b);
    if (r < 0)
        client_fail(c, "cannot talk to rdzvd: %s", uv_strerror(r));
    c->join_sent = true;
}

/* rdzvd's HELLO: answer its challenge when we hold a token; refuse a daemon that asks for a
 * token we don't have, or that does not ask when we have one (it could not prove itself). */
static void handle_hello(struct agent_client *c, const uint8_t *body, uint32_t len)
{
    struct rdzv_buf b = {0};
    bool required = false;
    char err[512];
    int r;

    if (rdzv_msg_parse_hello(body, len, err, sizeof(err)) < 0 ||
        rdzv_auth_parse_hello(body, len, &required, c->sn, err, sizeof(err)) < 0) {
        client_fail(c, "rdzvd's HELLO: %s", err);
        return;
    }
    if (required && !c->token) {
        client_fail(c, "authentication failed: rdzvd requires a token: pass --token-file "
                       "(or set RDZV_TOKEN_FILE)");
        return;
    }
    if (!c->token)
        return; /* JOIN went out with HELLO */
    if (!required) {
        client_fail(c, "authentication failed: rdzvd at %s:%s does not ask for a token (is it "
                       "running without --token-file?); refusing to join an unauthenticated "
                       "daemon",
                    c->host, c->port);
        return;
    }
    r = rdzv_auth_put_auth(&b, c->token, c->sn, c->cn);
    if (r == 0)
        r = client_write(c, &b);
    else
        rdzv_buf_free(&b);
    if (r < 0) {
        client_fail(c, "cannot talk to rdzvd: %s", uv_strerror(r));
        return;
    }
    client_set_state(c, CL_AUTH);
}

static void handle_frame(struct agent_client *c, uint8_t op, const uint8_t *body, uint32_t len)
{
    char err[512];

    if (c->state == CL_AUTH && op != RDZV_MSG_AUTH_OK) {
        if (op == RDZV_MSG_ERROR)
            client_fail(c, "authentication failed: rdzvd refused the token (check --token-file)");
        else
            client_fail(c, "authentication failed: unexpected %s from rdzvd", rdzv_msg_name(op));
        return;
    }
    switch (op) {
    case RDZV_MSG_HELLO:
        handle_hello(c, body, len);
        return;
    case RDZV_MSG_AUTH_OK:
        if (c->state != CL_AUTH) {
            client_fail(c, "unexpected AUTH_OK from rdzvd");
            return;
        }
        if (rdzv_auth_check_ok(body, len, c->token, c->sn, c->cn, err, sizeof(err)) < 0) {
            client_fail(c, "authentication failed: %s", err);
            return;
        }
        log_debug("authenticated with rdzvd at %s:%s (both ways)", c->host, c->port);
        client_set_state(c, CL_HELLO);
        client_send_join(c);
        return;
    case RDZV_MSG_JOINED: {
        struct rdzv_joined j;

        if (rdzv_msg_parse_joined(body, len, &j, err, sizeof(err)) < 0) {
            client_fail(c, "bad JOINED from rdzvd");
            return;
        }
        if (c->join.inplace && strcmp(j.recovery, "inplace") != 0) {
            /* An rdzvd from before protocol 1.1 ignores "recovery" and would restart every
             * worker after a failure: refuse rather than run differently than asked. */
            client_fail(c,
                        "rdzvd at %s:%s cannot recover in place (it is older than this agent: "
                        "protocol 1.1); upgrade rdzvd, or run every agent with --recovery restart",
                        c->host, c->port);
            return;
        }
        client_set_state(c, CL_JOINED);
        c->redirects = 0;
        log_debug("joined: %.*s", (int)len, (const char *)body);
        if (c->cbs.on_joined)
            c->cbs.on_joined(c, j.spare, j.resumed, j.secret, c->ud);
        return;
    }
    case RDZV_MSG_HEARTBEAT:
        return; /* rdzvd is alive: the silence timer was rearmed by the read */
    case RDZV_MSG_ROUND: {
        struct rdzv_round *rd = malloc(sizeof(*rd));

        if (!rd) {
            client_fail(c, "out of memory");
            return;
        }
        if (rdzv_msg_parse_round(body, len, rd, err, sizeof(err)) < 0)
            client_fail(c, "bad ROUND from rdzvd: %s", err);
        else if (c->cbs.on_round)
            c->cbs.on_round(c, rd, c->ud);
        free(rd);
        return;
    }
    case RDZV_MSG_NCCL_REQUEST: {
        struct rdzv_nccl_request q;

        if (rdzv_msg_parse_nccl_request(body, len, &q, err, sizeof(err)) < 0) {
            client_fail(c, "bad NCCL_REQUEST from rdzvd");
            return;
        }
        if (c->cbs.on_nccl_request)
            c->cbs.on_nccl_request(c, &q, c->ud);
        return;
    }
    case RDZV_MSG_REPLICA: {
        struct rdzv_replica q;

        if (rdzv_msg_parse_replica(body, len, &q, err, sizeof(err)) < 0) {
            client_fail(c, "bad REPLICA from rdzvd: %s", err);
            return;
        }
        if (q.port == 0) {
            client_fail(c, "bad REPLICA from rdzvd: no port");
            return;
        }
        if (c->cbs.on_replica)
            c->cbs.on_replica(c, &q, c->ud);
        return;
    }
    case RDZV_MSG_REPLICAS: {
        struct rdzv_replicas rs;

        if (rdzv_msg_parse_replicas(body, len, &rs, err, sizeof(err)) < 0) {
            client_fail(c, "bad REPLICAS from rdzvd: %s", err);
            return;
        }
        for (unsigned i = 0; i < rs.n; i++)
            (void)endpoint_find_or_add(c, rs.endpoint[i]);
        if (c->cbs.on_replicas)
            c->cbs.on_replicas(c, &rs, c->ud);
        return;
    }
    case RDZV_MSG_EVENT: {
        struct rdzv_event e;

        if (rdzv_msg_parse_event(body, len, &e, err, sizeof(err)) < 0)
            client_fail(c, "bad EVENT from rdzvd: %s", err);
        else if (c->cbs.on_event)
            c->cbs.on_event(c, &e, c->ud);
        return;
    }
    case RDZV_MSG_ERROR: {
        struct rdzv_error e;

        if (rdzv_msg_parse_error(body, len, &e, err, sizeof(err)) < 0) {
            client_fail(c, "rdzvd refused this agent");
        } else if (e.redirect && c->state != CL_JOINED) {
            /* A follower of a replicated rdzvd (1.3): go to the leader it names, or on to the
             * next endpoint while none is elected. */
            char why[RDZV_ERROR_MAX + 400];
            int idx = e.leader[0] ? endpoint_find_or_add(c, e.leader) : -1;

            snprintf(why, sizeof(why), "rdzvd at %s: %s", c->name, e.error);
            client_move(c, idx, why);
        } else {
            client_fail(c, "rdzvd refused this agent: %s", e.error);
        }
        return;
    }
    default:
        client_fail(c, "unexpected %s from rdzvd", rdzv_msg_name(op));
    }
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct agent_client *c = h->data;

    (void)suggested;
    if (rdzv_buf_reserve(&c->in, 16384) < 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct agent_client *c = s->data;

    (void)buf;
    if (nread == 0)
        return;
    if (nread < 0 && c->state != CL_JOINED && c->eps.n > 1) {
        char why[400];

        snprintf(why, sizeof(why), "rdzvd at %s closed the connection before JOINED (%s)",
                 c->name, nread == UV_EOF ? "EOF" : uv_strerror((int)nread));
        client_move(c, -1, why);
        return;
    }
    if (nread < 0) {
        client_lost(c, "lost the connection to rdzvd at %s:%s: %s", c->host, c->port,
                    nread == UV_EOF ? "closed by the daemon" : uv_strerror((int)nread));
        return;
    }
    silence_heard(c);
    silence_rearm(c);
    c->in.len += (size_t)nread;
    while (c->state != CL_DEAD) {
        const uint8_t *body;
        const char *why = "";
        uint32_t blen;
        uint8_t op;
        ssize_t r = rdzv_frame_peek(rdzv_buf_head(&c->in), rdzv_buf_avail(&c->in), RDZV_MAX_MSG,
                                    &op, &body, &blen, &why);

        if (r < 0) {
            client_fail(c, "malformed message from rdzvd: %s", why);
            return;
        }
        if (r == 0)
            break;
        handle_frame(c, op, body, blen);
        if (c->state == CL_RESOLVING)
            return; /* moved to another endpoint (client_move emptied c->in) */
        rdzv_buf_consume(&c->in, (size_t)r);
    }
    rdzv_buf_compact(&c->in);
}

/* One of the closes agent_client_close() waits for is done; the last one frees c. */
static void client_unref(struct agent_client *c)
{
    if (--c->closes_pending > 0)
        return;
    rdzv_buf_free(&c->in);
    if (c->done)
        c->done(c->done_ud);
    free(c);
}

static void tcp_close_cb(uv_handle_t *h)
{
    struct agent_client *c = h->data;

    c->tcp_open = false;
    client_unref(c);
}

static void retry_cb(uv_timer_t *t)
{
    struct agent_client *c = t->data;

    client_try(c);
}

static void schedule_retry(struct agent_client *c, int err)
{
    uint64_t now = rdzv_now_ms(), delay;

    if (now >= c->deadline_ms) {
        if (c->eps.n > 1)
            client_fail(c, "cannot join through any of the %u rdzvd endpoints (the last, %s: "
                           "%s); is a majority of the replicas running? check --endpoint",
                        c->eps.n, c->name, uv_strerror(err));
        else
            client_fail(c, "cannot reach rdzvd at %s:%s: %s (is the daemon running there? check "
                           "--endpoint)",
                        c->host, c->port, uv_strerror(err));
        return;
    }
    if (c->eps.n > 1) {
        /* The next endpoint at once; a whole round of them without an answer backs off. */
        log_debug("rdzvd at %s not usable (%s): trying the next endpoint", c->name,
                  uv_strerror(err));
        client_use(c, (c->cur + 1) % c->eps.n);
        if (c->cur != c->round_start) {
            /* 1 ms, not 0: started from a timer (silence_cb), a 0 ms timer would fire in the
             * same timer phase, before the closing socket's handle is free to be set up again. */
            (void)uv_timer_start(&c->retry, retry_cb, 1, 0);
            return;
        }
    }
    /* Exponential backoff with jitter, so a thousand agents do not retry in step. */
    delay = c->backoff_ms / 2 + rdzv_random_u64() % (c->backoff_ms + 1);
    c->backoff_ms = c->backoff_ms * 2 > AGENT_BACKOFF_MAX_MS ? AGENT_BACKOFF_MAX_MS
                                                             : c->backoff_ms * 2;
    log_debug("rdzvd at %s:%s not reachable (%s), retrying in %llu ms", c->host, c->port,
              uv_strerror(err), (unsigned long long)delay);
    (void)uv_timer_start(&c->retry, retry_cb, delay, 0); /* fails only once closing */
}

/* Drop the connection before JOINED and try again: at endpoint idx at once (a follower named its
 * leader), or (idx < 0) at the next one. */
static void client_move(struct agent_client *c, int idx, const char *why)
{
    uv_timer_stop(&c->silence);
    if (c->tcp_open) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        uv_close((uv_handle_t *)&c->tcp, NULL);
        c->tcp_open = false;
    }
    c->in.len = c->in.off = 0;
    c->join_sent = false;
    client_set_state(c, CL_RESOLVING);
    if (rdzv_now_ms() >= c->deadline_ms) {
        client_fail(c, "cannot join through %s: %s", c->name, why);
        return;
    }
    if (idx < 0) {
        log_info("%s; trying the next rdzvd endpoint", why);
        backoff_start(c);
        schedule_retry(c, UV_ECONNRESET);
        return;
    }
    client_use(c, (unsigned)idx);
    c->round_start = c->cur;
    log_info("%s; going to %s", why, c->name);
    /* A leader that keeps changing (or stale news of it): slow down after a few hops. */
    (void)uv_timer_start(&c->retry, retry_cb,
                         ++c->redirects > AGENT_REDIRECTS_AT_ONCE ? AGENT_REDIRECT_WAIT_MS : 0, 0);
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct agent_client *c = req->data;
    struct rdzv_buf b = {0};
    int r;

    if (c->closing)
        return;
    if (status < 0) {
        client_set_state(c, CL_RESOLVING);
        /* Close this socket and try again from the retry timer (schedule_retry: the next endpoint
         * at once, else after a backoff); tcp_close_cb is only for the client's final close. */
        if (c->tcp_open && !uv_is_closing((uv_handle_t *)&c->tcp)) {
            uint64_t now = rdzv_now_ms();

            if (now >= c->deadline_ms) {
                client_fail(c, "cannot reach rdzvd at %s:%s: %s (is the daemon running there? "
                               "check --endpoint)",
                            c->host, c->port, uv_strerror(status));
                return;
            }
            backoff_start(c);
            uv_close((uv_handle_t *)&c->tcp, NULL);
            c->tcp_open = false;
            schedule_retry(c, status);
        }
        return;
    }
    (void)uv_tcp_nodelay(&c->tcp, 1);
    client_set_state(c, CL_HELLO);
    silence_heard(c);
    r = rdzv_msg_put_hello(&b, "rdzv-agent " RDZV_VERSION);
    /* Without a token JOIN follows at once; with one it waits for AUTH_OK. */
    if (r == 0 && !c->token) {
        r = rdzv_msg_put_join(&b, &c->join);
        c->join_sent = true;
    }
    if (r == 0)
        r = client_write(c, &b);
    else
        rdzv_buf_free(&b);
    if (r == 0)
        r = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    if (r < 0)
        client_fail(c, "cannot talk to rdzvd: %s", uv_strerror(r));
    else
        silence_rearm(c);
}

static void gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct agent_client *c = req->data;
    int r;

    if (c->closing) {
        uv_freeaddrinfo(res);
        client_unref(c);
        return;
    }
    if (status < 0) {
        if (status == UV_EAI_NONAME && c->eps.n == 1) {
            client_fail(c, "cannot resolve rdzvd host '%s'; check --endpoint", c->host);
            return;
        }
        backoff_start(c);
        schedule_retry(c, status);
        return;
    }
    r = uv_tcp_init(c->loop, &c->tcp);
    if (r == 0) {
        c->tcp.data = c;
        c->tcp_open = true;
        client_set_state(c, CL_CONNECTING);
        c->connect_req.data = c;
        r = uv_tcp_connect(&c->connect_req, &c->tcp, res->ai_addr, connect_cb);
        if (r == 0 && silence_moves_on(c))
            silence_rearm(c);
    }
    if (!c->numeric)
        uv_freeaddrinfo(res);
    if (r < 0) {
        backoff_start(c);
        if (c->tcp_open) {
            uv_close((uv_handle_t *)&c->tcp, NULL);
            c->tcp_open = false;
        }
        schedule_retry(c, r);
    }
}

/* Connect to a numeric address directly: no resolver thread pool for the common case. */
static bool client_try_numeric(struct agent_client *c)
{
    struct sockaddr_storage ss;
    struct addrinfo ai = {.ai_socktype = SOCK_STREAM, .ai_addr = (struct sockaddr *)&ss};
    int port = atoi(c->port);

    if (uv_ip4_addr(c->host, port, (struct sockaddr_in *)&ss) == 0)
        ai.ai_family = AF_INET;
    else if (uv_ip6_addr(c->host, port, (struct sockaddr_in6 *)&ss) == 0)
        ai.ai_family = AF_INET6;
    else
        return false;
    client_set_state(c, CL_RESOLVING);
    c->numeric = true;
    c->gai.data = c;
    gai_cb(&c->gai, 0, &ai);
    return true;
}

static void client_try(struct agent_client *c)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    int r;

    if (c->closing || c->state == CL_DEAD)
        return;
    c->numeric = false; /* the endpoint may have changed */
    if (client_try_numeric(c))
        return;
    client_set_state(c, CL_RESOLVING);
    c->gai.data = c;
    r = uv_getaddrinfo(c->loop, &c->gai, gai_cb, c->host, c->port, &hints);
    if (r < 0)
        client_fail(c, "cannot resolve '%s': %s", c->host, uv_strerror(r));
}

/* A client whose second timer could not be set up: freed once the first is closed. */
static void free_on_close_cb(uv_handle_t *h)
{
    free(h->data);
}

int agent_client_start(uv_loop_t *loop, const struct agent_endpoints *eps, unsigned first,
                       uint64_t connect_timeout_ms, const struct rdzv_join *j,
                       const struct agent_client_cbs *cbs, void *ud, struct agent_client **ret)
{
    struct agent_client *c;
    int r;

    if (eps->n == 0 || eps->n > AGENT_ENDPOINTS_MAX + 1)
        return -EINVAL;
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->loop = loop;
    c->eps = *eps;
    client_use(c, first < eps->n ? first : 0);
    c->round_start = c->cur;
    c->deadline_ms = rdzv_now_ms() + connect_timeout_ms;
    c->join = *j;
    c->cbs = *cbs;
    c->ud = ud;
    c->retry.data = c;
    c->silence.data = c;
    r = uv_timer_init(loop, &c->retry);
    if (r < 0) {
        free(c);
        return r;
    }
    r = uv_timer_init(loop, &c->silence);
    if (r < 0) {
        uv_close((uv_handle_t *)&c->retry, free_on_close_cb);
        return r;
    }
    *ret = c;
    client_try(c);
    return 0;
}

static void retry_close_cb(uv_handle_t *h)
{
    client_unref(h->data);
}

void agent_client_close(struct agent_client *c, void (*done)(void *ud), void *ud)
{
    if (c->closing)
        return;
    c->closing = true;
    c->done = done;
    c->done_ud = ud;
    c->closes_pending = 1;
    if (c->numeric)
        ; /* no resolver request is ever in flight */
    else if (c->state == CL_RESOLVING && uv_cancel((uv_req_t *)&c->gai) == 0)
        c->closes_pending++; /* gai_cb runs with UV_ECANCELED */
    else if (c->state == CL_RESOLVING && uv_is_active((uv_handle_t *)&c->retry) == 0 &&
             !c->tcp_open)
        c->closes_pending++; /* a lookup is in flight and can't be cancelled: wait for it */
    if (c->tcp_open) {
        c->closes_pending++;
        uv_close((uv_handle_t *)&c->tcp, tcp_close_cb);
    }
    c->closes_pending++;
    uv_close((uv_handle_t *)&c->silence, retry_close_cb);
    uv_close((uv_handle_t *)&c->retry, retry_close_cb);
}
