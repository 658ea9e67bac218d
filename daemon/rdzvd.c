/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd.c: main(): options, limits, signals, run the loop, exit code. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-log.h"
#include "common/rdzv-opt.h"
#include "common/rdzv-util.h"
#include "daemon/front/rdzvd-daemon.h"
#include "daemon/front/rdzvd-http.h"
#include "daemon/repl/rdzvd-replica.h"
#include "daemon/net/rdzvd-transport.h"
#include "daemon/server/rdzvd-server.h"

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
    const char *admin_token_file;
    const char *allow_store_from;
    uint64_t idle_ms, idle_first_ms; /* --exit-when-idle; 0: never */
    int ready_fd;                    /* --ready-fd; -1: none */
    const char *peers;               /* --peers; NULL: a single rdzvd */
    const char *replica_key_file;    /* --replica-key-file */
    uint64_t replica_id;             /* --replica-id; 0: found from --peers and --port */
    bool join;                       /* --join */
    uint64_t replicas;               /* --replicas; 0: none */
    bool remove_state_dir;           /* --remove-state-dir */
    const char *remove_dir;          /* --remove-dir; NULL: none */
    int accept_thread;               /* --accept-thread: 1 on, 0 off, -1 auto (4+ CPUs) */
    struct rdzvd_peers peer_list;
};

#define RDZVD_IDLE_FIRST_S 180.0 /* --exit-when-idle's first deadline by default */

#define STR_(x) #x
#define STR(x) STR_(x)

static int legacy_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct opts *o = p->ud;

    if (strcmp(val, "none") == 0) {
        o->cfg.legacy_allowed = false;
        return 0;
    }
    if (rdzv_dialect_parse(val, &o->cfg.legacy) < 0 || o->cfg.legacy == RDZV_DIALECT_MODERN)
        return rdzv_opt_bad(p, opt, val, "expected 2.0, 2.1 or none");
    o->cfg.legacy_allowed = true;
    return 0;
}

static int accept_thread_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                            const char *val)
{
    struct opts *o = p->ud;

    if (strcmp(val, "on") == 0)
        o->accept_thread = 1;
    else if (strcmp(val, "off") == 0)
        o->accept_thread = 0;
    else if (strcmp(val, "auto") == 0)
        o->accept_thread = -1;
    else
        return rdzv_opt_bad(p, opt, val, "expected on, off or auto");
    return 0;
}

static int metrics_port_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                           const char *val)
{
    uint16_t port;

    if (rdzv_parse_port(val, &port) < 0)
        return rdzv_opt_bad(p, opt, val, "expected 0..65535");
    *(int *)opt->dest = port;
    return 0;
}

static int fsync_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    if (rdzvd_fsync_parse(val, opt->dest) < 0)
        return rdzv_opt_bad(p, opt, val, "expected always, everysec or no");
    return 0;
}

/* --exit-when-idle SEC[:FIRST_SEC], each 0 < x <= 1e6; FIRST_SEC defaults to 180 (or SEC). */
static int idle_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct opts *o = p->ud;
    double sec, first = RDZVD_IDLE_FIRST_S;
    char *end;

    sec = strtod(val, &end);
    if (end != val && *end == ':') {
        const char *f = end + 1;

        first = strtod(f, &end);
        if (end == f)
            end = (char *)val; /* "SEC:" */
    } else if (sec > first) {
        first = sec;
    }
    if (end == val || *end || !(sec > 0 && sec <= 1e6) || !(first > 0 && first <= 1e6))
        return rdzv_opt_bad(p, opt, val, "expected SEC or SEC:FIRST_SEC, each > 0");
    o->idle_ms = (uint64_t)(sec * 1000);
    o->idle_first_ms = (uint64_t)(first * 1000);
    if (!o->idle_ms)
        o->idle_ms = 1;
    if (!o->idle_first_ms)
        o->idle_first_ms = 1;
    return 0;
}

