/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-status-limits.c: the status JSON's figures of what rdzvd holds for clients against its
 * limits (rdzv-status.h): {"held", "limit"} objects, and the jobs' with "waiting". */
#include "proto/rdzv-status.h"

#include <errno.h>
#include <stdio.h>

/* One {"held", "limit"} object of the status: its key and where struct rdzv_status keeps it. */
struct held_limit {
    const char *key;
    size_t held, limit; /* offsets of int64_t fields */
};

#define HL(k, h, l) {k, offsetof(struct rdzv_status, h), offsetof(struct rdzv_status, l)}
static const struct held_limit held_limits[] = {
    HL("store_bytes", store_held, store_limit),
    HL("descriptors", fds_held, fds_limit),
    HL("input_bytes", input_held, input_limit),
};
#undef HL

#define FIELD(st, off) (*(int64_t *)((char *)(st) + (off)))
#define CFIELD(st, off) (*(const int64_t *)((const char *)(st) + (off)))

int rdzv_status_limits_put(json_t *root, const struct rdzv_status *st)
{
    for (size_t i = 0; i < sizeof(held_limits) / sizeof(held_limits[0]); i++) {
        const struct held_limit *hl = &held_limits[i];

        if (CFIELD(st, hl->limit) > 0 &&
            json_object_set_new(root, hl->key,
                                json_pack("{s:I, s:I}", "held", (json_int_t)CFIELD(st, hl->held),
                                          "limit", (json_int_t)CFIELD(st, hl->limit))) < 0)
            return -ENOMEM;
    }
    if (st->jobs_limit > 0 &&
        json_object_set_new(root, "jobs_held",
                            json_pack("{s:I, s:I, s:I}", "held", (json_int_t)st->jobs_held,
                                      "waiting", (json_int_t)st->jobs_waiting, "limit",
                                      (json_int_t)st->jobs_limit)) < 0)
        return -ENOMEM;
    return 0;
}

int rdzv_status_limits_parse(json_t *root, struct rdzv_status *st, char *err, size_t errlen)
{
    json_int_t held, limit, waiting = 0;
    json_error_t jerr;
    json_t *o;

    for (size_t i = 0; i < sizeof(held_limits) / sizeof(held_limits[0]); i++) {
        const struct held_limit *hl = &held_limits[i];

        if (!(o = json_object_get(root, hl->key)))
            continue;
        if (json_unpack_ex(o, &jerr, 0, "{s:I, s:I}", "held", &held, "limit", &limit) < 0 ||
            held < 0 || limit < 0) {
            snprintf(err, errlen, "'%s' malformed or out of range", hl->key);
            return -EBADMSG;
        }
        FIELD(st, hl->held) = held;
        FIELD(st, hl->limit) = limit;
    }
    if (!(o = json_object_get(root, "jobs_held")))
        return 0;
    if (json_unpack_ex(o, &jerr, 0, "{s:I, s:I, s:I}", "held", &held, "waiting", &waiting,
                       "limit", &limit) < 0 ||
        held < 0 || waiting < 0 || limit < 0) {
        snprintf(err, errlen, "'jobs_held' malformed or out of range");
        return -EBADMSG;
    }
    st->jobs_held = held;
    st->jobs_waiting = waiting;
    st->jobs_limit = limit;
    return 0;
}
