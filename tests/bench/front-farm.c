/* SPDX-License-Identifier: Apache-2.0 */
/* front-farm.c: many nodes' store fronts (agent/front/agent-front.h) in one process, for the
 * benchmark of a start through the fronts (run-front-bench.sh).
 *   rdzv-front-farm STORE_ADDR STORE_PORT COUNT [PER_NODE [SPREAD]]
 * starts COUNT fronts on one loop, each with its own listener and its own connection to the
 * store, as COUNT agents of PER_NODE workers (default 8) each would; with SPREAD (1 to 250) and
 * STORE_ADDR 127.0.0.1, front i connects to the store at 127.0.0.(1 + i % SPREAD), as if the
 * fronts were on hosts of their own (a store listening on every address): from one address to
 * one, each connect() searches the ports already in use to that destination, and thousands of
 * fronts' connections measure that search, not the store. Prints their ports, one a
 * line, then serves until its standard input closes, then prints what the fronts did, summed, as
 * one line of JSON and exits 0 (1 when a store connection was lost, said on stderr). Each front
 * takes PER_NODE + 3 descriptors at least (its listener, its workers, its store connection and
 * one wait connection): COUNT must fit the open-file limit. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include "agent/front/agent-front.h"
#include "common/rdzv-util.h"

static struct agent_front **fronts;
static uint32_t nfronts;
static uv_pipe_t in;
static uint64_t lost;

static void on_lost(const char *why, void *ud)
{
    if (lost++ < 5)
        fprintf(stderr, "rdzv-front-farm: front %u: %s\n", (unsigned)(uintptr_t)ud, why);
}

static void in_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char b[256];

    (void)h;
    (void)suggested;
    *buf = uv_buf_init(b, sizeof(b));
}

static void in_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct agent_front_stats s, sum = {0};

    (void)buf;
    if (nread >= 0)
        return;
    for (uint32_t i = 0; i < nfronts; i++) {
        agent_front_stats(fronts[i], &s);
        sum.conns += s.conns;
        sum.requests += s.requests;
        sum.forwarded += s.forwarded;
        sum.shared_gets += s.shared_gets;
        sum.waits += s.waits;
        sum.upstream_waits += s.upstream_waits;
        sum.wait_cancels += s.wait_cancels;
        agent_front_close(fronts[i]);
    }
    printf("{\"fronts\": %" PRIu32 ", \"conns\": %" PRIu64 ", \"requests\": %" PRIu64
           ", \"forwarded\": %" PRIu64 ", \"shared_gets\": %" PRIu64 ", \"waits\": %" PRIu64
           ", \"upstream_waits\": %" PRIu64 ", \"wait_cancels\": %" PRIu64 ", \"lost\": %" PRIu64
           "}\n",
           nfronts, sum.conns, sum.requests, sum.forwarded, sum.shared_gets, sum.waits,
           sum.upstream_waits, sum.wait_cancels, lost);
    fflush(stdout);
    uv_close((uv_handle_t *)st, NULL);
}

/* Raise the open-file limit to its hard limit; 0 when need descriptors fit. */
static int fit_nofile(uint64_t need)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
    (void)getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur != RLIM_INFINITY && need > (uint64_t)rl.rlim_cur) {
        fprintf(stderr,
                "rdzv-front-farm: %" PRIu64 " descriptors needed, the open-file limit is %llu: "
                "start fewer fronts a process\n",
                need, (unsigned long long)rl.rlim_cur);
        return -EMFILE;
    }
    return 0;
}

/* The fronts are started a batch a turn of the loop, so that each one's connection gets its
 * VALIDATE as an agent's would, at once: started all before the loop ran (1,600 take seconds
 * of bind()'s port search on a loaded machine), the first ones sat silent, and rdzvd shed them
 * as stale connections before their handshake (--max-handshaking). */
#define START_BATCH 32
static uv_idle_t starter;
static uint64_t want, per_node = 8;
static const char *store_addr;
static uint64_t spread;
static uint16_t store_port;
static int status;

static void start_some(uv_idle_t *h)
{
    for (unsigned i = 0; i < START_BATCH && nfronts < want; i++, nfronts++) {
        char addr[INET_ADDRSTRLEN];
        int r;

        if (spread)
            snprintf(addr, sizeof(addr), "127.0.0.%u", (unsigned)(1 + nfronts % spread));
        r = agent_front_start(
            &(struct agent_front_cfg){.loop = h->loop,
                                      .store_addr = spread ? addr : store_addr,
                                      .store_port = store_port,
                                      .legacy = RDZV_DIALECT_V20,
                                      .lim = RDZV_LIMITS_DEFAULT,
                                      .max_conns = (unsigned)(4 * per_node + 16),
                                      .on_lost = on_lost,
                                      .ud = (void *)(uintptr_t)nfronts},
            &fronts[nfronts]);
        if (r < 0) {
            fprintf(stderr, "rdzv-front-farm: front %" PRIu32 ": %s\n", nfronts, uv_strerror(r));
            status = 1;
            uv_stop(h->loop);
            return;
        }
        printf("%u\n", agent_front_port(fronts[nfronts]));
    }
    if (nfronts < want)
        return;
    fflush(stdout);
    uv_idle_stop(h);
    uv_close((uv_handle_t *)h, NULL);
    if (uv_pipe_init(h->loop, &in, 0) < 0 || uv_pipe_open(&in, 0) < 0 ||
        uv_read_start((uv_stream_t *)&in, in_alloc, in_read) < 0) {
        fprintf(stderr, "rdzv-front-farm: cannot read its standard input\n");
        status = 1;
        uv_stop(h->loop);
    }
}

int main(int argc, char **argv)
{
    uv_loop_t *loop = uv_default_loop();

    signal(SIGPIPE, SIG_IGN); /* a worker gone mid-reply: its write fails, no more */
    if (argc < 4 || argc > 6 || rdzv_parse_port(argv[2], &store_port) < 0 || store_port == 0 ||
        rdzv_parse_u64(argv[3], &want) < 0 || want == 0 || want > 1000000 ||
        (argc >= 5 && (rdzv_parse_u64(argv[4], &per_node) < 0 || per_node == 0 ||
                       per_node > 1024)) ||
        (argc == 6 && (rdzv_parse_u64(argv[5], &spread) < 0 || spread > 250 ||
                       strcmp(argv[1], "127.0.0.1") != 0))) {
        fprintf(stderr, "usage: rdzv-front-farm STORE_ADDR STORE_PORT COUNT [PER_NODE [SPREAD]] "
                        "(SPREAD: 0 to 250, with STORE_ADDR 127.0.0.1)\n");
        return 2;
    }
    store_addr = argv[1];
    /* a front: its listener, its connection to the store, its workers' */
    if (fit_nofile(want * (per_node + 2) + 32) < 0)
        return 2;
    fronts = calloc(want, sizeof(*fronts));
    if (!fronts || uv_idle_init(loop, &starter) < 0 || uv_idle_start(&starter, start_some) < 0)
        return 2;
    uv_run(loop, UV_RUN_DEFAULT);
    free(fronts);
    return status ? status : lost ? 1 : 0;
}
