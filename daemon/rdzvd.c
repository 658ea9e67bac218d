/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd.c: main(): options, limits, signals, run the loop, exit code. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "../common/rdzv-auth.h"
#include "../common/rdzv-log.h"
#include "../common/rdzv-util.h"
#include "rdzvd-daemon.h"
#include "rdzvd-http.h"
#include "rdzvd-server.h"

#ifndef RDZV_VERSION
#define RDZV_VERSION "unknown"
#endif

struct opts {
    struct rdzvd_config cfg;
    const char *port_file;
    enum rdzv_log_level level;
    bool max_conns_set;
    int metrics_port;         /* -1: no metrics endpoint */
    const char *metrics_bind;
    const char *metrics_port_file;
    const char *token_file;
    const char *allow_store_from;
};

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: rdzvd [OPTIONS]\n"
            "A PyTorch-compatible TCPStore daemon (c10d wire protocol) on libuv.\n"
            "\n"
            "  -p, --port N             TCP port (default %d; 0 picks a free port and reports it)\n"
            "  -b, --bind ADDR          listen on this IPv4/IPv6 address (default: all, dual stack)\n"
            "      --port-file FILE     write the bound port to FILE once listening\n"
            "      --legacy VER         numbering for clients that don't send VALIDATE:\n"
            "                           2.0 (PyTorch 1.x/2.0, default), 2.1, or none (refuse them)\n"
            "      --max-key-len N      bytes per key (default 8KiB)\n"
            "      --max-value-len N    bytes per value (default 8MiB)\n"
            "      --max-keys N         keys per CHECK/WAIT/MULTI_* request (default 131072)\n"
            "      --max-frame N        bytes per request (default 64MiB)\n"
            "      --max-outbuf N       queued reply bytes per connection before reads pause "
            "(default 16MiB)\n"
            "      --max-conns N        open connections (default: open-file limit - 64)\n"
            "      --max-store-bytes N  bytes of keys and values held (default 4GiB)\n"
            "      --max-wait-keys N    pending WAIT keys per connection (default 131072)\n"
            "      --metrics-port N     serve Prometheus metrics (/metrics), a status page (/) and\n"
            "                           /status.json over HTTP on port N (0: a free port)\n"
            "      --metrics-bind ADDR  address for --metrics-port (default: --bind, else\n"
            "                           127.0.0.1)\n"
            "      --metrics-port-file FILE  write the metrics port to FILE\n"
            "      --state-dir DIR      keep store keys across restarts: journal them in DIR\n"
            "                           (created 0700 if missing; default: nothing persisted)\n"
            "      --fsync MODE         when the journal is fsynced: everysec (default; a power\n"
            "                           failure loses up to ~1 s), always (every loop iteration\n"
            "                           that wrote), no (left to the kernel)\n"
            "      --token-file FILE    require agents and rdzvctl to prove they hold the secret\n"
            "                           in FILE (HMAC-SHA256 challenge; mode 0600, >= 16 bytes)\n"
            "      --allow-store-from CIDR[,CIDR...]\n"
            "                           addresses PyTorch TCPStore clients may connect from\n"
            "                           (they cannot authenticate); default with a token:\n"
            "                           " RDZVD_ACL_DEFAULT_WITH_TOKEN ", without one: anywhere\n"
            "      --handshake-timeout SEC  close connections that have not finished their\n"
            "                           handshake (rdzv: HELLO+AUTH; TCPStore: a first\n"
            "                           complete request) after SEC seconds (default 10; 0: never)\n"
            "  -l, --log-level LEVEL    error, warn, info (default), debug, trace\n"
            "  -h, --help               show this help\n"
            "  -V, --version            show the version\n"
            "\n"
            "Sizes take K/M/G suffixes. Every option can also be set in the environment as\n"
            "RDZVD_<OPTION> (e.g. RDZVD_PORT=0, RDZVD_LOG_LEVEL=debug); flags win.\n",
            RDZV_DEFAULT_PORT);
}

enum {
    OPT_PORT_FILE = 256,
    OPT_LEGACY,
    OPT_MAX_KEY_LEN,
    OPT_MAX_VALUE_LEN,
    OPT_MAX_KEYS,
    OPT_MAX_FRAME,
    OPT_MAX_OUTBUF,
    OPT_MAX_CONNS,
    OPT_MAX_STORE_BYTES,
    OPT_MAX_WAIT_KEYS,
    OPT_METRICS_PORT,
    OPT_METRICS_BIND,
    OPT_METRICS_PORT_FILE,
    OPT_STATE_DIR,
    OPT_FSYNC,
    OPT_TOKEN_FILE,
    OPT_ALLOW_STORE_FROM,
    OPT_HANDSHAKE_TIMEOUT,
};

