/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-bench-opts.c: rdzv-bench's command line, its port file, open-file limit and key names. */
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/rdzv-util.h"
#include "tests/bench/rdzv-bench.h"

void bench_usage(FILE *f)
{
    fprintf(
        f,
        "Usage: rdzv-bench [OPTIONS] throughput|barrier|memory\n"
        "Load generator for TCPStore servers. Prints one line of key=value results on stdout.\n"
        "\n"
        "  throughput  C connections in a closed loop of ADD(key_i,1), GET(key_i); replies/s\n"
        "  barrier     N connections: ADD(cnt,1); the one that reads N SETs go; all WAIT(go);\n"
        "              seconds from the first connect() to the last STOP_WAITING; also when\n"
        "              the last connection was open (opened_s) and when go was SET (go_s)\n"
        "  memory      N idle connections (one ADD each); server VmRSS growth per connection\n"
        "\n"
        "  -H, --host ADDR        server IPv4 address (default 127.0.0.1)\n"
        "  -p, --port N           server port\n"
        "  -P, --port-file FILE   read the port from FILE (waits up to 30 s for it)\n"
        "  -c, --conns N          connections (default: throughput 50, barrier 1000,\n"
        "                         memory 10000)\n"
        "  -d, --duration SEC     throughput: measured window (default 3)\n"
        "  -w, --warmup SEC       throughput: unmeasured warm-up (default 0.5)\n"
        "      --op OP            throughput: addget (default), get (one ADD, then GETs) or\n"
        "                         add (writes only)\n"
        "      --window SEC       throughput: also rate each window of SEC and report the best\n"
        "                         and the median (default 0.5)\n"
        "  -t, --timeout SEC      cap on connecting, on a barrier, on memory set-up (default 60)\n"
        "      --hosts K          barrier: the ranks come from K hosts, source addresses\n"
        "                         127.0.0.2 .. 127.0.0.(K+1) (default: no bind)\n"
        "      --stagger SEC      barrier: host h's ranks (consecutive) start connecting at\n"
        "                         h * SEC; 0 (default): the hosts' ranks in turn, one each\n"
        "      --silence SEC      barrier: each rank sends its ADD SEC after its connect\n"
        "                         (default 0)\n"
        "      --procs P          barrier: spread the ranks over P processes started together\n"
        "                         (default 1), as many hosts' ranks are: one client process\n"
        "                         should not be what a barrier of 16,000 measures\n"
        "      --fronts FILE      barrier: the ranks are nodes' workers, each node's ranks\n"
        "                         connecting to its own store front (rdzv-front-farm): FILE\n"
        "                         has one port a line, node i's; --host names their address;\n"
        "                         no --port. --conns defaults to nodes x --per-node\n"
        "      --per-node K       barrier with --fronts: ranks a node (default 8)\n"
        "  -D, --dialect D        the numbering PyTorch's clients speak: 2.0 (1.x and 2.0: SET 0,\n"
        "                         GET 2, ADD 3, WAIT 5; the default), 2.1, or modern (2.2 and\n"
        "                         later: each connection opens with VALIDATE and a PING whose\n"
        "                         echo it waits for, as PyTorch >= 2.5 does; SET 1, GET 2,\n"
        "                         ADD 3, WAIT 6). PyTorch >= 2.2's server answers only modern.\n"
        "  -k, --prefix STR       key namespace (default: unique per run)\n"
        "      --pid PID          server process: memory reads its VmRSS; throughput reads\n"
        "                         its CPU time over the measured window (server_cpu_s,\n"
        "                         server_cpu_ns_per_reply); every mode first waits (up to\n"
        "                         30 s) until it is idle\n"
        "      --idle-pid PID     also wait until this process is idle (repeatable, up to 32)\n"
        "      --settle SEC       memory: pause before reading VmRSS again (default 1)\n"
        "  -h, --help             show this help\n");
}

/* ---- set-up ---- */

