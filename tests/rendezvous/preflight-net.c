/* SPDX-License-Identifier: Apache-2.0 */
/* preflight-net: the network pre-flight's parts, one command each, for
 * test_preflight_net.py (network namespaces as nodes). Not installed.
 *
 *   preflight-net serve ADDR TOKEN          listen on ADDR (port 0), print "port N", serve
 *   preflight-net probe HOST:PORT TOKEN [BOUND_MS [full]]   print {"up": MB/s, "down": MB/s}
 *   preflight-net round1 N                  print round 1's links {"links": [{a, b, slot, round2}]}
 *   preflight-net round2 FRACTION < JOB     print round 2's links
 *   preflight-net confirm FRACTION < JOB    print the confirmation's links (round 3)
 *   preflight-net verdict FRACTION < JOB    print {"median", "bad": [...], "best": [...]}
 *
 * TOKEN: 32 hex digits. JOB: {"n": N, "links": [{"a", "b", "slot", "round2"?, "confirm"?, "ab",
 * "ba"}]}
 * with the figures (MB/s; -1: unreachable). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "agent/preflight/agent-preflight.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-preflight.h"

static int usage(void)
{
    fprintf(stderr, "usage: preflight-net serve ADDR TOKEN | probe HOST:PORT TOKEN [BOUND_MS "
                    "[full]] | round1 N | round2 FRACTION | confirm FRACTION | verdict FRACTION\n");
    return 2;
}

static int addr_of(const char *s, uint16_t port, struct sockaddr_storage *ss)
{
    char host[256];

    if (rdzv_parse_hostport(s, host, sizeof(host), &port) < 0)
        return -EINVAL;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
        return 0;
    return uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss);
}

static int serve(const char *addr, const uint8_t *token)
{
    struct sockaddr_storage ss;
    struct agent_pf_server *s;
    int r;

    if (addr_of(addr, 0, &ss) < 0)
        return usage();
    if ((r = agent_pf_server_start(uv_default_loop(), (struct sockaddr *)&ss, token, &s)) < 0) {
        fprintf(stderr, "preflight-net: listen on %s: %s\n", addr, strerror(-r));
        return 1;
    }
    printf("port %d\n", agent_pf_server_port(s));
    fflush(stdout);
    return uv_run(uv_default_loop(), UV_RUN_DEFAULT);
}

static void probed(const struct agent_pf_result *r, void *ud)
{
    (void)ud;
    printf("{\"up\": %.3f, \"down\": %.3f}\n", r->up, r->down);
}

static int probe(const char *addr, const uint8_t *token, unsigned bound_ms, bool full)
{
    struct sockaddr_storage ss;
    struct agent_pf_probe *p;
    int r;

    if (addr_of(addr, 0, &ss) < 0)
        return usage();
    r = agent_pf_probe_start(uv_default_loop(), (struct sockaddr *)&ss, token, bound_ms, full,
                             probed, NULL, &p);
    if (r < 0) {
        fprintf(stderr, "preflight-net: probe %s: %s\n", addr, strerror(-r));
        return 1;
    }
    uv_run(uv_default_loop(), UV_RUN_DEFAULT);
    return 0;
}

static void print_links(const struct rdzv_pf_link *l, size_t k)
{
    json_t *arr = json_array(), *o;
    char *s;

    for (size_t i = 0; i < k; i++)
        json_array_append_new(arr, json_pack("{s:i, s:i, s:i, s:b, s:i}", "a", (json_int_t)l[i].a,
                                             "b", (json_int_t)l[i].b, "slot",
                                             (json_int_t)l[i].slot, "round2", l[i].round2,
                                             "confirm", (int)l[i].confirm));
    o = json_pack("{s:o}", "links", arr);
    s = json_dumps(o, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(o);
}

/* The job on stdin, judged (what: 'r' round 2's links, 'c' the confirmation's, 'v' the
 * verdict): 0, or 1 on bad input. */
