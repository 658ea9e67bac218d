/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvctl.c: look into and change a running rdzvd over the TCPStore protocol (modern numbering).
 * With a token, the connection opens as an rdzv peer (HELLO, AUTH, AUTH_OK, STORE) and speaks
 * TCPStore after that, so it works from addresses outside rdzvd's --allow-store-from. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-opt.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-auth-msg.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "proto/rdzv-status.h"
#include "proto/rdzv-store-client.h"
#include "proto/rdzv-tcpstore.h"
#include "ctl/rdzvctl-print.h"
#include "ctl/rdzvctl-words.h"

/* Exit codes, for scripts. */
enum {
    EXIT_OK = 0,
    EXIT_NO = 1,      /* key missing, wait timed out, check not ready, nothing deleted */
    EXIT_USAGE = 2,   /* bad command line */
    EXIT_CONN = 3,    /* cannot connect, connection lost, or protocol error */
    EXIT_AUTH = 4,    /* authentication failed, or the token does not allow it (the operator's) */
};

struct ctl {
    struct rdzv_store_client *sc; /* NULL until connected */
    const char *endpoint;
    bool raw;           /* send keys as given instead of PyTorch's "/"-prefixed form */
    uint64_t timeout_ms;
    uint64_t deadline_ms;
    const struct rdzv_token *token; /* --token-file: authenticate first */
};

#define STR_(x) #x
#define STR(x) STR_(x)

static int die_usage(const char *msg)
{
    fprintf(stderr, "rdzvctl: %s (see rdzvctl --help)\n", msg);
    return EXIT_USAGE;
}

static int ctl_connect(struct ctl *c)
{
    char host[256];
    uint16_t port = RDZV_DEFAULT_PORT;
    uint64_t left = 0, now = rdzv_now_ms();
    int r;

    if (rdzv_parse_hostport(c->endpoint, host, sizeof(host), &port) < 0) {
        fprintf(stderr, "rdzvctl: bad endpoint '%s': expected HOST:PORT\n", c->endpoint);
        return -EINVAL;
    }
    if (c->deadline_ms)
        left = now < c->deadline_ms ? c->deadline_ms - now : 1;
    /* VALIDATE goes out with the first request (or STORE stands for it, with a token). */
    r = rdzv_store_client_connect(host, port, left, RDZV_STORE_CLIENT_NO_VALIDATE, &c->sc);
    if (r == -ENXIO)
        fprintf(stderr, "rdzvctl: cannot resolve '%s'\n", host);
    else if (r < 0)
        fprintf(stderr, "rdzvctl: cannot connect to %s: %s (is rdzvd running there?)\n",
                c->endpoint, strerror(-r));
    return r;
}

static int send_all(struct ctl *c, const struct rdzv_buf *b)
{
    return rdzv_store_client_send(c->sc, rdzv_buf_head(b), rdzv_buf_avail(b), c->deadline_ms);
}

static int recv_all(struct ctl *c, void *buf, size_t n)
{
    return rdzv_store_client_recv(c->sc, buf, n, c->deadline_ms);
}

static int recv_u8(struct ctl *c, uint8_t *v)
{
    return recv_all(c, v, 1);
}

static int recv_u64(struct ctl *c, uint64_t *v)
{
    return rdzv_store_client_recv_u64(c->sc, v, c->deadline_ms);
}

/* A u64-length-prefixed byte string (malloc'd, NUL-terminated for convenience). */
static int recv_str(struct ctl *c, uint8_t **ret, size_t *len)
{
    return rdzv_store_client_recv_str(c->sc, 1ull << 32, ret, len, c->deadline_ms);
}

/* The key as sent on the wire: "/" + key unless --raw. Caller frees. */
static char *wire_key(const struct ctl *c, const char *key)
{
    size_t n = strlen(key);
    char *k = malloc(n + 2);

    if (!k)
        return NULL;
    if (c->raw)
        memcpy(k, key, n + 1);
    else {
        k[0] = '/';
        memcpy(k + 1, key, n + 1);
    }
    return k;
}

static int conn_error(const struct ctl *c, int r)
{
    if (r == -ETIMEDOUT)
        fprintf(stderr, "rdzvctl: %s: no reply within %.1f s\n", c->endpoint,
                (double)c->timeout_ms / 1000);
    else
        fprintf(stderr, "rdzvctl: %s: %s\n", c->endpoint,
                r == -ECONNRESET ? "connection closed by the daemon" : strerror(-r));
    return EXIT_CONN;
}

/* Read one rendezvous frame (bodies up to 64 KiB here). Returns 0 or a negative errno. */
static int recv_frame(struct ctl *c, uint8_t *op, uint8_t *body, uint32_t *len)
{
    uint8_t hdr[RDZV_FRAME_HDR];
    const uint8_t *bp;
    const char *why = "";
    uint32_t n;
    int r = recv_all(c, hdr, sizeof(hdr));

    if (r < 0)
        return r;
    if (rdzv_frame_peek(hdr, sizeof(hdr), 65535, op, &bp, &n, &why) < 0 ||
        (n = rdzv_get_u32(hdr + 4)) > 65535)
        return -EPROTO;
    *op = hdr[0]; /* peek only fills it in for a complete frame */
    r = recv_all(c, body, n);
    if (r == 0)
        *len = n;
    return r;
}

