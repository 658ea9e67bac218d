/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-worker.c: the progress and control lines (rdzv-worker.h, proto/WORKER.md). */
#include "proto/rdzv-worker.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-util.h"

/* An error line's text: 1 to RDZV_PROGRESS_ERROR_MAX bytes, no control character. */
static bool error_text_ok(const char *s, size_t n)
{
    if (!s || n == 0 || n > RDZV_PROGRESS_ERROR_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

int rdzv_progress_format(const struct rdzv_progress_line *p, char *buf, size_t len)
{
    int n;

    switch (p->kind) {
    case RDZV_PROGRESS_STEP:
        if (p->has_compute && p->compute_ms > RDZV_COMPUTE_MS_MAX)
            return -EINVAL;
        if (p->has_compute)
            n = snprintf(buf, len, "step %" PRIu64 " compute_ms %" PRIu32 "\n", p->step,
                         p->compute_ms);
        else
            n = snprintf(buf, len, "step %" PRIu64 "\n", p->step);
        break;
    case RDZV_PROGRESS_WAIT:
        n = snprintf(buf, len, "wait\n");
        break;
    case RDZV_PROGRESS_STACKS:
        n = snprintf(buf, len, "stacks\n");
        break;
    case RDZV_PROGRESS_DONE:
        n = snprintf(buf, len, "done\n");
        break;
    case RDZV_PROGRESS_CONTROL:
        n = snprintf(buf, len, "control\n");
        break;
    case RDZV_PROGRESS_SLOW:
        if (p->step < 1 || p->step > RDZV_PROGRESS_SLOW_MAX)
            return -EINVAL;
        n = snprintf(buf, len, "slow %" PRIu64 "\n", p->step);
        break;
    case RDZV_PROGRESS_ERROR:
        if (!error_text_ok(p->text, p->text_len))
            return -EINVAL;
        n = snprintf(buf, len, "error %.*s\n", (int)p->text_len, p->text);
        break;
    default:
        return -EINVAL;
    }
    return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

#define COMPUTE_TAG " compute_ms "

/* "step N compute_ms M": the compute part of a step line's n bytes after "step ", in *ret_ms;
 * *ret_n is left the length of N. 0 when there is none, 1 when there is, -EINVAL when bad. */
static int step_compute_parse(const char *s, size_t *ret_n, uint32_t *ret_ms)
{
    const char *sp = memchr(s, ' ', *ret_n);
    size_t tag = sizeof(COMPUTE_TAG) - 1, rest;
    char num[24];
    uint64_t ms;

    if (!sp)
        return 0;
    rest = *ret_n - (size_t)(sp - s);
    if (rest <= tag || rest - tag >= sizeof(num) || memcmp(sp, COMPUTE_TAG, tag) != 0)
        return -EINVAL;
    memcpy(num, sp + tag, rest - tag);
    num[rest - tag] = '\0';
    if (rdzv_parse_u64(num, &ms) < 0 || ms > RDZV_COMPUTE_MS_MAX)
        return -EINVAL;
    *ret_ms = (uint32_t)ms;
    *ret_n = (size_t)(sp - s);
    return 1;
}

int rdzv_progress_parse(const char *line, size_t n, struct rdzv_progress_line *p)
{
    struct rdzv_progress_line q = {0};
    char num[24];
    size_t m;
    int r;

    if (n == 4 && memcmp(line, "wait", 4) == 0) {
        *p = (struct rdzv_progress_line){.kind = RDZV_PROGRESS_WAIT};
        return 0;
    }
    if (n == 4 && memcmp(line, "done", 4) == 0) {
        *p = (struct rdzv_progress_line){.kind = RDZV_PROGRESS_DONE};
        return 0;
    }
    if (n == 7 && memcmp(line, "control", 7) == 0) {
        *p = (struct rdzv_progress_line){.kind = RDZV_PROGRESS_CONTROL};
        return 0;
    }
    if (n == 6 && memcmp(line, "stacks", 6) == 0) {
        *p = (struct rdzv_progress_line){.kind = RDZV_PROGRESS_STACKS};
        return 0;
    }
    if (n > 6 && memcmp(line, "error ", 6) == 0) {
        if (!error_text_ok(line + 6, n - 6))
            return -EINVAL;
        *p = (struct rdzv_progress_line){
            .kind = RDZV_PROGRESS_ERROR, .text = line + 6, .text_len = n - 6};
        return 0;
    }
    if (n < 6 || (memcmp(line, "step ", 5) != 0 && memcmp(line, "slow ", 5) != 0))
        return -EINVAL;
    q.kind = line[1] == 't' ? RDZV_PROGRESS_STEP : RDZV_PROGRESS_SLOW;
    m = n - 5;
    if (q.kind == RDZV_PROGRESS_STEP) {
        r = step_compute_parse(line + 5, &m, &q.compute_ms);
        if (r < 0)
            return r;
        q.has_compute = r > 0;
    }
    if (m == 0 || m >= sizeof(num))
        return -EINVAL;
    memcpy(num, line + 5, m);
    num[m] = '\0';
    if (rdzv_parse_u64(num, &q.step) < 0)
        return -EINVAL;
    if (q.kind == RDZV_PROGRESS_SLOW && (q.step < 1 || q.step > RDZV_PROGRESS_SLOW_MAX))
        return -EINVAL;
    *p = q;
    return 0;
}

/* s can go in a JSON string as it is. */
static bool json_plain(const char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            return false;
    return true;
}

int rdzv_worker_gen_format(const struct rdzv_worker_gen *g, char *buf, size_t len)
{
    bool id = g->nccl_id[0] != '\0';
    int n;

    if (g->rank >= g->world || !json_plain(g->master_addr) || !json_plain(g->nccl_id))
        return -EINVAL;
    n = snprintf(buf, len,
                 "{\"op\":\"generation\",\"generation\":%" PRIu64 ",\"rank\":%u"
                 ",\"world_size\":%u,\"local_rank\":%u,\"master_addr\":\"%s\",\"master_port\":%u,"
                 "\"nccl_id\":%s%s%s,\"restart_count\":%u}",
                 g->generation, g->rank, g->world, g->local_rank, g->master_addr, g->master_port,
                 id ? "\"" : "", id ? g->nccl_id : "null", id ? "\"" : "", g->restart_count);
    if (n < 0 || (size_t)n >= len)
        return -ENOSPC;
    return n;
}

static int get_uint(json_t *o, const char *key, uint64_t max, uint64_t *ret)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return -EINVAL;
    *ret = (uint64_t)json_integer_value(v);
    return 0;
}

int rdzv_worker_gen_parse(const char *line, struct rdzv_worker_gen *g)
{
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, NULL), *v;
    uint64_t gen, rank, world, lr = 0, port, rc = 0;
    const char *op, *addr, *id = "";
    int r = -EINVAL;

    if (!json_is_object(o))
        goto out;
    op = json_string_value(json_object_get(o, "op"));
    if (!op)
        goto out;
    if (strcmp(op, "generation") != 0) {
        r = 0;
        goto out;
    }
    addr = json_string_value(json_object_get(o, "master_addr"));
    v = json_object_get(o, "nccl_id");
    if (v && !json_is_null(v))
        id = json_string_value(v);
    if (get_uint(o, "generation", INT64_MAX, &gen) < 0 ||
        get_uint(o, "rank", 1u << 24, &rank) < 0 ||
        get_uint(o, "world_size", 1u << 24, &world) < 0 || world == 0 || rank >= world ||
        get_uint(o, "master_port", 65535, &port) < 0 || !addr || !*addr || !id ||
        strlen(addr) >= sizeof(g->master_addr) || strlen(id) >= sizeof(g->nccl_id) ||
        (json_object_get(o, "local_rank") && get_uint(o, "local_rank", 1u << 24, &lr) < 0) ||
        (json_object_get(o, "restart_count") && get_uint(o, "restart_count", UINT32_MAX, &rc) < 0))
        goto out;
    memset(g, 0, sizeof(*g));
    g->generation = gen;
    g->rank = (unsigned)rank;
    g->world = (unsigned)world;
    g->local_rank = (unsigned)lr;
    g->master_port = (uint16_t)port;
    g->restart_count = (unsigned)rc;
    strcpy(g->master_addr, addr);
    strcpy(g->nccl_id, id);
    r = 1;
out:
    json_decref(o);
    return r;
}
