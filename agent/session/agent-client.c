/* SPDX-License-Identifier: Apache-2.0 */
/* agent-client.c: the agent's rdzvd connection. */
#include "agent/session/agent-client-impl.h"

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

struct client_write {
    uv_write_t req;
    struct rdzv_buf buf;
};


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

int agent_client_send_round_ack(struct agent_client *c, uint64_t generation)
{
    struct rdzv_heartbeat h = {.generation = generation};
    struct rdzv_buf b = {0};

    return client_send(c, &b, rdzv_msg_put_heartbeat(&b, &h)); /* asked_ms not set */
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

/* JOIN's age_ms as the JOIN leaves, not as the client started: a connection that took long
 * (retries, AUTH) must not make the agent look younger than it is. */
static int client_put_join(struct agent_client *c, struct rdzv_buf *b)
{
    if (c->started_ms)
        c->join.age_ms = (int64_t)(rdzv_now_ms() - c->started_ms) + 1;
    agent_client_pf_addr(c);
    return rdzv_msg_put_join(b, &c->join);
}

static void client_send_join(struct agent_client *c)
{
    struct rdzv_buf b = {0};
    int r = client_put_join(c, &b);

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
    agent_client_set_state(c, CL_AUTH);
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
        agent_client_set_state(c, CL_HELLO);
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
        agent_client_set_state(c, CL_JOINED);
        c->incarnation = j.incarnation;
        uv_timer_stop(&c->note);
        c->redirects = 0;
        log_debug("joined: %.*s", (int)len, (const char *)body);
        if (j.warning[0]) /* 1.17: another agent of the job on this host, by its name */
            log_warn("%s", j.warning);
        if (c->cbs.on_joined)
            c->cbs.on_joined(c, j.spare, j.resumed, j.secret, c->ud);
        return;
    }
    case RDZV_MSG_HEARTBEAT: {
        /* rdzvd is alive: the silence timer was rearmed by the read. What it says the job waits
         * for is told, and a warning (1.17) said; an answer that does not decode is only alive
         * (as before 1.15). */
        struct rdzv_heartbeat *hb = malloc(sizeof(*hb));

        if (hb && rdzv_msg_parse_heartbeat(body, len, hb, err, sizeof(err)) == 0) {
            if (hb->warning[0])
                log_warn("%s", hb->warning);
            if (c->cbs.on_wait)
                c->cbs.on_wait(c, &hb->wait, c->ud);
        } else if (hb)
            log_debug("rdzvd's HEARTBEAT answer: %s", err);
        free(hb);
        return;
    }
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
            (void)agent_endpoints_add(&c->eps, rs.endpoint[i]);
        if (c->cbs.on_replicas)
            c->cbs.on_replicas(c, &rs, c->ud);
        return;
    }
    case RDZV_MSG_PREFLIGHT:
        agent_client_pf_handle(c, body, len);
        return;
    case RDZV_MSG_EVENT: {
        struct rdzv_event e;

        if (rdzv_msg_parse_event(body, len, &e, err, sizeof(err)) < 0) {
            client_fail(c, "bad EVENT from rdzvd: %s", err);
            return;
        }
        /* The answer to its JOIN (its job ended, or its node is put aside): the close that
         * follows is no endpoint to move on from. */
        if (c->state != CL_JOINED && strcmp(e.type, "restart"))
            c->told_end = true;
        if (c->cbs.on_event)
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
            int idx = e.leader[0] ? agent_endpoints_add(&c->eps, e.leader) : -1;

            snprintf(why, sizeof(why), "rdzvd at %s: %s", c->name, e.error);
            agent_client_note(c, "a follower: %.60s", e.error);
            c->ep_answered[c->cur] = true;
            agent_client_move(c, idx, why);
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
    if (nread < 0 && c->state != CL_JOINED && c->eps.n == 1 && !c->framed) {
        agent_client_probe(c, AGENT_PEER_CLOSED);
        return;
    }
    if (nread < 0 && c->state != CL_JOINED && c->eps.n > 1 && !c->told_end) {
        char why[400];

        agent_client_note(c, "closed the connection before JOINED (%s)",
                          nread == UV_EOF ? "EOF" : uv_strerror((int)nread));
        snprintf(why, sizeof(why), "rdzvd at %s %s", c->name, c->ep_why[c->cur]);
        agent_client_move(c, -1, why);
        return;
    }
    if (nread < 0) {
        client_lost(c, "lost the connection to rdzvd at %s:%s: %s", c->host, c->port,
                    nread == UV_EOF ? "closed by the daemon" : uv_strerror((int)nread));
        return;
    }
    agent_client_silence_heard(c);
    agent_client_silence_rearm(c);
    c->in.len += (size_t)nread;
    while (c->state != CL_DEAD) {
        const uint8_t *body;
        const char *why = "";
        uint32_t blen;
        uint8_t op;
        ssize_t r = rdzv_frame_peek(rdzv_buf_head(&c->in), rdzv_buf_avail(&c->in), RDZV_MAX_MSG,
                                    &op, &body, &blen, &why);

        if (r < 0 && !c->framed && c->state != CL_JOINED) {
            const uint8_t *head = rdzv_buf_head(&c->in);
            size_t n = rdzv_buf_avail(&c->in);

            agent_client_not_rdzvd(c, agent_peer_classify(head, n), head, n);
            return;
        }
        if (r < 0) {
            client_fail(c, "malformed message from rdzvd: %s", why);
            return;
        }
        if (r == 0)
            break;
        c->framed = true;
        c->ep_answered[c->cur] = true;
        handle_frame(c, op, body, blen);
        if (c->state == CL_RESOLVING)
            return; /* moved to another endpoint (agent_client_move emptied c->in) */
        rdzv_buf_consume(&c->in, (size_t)r);
    }
    rdzv_buf_compact(&c->in);
}