static int judge(double fraction, char what)
{
    json_t *job = json_loadf(stdin, 0, NULL), *links, *l, *bad, *best, *o;
    struct rdzv_pf_link *lk = NULL, *out = NULL;
    struct rdzv_pf_node *nodes = NULL;
    json_int_t n = 0;
    double median;
    size_t i, k;
    char *s;
    int ret = 1;

    if (!job || json_unpack(job, "{s:I, s:o}", "n", &n, "links", &links) < 0 || n < 0 ||
        n > 100000 || !json_is_array(links))
        goto out;
    k = json_array_size(links);
    lk = calloc(k + 1, sizeof(*lk));
    out = calloc((size_t)n + 2, sizeof(*out));
    nodes = calloc((size_t)n + 1, sizeof(*nodes));
    if (!lk || !out || !nodes)
        goto out;
    json_array_foreach(links, i, l)
    {
        json_int_t a, b, slot;
        int round2 = 0, confirm = 0;

        if (json_unpack(l, "{s:I, s:I, s:I, s:F, s:F, s?b, s?i}", "a", &a, "b", &b, "slot",
                        &slot, "ab", &lk[i].ab, "ba", &lk[i].ba, "round2", &round2, "confirm",
                        &confirm) < 0 ||
            a < 0 || b < 0 || slot < 0 || confirm < 0 || confirm > 2)
            goto out;
        lk[i].confirm = (uint8_t)confirm;
        lk[i].a = (uint32_t)a;
        lk[i].b = (uint32_t)b;
        lk[i].slot = (uint32_t)slot;
        lk[i].round2 = round2 != 0;
    }
    if (rdzv_pf_judge((uint32_t)n, lk, k, fraction, nodes, &median) < 0)
        goto out;
    if (what == 'r' || what == 'c') {
        print_links(out, what == 'r' ? rdzv_pf_round2((uint32_t)n, nodes, 3, out)
                                     : rdzv_pf_confirm((uint32_t)n, nodes, NULL, 5, out));
        ret = 0;
        goto out;
    }
    bad = json_array();
    best = json_array();
    for (json_int_t j = 0; j < n; j++) {
        if (nodes[j].bad)
            json_array_append_new(bad, json_integer(j));
        json_array_append_new(best, json_real(nodes[j].best));
    }
    o = json_pack("{s:f, s:o, s:o}", "median", median, "bad", bad, "best", best);
    s = json_dumps(o, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(o);
    ret = 0;
out:
    if (ret)
        fprintf(stderr, "preflight-net: bad job on stdin\n");
    free(lk);
    free(out);
    free(nodes);
    json_decref(job);
    return ret;
}

int main(int argc, char **argv)
{
    uint8_t token[AGENT_PF_TOKEN_LEN];
    struct rdzv_pf_link *l;
    uint64_t v;

    if (argc < 3)
        return usage();
    /* As rdzv-agent does: a peer that closes while this side writes is EPIPE, not death (a
     * probe closes its 'D' connection while the listener still sends). */
    signal(SIGPIPE, SIG_IGN);
    if (!strcmp(argv[1], "serve") || !strcmp(argv[1], "probe")) {
        if (argc < 4 || rdzv_hex_decode(argv[3], token, sizeof(token)) < 0)
            return usage();
        if (argv[1][0] == 's')
            return serve(argv[2], token);
        v = 0;
        if (argc > 4 && (rdzv_parse_u64(argv[4], &v) < 0 || v > 60000))
            return usage();
        return probe(argv[2], token, (unsigned)v, argc > 5 && !strcmp(argv[5], "full"));
    }
    if (!strcmp(argv[1], "round1")) {
        if (rdzv_parse_u64(argv[2], &v) < 0 || v > 100000 ||
            !(l = calloc(rdzv_pf_round1_max((uint32_t)v), sizeof(*l))))
            return usage();
        print_links(l, rdzv_pf_round1((uint32_t)v, l));
        free(l);
        return 0;
    }
    if (!strcmp(argv[1], "round2") || !strcmp(argv[1], "verdict") || !strcmp(argv[1], "confirm"))
        return judge(atof(argv[2]), argv[1][0] == 'r' ? 'r' : argv[1][0]);
    return usage();
}
