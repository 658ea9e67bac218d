/* SPDX-License-Identifier: Apache-2.0 */
/* agent-connect.c: reaching a peer that speaks rdzvd's protocol (see agent-client-impl.h). */
#include "agent/session/agent-client-impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-proto.h"

static const char *const client_state_names[] = {
    [CL_RESOLVING] = "resolving", [CL_CONNECTING] = "connecting", [CL_HELLO] = "hello",
    [CL_AUTH] = "auth",           [CL_JOINED] = "joined",         [CL_DEAD] = "dead",
    [CL_PROBING] = "probing",
};

/* Every change of c->state goes through here. */
void agent_client_set_state(struct agent_client *c, enum client_state s)
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

static void retry_cb(uv_timer_t *t);
static void schedule_retry(struct agent_client *c, int err);

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

void agent_client_note(struct agent_client *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->ep_why[c->cur], sizeof(c->ep_why[c->cur]), fmt, ap);
    va_end(ap);
    c->ep_answered[c->cur] = false;
}

/* Whether rdzvd's frames came on the last attempt at some endpoint. */
static bool some_answered(const struct agent_client *c)
{
    for (unsigned i = 0; i < c->eps.n; i++)
        if (c->ep_answered[i])
            return true;
    return false;
}

bool agent_client_unanswered(const struct agent_client *c)
{
    return c->unanswered;
}

/* "A (connection refused), B (timed out: ...)": what the last attempt at each endpoint met, in
 * a buffer of EPS_SUMMARY_LEN (an endpoint's host, port and why fit in 380). */
#define EPS_SUMMARY_LEN ((AGENT_ENDPOINTS_MAX + 1) * 380)
static void eps_summary(const struct agent_client *c, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (unsigned i = 0; i < c->eps.n && off < len; i++) {
        const struct agent_endpoint *e = &c->eps.ep[i];
        int n = snprintf(buf + off, len - off, strchr(e->host, ':') ? "%s[%s]:%u (%s)"
                                                                    : "%s%s:%u (%s)",
                         i ? ", " : "", e->host, e->port,
                         c->ep_why[i][0] ? c->ep_why[i] : "not tried yet");

        if (n < 0)
            break;
        off += (size_t)n;
    }
}

/* Talk to eps.ep[i] from now on. */
void agent_client_use(struct agent_client *c, unsigned i)
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