static int read_port_file(const char *path, uint16_t *port)
{
    uint64_t t0 = rdzv_now_ns();
    char buf[32];

    for (;;) {
        FILE *f = fopen(path, "re");

        if (f) {
            bool got = fgets(buf, sizeof(buf), f) != NULL;

            fclose(f);
            buf[strcspn(buf, "\r\n")] = '\0';
            if (got && rdzv_parse_port(buf, port) == 0 && *port != 0)
                return 0;
        }
        if (rdzv_now_ns() - t0 > 30 * NS_PER_S)
            return -ETIMEDOUT;
        sleep_ns(NS_PER_S / 20);
    }
}

int bench_raise_nofile(uint32_t need)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && (uint64_t)need + 16 > (uint64_t)rl.rlim_cur) {
        fprintf(stderr,
                "rdzv-bench: %" PRIu32 " connections need more than the open-file limit %llu\n",
                need, (unsigned long long)rl.rlim_cur);
        return -EMFILE;
    }
    return 0;
}

static int parse_secs(const char *opt, const char *s, double *ret)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || v < 0 || v > 86400) {
        fprintf(stderr, "rdzv-bench: invalid %s '%s': expected seconds\n", opt, s);
        return -EINVAL;
    }
    *ret = v;
    return 0;
}

/* A count of 1 to max (--hosts, --procs, --per-node). */
static int parse_count(const char *opt, const char *s, uint64_t max, uint32_t *ret)
{
    uint64_t v;

    if (rdzv_parse_u64(s, &v) < 0 || v == 0 || v > max) {
        fprintf(stderr, "rdzv-bench: invalid %s '%s' (1 to %" PRIu64 ")\n", opt, s, max);
        return -EINVAL;
    }
    *ret = (uint32_t)v;
    return 0;
}

enum { OPT_PID = 256, OPT_SETTLE, OPT_IDLE_PID, OPT_WINDOW, OPT_OP, OPT_HOSTS, OPT_STAGGER,
       OPT_SILENCE, OPT_PROCS, OPT_FRONTS, OPT_PER_NODE };

static const struct option longopts[] = {
    {"host", required_argument, NULL, 'H'},      {"port", required_argument, NULL, 'p'},
    {"port-file", required_argument, NULL, 'P'}, {"conns", required_argument, NULL, 'c'},
    {"duration", required_argument, NULL, 'd'},  {"warmup", required_argument, NULL, 'w'},
    {"timeout", required_argument, NULL, 't'},   {"prefix", required_argument, NULL, 'k'},
    {"pid", required_argument, NULL, OPT_PID},   {"settle", required_argument, NULL, OPT_SETTLE},
    {"idle-pid", required_argument, NULL, OPT_IDLE_PID},
    {"window", required_argument, NULL, OPT_WINDOW}, {"op", required_argument, NULL, OPT_OP},
    {"hosts", required_argument, NULL, OPT_HOSTS},
    {"stagger", required_argument, NULL, OPT_STAGGER},
    {"silence", required_argument, NULL, OPT_SILENCE},
    {"dialect", required_argument, NULL, 'D'},
    {"procs", required_argument, NULL, OPT_PROCS},
    {"fronts", required_argument, NULL, OPT_FRONTS},
    {"per-node", required_argument, NULL, OPT_PER_NODE},
    {"help", no_argument, NULL, 'h'},            {0},
};

/* --fronts FILE: one port a line, node i's on line i. */
static int read_fronts(const char *path, struct bench *b)
{
    FILE *f = fopen(path, "re");
    char line[32];
    uint32_t cap = 0;

    if (!f) {
        int err = errno;

        fprintf(stderr, "rdzv-bench: --fronts %s: %s\n", path, strerror(err));
        return -err;
    }
    while (fgets(line, sizeof(line), f)) {
        uint16_t port;

        line[strcspn(line, "\r\n")] = '\0';
        if (rdzv_parse_port(line, &port) < 0 || port == 0) {
            fprintf(stderr, "rdzv-bench: --fronts %s: line %" PRIu32 " is no port: '%s'\n",
                    path, b->nnodes + 1, line);
            fclose(f);
            return -EINVAL;
        }
        if (b->nnodes == cap) {
            uint16_t *p = realloc(b->node_ports, (cap ? cap * 2 : 1024) * sizeof(*p));

            if (!p) {
                fclose(f);
                return -ENOMEM;
            }
            b->node_ports = p;
            cap = cap ? cap * 2 : 1024;
        }
        b->node_ports[b->nnodes++] = port;
    }
    fclose(f);
    if (b->nnodes == 0) {
        fprintf(stderr, "rdzv-bench: --fronts %s has no port\n", path);
        return -EINVAL;
    }
    return 0;
}

