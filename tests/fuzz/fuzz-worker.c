/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz-worker.c: the worker lines (proto/rdzv-worker.h) from arbitrary bytes, as an agent reads a
 * progress channel and a worker its control channel: the input is split at newlines; each line
 * goes to both parsers. Properties: what a parser accepts formats again and parses back to the
 * same values; a formatted progress line is no longer than the line read; nothing crashes. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/rdzv-worker.h"
#include "fuzz-check.h"

static void progress(const char *line, size_t n)
{
    struct rdzv_progress_line p, q;
    char buf[RDZV_PROGRESS_ERROR_LINE_MAX + 2];
    int len;

    if (n > RDZV_PROGRESS_ERROR_LINE_MAX || rdzv_progress_parse(line, n, &p) < 0 ||
        (p.kind != RDZV_PROGRESS_ERROR && n > RDZV_PROGRESS_LINE_MAX))
        return;
    len = rdzv_progress_format(&p, buf, sizeof(buf));
    CHECK(len > 0 && buf[len - 1] == '\n');
    /* The written form is the shortest (the reader also takes leading zeros). */
    CHECK((size_t)len - 1 <= n);
    CHECK(rdzv_progress_parse(buf, (size_t)len - 1, &q) == 0 && q.kind == p.kind &&
          q.step == p.step && q.text_len == p.text_len &&
          (!p.text_len || memcmp(q.text, p.text, p.text_len) == 0));
}

static void control(const char *line)
{
    struct rdzv_worker_gen g, h;
    char buf[RDZV_WORKER_LINE_MAX];
    int r = rdzv_worker_gen_parse(line, &g), len;

    CHECK(r == 1 || r == 0 || r == -EINVAL);
    if (r != 1)
        return;
    CHECK(g.rank < g.world);
    len = rdzv_worker_gen_format(&g, buf, sizeof(buf));
    if (len == -EINVAL) /* a string the agent never writes (it would need escaping) */
        return;
    CHECK(len > 0);
    CHECK(rdzv_worker_gen_parse(buf, &h) == 1);
    CHECK(h.generation == g.generation && h.rank == g.rank && h.world == g.world &&
          h.local_rank == g.local_rank && h.master_port == g.master_port &&
          h.restart_count == g.restart_count && strcmp(h.master_addr, g.master_addr) == 0 &&
          strcmp(h.nccl_id, g.nccl_id) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size + 1);
    size_t start = 0;

    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    for (size_t i = 0; i <= size; i++) {
        if (i < size && copy[i] != '\n')
            continue;
        copy[i] = '\0';
        progress(copy + start, i - start);
        if (i - start < RDZV_WORKER_LINE_MAX && !memchr(copy + start, '\0', i - start))
            control(copy + start);
        start = i + 1;
    }
    free(copy);
    return 0;
}