uint64_t agent_client_incarnation(const struct agent_client *c)
{
    return c->incarnation;
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

void agent_client_end(struct agent_client *c, bool lost, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    if (c->state == CL_DEAD)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    agent_client_set_state(c, CL_DEAD);
    uv_timer_stop(&c->silence);
    uv_timer_stop(&c->note);
    if (c->tcp_open)
        uv_read_stop((uv_stream_t *)&c->tcp);
    if (c->closing)
        return;
    if (lost && c->cbs.on_lost)
        c->cbs.on_lost(c, msg, c->ud);
    else if (c->cbs.on_error)
        c->cbs.on_error(c, msg, c->ud);
}


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

void agent_client_silence_heard(struct agent_client *c)
{
    c->asked_ms = 0;
    c->silence_extended = false;
}

static void silence_cb(uv_timer_t *t)
{
    struct agent_client *c = t->data;
    char why[400];
    uint64_t more;

    /* Between attempts (a refused connect, a backoff): nothing is silent. */
    if (c->state == CL_RESOLVING || c->state == CL_PROBING || c->state == CL_DEAD)
        return;
    if (c->eps.n == 1 && (c->state == CL_HELLO || c->state == CL_AUTH) && !c->framed) {
        agent_client_probe(c, AGENT_PEER_SILENT);
        return;
    }
    if (silence_moves_on(c)) {
        if (c->state == CL_CONNECTING)
            agent_client_note(c, "timed out: connection not accepted within %.1f s",
                              (double)AGENT_CONNECT_ATTEMPT_MS / 1000);
        else
            agent_client_note(c, "timed out: accepted, then sent nothing for %.1f s",
                              (double)c->silence_ms / 1000);
        snprintf(why, sizeof(why), "rdzvd at %s %s", c->name, c->ep_why[c->cur]);
        agent_client_move(c, -1, why);
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

void agent_client_silence_rearm(struct agent_client *c)
{
    uint64_t ms = c->silence_ms, now = rdzv_now_ms();

    if (c->state == CL_CONNECTING && ms > AGENT_CONNECT_ATTEMPT_MS)
        ms = AGENT_CONNECT_ATTEMPT_MS;
    /* A peer that never answers is probed (AGENT_PROBE_MS) before --connect-timeout ends. */
    if ((c->state == CL_HELLO || c->state == CL_AUTH) && !c->framed && ms > AGENT_PROBE_MS &&
        c->deadline_ms < now + ms + AGENT_PROBE_MS)
        ms = c->deadline_ms > now + AGENT_PROBE_MS + AGENT_PROBE_MS / 4
                 ? c->deadline_ms - now - AGENT_PROBE_MS
                 : AGENT_PROBE_MS / 4;
    if (ms && c->state != CL_DEAD && !c->closing)
        (void)uv_timer_start(&c->silence, silence_cb, ms, 0); /* fails only once closing */
}

void agent_client_set_silence(struct agent_client *c, uint64_t silence_ms)
{
    c->silence_ms = silence_ms;
    if (c->state == CL_HELLO || c->state == CL_AUTH || c->state == CL_JOINED ||
        silence_moves_on(c))
        agent_client_silence_rearm(c);
}

/* One of the closes agent_client_close() waits for is done; the last one frees c. */
void agent_client_unref(struct agent_client *c)
{
    if (--c->closes_pending > 0)
        return;
    rdzv_buf_free(&c->in);
    if (c->done)
        c->done(c->done_ud);
    free(c);
}

static void retry_cb(uv_timer_t *t)
{
    struct agent_client *c = t->data;

    agent_client_try(c);
}

/* What the last attempt met: an error (the peer's word kept when err is 0). */
static void client_why(struct agent_client *c, int err)
{
    if (!err)
        return;
    snprintf(c->why, sizeof(c->why), "%s", uv_strerror(err));
    c->why_peer = false;
    agent_client_note(c, "%s", uv_strerror(err));
}

/* --connect-timeout is over: one line that says what the last attempt met. */
static void client_give_up(struct agent_client *c)
{
    double secs = (double)c->timeout_ms / 1000;
    char all[EPS_SUMMARY_LEN];

    c->unanswered = !some_answered(c) && (c->eps.n > 1 || !c->why_peer);
    if (c->eps.n > 1 && c->unanswered) {
        eps_summary(c, all, sizeof(all));
        client_fail(c, "no rdzvd at %s answered for %.0f s (--connect-timeout): all replicas "
                       "down? check %s",
                    all, secs, agent_endpoints_flag(&c->eps));
    } else if (c->eps.n > 1)
        client_fail(c, "cannot join through any of the %u rdzvd endpoints (the last, %s: %s); "
                       "is a majority of the replicas running? check %s",
                    c->eps.n, c->name, c->why[0] ? c->why : "no answer",
                    agent_endpoints_flag(&c->eps));
    else if (c->why_peer)
        client_fail(c, "%s %s (for %.0f s, --connect-timeout): not rdzvd? check %s",
                    c->name, c->why, secs, agent_endpoints_flag(&c->eps));
    else
        client_fail(c, "cannot reach rdzvd at %s within %.0f s (--connect-timeout): %s (is the "
                       "daemon running there? check %s)",
                    c->name, secs, c->why[0] ? c->why : "no answer to the connection",
                    agent_endpoints_flag(&c->eps));
}

static void schedule_retry(struct agent_client *c, int err)
{
    uint64_t now = rdzv_now_ms(), delay;

    client_why(c, err);
    if (now >= c->deadline_ms) {
        client_give_up(c);
        return;
    }
    /* The rdzvd that answered when this agent looked is gone (one hosted for a run that just
     * ended, say): the caller may host one there now. */
    if (err == UV_ECONNREFUSED && c->eps.n == 1 && c->cbs.on_refused &&
        c->cbs.on_refused(c, c->ud)) {
        (void)uv_timer_start(&c->retry, retry_cb, 1, 0); /* fails only once closing */
        return;
    }
    if (c->eps.n > 1) {
        /* The next endpoint at once; a whole round of them without an answer backs off. */
        log_debug("rdzvd at %s not usable (%s): trying the next endpoint", c->name,
                  c->ep_why[c->cur]);
        agent_client_use(c, (c->cur + 1) % c->eps.n);
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
              c->ep_why[c->cur], (unsigned long long)delay);
    (void)uv_timer_start(&c->retry, retry_cb, delay, 0); /* fails only once closing */
}

/* Drop the connection before JOINED and try again: at endpoint idx at once (a follower named its
 * leader), or (idx < 0) at the next one. */
/* Close this attempt's connection (not the client). */
static void client_drop(struct agent_client *c, enum client_state s)
{
    uv_timer_stop(&c->silence);
    if (c->tcp_open) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        uv_close((uv_handle_t *)&c->tcp, NULL);
        c->tcp_open = false;
    }
    c->in.len = c->in.off = 0;
    c->join_sent = false;
    agent_client_set_state(c, s);
}

/* The probe (agent-probe.h) says what the peer is: its word wins over what the connection given
 * up showed (silence, a close). */
static void probe_cb(enum agent_peer k, const uint8_t *p, size_t n, void *ud)
{
    struct agent_client *c = ud;

    c->probe = NULL;
    agent_client_set_state(c, CL_RESOLVING);
    agent_client_not_rdzvd(c, k == AGENT_PEER_HTTP || k == AGENT_PEER_OTHER ? k : c->seen, p, n);
}

/* The peer accepted the connection and then said nothing, or closed it, before any frame: ask
 * it what it is on a connection of its own (an HTTP server answers a request, not HELLO). */
void agent_client_probe(struct agent_client *c, enum agent_peer seen)
{
    c->seen = seen;
    client_drop(c, CL_PROBING);
    if (agent_probe_start(c->loop, (struct sockaddr *)&c->peer, probe_cb, c, &c->probe) < 0) {
        agent_client_set_state(c, CL_RESOLVING);
        agent_client_not_rdzvd(c, seen, NULL, 0);
    }
}

/* The peer at c->name did not answer as rdzvd (k; p, n: its first bytes). An HTTP server or
 * another protocol settles it: stop, saying what answered (with several endpoints, the next).
 * Silence or a close may be an rdzvd in trouble: again until --connect-timeout, then stop. */
void agent_client_not_rdzvd(struct agent_client *c, enum agent_peer k, const uint8_t *p, size_t n)
{
    char what[200], why[sizeof(c->name) + sizeof(what)];

    agent_peer_describe(k, p, n, what, sizeof(what));
    snprintf(why, sizeof(why), "%s %s", c->name, what);
    if (c->eps.n > 1) {
        agent_client_note(c, "%s", what);
        agent_client_move(c, -1, why);
        return;
    }
    client_drop(c, CL_RESOLVING);
    if (k == AGENT_PEER_HTTP || k == AGENT_PEER_OTHER) {
        client_fail(c, "%s, not rdzvd: check %s", why, agent_endpoints_flag(&c->eps));
        return;
    }
    snprintf(c->why, sizeof(c->why), "%s", what);
    c->why_peer = true;
    if (rdzv_now_ms() >= c->deadline_ms) {
        client_give_up(c);
        return;
    }
    log_debug("%s; trying again", why);
    backoff_start(c);
    schedule_retry(c, 0);
}

void agent_client_move(struct agent_client *c, int idx, const char *why)
{
    client_drop(c, CL_RESOLVING);
    if (idx < 0 && c->ep_why[c->cur][0]) {
        snprintf(c->why, sizeof(c->why), "%s", c->ep_why[c->cur]);
        c->why_peer = false;
    }
    if (rdzv_now_ms() >= c->deadline_ms) {
        client_give_up(c);
        return;
    }
    if (idx < 0) {
        log_info("%s; trying the next rdzvd endpoint", why);
        backoff_start(c);
        schedule_retry(c, 0);
        return;
    }
    agent_client_use(c, (unsigned)idx);
    c->round_start = c->cur;
    log_info("%s; going to %s", why, c->name);
    /* A leader that keeps changing (or stale news of it): slow down after a few hops. */
    (void)uv_timer_start(&c->retry, retry_cb,
                         ++c->redirects > AGENT_REDIRECTS_AT_ONCE ? AGENT_REDIRECT_WAIT_MS : 0, 0);
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct agent_client *c = req->data;
    uv_os_fd_t fd;

    if (c->closing)
        return;
    if (status == 0 && c->tcp_open && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 &&
        rdzv_fd_self_connected(fd)) {
        /* Nothing listens on the target port, and the kernel gave this connection that very
         * port as its source: closed before a byte is sent (it would read its own HELLO). */
        log_debug("rdzvd at %s: connected to itself (no listener there): closed", c->name);
        status = UV_ECONNREFUSED;
    }
    if (status < 0) {
        agent_client_set_state(c, CL_RESOLVING);
        uv_timer_stop(&c->silence);
        /* Close this socket and try again from the retry timer (schedule_retry: the next endpoint
         * at once, else after a backoff); tcp_close_cb is only for the client's final close. */
        if (c->tcp_open && !uv_is_closing((uv_handle_t *)&c->tcp)) {
            uint64_t now = rdzv_now_ms();

            if (now >= c->deadline_ms) {
                client_why(c, status);
                client_give_up(c);
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
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&c->peer, &(int){sizeof(c->peer)}) < 0)
        c->peer.ss_family = AF_UNSPEC; /* a probe then fails at once */
    c->framed = c->told_end = false;
    agent_client_set_state(c, CL_HELLO);
    agent_client_silence_heard(c);
    c->connected(c);
}

static void gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct agent_client *c = req->data;
    int r;

    if (c->closing) {
        uv_freeaddrinfo(res);
        agent_client_unref(c);
        return;
    }
    if (status < 0) {
        if (status == UV_EAI_NONAME && c->eps.n == 1) {
            client_fail(c, "cannot resolve rdzvd host '%s'; check %s", c->host,
                        agent_endpoints_flag(&c->eps));
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
        agent_client_set_state(c, CL_CONNECTING);
        c->connect_req.data = c;
        r = uv_tcp_connect(&c->connect_req, &c->tcp, res->ai_addr, connect_cb);
        if (r == 0 && silence_moves_on(c))
            agent_client_silence_rearm(c);
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
    agent_client_set_state(c, CL_RESOLVING);
    c->numeric = true;
    c->gai.data = c;
    gai_cb(&c->gai, 0, &ai);
    return true;
}

void agent_client_try(struct agent_client *c)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    int r;

    if (c->closing || c->state == CL_DEAD)
        return;
    c->numeric = false; /* the endpoint may have changed */
    if (client_try_numeric(c))
        return;
    agent_client_set_state(c, CL_RESOLVING);
    c->gai.data = c;
    r = uv_getaddrinfo(c->loop, &c->gai, gai_cb, c->host, c->port, &hints);
    if (r < 0)
        client_fail(c, "cannot resolve '%s': %s", c->host, uv_strerror(r));
}

/* Before JOINED, every AGENT_WAIT_NOTE_MS: one line saying what the agent waits for and how
 * much longer; at the deadline, a connection still not accepted ends the wait. */
static void note_cb(uv_timer_t *t)
{
    struct agent_client *c = t->data;
    uint64_t now = rdzv_now_ms(), left = c->deadline_ms > now ? c->deadline_ms - now : 0;

    if (c->state == CL_JOINED || c->state == CL_DEAD || c->closing)
        return;
    if (left == 0) {
        if (c->state == CL_CONNECTING)
            agent_client_note(c, "timed out: connection not accepted");
        if (c->state == CL_CONNECTING || c->state == CL_RESOLVING)
            client_give_up(c);
        return;
    }
    if (c->eps.n > 1) {
        char all[EPS_SUMMARY_LEN];

        eps_summary(c, all, sizeof(all));
        log_info("waiting for an rdzvd leader at %s: %.0f s left of --connect-timeout", all,
                 (double)left / 1000);
    } else {
        log_info("waiting for rdzvd at %s (%s%s): %.0f s left of --connect-timeout", c->name,
                 c->why_peer ? "it " : "", c->why[0] ? c->why : "no answer yet",
                 (double)left / 1000);
    }
    (void)uv_timer_start(&c->note, note_cb, left < AGENT_WAIT_NOTE_MS ? left : AGENT_WAIT_NOTE_MS,
                         0);
}

void agent_client_begin(struct agent_client *c)
{
    uint64_t first = c->timeout_ms < AGENT_WAIT_NOTE_MS ? c->timeout_ms : AGENT_WAIT_NOTE_MS;

    (void)uv_timer_start(&c->note, note_cb, first, 0);
    agent_client_try(c);
}