static const struct option longopts[] = {
    {"port", required_argument, NULL, 'p'},
    {"bind", required_argument, NULL, 'b'},
    {"port-file", required_argument, NULL, OPT_PORT_FILE},
    {"legacy", required_argument, NULL, OPT_LEGACY},
    {"max-key-len", required_argument, NULL, OPT_MAX_KEY_LEN},
    {"max-value-len", required_argument, NULL, OPT_MAX_VALUE_LEN},
    {"max-keys", required_argument, NULL, OPT_MAX_KEYS},
    {"max-frame", required_argument, NULL, OPT_MAX_FRAME},
    {"max-outbuf", required_argument, NULL, OPT_MAX_OUTBUF},
    {"max-conns", required_argument, NULL, OPT_MAX_CONNS},
    {"max-store-bytes", required_argument, NULL, OPT_MAX_STORE_BYTES},
    {"max-wait-keys", required_argument, NULL, OPT_MAX_WAIT_KEYS},
    {"metrics-port", required_argument, NULL, OPT_METRICS_PORT},
    {"metrics-bind", required_argument, NULL, OPT_METRICS_BIND},
    {"metrics-port-file", required_argument, NULL, OPT_METRICS_PORT_FILE},
    {"state-dir", required_argument, NULL, OPT_STATE_DIR},
    {"fsync", required_argument, NULL, OPT_FSYNC},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"allow-store-from", required_argument, NULL, OPT_ALLOW_STORE_FROM},
    {"handshake-timeout", required_argument, NULL, OPT_HANDSHAKE_TIMEOUT},
    {"log-level", required_argument, NULL, 'l'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {0},
};

static int bad(const char *opt, const char *val, const char *what)
{
    fprintf(stderr, "rdzvd: invalid %s '%s': %s (see rdzvd --help)\n", opt, val, what);
    return -EINVAL;
}

static int size_opt(const char *opt, const char *val, uint64_t *ret)
{
    uint64_t v;

    if (rdzv_parse_size(val, &v) < 0 || v == 0)
        return bad(opt, val, "expected a positive number, optionally with K/M/G");
    *ret = v;
    return 0;
}

/* Apply one option. Returns 0, 1 to exit successfully, or -EINVAL (message printed). */
static int apply(struct opts *o, int c, const char *val)
{
    struct rdzv_limits *lim = &o->cfg.lim;

    switch (c) {
    case 'p':
        if (rdzv_parse_port(val, &o->cfg.port) < 0)
            return bad("--port", val, "expected 0..65535");
        return 0;
    case 'b':
        o->cfg.bind = val;
        return 0;
    case OPT_PORT_FILE:
        o->port_file = val;
        return 0;
    case OPT_LEGACY:
        if (strcmp(val, "none") == 0) {
            o->cfg.legacy_allowed = false;
            return 0;
        }
        if (rdzv_dialect_parse(val, &o->cfg.legacy) < 0 || o->cfg.legacy == RDZV_DIALECT_MODERN)
            return bad("--legacy", val, "expected 2.0, 2.1 or none");
        o->cfg.legacy_allowed = true;
        return 0;
    case OPT_MAX_KEY_LEN:
        return size_opt("--max-key-len", val, &lim->max_key_len);
    case OPT_MAX_VALUE_LEN:
        return size_opt("--max-value-len", val, &lim->max_value_len);
    case OPT_MAX_KEYS:
        return size_opt("--max-keys", val, &lim->max_keys_per_req);
    case OPT_MAX_FRAME:
        return size_opt("--max-frame", val, &lim->max_frame);
    case OPT_MAX_OUTBUF:
        return size_opt("--max-outbuf", val, &lim->max_outbuf);
    case OPT_MAX_CONNS:
        o->max_conns_set = true;
        return size_opt("--max-conns", val, &lim->max_conns);
    case OPT_MAX_STORE_BYTES:
        return size_opt("--max-store-bytes", val, &lim->max_store_bytes);
    case OPT_MAX_WAIT_KEYS:
        return size_opt("--max-wait-keys", val, &lim->max_wait_keys);
    case OPT_METRICS_PORT: {
        uint16_t port;

        if (rdzv_parse_port(val, &port) < 0)
            return bad("--metrics-port", val, "expected 0..65535");
        o->metrics_port = port;
        return 0;
    }
    case OPT_METRICS_BIND:
        o->metrics_bind = val;
        return 0;
    case OPT_METRICS_PORT_FILE:
        o->metrics_port_file = val;
        return 0;
    case OPT_STATE_DIR:
        o->cfg.state_dir = val;
        return 0;
    case OPT_FSYNC:
        if (rdzvd_fsync_parse(val, &o->cfg.fsync) < 0)
            return bad("--fsync", val, "expected always, everysec or no");
        return 0;
    case OPT_TOKEN_FILE:
        o->token_file = val;
        return 0;
    case OPT_ALLOW_STORE_FROM:
        o->allow_store_from = val;
        return 0;
    case OPT_HANDSHAKE_TIMEOUT: {
        char *end;
        double s = strtod(val, &end);

        if (*val == '\0' || *end != '\0' || !(s >= 0) || s > 86400)
            return bad("--handshake-timeout", val, "expected 0 to 86400 seconds");
        o->cfg.handshake_timeout_ms = (uint64_t)(s * 1000);
        return 0;
    }
    case 'l':
        if (rdzv_log_parse_level(val, &o->level) < 0)
            return bad("--log-level", val, "expected error, warn, info, debug or trace");
        return 0;
    case 'h':
        usage(stdout);
        return 1;
    case 'V':
        printf("rdzvd %s\n", RDZV_VERSION);
        return 1;
    default:
        fprintf(stderr, "rdzvd: unknown option; see rdzvd --help\n");
        return -EINVAL;
    }
}