/* HELLO, AUTH, check AUTH_OK, then with store STORE: from there on the connection speaks
 * TCPStore (without VALIDATE). Returns 0 or an exit code (message printed). */
static int ctl_auth(struct ctl *c, bool store)
{
    static uint8_t body[65536];
    uint8_t sn[RDZV_NONCE_BYTES], cn[RDZV_NONCE_BYTES], op = 0;
    struct rdzv_buf b = {0};
    bool required = false;
    uint32_t len = 0;
    char err[512];
    int r;

    r = rdzv_msg_put_hello(&b, "rdzvctl " RDZV_VERSION);
    r = r ?: send_all(c, &b);
    rdzv_buf_free(&b);
    r = r ?: recv_frame(c, &op, body, &len);
    if (r == -EPROTO || (r == 0 && op != RDZV_MSG_HELLO)) {
        fprintf(stderr, "rdzvctl: %s: not an rdzvd (no rendezvous HELLO); --token-file only "
                        "works with rdzvd\n",
                c->endpoint);
        return EXIT_CONN;
    }
    if (r < 0)
        return conn_error(c, r);
    if (rdzv_auth_parse_hello(body, len, &required, sn, err, sizeof(err)) < 0) {
        fprintf(stderr, "rdzvctl: %s: %s\n", c->endpoint, err);
        return EXIT_CONN;
    }
    if (!required) {
        fprintf(stderr, "rdzvctl: authentication failed: rdzvd at %s does not ask for a token "
                        "(running without --token-file?); refusing to trust it\n",
                c->endpoint);
        return EXIT_AUTH;
    }
    r = rdzv_auth_put_auth(&b, c->token, sn, cn);
    r = r ?: send_all(c, &b);
    rdzv_buf_free(&b);
    r = r ?: recv_frame(c, &op, body, &len);
    if (r < 0 || op == RDZV_MSG_ERROR) {
        if (r == 0 || r == -ECONNRESET) {
            fprintf(stderr, "rdzvctl: authentication failed: rdzvd refused the token (check "
                            "--token-file)\n");
            return EXIT_AUTH;
        }
        return conn_error(c, r);
    }
    if (op != RDZV_MSG_AUTH_OK ||
        rdzv_auth_check_ok(body, len, c->token, sn, cn, err, sizeof(err)) < 0) {
        fprintf(stderr, "rdzvctl: authentication failed: %s\n",
                op != RDZV_MSG_AUTH_OK ? "unexpected reply to AUTH" : err);
        return EXIT_AUTH;
    }
    if (!store)
        return 0;
    r = rdzv_msg_put(&b, RDZV_MSG_STORE, json_object());
    r = r ?: send_all(c, &b);
    rdzv_buf_free(&b);
    return r < 0 ? conn_error(c, r) : 0;
}

#define PROBE_MS 2000 /* how long one endpoint of a list may take to answer HELLO */

/* The answer of endpoint ep to a rendezvous HELLO, on a connection of its own: 1 when it serves
 * (HELLO: the leader, or a single rdzvd), 0 when it is a follower (ERROR naming the leader, into
 * leader: "" while none is elected), or a negative errno (unreachable, not an rdzvd). Quiet. */
static int probe_endpoint(struct ctl *c, const char *ep, char *leader, size_t len)
{
    static uint8_t body[65536];
    struct ctl p = *c;
    struct rdzv_buf b = {0};
    struct rdzv_error e;
    char host[256], err[128];
    uint16_t port = RDZV_DEFAULT_PORT;
    uint64_t now = rdzv_now_ms();
    uint32_t n = 0;
    uint8_t op = 0;
    int r;

    p.endpoint = ep;
    if (rdzv_parse_hostport(ep, host, sizeof(host), &port) < 0)
        return -EINVAL;
    /* A host that is gone answers nothing: the next endpoint is asked after PROBE_MS. */
    p.deadline_ms = now + PROBE_MS;
    if (c->deadline_ms && c->deadline_ms < p.deadline_ms)
        p.deadline_ms = c->deadline_ms > now ? c->deadline_ms : now + 1;
    r = rdzv_store_client_connect(host, port, p.deadline_ms - now, RDZV_STORE_CLIENT_NO_VALIDATE,
                                  &p.sc);
    if (r < 0)
        return r;
    r = rdzv_msg_put_hello(&b, "rdzvctl " RDZV_VERSION);
    r = r ?: send_all(&p, &b);
    rdzv_buf_free(&b);
    r = r ?: recv_frame(&p, &op, body, &n);
    p.sc = rdzv_store_client_free(p.sc);
    if (r < 0)
        return r;
    if (op == RDZV_MSG_HELLO)
        return 1;
    if (op != RDZV_MSG_ERROR || rdzv_msg_parse_error(body, n, &e, err, sizeof(err)) < 0 ||
        !e.redirect)
        return -EPROTO;
    snprintf(leader, len, "%s", e.leader);
    return 0;
}