static int ready_fd_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct opts *o = p->ud;
    uint64_t fd;

    if (rdzv_parse_u64(val, &fd) < 0 || fd > INT32_MAX || fcntl((int)fd, F_GETFD) < 0)
        return rdzv_opt_bad(p, opt, val, "expected an open file descriptor");
    o->ready_fd = (int)fd;
    return 0;
}

#define SIZE_OPT(n, field, h)                                                                     \
    {.kind = RDZV_OPT_SIZE, .name = n, .dest = &lim->field, .umin = 1, .metavar = "N",          \
     .what = "expected a positive number, optionally with K/M/G", .help = h}

/* Options from RDZVD_<OPTION>, then argv. Returns 0, 1 (exit 0 now) or -EINVAL (printed). */
static int parse_table(struct opts *o, int argc, char **argv, int *ret_optind)
{
    struct rdzv_limits *lim = &o->cfg.lim;
    double handshake_s = 0, request_s = 0, keep_ended_s = 0, abandon_s = 0;
    bool handshake_set = false, request_set = false, keep_ended_set = false, abandon_set = false;
    const struct rdzv_opt table[] = {
        {.kind = RDZV_OPT_CALLBACK, .name = "port", .short_name = 'p', .cb = rdzv_opt_port_cb,
         .dest = &o->cfg.port, .metavar = "N",
         .help = "TCP port (default " STR(RDZV_DEFAULT_PORT) "; 0 picks a free port and "
                 "reports it)"},
        {.kind = RDZV_OPT_STRING, .name = "bind", .short_name = 'b', .dest = &o->cfg.bind,
         .metavar = "ADDR",
         .help = "listen on this IPv4/IPv6 address (default: all, dual stack)"},
        {.kind = RDZV_OPT_STRING, .name = "port-file", .dest = &o->port_file, .metavar = "FILE",
         .help = "write the bound port to FILE once listening"},
        {.kind = RDZV_OPT_CALLBACK, .name = "legacy", .cb = legacy_cb, .metavar = "VER",
         .help = "numbering for clients that don't send VALIDATE:\n"
                 "2.0 (PyTorch 1.x/2.0, default), 2.1, or none (refuse them)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "accept-thread", .cb = accept_thread_cb,
         .metavar = "WHEN",
         .help = "accept connections on a thread of their own: on, off,\n"
                 "or auto (default: on with 4 or more CPUs; a burst of\n"
                 "thousands of ranks connecting then opens faster)"},
        SIZE_OPT("max-key-len", max_key_len, "bytes per key (default 8KiB)"),
        SIZE_OPT("max-value-len", max_value_len, "bytes per value (default 8MiB)"),
        SIZE_OPT("max-keys", max_keys_per_req,
                 "keys per CHECK/WAIT/MULTI_* request (default 131072)"),
        SIZE_OPT("max-frame", max_frame, "bytes per request (default 64MiB)"),
        SIZE_OPT("max-outbuf", max_outbuf,
                 "queued reply bytes per connection before reads pause,\n"
                 "and the largest MULTI_GET or LIST reply (default 16MiB)"),
        {.kind = RDZV_OPT_SIZE, .name = "max-conns", .dest = &lim->max_conns, .umin = 1,
         .seen = &o->max_conns_set, .metavar = "N",
         .what = "expected a positive number, optionally with K/M/G",
         .help = "open connections and the descriptors of job\n"
                 "generations (each store's socket and journal;\n"
                 "default: open-file limit - 64)"},
        {.kind = RDZV_OPT_SIZE, .name = "max-handshaking-bytes",
         .dest = &lim->max_handshaking_bytes, .umin = 1, .metavar = "SIZE",
         .what = "expected a positive size, optionally with K/M/G",
         .help = "what connections not through their handshake yet\n"
                 "cost rdzvd together (each under 1 KiB, and the input\n"
                 "it holds); past it a new one takes the slot of the\n"
                 "oldest one silent 3 s from its own address, else (its\n"
                 "address has none) of the oldest one silent 3 s; none\n"
                 "younger is closed: the pool runs over, up to\n"
                 "--max-conns (default 32MiB)"},
        {.kind = RDZV_OPT_SIZE, .name = "max-handshaking", .dest = &lim->max_handshaking,
         .umin = 1, .metavar = "N",
         .what = "expected a positive number, optionally with K/M/G",
         .help = "also at most N connections not through their\n"
                 "handshake yet, the same way (default: no count)"},
        SIZE_OPT("max-input-bytes", max_input_bytes,
                 "bytes of incomplete requests buffered, all\nconnections together; past it "
                 "the connection holding\nthe most is closed (default 256MiB)"),
        SIZE_OPT("max-store-bytes", max_store_bytes,
                 "bytes held for clients, all stores together: keys,\nvalues, queue items and "
                 "WAIT registrations, each\nwith its overhead; the main store at most half\n"
                 "(default 4GiB)"),
        SIZE_OPT("max-wait-keys", max_wait_keys,
                 "pending WAIT keys per connection (default 131072)"),
        {.kind = RDZV_OPT_CALLBACK, .name = "metrics-port", .cb = metrics_port_cb,
         .dest = &o->metrics_port, .metavar = "N",
         .help = "serve Prometheus metrics (/metrics), a status page (/) and\n"
                 "/status.json over HTTP on port N (0: a free port)"},
        {.kind = RDZV_OPT_STRING, .name = "metrics-bind", .dest = &o->metrics_bind,
         .metavar = "ADDR",
         .help = "address for --metrics-port (default: --bind, else\n127.0.0.1)"},
        {.kind = RDZV_OPT_STRING, .name = "metrics-port-file", .dest = &o->metrics_port_file,
         .metavar = "FILE", .help = "write the metrics port to FILE"},
        {.kind = RDZV_OPT_STRING, .name = "state-dir", .dest = &o->cfg.state_dir,
         .metavar = "DIR",
         .help = "keep store keys across restarts: journal them in DIR\n"
                 "(created 0700 if missing; default: nothing persisted)"},
        {.kind = RDZV_OPT_FLAG, .name = "remove-state-dir", .dest = &o->remove_state_dir,
         .help = "delete --state-dir and all in it when rdzvd ends with exit\n"
                 "status 0 (for a directory made for this run only: the\n"
                 "replicas rdzv-agent starts use it)"},
        {.kind = RDZV_OPT_STRING, .name = "remove-dir", .dest = &o->remove_dir,
         .metavar = "DIR",
         .help = "delete DIR and all in it when rdzvd ends with exit status 0\n"
                 "(a directory made for this run only: the rdzvd rdzv-agent\n"
                 "hosts keeps its log and state there)"},
        {.kind = RDZV_OPT_STRING, .name = "peers", .dest = &o->peers,
         .metavar = "HOST:PORT,...",
         .help = "run as one replica of a replicated rdzvd: the replicas'\n"
                 "main endpoints, the same list in the same order on\n"
                 "each (3 or 5: a majority must live); needs --state-dir\n"
                 "(the Raft log) and a fixed --port; Raft links on PORT+1"},
        {.kind = RDZV_OPT_UINT, .name = "replica-id", .dest = &o->replica_id, .umin = 1,
         .umax = 1u << 30, .metavar = "N",
         .help = "which entry of --peers this rdzvd is (1-based; default:\n"
                 "the one entry with this machine's address and --port);\n"
                 "with --join, its Raft id"},
        {.kind = RDZV_OPT_FLAG, .name = "join", .dest = &o->join,
         .help = "start outside the replicas' configuration (--peers names\n"
                 "only this one) and wait for the leader to add it"},
        {.kind = RDZV_OPT_UINT, .name = "replicas", .dest = &o->replicas, .umin = 1,
         .umax = RDZVD_REPLICAS_MAX, .metavar = "N",
         .help = "as the leader, ask the agents of its jobs to host replicas\n"
                 "(one per host) until there are N voters, and replace the\n"
                 "one of a lost host (c10d self-hosting; needs --peers)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "fsync", .cb = fsync_cb, .dest = &o->cfg.fsync,
         .metavar = "MODE",
         .help = "when the journal is fsynced: everysec (default; a power\n"
                 "failure loses up to ~1 s), always (every loop iteration\n"
                 "that wrote), no (left to the kernel)"},
        {.kind = RDZV_OPT_STRING, .name = "token-file", .dest = &o->token_file,
         .metavar = "FILE",
         .help = "require agents and rdzvctl to prove they hold the secret\n"
                 "in FILE (HMAC-SHA256 challenge; mode 0600, >= 16 bytes)"},
        {.kind = RDZV_OPT_STRING, .name = "admin-token-file", .dest = &o->admin_token_file,
         .metavar = "FILE",
         .help = "the operator's secret (mode 0600, >= 16 bytes; agents\n"
                 "must not have it; needs --token-file): rdzvctl proving it\n"
                 "may release nodes put aside and cancel jobs"},
        {.kind = RDZV_OPT_STRING, .name = "replica-key-file", .dest = &o->replica_key_file,
         .metavar = "FILE",
         .help = "the replicas' own secret (mode 0600, >= 16 bytes; agents\n"
                 "must not have it): each Raft link proves it, bound to its\n"
                 "replica id and address (needs --peers; without it the links\n"
                 "prove --token-file, which every agent holds)"},
        {.kind = RDZV_OPT_STRING, .name = "allow-store-from", .dest = &o->allow_store_from,
         .metavar = "CIDR[,CIDR...]",
         .help = "addresses PyTorch TCPStore clients may connect from\n"
                 "(they cannot authenticate); default with a token:\n"
                 RDZVD_ACL_DEFAULT_WITH_TOKEN ", without one: anywhere"},
        {.kind = RDZV_OPT_DOUBLE, .name = "handshake-timeout", .dest = &handshake_s,
         .seen = &handshake_set, .dmin = 0, .dmax = 86400, .metavar = "SEC",
         .what = "expected 0 to 86400 seconds",
         .help = "close connections that have not finished their\n"
                 "handshake (rdzv: HELLO+AUTH; TCPStore: a first\n"
                 "complete request) after SEC seconds (default 10; 0: never)"},
        {.kind = RDZV_OPT_DOUBLE, .name = "request-timeout", .dest = &request_s,
         .seen = &request_set, .dmin = 0, .dmax = 86400, .metavar = "SEC",
         .what = "expected 0 to 86400 seconds",
         .help = "close connections whose request has been incomplete\n"
                 "for SEC seconds (default 30; 0: never)"},
        {.kind = RDZV_OPT_DOUBLE, .name = "keep-ended", .dest = &keep_ended_s,
         .seen = &keep_ended_set, .dmin = 0, .dmax = 30 * 86400, .metavar = "SEC",
         .what = "expected 0 to 2592000 seconds",
         .help = "show a job that ended (outcome, root cause, restarts,\n"
                 "duration) in status and /metrics this long after its\n"
                 "last agent left (default 3600; 0: not at all)"},
        {.kind = RDZV_OPT_UINT, .name = "keep-ended-max", .dest = &o->cfg.keep_ended_max,
         .umin = 0, .umax = RDZVD_KEEP_ENDED_MAX_LIMIT, .metavar = "N",
         .help = "at most N ended jobs shown, the oldest dropped first\n(default 100)"},
        {.kind = RDZV_OPT_UINT, .name = "max-jobs", .dest = &o->cfg.max_jobs, .umin = 1,
         .umax = RDZVD_MAX_JOBS_LIMIT, .metavar = "N",
         .help = "jobs held at once: running, and waiting in their records\n"
                 "for their nodes; a JOIN that would make one more is\n"
                 "refused (default 1024)"},
        {.kind = RDZV_OPT_DOUBLE, .name = "abandon-after", .dest = &abandon_s,
         .seen = &abandon_set, .dmin = 0, .dmax = 30 * 86400, .metavar = "SEC",
         .what = "expected 0 to 2592000 seconds",
         .help = "end a job as abandoned when none of its agents has been\n"
                 "connected for SEC seconds (its record kept meanwhile, with\n"
                 "--state-dir or --peers; default 21600; 0: never)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "exit-when-idle", .cb = idle_cb,
         .metavar = "SEC[:FIRST]",
         .help = "exit (as on SIGTERM) once no agent has been connected\n"
                 "for SEC seconds, at once when every job ended, or\n"
                 "when none came within FIRST seconds of the start\n"
                 "(default 180, or SEC if longer); TCPStore clients do\n"
                 "not count (default: never)"},
        {.kind = RDZV_OPT_CALLBACK, .name = "ready-fd", .cb = ready_fd_cb, .metavar = "N",
         .help = "once listening, write the port and a newline to file\n"
                 "descriptor N (a pipe) and close it"},
        {.kind = RDZV_OPT_CALLBACK, .name = "log-level", .short_name = 'l',
         .cb = rdzv_opt_log_level_cb, .dest = &o->level, .metavar = "LEVEL",
         .help = "error, warn, info (default), debug, trace"},
        RDZV_OPT_HELP_ENTRY("show this help"),
        RDZV_OPT_VERSION_ENTRY('V', "show the version"),
        {0},
    };
    const struct rdzv_opt_prog prog = {
        .name = "rdzvd",
        .env_prefix = "RDZVD",
        .usage = "Usage: rdzvd [OPTIONS]\n"
                 "A PyTorch-compatible TCPStore daemon (c10d wire protocol) on libuv.\n"
                 "\n",
        .footer = "Sizes take K/M/G suffixes. Every option can also be set in the environment "
                  "as\nRDZVD_<OPTION> (e.g. RDZVD_PORT=0, RDZVD_LOG_LEVEL=debug); flags win.\n",
        .version = RDZV_VERSION,
        .opts = table,
        .help_col = 27,
        .ud = o,
    };
    int r = rdzv_opt_parse(&prog, argc, argv, ret_optind);

    if (r == 0 && handshake_set)
        o->cfg.handshake_timeout_ms = (uint64_t)(handshake_s * 1000);
    if (r == 0 && request_set)
        o->cfg.request_timeout_ms = (uint64_t)(request_s * 1000);
    if (r == 0 && keep_ended_set)
        o->cfg.keep_ended_ms = (uint64_t)(keep_ended_s * 1000);
    if (r == 0 && abandon_set) { /* 0 is never; anything else at least 1 ms */
        o->cfg.abandon_after_ms = (uint64_t)(abandon_s * 1000);
        if (abandon_s > 0 && o->cfg.abandon_after_ms == 0)
            o->cfg.abandon_after_ms = 1;
    }
    return r;
}