int bench_parse_args(int argc, char **argv, struct bench *b)
{
    const char *host = "127.0.0.1", *port_file = NULL, *fronts = NULL;
    uint16_t port = 0;
    uint64_t v;
    int c, r;

    while ((c = getopt_long(argc, argv, "H:p:P:c:d:w:t:k:D:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'H':
            host = optarg;
            break;
        case 'p':
            if (rdzv_parse_port(optarg, &port) < 0 || port == 0) {
                fprintf(stderr, "rdzv-bench: invalid --port '%s'\n", optarg);
                return -EINVAL;
            }
            break;
        case 'P':
            port_file = optarg;
            break;
        case 'c':
            if (rdzv_parse_u64(optarg, &v) < 0 || v == 0 || v > 1000000) {
                fprintf(stderr, "rdzv-bench: invalid --conns '%s'\n", optarg);
                return -EINVAL;
            }
            b->n = (uint32_t)v;
            break;
        case 'd':
            r = parse_secs("--duration", optarg, &b->duration_s);
            if (r < 0)
                return r;
            break;
        case 'w':
            r = parse_secs("--warmup", optarg, &b->warmup_s);
            if (r < 0)
                return r;
            break;
        case 't':
            r = parse_secs("--timeout", optarg, &b->timeout_s);
            if (r < 0)
                return r;
            break;
        case 'D':
            if (rdzv_dialect_parse(optarg, &b->dialect) < 0) {
                fprintf(stderr, "rdzv-bench: --dialect must be 2.0, 2.1 or modern, not '%s'\n",
                        optarg);
                return -EINVAL;
            }
            break;
        case 'k':
            if (strlen(optarg) > PREFIX_MAX) {
                fprintf(stderr, "rdzv-bench: --prefix longer than %d bytes\n", PREFIX_MAX);
                return -EINVAL;
            }
            snprintf(b->prefix, sizeof(b->prefix), "%s", optarg);
            break;
        case OPT_OP:
            if (strcmp(optarg, "addget") == 0)
                b->op = OP_ADDGET;
            else if (strcmp(optarg, "get") == 0)
                b->op = OP_GET;
            else if (strcmp(optarg, "add") == 0)
                b->op = OP_ADD;
            else {
                fprintf(stderr, "rdzv-bench: --op must be addget, get or add\n");
                return -EINVAL;
            }
            break;
        case OPT_PID:
            if (rdzv_parse_u64(optarg, &v) < 0 || v == 0 || v > INT32_MAX) {
                fprintf(stderr, "rdzv-bench: invalid --pid '%s'\n", optarg);
                return -EINVAL;
            }
            b->server_pid = (int)v;
            break;
        case OPT_IDLE_PID:
            if (rdzv_parse_u64(optarg, &v) < 0 || v == 0 || v > INT32_MAX ||
                b->nidle_pids >= MAX_IDLE_PIDS) {
                fprintf(stderr, "rdzv-bench: invalid --idle-pid '%s' (at most %d)\n", optarg,
                        MAX_IDLE_PIDS);
                return -EINVAL;
            }
            b->idle_pids[b->nidle_pids++] = (int)v;
            break;
        case OPT_WINDOW:
            r = parse_secs("--window", optarg, &b->window_s);
            if (r < 0)
                return r;
            break;
        case OPT_SETTLE:
            r = parse_secs("--settle", optarg, &b->settle_s);
            if (r < 0)
                return r;
            break;
        case OPT_HOSTS:
            r = parse_count("--hosts", optarg, 250, &b->hosts);
            if (r < 0)
                return r;
            break;
        case OPT_PROCS:
            r = parse_count("--procs", optarg, 256, &b->procs);
            if (r < 0)
                return r;
            break;
        case OPT_FRONTS:
            fronts = optarg;
            break;
        case OPT_PER_NODE:
            r = parse_count("--per-node", optarg, 1024, &b->per_node);
            if (r < 0)
                return r;
            break;
        case OPT_STAGGER:
            r = parse_secs("--stagger", optarg, &b->stagger_s);
            if (r < 0)
                return r;
            break;
        case OPT_SILENCE:
            r = parse_secs("--silence", optarg, &b->silence_s);
            if (r < 0)
                return r;
            break;
        case 'h':
            bench_usage(stdout);
            return 1;
        default:
            bench_usage(stderr);
            return -EINVAL;
        }
    }
    if (optind + 1 != argc) {
        bench_usage(stderr);
        return -EINVAL;
    }
    if (strcmp(argv[optind], "throughput") == 0)
        b->mode = MODE_THROUGHPUT;
    else if (strcmp(argv[optind], "barrier") == 0)
        b->mode = MODE_BARRIER;
    else if (strcmp(argv[optind], "memory") == 0)
        b->mode = MODE_MEMORY;
    else {
        fprintf(stderr, "rdzv-bench: unknown mode '%s'\n", argv[optind]);
        return -EINVAL;
    }
    if (fronts) {
        if (b->mode != MODE_BARRIER || port_file || port || b->hosts) {
            fprintf(stderr, "rdzv-bench: --fronts is for a barrier, without --port, "
                            "--port-file or --hosts\n");
            return -EINVAL;
        }
        if (!b->per_node)
            b->per_node = 8;
        r = read_fronts(fronts, b);
        if (r < 0)
            return r;
        if (!b->n)
            b->n = b->nnodes * b->per_node;
        if ((uint64_t)b->n > (uint64_t)b->nnodes * b->per_node) {
            fprintf(stderr,
                    "rdzv-bench: %" PRIu32 " ranks need more than %" PRIu32 " fronts of %" PRIu32
                    "\n", b->n, b->nnodes, b->per_node);
            return -EINVAL;
        }
        port = b->node_ports[0];
    } else if (b->per_node) {
        fprintf(stderr, "rdzv-bench: --per-node goes with --fronts\n");
        return -EINVAL;
    }
    if (port_file) {
        r = read_port_file(port_file, &port);
        if (r < 0) {
            fprintf(stderr, "rdzv-bench: no port in %s: %s\n", port_file, strerror(-r));
            return r;
        }
    }
    if (port == 0) {
        fprintf(stderr, "rdzv-bench: need --port or --port-file\n");
        return -EINVAL;
    }
    b->addr.sin_family = AF_INET;
    b->addr.sin_port = htons(port);
    if (inet_pton(AF_INET, host, &b->addr.sin_addr) != 1) {
        fprintf(stderr, "rdzv-bench: --host '%s' is not an IPv4 address\n", host);
        return -EINVAL;
    }
    return 0;
}

const struct sockaddr_in *bench_dest(const struct bench *b, uint32_t i, struct sockaddr_in *dst)
{
    if (!b->node_ports)
        return &b->addr;
    *dst = b->addr;
    dst->sin_port = htons(b->node_ports[(b->first + i) / b->per_node]);
    return dst;
}

int bench_setup(struct bench *b)
{
    if (!b->prefix[0])
        snprintf(b->prefix, sizeof(b->prefix), "/rdzv-bench/%d.%" PRIu64, (int)getpid(),
                 (uint64_t)(rdzv_now_ns() % 1000000000u));
    b->cnt_len = (size_t)snprintf(b->cnt_key, sizeof(b->cnt_key), "%s/cnt", b->prefix);
    b->go_len = (size_t)snprintf(b->go_key, sizeof(b->go_key), "%s/go", b->prefix);
    b->idle_len = (size_t)snprintf(b->idle_key, sizeof(b->idle_key), "%s/idle", b->prefix);
    return 0;
}