/* --endpoint A,B,C (the replicas of a replicated rdzvd): c->endpoint becomes the one that
 * leads. Each is asked in turn (probe_endpoint); a follower that names the leader sends us there
 * at once. A single endpoint is taken as it is, unasked. 0 or an exit code (message printed). */
static int find_leader(struct ctl *c, char *buf, size_t len)
{
    char list[1024], leader[RDZV_ENDPOINT_MAX + 1], *save = NULL;
    int r = -ENOENT;

    if (!strchr(c->endpoint, ','))
        return 0;
    if (strlen(c->endpoint) >= sizeof(list))
        return die_usage("--endpoint: the list is too long");
    snprintf(list, sizeof(list), "%s", c->endpoint);
    for (char *ep = strtok_r(list, ",", &save); ep; ep = strtok_r(NULL, ",", &save)) {
        r = probe_endpoint(c, ep, leader, sizeof(leader));
        if (r == 0 && leader[0])
            r = probe_endpoint(c, leader, leader, sizeof(leader)) == 1 ? 2 : r;
        if (r == 1 || r == 2) {
            snprintf(buf, len, "%s", r == 1 ? ep : leader);
            c->endpoint = buf;
            return 0;
        }
    }
    fprintf(stderr, "rdzvctl: no rdzvd in --endpoint %s leads%s\n", c->endpoint,
            r == 0 ? " (no leader is elected yet)" : "");
    return EXIT_CONN;
}