/* RDZVD_<NAME> for each long option with an argument, applied before the command line. */
static int apply_env(struct opts *o)
{
    for (const struct option *lo = longopts; lo->name; lo++) {
        char name[64];
        const char *val;

        if (lo->has_arg != required_argument)
            continue;
        rdzv_env_name("RDZVD", lo->name, name, sizeof(name));
        val = getenv(name);
        if (val && *val) {
            int r = apply(o, lo->val, val);

            if (r < 0) {
                fprintf(stderr, "rdzvd: (from %s)\n", name);
                return r;
            }
        }
    }
    return 0;
}

/* The token and the allowlist, once every option is known. Messages name files, never secrets. */
static int setup_security(struct opts *o)
{
    static struct rdzv_token token;
    static struct rdzvd_acl acl;
    const char *allow = o->allow_store_from;
    char err[512];

    if (o->token_file) {
        if (rdzv_token_load(o->token_file, &token, err, sizeof(err)) < 0) {
            fprintf(stderr, "rdzvd: --token-file: %s\n", err);
            return -EINVAL;
        }
        o->cfg.token = &token;
        if (!allow)
            allow = RDZVD_ACL_DEFAULT_WITH_TOKEN;
    }
    if (allow) {
        if (rdzvd_acl_parse(allow, &acl, err, sizeof(err)) < 0)
            return bad("--allow-store-from", allow, err);
        o->cfg.store_acl = &acl;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    int c, r;

    r = apply_env(o);
    if (r < 0)
        return r;
    while ((c = getopt_long(argc, argv, "p:b:l:hV", longopts, NULL)) != -1) {
        r = apply(o, c == '?' ? 0 : c, optarg);
        if (r != 0)
            return r;
    }
    if (optind < argc) {
        fprintf(stderr, "rdzvd: unexpected argument '%s'; see rdzvd --help\n", argv[optind]);
        return -EINVAL;
    }
    if (setup_security(o) < 0)
        return -EINVAL;
    if (o->cfg.lim.max_frame < o->cfg.lim.max_key_len + o->cfg.lim.max_value_len + 32) {
        fprintf(stderr, "rdzvd: --max-frame must be at least --max-key-len + --max-value-len + 32\n");
        return -EINVAL;
    }
    return 0;
}

/* Raise the soft open-file limit to the hard one: each client is a file descriptor. */
static uint64_t raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            log_warn_errno(-errno, "cannot raise the open-file limit to %llu",
                           (unsigned long long)rl.rlim_max);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur == RLIM_INFINITY ? 1u << 20 : (uint64_t)rl.rlim_cur;
}

static int write_port_file(const char *path, unsigned port)
{
    char tmp[4096];
    FILE *f;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    f = fopen(tmp, "we");
    if (!f)
        return -errno;
    fprintf(f, "%u\n", port);
    if (fclose(f) != 0 || rename(tmp, path) < 0) {
        int r = -errno;

        (void)unlink(tmp);
        return r;
    }
    return 0;
}

struct daemon_ctx {
    struct rdzvd_server srv;
    struct rdzvd_http *http;
    uv_signal_t sigterm, sigint;
};

static void signal_cb(uv_signal_t *h, int signum)
{
    struct daemon_ctx *d = h->data;

    log_info("received %s, shutting down", strsignal(signum));
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
    rdzvd_http_stop(d->http);
    d->http = NULL;
    rdzvd_server_stop(&d->srv);
}

