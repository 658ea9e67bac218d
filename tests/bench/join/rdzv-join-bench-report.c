/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-join-bench-report.c: rdzv-join-bench's readings of rdzvd's memory, its check of the
 * ROUNDs, and its report (text or JSON). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/rdzv-msg.h"
#include "tests/bench/join/rdzv-join-bench.h"

/* VmRSS and VmHWM of pid in kB. Returns 0, or a negative errno (the process is gone). */
static int read_rss(int pid, long *ret_rss, long *ret_hwm)
{
    char path[64], line[256];
    long rss = -1, hwm = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    f = fopen(path, "re");
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            rss = strtol(line + 6, NULL, 10);
        else if (strncmp(line, "VmHWM:", 6) == 0)
            hwm = strtol(line + 6, NULL, 10);
    }
    fclose(f);
    if (rss < 0)
        return -ENODATA;
    *ret_rss = rss;
    if (ret_hwm)
        *ret_hwm = hwm;
    return 0;
}

int bench_sample_rss(struct bench *b, long *ret, long *ret_hwm, const char *when)
{
    int r;

    if (b->pid <= 0)
        return 0;
    r = read_rss(b->pid, ret, ret_hwm);
    if (r < 0)
        return bench_fail(b, r, "cannot read VmRSS of rdzvd (pid %d) %s: %s", b->pid, when,
                          strerror(-r));
    return 0;
}

/* Check the ROUNDs: node ranks 0..n-1 once each, one world size, one master port. */
int bench_verify_rounds(struct bench *b)
{
    struct rdzv_round *rd = malloc(sizeof(*rd));
    uint32_t *owner = malloc((size_t)b->n * sizeof(*owner));
    uint64_t generation = 0;
    char err[256];
    int r = 0;

    if (!rd || !owner) {
        r = bench_fail(b, ENOMEM, "out of memory checking the ROUNDs");
        goto out_free;
    }
    memset(owner, 0xff, (size_t)b->n * sizeof(*owner));
    for (uint32_t i = 0; i < b->n; i++) {
        struct conn *c = &b->conns[i];

        if (rdzv_msg_parse_round(c->round, c->round_len, rd, err, sizeof(err)) < 0) {
            r = bench_fail(b, EBADMSG, "ROUND of connection %u: %s", i, err);
            goto out_free;
        }
        if (i == 0) {
            b->master_port = rd->master_port;
            generation = rd->generation;
        }
        if (rd->node_rank < 0 || rd->node_rank >= (int64_t)b->n) {
            r = bench_fail(b, ERANGE, "ROUND of connection %u: node_rank %" PRId64 " not in 0..%u",
                           i, rd->node_rank, b->n - 1);
            goto out_free;
        }
        if (owner[rd->node_rank] != UINT32_MAX) {
            r = bench_fail(b, EEXIST,
                           "ROUND of connection %u: node_rank %" PRId64
                           " was already given to connection %u",
                           i, rd->node_rank, owner[rd->node_rank]);
            goto out_free;
        }
        owner[rd->node_rank] = i;
        if (rd->world_size != (int64_t)b->n || rd->nnodes != (int64_t)b->n) {
            r = bench_fail(b, EBADMSG,
                           "ROUND of connection %u: world_size %" PRId64 ", nnodes %" PRId64
                           ", expected %u",
                           i, rd->world_size, rd->nnodes, b->n);
            goto out_free;
        }
        if (rd->rank_offset != rd->node_rank) {
            r = bench_fail(b, EBADMSG,
                           "ROUND of connection %u: rank_offset %" PRId64 " for node_rank %" PRId64
                           " (every node has nproc 1)",
                           i, rd->rank_offset, rd->node_rank);
            goto out_free;
        }
        if (rd->master_port != b->master_port || rd->master_port <= 0 || rd->master_port > 65535) {
            r = bench_fail(b, EBADMSG,
                           "ROUND of connection %u: master_port %" PRId64
                           ", connection 0 got %" PRId64,
                           i, rd->master_port, b->master_port);
            goto out_free;
        }
        if (rd->generation != generation) {
            r = bench_fail(b, EBADMSG,
                           "ROUND of connection %u: generation %" PRIu64
                           ", connection 0 got %" PRIu64,
                           i, rd->generation, generation);
            goto out_free;
        }
        if (rd->n_ids != 0) {
            r = bench_fail(b, EBADMSG, "ROUND of connection %u: %u NCCL ids with nccl \"off\"", i,
                           rd->n_ids);
            goto out_free;
        }
    }
    /* n distinct ranks in 0..n-1: every rank is there exactly once. */
out_free:
    free(owner);
    free(rd);
    return r;
}