static int bad(const char *opt, const char *val, const char *what)
{
    fprintf(stderr, "rdzvd: invalid %s '%s': %s (see rdzvd --help)\n", opt, val, what);
    return -EINVAL;
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
    if (o->admin_token_file) {
        static struct rdzv_token admin;

        if (!o->cfg.token) {
            fprintf(stderr, "rdzvd: --admin-token-file needs --token-file (without a token "
                            "every peer is trusted alike, the operator's messages included)\n");
            return -EINVAL;
        }
        if (rdzv_token_load(o->admin_token_file, &admin, err, sizeof(err)) < 0) {
            fprintf(stderr, "rdzvd: --admin-token-file: %s\n", err);
            return -EINVAL;
        }
        if (admin.len == token.len && rdzv_auth_equal(admin.key, token.key, token.len)) {
            fprintf(stderr, "rdzvd: --admin-token-file holds the agents' token: give the "
                            "operator a secret of its own\n");
            return -EINVAL;
        }
        o->cfg.admin_token = &admin;
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
    int first_arg, r;

    r = parse_table(o, argc, argv, &first_arg);
    if (r != 0)
        return r;
    if (first_arg < argc) {
        fprintf(stderr, "rdzvd: unexpected argument '%s'; see rdzvd --help\n", argv[first_arg]);
        return -EINVAL;
    }
    if (setup_security(o) < 0)
        return -EINVAL;
    if (o->cfg.lim.max_frame < o->cfg.lim.max_key_len + o->cfg.lim.max_value_len + 32) {
        fprintf(stderr,
                "rdzvd: --max-frame must be at least --max-key-len + --max-value-len + 32\n");
        return -EINVAL;
    }
    if (o->cfg.lim.max_input_bytes < o->cfg.lim.max_frame) {
        fprintf(stderr, "rdzvd: --max-input-bytes must be at least --max-frame\n");
        return -EINVAL;
    }
    if ((o->replica_id || o->join || o->replicas || o->replica_key_file) && !o->peers) {
        fprintf(stderr, "rdzvd: --%s needs --peers\n",
                o->replica_id ? "replica-id" : o->join ? "join"
                : o->replicas ? "replicas" : "replica-key-file");
        return -EINVAL;
    }
    if (o->join && !o->replica_id) {
        fprintf(stderr, "rdzvd: --join needs --replica-id N (the Raft id the leader gave it)\n");
        return -EINVAL;
    }
    if (o->peers) {
        char err[256];

        if (!o->cfg.state_dir) {
            fprintf(stderr, "rdzvd: --peers needs --state-dir DIR (each replica's Raft log)\n");
            return -EINVAL;
        }
        if (o->cfg.port == 0) {
            fprintf(stderr, "rdzvd: --peers needs a fixed --port (the one --peers lists)\n");
            return -EINVAL;
        }
        if (rdzvd_peers_parse(o->peers, o->join ? 1 : (unsigned)o->replica_id, o->cfg.port,
                              &o->peer_list, err, sizeof(err)) < 0) {
            fprintf(stderr, "rdzvd: %s\n", err);
            return -EINVAL;
        }
        if (o->join && o->peer_list.n != 1) {
            fprintf(stderr, "rdzvd: with --join, --peers names this replica only\n");
            return -EINVAL;
        }
        o->peer_list.join_id = o->join ? (unsigned)o->replica_id : 0;
        if (o->replica_key_file) {
            static struct rdzv_token key;

            if (rdzv_token_load(o->replica_key_file, &key, err, sizeof(err)) < 0) {
                fprintf(stderr, "rdzvd: --replica-key-file: %s\n", err);
                return -EINVAL;
            }
            o->peer_list.key = &key;
        }
        o->cfg.replicas = (unsigned)o->replicas;
        o->cfg.peers = &o->peer_list;
        o->cfg.replica_ops = &rdzvd_replica_ops;
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

/* --ready-fd: "PORT\n", then close it (the starter reads it: ready, or EOF if we died first). */
static void write_ready_fd(int fd, unsigned port)
{
    char line[16];
    int n = snprintf(line, sizeof(line), "%u\n", port);
    ssize_t w;

    while ((w = write(fd, line, (size_t)n)) < 0 && errno == EINTR)
        ;
    if (w != n)
        log_warn_errno(w < 0 ? -errno : -EIO, "cannot write to --ready-fd %d", fd);
    (void)close(fd);
}

struct daemon_ctx {
    struct rdzvd_daemon *daemon;
    struct rdzvd_server *srv; /* the daemon's */
    struct rdzvd_http *http;
    uv_signal_t sigterm, sigint;
    uv_timer_t linger; /* a replica's end, decided by the cluster (shutdown_cb) */
    bool lingering;    /* linger is initialised */
    bool stopped;      /* daemon_stop ran: a second cause (a signal after a failure) is a no-op */
};

/* How long a replica lingers after the cluster decided to end: the followers learn that the
 * decision committed from the leader's next heartbeats, which must still come. */
#define RDZVD_SHUTDOWN_LINGER_MS (RDZVD_REPL_HEARTBEAT_MS * 4)

/* Shut down: SIGTERM, SIGINT, --exit-when-idle. The loop ends once everything is closed. */
static void daemon_stop(struct daemon_ctx *d)
{
    if (d->stopped)
        return;
    d->stopped = true;
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
    if (d->lingering && !uv_is_closing((uv_handle_t *)&d->linger))
        uv_close((uv_handle_t *)&d->linger, NULL);
    rdzvd_http_stop(d->http);
    d->http = NULL;
    rdzvd_server_stop(d->srv);
}

static void signal_cb(uv_signal_t *h, int signum)
{
    log_info("received %s, shutting down", strsignal(signum));
    daemon_stop(h->data);
}

static void idle_done_cb(void *data)
{
    daemon_stop(data);
}

static void linger_cb(uv_timer_t *t)
{
    daemon_stop(t->data);
}

/* The replicas decided to end (the leader's --exit-when-idle, committed): stop, after the
 * leader has had time to tell the followers. */
static void shutdown_cb(void *data)
{
    struct daemon_ctx *d = data;

    if (d->lingering)
        return;
    if (uv_timer_init(rdzvd_server_loop(d->srv), &d->linger) < 0) {
        daemon_stop(d);
        return;
    }
    d->lingering = true;
    d->linger.data = d;
    (void)uv_timer_start(&d->linger, linger_cb, RDZVD_SHUTDOWN_LINGER_MS, 0);
}

/* --remove-state-dir or --remove-dir (flag), at a normal end: DIR and everything in it (links
 * not followed). */
static void remove_dir(const char *dir, const char *flag)
{
    int r = rdzv_rmtree(dir);

    if (r < 0)
        log_warn_errno(r, "%s: cannot delete all of %s", flag, dir);
    else
        log_info("deleted %s%s (%s)", strcmp(flag, "--remove-dir") ? "--state-dir " : "", dir,
                 flag);
}

/* Replication failed: stop, and exit 75 (EX_TEMPFAIL: restart on the same --state-dir). */
static void failure_cb(void *data)
{
    daemon_stop(data);
}

int main(int argc, char **argv)
{
    struct opts o = {
        .cfg = {.port = RDZV_DEFAULT_PORT, .legacy = RDZV_DIALECT_V20, .legacy_allowed = true,
                .lim = RDZV_LIMITS_DEFAULT, .handshake_timeout_ms = RDZVD_HANDSHAKE_TIMEOUT_MS,
                .request_timeout_ms = RDZVD_REQUEST_TIMEOUT_MS,
                .keep_ended_ms = RDZVD_KEEP_ENDED_MS, .keep_ended_max = RDZVD_KEEP_ENDED_MAX,
                .max_jobs = RDZVD_MAX_JOBS, .abandon_after_ms = RDZVD_ABANDON_AFTER_MS},
        .level = RDZV_LOG_INFO,
        .metrics_port = -1,
        .ready_fd = -1,
        .accept_thread = -1,
    };
    struct daemon_ctx d = {0};
    struct rdzvd_server_info info;
    char hs_count[64] = "";
    uv_loop_t loop;
    uint64_t nofile;
    bool failed;
    int r;

    r = parse_args(argc, argv, &o);
    if (r != 0)
        return r > 0 ? 0 : 2;
    rdzv_log_setup("rdzvd", o.level);
    signal(SIGPIPE, SIG_IGN);
    nofile = raise_nofile();
    if (!o.max_conns_set)
        o.cfg.lim.max_conns = nofile > 128 ? nofile - 64 : 64;
    /* The acceptor's queue (RDZVD_ACCEPT_QUEUE descriptors) fits in the 64 kept apart. */
    o.cfg.accept_thread = o.accept_thread > 0 ||
                          (o.accept_thread < 0 && sysconf(_SC_NPROCESSORS_ONLN) >= 4);

    o.cfg.on_failure = failure_cb;
    o.cfg.on_shutdown = shutdown_cb;
    o.cfg.failure_ud = &d;
    r = uv_loop_init(&loop);
    if (r < 0)
        return log_error_errno(r, "uv_loop_init"), 1;

    r = rdzvd_daemon_new(&loop, &o.cfg, &d.daemon);
    if (r < 0) {
        uv_run(&loop, UV_RUN_DEFAULT); /* let the handles init closed finish closing */
        (void)uv_loop_close(&loop);
        return 1; /* it logged why */
    }
    d.srv = rdzvd_daemon_server(d.daemon);
    if (o.idle_ms)
        r = rdzvd_daemon_exit_when_idle(d.daemon, o.idle_ms, o.idle_first_ms, idle_done_cb, &d);
    if (r == 0)
        r = rdzvd_daemon_listen(d.daemon);
    if (r < 0) {
        rdzvd_daemon_free(d.daemon);
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
        rdzvd_server_stop(d.srv);
        uv_run(&loop, UV_RUN_DEFAULT);
        rdzvd_daemon_free(d.daemon);
        (void)uv_loop_close(&loop);
        return 1;
    }

    if (o.metrics_port >= 0) {
        const char *maddr = o.metrics_bind ? o.metrics_bind : o.cfg.bind ? o.cfg.bind : "127.0.0.1";
        uint16_t mport;

        r = rdzvd_http_start(&loop, rdzvd_daemon_jobs(d.daemon), maddr, (uint16_t)o.metrics_port,
                             &mport, &d.http);
        if (r < 0) {
            log_error("cannot serve metrics on %s port %d: %s (check --metrics-port and "
                      "--metrics-bind)",
                      maddr, o.metrics_port, uv_strerror(r));
            daemon_stop(&d);
            uv_run(&loop, UV_RUN_DEFAULT);
            rdzvd_daemon_free(d.daemon);
            uv_loop_close(&loop);
            return 1;
        }
        log_info("metrics and status page on http://%s:%u/", maddr, mport);
        if (o.metrics_port_file && (r = write_port_file(o.metrics_port_file, mport)) < 0)
            log_warn_errno(r, "cannot write --metrics-port-file %s", o.metrics_port_file);
    }
    rdzvd_server_info(d.srv, &info);
    if (o.port_file && (r = write_port_file(o.port_file, info.port)) < 0)
        log_warn_errno(r, "cannot write --port-file %s", o.port_file);
    printf("rdzvd listening on %s port %u\n", info.addr, info.port);
    fflush(stdout);
    if (o.ready_fd >= 0)
        write_ready_fd(o.ready_fd, info.port);
    log_info("rdzvd %s listening on %s port %u (open-file limit %" PRIu64 ", max %" PRIu64
             " connections, legacy clients: %s)",
             RDZV_VERSION, info.addr, info.port, nofile, o.cfg.lim.max_conns,
             o.cfg.legacy_allowed ? rdzv_dialect_name(o.cfg.legacy) : "refused");
    if (o.cfg.lim.max_handshaking)
        snprintf(hs_count, sizeof(hs_count), "; at most %" PRIu64 " connections",
                 o.cfg.lim.max_handshaking);
    log_info("authentication: %s; TCPStore clients from: %s; handshake timeout: %.1f s "
             "(connections before it: %" PRIu64 " bytes, %" PRIu64 " each and their input%s)",
             o.cfg.token ? "token required (" RDZV_AUTH_SCHEME ")" : "none (no --token-file)",
             o.cfg.store_acl ? o.cfg.store_acl->desc : "anywhere",
             (double)o.cfg.handshake_timeout_ms / 1000, o.cfg.lim.max_handshaking_bytes,
             rdzvd_conn_hs_cost(), hs_count);

    uv_run(&loop, UV_RUN_DEFAULT);
    rdzvd_server_info(d.srv, &info);
    failed = rdzvd_server_failed(d.srv);
    d.daemon = rdzvd_daemon_free(d.daemon);
    r = uv_loop_close(&loop);
    if (r < 0)
        log_warn("loop closed with handles still open: %s", uv_strerror(r));
    log_info("stopped (%" PRIu64 " connections served, %" PRIu64 " requests)", info.stats.accepted,
             info.stats.requests);
    if (!failed && o.remove_state_dir && o.cfg.state_dir)
        remove_dir(o.cfg.state_dir, "--remove-state-dir");
    if (!failed && o.remove_dir)
        remove_dir(o.remove_dir, "--remove-dir");
    return failed ? 75 : 0;
}