int main(int argc, char **argv)
{
    struct opts o = {
        .cfg = {.port = RDZV_DEFAULT_PORT, .legacy = RDZV_DIALECT_V20, .legacy_allowed = true,
                .lim = RDZV_LIMITS_DEFAULT, .handshake_timeout_ms = RDZVD_HANDSHAKE_TIMEOUT_MS},
        .level = RDZV_LOG_INFO,
        .metrics_port = -1,
    };
    struct daemon_ctx d = {0};
    uv_loop_t loop;
    uint64_t nofile;
    int r;

    r = parse_args(argc, argv, &o);
    if (r != 0)
        return r > 0 ? 0 : 2;
    rdzv_log_setup("rdzvd", o.level);
    signal(SIGPIPE, SIG_IGN);
    nofile = raise_nofile();
    if (!o.max_conns_set)
        o.cfg.lim.max_conns = nofile > 128 ? nofile - 64 : 64;

    r = uv_loop_init(&loop);
    if (r < 0)
        return log_error_errno(r, "uv_loop_init"), 1;
    r = rdzvd_daemon_init(&d.srv, &loop, &o.cfg);
    if (r < 0) {
        uv_run(&loop, UV_RUN_DEFAULT); /* let the handles init closed finish closing */
        (void)uv_loop_close(&loop);
        return 1; /* it logged why */
    }
    r = rdzvd_server_listen(&d.srv);
    if (r < 0) {
        rdzvd_server_done(&d.srv);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        return 1;
    }
    r = uv_signal_init(&loop, &d.sigterm);
    if (r == 0 && (r = uv_signal_init(&loop, &d.sigint)) < 0)
        uv_close((uv_handle_t *)&d.sigterm, NULL);
    if (r == 0) {
        d.sigterm.data = d.sigint.data = &d;
        r = uv_signal_start(&d.sigterm, signal_cb, SIGTERM);
        if (r == 0)
            r = uv_signal_start(&d.sigint, signal_cb, SIGINT);
        if (r < 0) {
            uv_close((uv_handle_t *)&d.sigterm, NULL);
            uv_close((uv_handle_t *)&d.sigint, NULL);
        }
    }
    if (r < 0) {
        log_error_errno(r, "cannot handle signals");
        rdzvd_server_stop(&d.srv);
        uv_run(&loop, UV_RUN_DEFAULT);
        rdzvd_server_done(&d.srv);
        (void)uv_loop_close(&loop);
        return 1;
    }

    if (o.metrics_port >= 0) {
        const char *maddr = o.metrics_bind ? o.metrics_bind : o.cfg.bind ? o.cfg.bind : "127.0.0.1";
        uint16_t mport;

        r = rdzvd_http_start(&d.srv, maddr, (uint16_t)o.metrics_port, &mport, &d.http);
        if (r < 0) {
            log_error("cannot serve metrics on %s port %d: %s (check --metrics-port and "
                      "--metrics-bind)",
                      maddr, o.metrics_port, uv_strerror(r));
            rdzvd_server_stop(&d.srv);
            uv_close((uv_handle_t *)&d.sigterm, NULL);
            uv_close((uv_handle_t *)&d.sigint, NULL);
            uv_run(&loop, UV_RUN_DEFAULT);
            rdzvd_server_done(&d.srv);
            uv_loop_close(&loop);
            return 1;
        }
        log_info("metrics and status page on http://%s:%u/", maddr, mport);
        if (o.metrics_port_file && (r = write_port_file(o.metrics_port_file, mport)) < 0)
            log_warn_errno(r, "cannot write --metrics-port-file %s", o.metrics_port_file);
    }
    if (o.port_file && (r = write_port_file(o.port_file, d.srv.bound_port)) < 0)
        log_warn_errno(r, "cannot write --port-file %s", o.port_file);
    printf("rdzvd listening on %s port %u\n", d.srv.bound_addr, d.srv.bound_port);
    fflush(stdout);
    log_info("rdzvd %s listening on %s port %u (open-file limit %" PRIu64 ", max %" PRIu64
             " connections, legacy clients: %s)",
             RDZV_VERSION, d.srv.bound_addr, d.srv.bound_port, nofile, o.cfg.lim.max_conns,
             o.cfg.legacy_allowed ? rdzv_dialect_name(o.cfg.legacy) : "refused");
    log_info("authentication: %s; TCPStore clients from: %s; handshake timeout: %.1f s",
             o.cfg.token ? "token required (" RDZV_AUTH_SCHEME ")" : "none (no --token-file)",
             o.cfg.store_acl ? o.cfg.store_acl->desc : "anywhere",
             (double)o.cfg.handshake_timeout_ms / 1000);

    uv_run(&loop, UV_RUN_DEFAULT);
    rdzvd_server_done(&d.srv);
    r = uv_loop_close(&loop);
    if (r < 0)
        log_warn("loop closed with handles still open: %s", uv_strerror(r));
    log_info("stopped (%" PRIu64 " connections served, %" PRIu64 " requests)",
             d.srv.stats.accepted, d.srv.stats.requests);
    return 0;
}