static json_t *rss_json(long kb)
{
    return kb >= 0 ? json_integer(kb) : json_null();
}

void bench_report_json(const struct bench *b, bool ok)
{
    const struct rss *m = &b->rss;
    json_t *o;

    if (!ok)
        o = json_pack("{s:b, s:I, s:s, s:s, s:s}", "ok", 0, "n", (json_int_t)b->n, "endpoint",
                      b->endpoint, "run_id", b->run_id, "error", b->error);
    else
        o = json_pack(
            "{s:b, s:I, s:s, s:s, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:I, s:{s:o, s:o, s:o, s:o, "
            "s:o}, s:o}",
            "ok", 1, "n", (json_int_t)b->n, "endpoint", b->endpoint, "run_id", b->run_id,
            "connect_s", secs(b->t_start, b->t_hello), "tcp_connect_s",
            secs(b->t_start, b->t_connected), "connect_retries", (json_int_t)b->retries,
            "join_send_s", secs(b->t_first_join, b->t_last_join), "last_join_to_joined_s",
            secs(b->t_last_join, b->t_joined), "last_join_to_first_round_s",
            secs(b->t_last_join, b->t_first_round), "last_join_to_round_s",
            secs(b->t_last_join, b->t_last_round), "master_port", (json_int_t)b->master_port,
            "rss_kb", "before", rss_json(m->before), "connected", rss_json(m->connected), "joined",
            rss_json(m->joined), "round", rss_json(m->round), "peak", rss_json(m->peak),
            "rss_per_agent_kb",
            m->before >= 0 ? json_real((double)(m->round - m->before) / b->n) : json_null());
    if (!o) {
        printf("{\"ok\":false,\"error\":\"out of memory\"}\n");
        return;
    }
    if (ok && b->lose) {
        (void)json_object_set_new(o, "lost", json_integer(b->lose));
        (void)json_object_set_new(o, "lost_to_event_s",
                                  json_real(secs(b->t_lost, b->t_first_event)));
        (void)json_object_set_new(o, "event_to_round_s",
                                  json_real(secs(b->t_first_event, b->t_last_round2)));
    }
    (void)json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
    putchar('\n');
    json_decref(o);
}

void bench_report_text(const struct bench *b)
{
    const struct rss *m = &b->rss;

    printf("rdzv-join-bench: %u agents -> %s (run_id %s)\n", b->n, b->endpoint, b->run_id);
    printf("  connect all (TCP + HELLO):      %8.3f s (TCP alone %.3f s, %" PRIu64 " retries)\n",
           secs(b->t_start, b->t_hello), secs(b->t_start, b->t_connected), b->retries);
    printf("  first JOIN -> last JOIN sent:   %8.3f s\n", secs(b->t_first_join, b->t_last_join));
    printf("  last JOIN -> all JOINED:        %8.3f s\n", secs(b->t_last_join, b->t_joined));
    printf("  last JOIN -> first ROUND:       %8.3f s\n", secs(b->t_last_join, b->t_first_round));
    printf("  last JOIN -> round complete:    %8.3f s\n", secs(b->t_last_join, b->t_last_round));
    if (m->before >= 0)
        printf("  rdzvd VmRSS: before %ld kB, connected %ld kB, all JOINed %ld kB, after round "
               "%ld kB (peak %ld kB); %.2f kB per agent\n",
               m->before, m->connected, m->joined, m->round, m->peak,
               (double)(m->round - m->before) / b->n);
    printf("  ROUNDs ok: node ranks 0..%u once each, world_size %u, master_port %" PRId64
           " on all\n",
           b->n - 1, b->n, b->master_port);
    if (!b->lose)
        return;
    printf("  %u lost -> first EVENT restart: %8.3f s (the loss detected; last %.3f s)\n",
           b->lose, secs(b->t_lost, b->t_first_event), secs(b->t_lost, b->t_last_event));
    printf("  first EVENT restart -> the next generation's last ROUND: %8.3f s (%u agents)\n",
           secs(b->t_first_event, b->t_last_round2), b->nround2);
}