static char *read_stdin(size_t *len)
{
    struct rdzv_buf b = {0};
    char tmp[65536];
    size_t n;

    while ((n = fread(tmp, 1, sizeof(tmp), stdin)) > 0)
        if (rdzv_buf_put(&b, tmp, n) < 0) {
            rdzv_buf_free(&b);
            return NULL;
        }
    *len = b.len;
    if (rdzv_buf_put_u8(&b, 0) < 0) {
        rdzv_buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

/* Build keys[] in wire form for check/wait. */
static char **wire_keys(const struct ctl *c, char **args, int n)
{
    char **k = calloc((size_t)n, sizeof(*k));

    for (int i = 0; k && i < n; i++)
        if (!(k[i] = wire_key(c, args[i]))) {
            while (i--)
                free(k[i]);
            free(k);
            return NULL;
        }
    return k;
}

static void free_keys(char **k, int n)
{
    for (int i = 0; i < n; i++)
        free(k[i]);
    free(k);
}

static bool nargs_ok(int argc, int want, int *rc)
{
    if (argc == want)
        return true;
    *rc = die_usage("wrong number of arguments for this command");
    return false;
}

/* One request of the rendezvous protocol: HELLO (without a token; with one, ctl_auth proves it)
 * and the frames in b, then the reply of op want, whose body (malloc'd) goes to *body and *len.
 * EXIT_OK, or the exit code of what went wrong (said on stderr). */
static int ctl_exchange(struct ctl *c, struct rdzv_buf *b, uint8_t want_op, const char *what,
                        uint8_t **body, uint32_t *len)
{
    uint8_t hdr[RDZV_FRAME_HDR];
    int r, rc;

    *body = NULL;
    if (ctl_connect(c) < 0)
        return EXIT_CONN;
    if (c->token && (rc = ctl_auth(c, false)) != EXIT_OK)
        return rc;
    r = send_all(c, b);
    for (int want = c->token ? want_op : RDZV_MSG_HELLO; r == 0;) {
        struct rdzv_error e;
        char err[256];

        r = recv_all(c, hdr, sizeof(hdr));
        if (r < 0)
            break;
        *len = rdzv_get_u32(hdr + 4);
        if (*len > RDZV_MAX_MSG || (hdr[0] != want && hdr[0] != RDZV_MSG_ERROR)) {
            fprintf(stderr, "rdzvctl: %s did not answer rdzvctl %s (message 0x%02x): is it "
                    "rdzvd, as recent as this rdzvctl?\n", c->endpoint, what, hdr[0]);
            return EXIT_CONN;
        }
        free(*body);
        *body = malloc(*len ? *len : 1);
        if (!*body || (r = recv_all(c, *body, *len)) < 0)
            break;
        if (hdr[0] == RDZV_MSG_ERROR) {
            fprintf(stderr, "rdzvctl: rdzvd refused: %s\n",
                    rdzv_msg_parse_error(*body, *len, &e, err, sizeof(err)) == 0
                        ? e.error
                        : "(no reason given)");
            return EXIT_CONN;
        }
        if (want == RDZV_MSG_HELLO) {
            want = want_op;
            continue;
        }
        return EXIT_OK;
    }
    return conn_error(c, r < 0 ? r : -ENOMEM);
}

static int status_once(struct ctl *c, bool as_json, const struct rdzvctl_view *v);

/* status --watch [SEC] [--count N]: the period (0.1 s to a day) and how many refreshes (0: until
 * interrupted). */
struct watch {
    bool on;
    double period_s;
    uint64_t count;
};

static int status_args(int argc, char **argv, bool *as_json, struct watch *w, bool *ended)
{
    *as_json = *ended = false;
    *w = (struct watch){.period_s = 2.0};
    for (int i = 0; i < argc; i++) {
        char *end;

        if (strcmp(argv[i], "--json") == 0) {
            *as_json = true;
        } else if (strcmp(argv[i], "--ended") == 0) {
            *ended = true; /* --json has every job in full anyway */
        } else if (strcmp(argv[i], "--watch") == 0) {
            w->on = true;
            if (i + 1 < argc && argv[i + 1][0] != '-') {
                w->period_s = strtod(argv[++i], &end);
                if (*end || end == argv[i] || !(w->period_s >= 0.1 && w->period_s <= 86400))
                    return die_usage("status --watch SEC: SEC must be 0.1 to 86400 (seconds "
                                     "between refreshes)");
            }
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            if (rdzv_parse_u64(argv[++i], &w->count) < 0 || w->count == 0)
                return die_usage("status --count N: N must be a whole number from 1");
        } else {
            rdzvctl_status_option_unknown(argv[i]);
            return EXIT_USAGE;
        }
    }
    if (*as_json && w->on)
        return die_usage("status: --json and --watch do not go together");
    if (w->count && !w->on)
        return die_usage("status: --count goes with --watch");
    return 0;
}

/* status --watch: the terminal view again every period, in place on a terminal (cleared and
 * redrawn), else one view after the other; until interrupted, --count refreshes, or rdzvd cannot
 * be reached. */
static int run_status_watch(struct ctl *c, const struct watch *w, struct rdzvctl_view v)
{
    bool tty = (v.color = isatty(STDOUT_FILENO));
    int rc = EXIT_OK;

    for (uint64_t n = 1;; n++) {
        struct timespec ts = {.tv_sec = (time_t)w->period_s,
                              .tv_nsec = (long)((w->period_s - (double)(time_t)w->period_s) * 1e9)};

        if (tty)
            printf("\033[H\033[2J");
        else if (n > 1)
            printf("\n");
        c->deadline_ms = c->timeout_ms ? rdzv_now_ms() + c->timeout_ms : 0; /* each view's */
        rc = status_once(c, false, &v);
        if (tty)
            printf("\n(every %.1f s; Ctrl-C to stop)\n", w->period_s);
        fflush(stdout);
        if (rc != EXIT_OK || (w->count && n >= w->count))
            return rc;
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
}

static int run_status(struct ctl *c, int argc, char **argv)
{
    struct rdzvctl_view v = {0};
    struct watch w;
    bool as_json;
    int rc = status_args(argc, argv, &as_json, &w, &v.ended_in_full);

    if (rc != 0)
        return rc;
    return w.on ? run_status_watch(c, &w, v) : status_once(c, as_json, &v);
}

/* status: HELLO and STATUS over the rendezvous protocol, one STATUS_REPLY back, printed. */
static int status_once(struct ctl *c, bool as_json, const struct rdzvctl_view *v)
{
    struct rdzv_buf b = {0};
    struct rdzv_status st;
    uint8_t *body = NULL;
    uint32_t len = 0;
    char err[256];
    int r, rc;

    r = c->token ? 0 : rdzv_msg_put_hello(&b, "rdzvctl " RDZV_VERSION);
    r = r ?: rdzv_msg_put_status(&b);
    if (r < 0) {
        fprintf(stderr, "rdzvctl: out of memory\n");
        rc = EXIT_CONN;
        goto out;
    }
    rc = ctl_exchange(c, &b, RDZV_MSG_STATUS_REPLY, "status", &body, &len);
    if (rc != EXIT_OK)
        goto out;
    if (rdzv_status_parse(body, len, &st, err, sizeof(err)) < 0) {
        fprintf(stderr, "rdzvctl: bad STATUS reply: %s\n", err);
        rc = EXIT_CONN;
    } else if (as_json) {
        if (rdzvctl_print_status_json(&st) < 0) {
            fprintf(stderr, "rdzvctl: out of memory\n");
            rc = EXIT_CONN;
        }
    } else {
        rdzvctl_print_status(&st, v);
    }
    rdzv_status_free(&st);
out:
    free(body);
    rdzv_buf_free(&b);
    c->sc = rdzv_store_client_free(c->sc);
    return rc;
}

/* release JOB NODE: HELLO and RELEASE over the rendezvous protocol, one RELEASE_REPLY back. */
static int run_release(struct ctl *c, int argc, char **argv)
{
    struct rdzv_release_reply rep;
    struct rdzv_release rq = {0};
    struct rdzv_buf b = {0};
    uint8_t *body = NULL;
    uint32_t len = 0;
    char err[256];
    int r, rc;

    if (argc != 2)
        return die_usage("release takes a job id and a node (its host, node id or a GPU "
                         "UUID)");
    if (!*argv[0] || strlen(argv[0]) > RDZV_ID_MAX || !*argv[1] ||
        strlen(argv[1]) > RDZV_HOST_MAX)
        return die_usage("release: the job id or the node is empty or too long");
    snprintf(rq.run_id, sizeof(rq.run_id), "%s", argv[0]);
    snprintf(rq.node, sizeof(rq.node), "%s", argv[1]);
    r = c->token ? 0 : rdzv_msg_put_hello(&b, "rdzvctl " RDZV_VERSION);
    r = r ?: rdzv_msg_put_release(&b, &rq);
    if (r < 0) {
        fprintf(stderr, "rdzvctl: out of memory\n");
        rc = EXIT_CONN;
        goto out;
    }
    rc = ctl_exchange(c, &b, RDZV_MSG_RELEASE_REPLY, "release", &body, &len);
    if (rc != EXIT_OK)
        goto out;
    if (rdzv_msg_parse_release_reply(body, len, &rep, err, sizeof(err)) < 0) {
        fprintf(stderr, "rdzvctl: release: rdzvd's answer cannot be read (%s): is rdzvd as "
                        "recent as this rdzvctl?\n", err);
        rc = EXIT_CONN;
    } else if (rep.error[0]) {
        fprintf(stderr, "rdzvctl: release: %s\n", rep.error);
        rc = rep.denied ? EXIT_AUTH : EXIT_NO;
    } else if (!rep.released) {
        fprintf(stderr, "rdzvctl: release: job '%s' has put no node '%s' aside (rdzvctl status "
                        "lists the nodes it put aside, by host, node id and GPU UUID)\n",
                rq.run_id, rq.node);
        rc = EXIT_NO;
    } else if (strncmp(rq.node, "GPU-", 4) == 0) {
        printf("released GPU %s of %lld node(s) put aside by job %s\n", rq.node,
               (long long)rep.released, rq.run_id);
    } else {
        printf("released %lld node(s) of job %s\n", (long long)rep.released, rq.run_id);
    }
out:
    free(body);
    rdzv_buf_free(&b);
    c->sc = rdzv_store_client_free(c->sc);
    return rc;
}

static int run(struct ctl *c, const char *cmd, int argc, char **argv)
{
    struct rdzv_buf b = {0};
    uint8_t u8, *val = NULL;
    uint64_t u64;
    size_t vlen;
    char *key = NULL, **keys = NULL;
    int r, rc = EXIT_OK;

    /* Handshake: VALIDATE, then PING as PyTorch >= 2.5 does, so a non-rdzvd peer fails fast. */
    r = c->token ? 0 : rdzv_enc_validate(&b); /* with a token, STORE stands for VALIDATE */
    if (r == 0)
        r = rdzv_enc_ping(&b, (uint32_t)getpid());

    if (strcmp(cmd, "ping") == 0) {
        if (!nargs_ok(argc, 0, &rc))
            goto out;
    } else if (strcmp(cmd, "get") == 0) {
        if (!nargs_ok(argc, 1, &rc))
            goto out;
        key = wire_key(c, argv[0]);
        const char *ks[1] = {key};
        r = r ?: rdzv_enc_keys(&b, RDZV_DIALECT_MODERN, RDZV_OP_CHECK, ks, 1);
        r = r ?: rdzv_enc_key(&b, RDZV_DIALECT_MODERN, RDZV_OP_GET, key, strlen(key));
    } else if (strcmp(cmd, "set") == 0) {
        char *v = argc == 2 ? argv[1] : NULL;
        size_t vl = v ? strlen(v) : 0;
        char *in = NULL;

        if (!nargs_ok(argc, 2, &rc))
            goto out;
        if (strcmp(v, "-") == 0) {
            in = read_stdin(&vl);
            if (!in) {
                fprintf(stderr, "rdzvctl: cannot read standard input\n");
                rc = EXIT_USAGE;
                goto out;
            }
            v = in;
        }
        key = wire_key(c, argv[0]);
        r = r ?: rdzv_enc_set(&b, RDZV_DIALECT_MODERN, key, strlen(key), v, vl);
        /* SET has no reply: follow it with a PING so we know it was applied. */
        r = r ?: rdzv_enc_ping(&b, 1);
        free(in);
    } else if (strcmp(cmd, "add") == 0) {
        int64_t delta;

        if (!nargs_ok(argc, 2, &rc))
            goto out;
        if (rdzv_parse_i64n((const uint8_t *)argv[1], strlen(argv[1]), &delta) < 0) {
            rc = die_usage("DELTA must be an integer");
            goto out;
        }
        key = wire_key(c, argv[0]);
        r = r ?: rdzv_enc_add(&b, RDZV_DIALECT_MODERN, key, strlen(key), delta);
    } else if (strcmp(cmd, "delete") == 0) {
        if (!nargs_ok(argc, 1, &rc))
            goto out;
        key = wire_key(c, argv[0]);
        r = r ?: rdzv_enc_key(&b, RDZV_DIALECT_MODERN, RDZV_OP_DELETE_KEY, key, strlen(key));
    } else if (strcmp(cmd, "check") == 0 || strcmp(cmd, "wait") == 0) {
        if (argc < 1) {
            rc = die_usage("give at least one KEY");
            goto out;
        }
        keys = wire_keys(c, argv, argc);
        r = r ?: rdzv_enc_keys(&b, RDZV_DIALECT_MODERN,
                               cmd[0] == 'c' ? RDZV_OP_CHECK : RDZV_OP_WAIT,
                               (const char *const *)keys, (size_t)argc);
    } else if (strcmp(cmd, "num-keys") == 0) {
        if (!nargs_ok(argc, 0, &rc))
            goto out;
        r = r ?: rdzv_enc_op(&b, RDZV_DIALECT_MODERN, RDZV_OP_GETNUMKEYS);
    } else { /* list: main() took only known commands (rdzvctl_command_known) */
        if (!nargs_ok(argc, 0, &rc))
            goto out;
        r = r ?: rdzv_enc_op(&b, RDZV_DIALECT_MODERN, RDZV_OP_LIST);
    }
    if (r < 0 || (!key && !keys && strcmp(cmd, "ping") && strcmp(cmd, "num-keys") &&
                  strcmp(cmd, "list"))) {
        fprintf(stderr, "rdzvctl: out of memory\n");
        rc = EXIT_CONN;
        goto out;
    }

    uint64_t t0 = rdzv_now_ns();
    if (ctl_connect(c) < 0) {
        rc = EXIT_CONN;
        goto out;
    }
    if (c->token && (rc = ctl_auth(c, true)) != EXIT_OK)
        goto out;
    r = send_all(c, &b);
    /* The PING reply: the handshake answered. */
    if (r == 0)
        r = recv_all(c, &u8, 1) ?: recv_all(c, (uint8_t[3]){0}, 3);
    if (r < 0) {
        rc = conn_error(c, r);
        if (r == -ECONNRESET && !c->token)
            fprintf(stderr, "rdzvctl: (an rdzvd with --token-file takes TCPStore clients only "
                            "from its --allow-store-from addresses: pass --token-file)\n");
        goto out;
    }

    if (strcmp(cmd, "ping") == 0) {
        printf("pong from %s in %.3f ms\n", c->endpoint, (double)(rdzv_now_ns() - t0) / 1e6);
    } else if (strcmp(cmd, "get") == 0) {
        r = recv_u8(c, &u8) ?: recv_str(c, &val, &vlen);
        if (r == 0 && u8 != RDZV_CHECK_READY) {
            fprintf(stderr, "rdzvctl: key '%s' not found\n", argv[0]);
            rc = EXIT_NO;
        } else if (r == 0) {
            fwrite(val, 1, vlen, stdout);
            putchar('\n');
        }
    } else if (strcmp(cmd, "set") == 0) {
        r = recv_all(c, (uint8_t[4]){0}, 4);
    } else if (strcmp(cmd, "add") == 0) {
        r = recv_u64(c, &u64);
        if (r == 0)
            printf("%" PRId64 "\n", (int64_t)u64);
    } else if (strcmp(cmd, "delete") == 0) {
        r = recv_u64(c, &u64);
        if (r == 0 && u64 != 1) {
            fprintf(stderr, "rdzvctl: key '%s' not found\n", argv[0]);
            rc = EXIT_NO;
        }
    } else if (strcmp(cmd, "check") == 0) {
        r = recv_u8(c, &u8);
        if (r == 0 && u8 != RDZV_CHECK_READY)
            rc = EXIT_NO;
    } else if (strcmp(cmd, "wait") == 0) {
        r = recv_u8(c, &u8);
        if (r == -ETIMEDOUT) {
            /* Take the wait back; the daemon always answers WAIT_CANCELED, possibly after a
             * STOP_WAITING that crossed our cancel on the wire. */
            struct rdzv_buf cb = {0};

            c->deadline_ms = rdzv_now_ms() + 5000;
            r = rdzv_enc_op(&cb, RDZV_DIALECT_MODERN, RDZV_OP_CANCEL_WAIT);
            r = r ?: send_all(c, &cb);
            rdzv_buf_free(&cb);
            r = r ?: recv_u8(c, &u8);
            if (r == 0 && u8 == RDZV_WAIT_STOP_WAITING)
                r = recv_u8(c, (uint8_t[1]){0}); /* the WAIT_CANCELED that follows */
            else if (r == 0) {
                fprintf(stderr, "rdzvctl: wait timed out after %.1f s\n",
                        (double)c->timeout_ms / 1000);
                rc = EXIT_NO;
            }
        }
    } else if (strcmp(cmd, "num-keys") == 0) {
        r = recv_u64(c, &u64);
        if (r == 0)
            printf("%" PRIu64 "\n", u64);
    } else if (strcmp(cmd, "list") == 0) {
        r = recv_u64(c, &u64);
        for (uint64_t i = 0; r == 0 && i < u64; i++) {
            r = recv_str(c, &val, &vlen);
            if (r < 0)
                break;
            if (c->raw)
                printf("%.*s\n", (int)vlen, (const char *)val);
            else if (vlen > 0 && val[0] == '/')
                printf("%.*s\n", (int)vlen - 1, (const char *)val + 1);
            free(val);
            val = NULL;
        }
    }
    if (r < 0)
        rc = conn_error(c, r);
out:
    free(val);
    free(key);
    if (keys)
        free_keys(keys, argc);
    rdzv_buf_free(&b);
    c->sc = rdzv_store_client_free(c->sc);
    return rc;
}

static int timeout_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val)
{
    struct ctl *c = p->ud;
    char *end;
    double s = strtod(val, &end);

    if (*val == '\0' || *end != '\0' || s < 0 || s > 1e9) {
        die_usage("--timeout takes a number of seconds");
        return -EINVAL;
    }
    c->timeout_ms = (uint64_t)(s * 1000);
    return 0;
}

/* cancel JOB [REASON]: the operator ends a job (CANCEL_JOB, one CANCEL_JOB_REPLY back). */
static int run_cancel(struct ctl *c, int argc, char **argv)
{
    struct rdzv_cancel_job_reply rep;
    struct rdzv_cancel_job rq = {0};
    struct rdzv_buf b = {0};
    uint8_t *body = NULL;
    uint32_t len = 0;
    char err[256];
    int r, rc;

    if (argc < 1 || argc > 2 || !*argv[0] || strlen(argv[0]) > RDZV_ID_MAX)
        return die_usage("cancel takes a job id and, optionally, a reason");
    snprintf(rq.run_id, sizeof(rq.run_id), "%s", argv[0]);
    snprintf(rq.reason, sizeof(rq.reason), "%s", argc > 1 ? argv[1] : "");
    r = c->token ? 0 : rdzv_msg_put_hello(&b, "rdzvctl " RDZV_VERSION);
    r = r ?: rdzv_msg_put_cancel_job(&b, &rq);
    rc = r < 0 ? (fprintf(stderr, "rdzvctl: out of memory\n"), EXIT_CONN)
               : ctl_exchange(c, &b, RDZV_MSG_CANCEL_JOB_REPLY, "cancel", &body, &len);
    if (rc == EXIT_OK && rdzv_msg_parse_cancel_job_reply(body, len, &rep, err, sizeof(err)) < 0) {
        fprintf(stderr, "rdzvctl: cancel: rdzvd's answer cannot be read (%s): is rdzvd as "
                        "recent as this rdzvctl?\n", err);
        rc = EXIT_CONN;
    } else if (rc == EXIT_OK && !rep.cancelled) {
        fprintf(stderr, "rdzvctl: cancel: %s\n",
                rep.error[0] ? rep.error : "rdzvd did not cancel the job and gave no reason");
        rc = rep.denied ? EXIT_AUTH : EXIT_NO;
    } else if (rc == EXIT_OK) {
        printf("cancelled job %s\n", rq.run_id);
    }
    free(body);
    rdzv_buf_free(&b);
    c->sc = rdzv_store_client_free(c->sc);
    return rc;
}

int main(int argc, char **argv)
{
    static struct rdzv_token token;
    struct ctl c = {.timeout_ms = 10000};
    const char *token_file = NULL, *admin_token_file = NULL;
    bool timeout_set = false;
    char defep[32], leader_ep[RDZV_ENDPOINT_MAX + 1];
    int first_arg, r;
    const struct rdzv_opt table[] = {
        {.kind = RDZV_OPT_STRING, .name = "endpoint", .short_name = 'e', .dest = &c.endpoint,
         .metavar = "HOST:PORT", .env = "RDZV_ENDPOINT",
         .help = "daemon address (default $RDZV_ENDPOINT or 127.0.0.1:" STR(RDZV_DEFAULT_PORT)
                 ");\na comma-separated list (the replicas of a replicated\nrdzvd): the one that "
                 "leads"},
        {.kind = RDZV_OPT_CALLBACK, .name = "timeout", .short_name = 't', .cb = timeout_cb,
         .seen = &timeout_set, .metavar = "SEC", .env = "",
         .help = "give up after SEC seconds (default 10; wait: 0 = forever)"},
        {.kind = RDZV_OPT_STRING, .name = "token-file", .dest = &token_file, .metavar = "FILE",
         .env = "* RDZV_TOKEN_FILE",
         .help = "prove the secret rdzvd runs with (--token-file), and make\n"
                 "rdzvd prove it too (default $RDZVCTL_TOKEN_FILE, then\n"
                 "$RDZV_TOKEN_FILE); needed from addresses outside rdzvd's\n"
                 "allowed store addresses"},
        {.kind = RDZV_OPT_STRING, .name = "admin-token-file", .dest = &admin_token_file,
         .metavar = "FILE", .env = "",
         .help = "prove the operator's secret instead (rdzvd\n"
                 "--admin-token-file): needed by release and cancel"},
        {.kind = RDZV_OPT_FLAG, .name = "raw", .dest = &c.raw, .env = "",
         .help = "use keys exactly as given; by default keys are prefixed\n"
                 "with '/' as PyTorch's TCPStore client does, so\n"
                 "'rdzvctl get x' reads what store.set(\"x\", ...) wrote"},
        RDZV_OPT_HELP_ENTRY("show this help"),
        RDZV_OPT_VERSION_ENTRY('V', "show the version"),
        {0},
    };
    const struct rdzv_opt_prog prog = {
        .name = "rdzvctl",
        .env_prefix = "RDZVCTL",
        .usage = "Usage: rdzvctl [OPTIONS] COMMAND [ARGS]\n"
                 "Talk to a running rdzvd (or any PyTorch TCPStore server >= 2.2 protocol).\n"
                 "\n"
                 "Commands:\n"
                 "  ping                     round trip; prints the time it took\n"
                 "  get KEY                  print the value of KEY (exit 1 if missing)\n"
                 "  set KEY VALUE            set KEY (VALUE '-' reads standard input)\n"
                 "  add KEY DELTA            add DELTA to the integer at KEY; prints the result\n"
                 "  delete KEY               delete KEY (exit 1 if there was none)\n"
                 "  check KEY...             exit 0 if all KEYs exist, 1 if not\n"
                 "  wait KEY...              wait until all KEYs exist (exit 1 on --timeout)\n"
                 "  num-keys                 print the number of keys\n"
                 "  list                     print every key, one per line\n"
                 "  status [--json]          jobs, generations, nodes (host, node rank, "
                 "heartbeat age,\n"
                 "                           workers, failures), steps per second as a "
                 "sparkline,\n"
                 "                           ranks' last step and its age, and recent events;\n"
                 "                           ended jobs one line each (--ended: in full)\n"
                 "  status --watch [SEC] [--count N]\n"
                 "                           the same, refreshed every SEC (default 2) in "
                 "place\n"
                 "  release JOB NODE         take back a node the job put aside (NODE: its\n"
                 "                           host or node id): it may join the job again;\n"
                 "                           NODE a GPU UUID: only that GPU is taken back\n"
                 "  cancel JOB [REASON]      end the job as cancelled, on every node\n"
                 "\n"
                 "Options:\n",
        .footer = "Exit status: 0 success, 1 no (missing key, timeout, not ready), 2 usage "
                  "error,\n3 connection or protocol error, 4 authentication failed.\n",
        .version = RDZV_VERSION,
        .opts = table,
        /* Stop at the command so 'rdzvctl add k -1' reads -1 as an argument. */
        .flags = RDZV_OPT_STOP_AT_ARG,
        .help_col = 27,
        .ud = &c,
    };

    snprintf(defep, sizeof(defep), "127.0.0.1:%d", RDZV_DEFAULT_PORT);
    c.endpoint = defep;
    r = rdzv_opt_parse(&prog, argc, argv, &first_arg);
    if (r != 0)
        return r > 0 ? EXIT_OK : EXIT_USAGE;
    if (first_arg >= argc)
        return die_usage("no command given");
    if (!rdzvctl_command_known(argv[first_arg]))
        return EXIT_USAGE;
    if (admin_token_file && *admin_token_file) /* the operator's proof, in the same handshake */
        token_file = admin_token_file;
    if (token_file && *token_file) {
        char err[512];

        if (rdzv_token_load(token_file, &token, err, sizeof(err)) < 0) {
            fprintf(stderr, "rdzvctl: --%stoken-file: %s\n",
                    token_file == admin_token_file ? "admin-" : "", err);
            return EXIT_USAGE;
        }
        c.token = &token;
    }
    if (strcmp(argv[first_arg], "wait") == 0 && !timeout_set)
        c.timeout_ms = 0;
    c.deadline_ms = c.timeout_ms ? rdzv_now_ms() + c.timeout_ms : 0;
    if ((r = find_leader(&c, leader_ep, sizeof(leader_ep))) != 0)
        return r;
    if (strcmp(argv[first_arg], "status") == 0)
        return run_status(&c, argc - first_arg - 1, argv + first_arg + 1);
    if (strcmp(argv[first_arg], "release") == 0)
        return run_release(&c, argc - first_arg - 1, argv + first_arg + 1);
    if (strcmp(argv[first_arg], "cancel") == 0)
        return run_cancel(&c, argc - first_arg - 1, argv + first_arg + 1);
    return run(&c, argv[first_arg], argc - first_arg - 1, argv + first_arg + 1);
}