/* Connected (agent-connect.c): say HELLO (and JOIN, without a token), and read rdzvd's frames. */
static void client_connected(struct agent_client *c)
{
    struct rdzv_buf b = {0};
    int r = rdzv_msg_put_hello(&b, "rdzv-agent " RDZV_VERSION);

    /* Without a token JOIN follows at once; with one it waits for AUTH_OK. */
    if (r == 0 && !c->token) {
        r = client_put_join(c, &b);
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
        agent_client_silence_rearm(c);
}

static void tcp_close_cb(uv_handle_t *h)
{
    struct agent_client *c = h->data;

    c->tcp_open = false;
    agent_client_unref(c);
}

/* A client whose later timer could not be set up: freed once the earlier ones are closed. */
static void free_on_close_cb(uv_handle_t *h)
{
    struct agent_client *c = h->data;

    if (--c->closes_pending <= 0)
        free(c);
}

int agent_client_start(uv_loop_t *loop, const struct agent_endpoints *eps, unsigned first,
                       uint64_t connect_timeout_ms, const struct rdzv_join *j,
                       const struct agent_client_cbs *cbs, void *ud, struct agent_client **ret)
{
    struct agent_client *c;
    uv_timer_t *timers[3];
    int r;

    if (eps->n == 0 || eps->n > AGENT_ENDPOINTS_MAX + 1)
        return -EINVAL;
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->loop = loop;
    c->eps = *eps;
    agent_client_use(c, first < eps->n ? first : 0);
    c->round_start = c->cur;
    c->deadline_ms = rdzv_now_ms() + connect_timeout_ms;
    c->timeout_ms = connect_timeout_ms;
    c->join = *j;
    if (j->age_ms > 0)
        c->started_ms = rdzv_now_ms() - (uint64_t)(j->age_ms - 1);
    c->cbs = *cbs;
    c->ud = ud;
    timers[0] = &c->retry;
    timers[1] = &c->silence;
    timers[2] = &c->note;
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(timers); i++) {
        timers[i]->data = c;
        r = uv_timer_init(loop, timers[i]);
        if (r == 0)
            continue;
        c->closes_pending = (int)i;
        while (i-- > 0)
            uv_close((uv_handle_t *)timers[i], free_on_close_cb);
        if (c->closes_pending == 0)
            free(c);
        return r;
    }
    c->connected = client_connected;
    *ret = c;
    c->pf_write = client_write;
    if (agent_client_pf_open(c) < 0)
        agent_client_pf_close(c); /* JOIN then asks for no check */
    c->join.preflight.on = c->pf_server != NULL;
    agent_client_begin(c);
    return 0;
}

static void retry_close_cb(uv_handle_t *h)
{
    agent_client_unref(h->data);
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
    if (c->probe) {
        agent_probe_cancel(c->probe);
        c->probe = NULL;
    }
    agent_client_pf_close(c);
    c->closes_pending += 2;
    uv_close((uv_handle_t *)&c->silence, retry_close_cb);
    uv_close((uv_handle_t *)&c->note, retry_close_cb);
    uv_close((uv_handle_t *)&c->retry, retry_close_cb);
}
