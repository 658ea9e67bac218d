/* SPDX-License-Identifier: Apache-2.0 */
/* front-proxy.c: the node's store front alone (agent/front/agent-front.h), for tests: PyTorch's
 * own store tests run through it against rdzvd.
 *   front-proxy STORE_ADDR STORE_PORT
 * prints the port the clients connect to, serves until its standard input closes, then prints
 * what the front did as one line of JSON and exits 0 (1 when the store's connection was lost,
 * said on stderr). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

#include "agent/front/agent-front.h"

static struct agent_front *front;
static uv_pipe_t in;
static int status;

static void on_lost(const char *why, void *ud)
{
    (void)ud;
    fprintf(stderr, "front-proxy: %s\n", why);
    status = 1;
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
    struct agent_front_stats s;

    (void)buf;
    if (nread >= 0)
        return;
    agent_front_stats(front, &s);
    printf("{\"conns\": %llu, \"requests\": %llu, \"forwarded\": %llu, \"shared_gets\": %llu, "
           "\"waits\": %llu, \"upstream_waits\": %llu, \"wait_cancels\": %llu}\n",
           (unsigned long long)s.conns, (unsigned long long)s.requests,
           (unsigned long long)s.forwarded, (unsigned long long)s.shared_gets,
           (unsigned long long)s.waits, (unsigned long long)s.upstream_waits,
           (unsigned long long)s.wait_cancels);
    fflush(stdout);
    agent_front_close(front);
    uv_close((uv_handle_t *)st, NULL);
}

int main(int argc, char **argv)
{
    uv_loop_t *loop = uv_default_loop();
    int r;

    signal(SIGPIPE, SIG_IGN); /* a client gone mid-reply: its write fails, no more */
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: front-proxy STORE_ADDR STORE_PORT [MAX_CONNS]\n");
        return 2;
    }
    r = agent_front_start(&(struct agent_front_cfg){.loop = loop,
                                                    .store_addr = argv[1],
                                                    .store_port = (uint16_t)atoi(argv[2]),
                                                    .legacy = RDZV_DIALECT_V20,
                                                    .lim = RDZV_LIMITS_DEFAULT,
                                                    .max_conns = argc == 4
                                                                     ? (unsigned)atoi(argv[3])
                                                                     : 1024,
                                                    .on_lost = on_lost},
                          &front);
    if (r < 0) {
        fprintf(stderr, "front-proxy: %s\n", uv_strerror(r));
        return 1;
    }
    printf("%u\n", agent_front_port(front));
    fflush(stdout);
    if (uv_pipe_init(loop, &in, 0) < 0 || uv_pipe_open(&in, 0) < 0 ||
        uv_read_start((uv_stream_t *)&in, in_alloc, in_read) < 0) {
        fprintf(stderr, "front-proxy: cannot read its standard input\n");
        return 1;
    }
    uv_run(loop, UV_RUN_DEFAULT);
    return status;
}
