/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-ends.c: how ended jobs ended, kept in the job table (rdzvd-job-ends.h, struct
 * rdzvd_job_end): written only from inside an ENDED decision's apply
 * (rdzvd-job-record.c), so the deciding rdzvd, a journal's replay and every replica's Raft apply
 * keep the same ones, and read when rdzvd starts or a replica leads (rdzvd_jobs_rebuild). */
#include "daemon/job/rdzvd-job-ends.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define END_KEY_PREFIX "end/"
#define ENDS_KEY "ends"
#define END_KEY_MAX (sizeof(END_KEY_PREFIX) + RDZV_ID_MAX + 1)

static size_t end_key(const char *run_id, char key[END_KEY_MAX])
{
    return (size_t)snprintf(key, END_KEY_MAX, END_KEY_PREFIX "%s", run_id);
}

void rdzvd_job_end_set(struct rdzvd_job_end *e, const char *run_id, const char *type,
                       int64_t exit_code, const char *summary, double ended_s, uint64_t gen,
                       int64_t restarts)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->run_id, sizeof(e->run_id), "%s", run_id);
    snprintf(e->type, sizeof(e->type), "%s", type);
    snprintf(e->summary, sizeof(e->summary), "%s", summary);
    e->exit_code = exit_code;
    e->ended_s = ended_s;
    e->generation = gen;
    e->restart_count = restarts;
}

json_t *rdzvd_job_end_json(const struct rdzvd_job_end *e)
{
    return json_pack("{s:s, s:I, s:f, s:I, s:I, s:s}", "type", e->type, "exit_code",
                     (json_int_t)e->exit_code, "ended_s", e->ended_s, "generation",
                     (json_int_t)e->generation, "restarts", (json_int_t)e->restart_count,
                     "summary", e->summary);
}

int rdzvd_job_end_from_json(json_t *o, const char *run_id, struct rdzvd_job_end *e)
{
    const char *type, *summary;
    json_int_t code, gen, restarts;
    double ended_s;

    memset(e, 0, sizeof(*e));
    if (!o || json_unpack(o, "{s:s, s:I, s:F, s:I, s:I, s:s}", "type", &type, "exit_code", &code,
                          "ended_s", &ended_s, "generation", &gen, "restarts", &restarts,
                          "summary", &summary) < 0 ||
        (strcmp(type, "succeeded") && strcmp(type, "failed") && strcmp(type, "cancelled") &&
         strcmp(type, "abandoned")) ||
        strlen(summary) > RDZV_SUMMARY_MAX || strlen(run_id) > RDZV_ID_MAX || gen < 0 ||
        restarts < 0 || !(ended_s >= 0))
        return -EBADMSG;
    rdzvd_job_end_set(e, run_id, type, code, summary, ended_s, (uint64_t)gen, restarts);
    return 0;
}

/* The run ids listed under "ends" (NUL-terminated, oldest first) into a malloc'd copy (*ids,
 * *len; NULL and 0 when none). 0 or -ENOMEM. */
static int ends_list(struct rdzvd_store *t, char **ids, size_t *len)
{
    const uint8_t *val;
    size_t vlen;

    *ids = NULL;
    *len = 0;
    if (rdzvd_store_get(t, ENDS_KEY, strlen(ENDS_KEY), &val, &vlen) < 0 || vlen == 0)
        return 0;
    if (!(*ids = malloc(vlen + 1)))
        return -ENOMEM;
    memcpy(*ids, val, vlen);
    (*ids)[vlen] = '\0'; /* a last id cut short still ends */
    *len = vlen;
    return 0;
}

unsigned rdzvd_job_ends_kept = RDZVD_JOB_ENDS_KEPT;

int rdzvd_job_end_keep(struct rdzvd_store *t, const struct rdzvd_job_end *e)
{
    char key[END_KEY_MAX], *ids, *out = NULL, *text = NULL;
    json_t *o = rdzvd_job_end_json(e);
    size_t len, off, olen = 0, n = 0, drop;
    int r = -ENOMEM;

    if (!o || !(text = json_dumps(o, JSON_COMPACT)) || ends_list(t, &ids, &len) < 0)
        goto out;
    if (!(out = malloc(len + strlen(e->run_id) + 1))) {
        free(ids);
        goto out;
    }
    for (off = 0; off < len; off += strlen(ids + off) + 1) /* the others, in their order */
        if (strcmp(ids + off, e->run_id)) {
            memcpy(out + olen, ids + off, strlen(ids + off) + 1);
            olen += strlen(ids + off) + 1;
            n++;
        }
    memcpy(out + olen, e->run_id, strlen(e->run_id) + 1);
    olen += strlen(e->run_id) + 1;
    n++;
    /* Past the bound the oldest go, with their outcomes. */
    for (drop = 0; n > rdzvd_job_ends_kept; n--) {
        (void)rdzvd_store_delete(t, key, end_key(out + drop, key));
        drop += strlen(out + drop) + 1;
    }
    free(ids);
    r = rdzvd_store_set(t, key, end_key(e->run_id, key), text, strlen(text));
    if (r >= 0)
        r = rdzvd_store_set(t, ENDS_KEY, strlen(ENDS_KEY), out + drop, olen - drop);
out:
    free(out);
    free(text);
    json_decref(o);
    return r < 0 ? r : 0;
}

int rdzvd_job_ends_foreach(struct rdzvd_store *t,
                           int (*fn)(const struct rdzvd_job_end *e, void *ud), void *ud)
{
    struct rdzvd_job_end e;
    char key[END_KEY_MAX], *ids;
    size_t len, off;
    int r = ends_list(t, &ids, &len);

    for (off = 0; r == 0 && off < len; off += strlen(ids + off) + 1) {
        const uint8_t *val;
        size_t vlen;
        json_t *o;

        if (strlen(ids + off) > RDZV_ID_MAX ||
            rdzvd_store_get(t, key, end_key(ids + off, key), &val, &vlen) < 0)
            continue;
        o = json_loadb((const char *)val, vlen, 0, NULL);
        if (rdzvd_job_end_from_json(o, ids + off, &e) == 0)
            r = fn(&e, ud);
        json_decref(o);
    }
    free(ids);
    return r;
}
