/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-gpu.c: GPU UUIDs (rdzv-gpu.h). */
#include "proto/rdzv-gpu.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-util.h"

#define UUID_PREFIX "GPU-"

/* Whether the character at i of the 32 digits after the prefix is followed by a dash there
 * (8-4-4-4-12). */
static bool dash_after(size_t i)
{
    return i == 7 || i == 11 || i == 15 || i == 19;
}

int rdzv_gpu_uuid_parse(const char *s, size_t len, struct rdzv_gpu_uuid *ret)
{
    const char *p = s + strlen(UUID_PREFIX);
    char hex[2 * sizeof(ret->b) + 1];
    struct rdzv_gpu_uuid u;

    if (len != RDZV_GPU_UUID_LEN || memcmp(s, UUID_PREFIX, strlen(UUID_PREFIX)) != 0)
        return -EINVAL;
    for (size_t i = 0; i < 2 * sizeof(u.b); i++) {
        hex[i] = *p++;
        if (dash_after(i) && *p++ != '-')
            return -EINVAL;
    }
    hex[2 * sizeof(u.b)] = '\0';
    if (rdzv_hex_decode(hex, u.b, sizeof(u.b)) < 0)
        return -EINVAL;
    *ret = u;
    return 0;
}

void rdzv_gpu_uuid_format(const struct rdzv_gpu_uuid *u, char out[RDZV_GPU_UUID_LEN + 1])
{
    char hex[2 * sizeof(u->b) + 1], *o = out + strlen(UUID_PREFIX);

    rdzv_hex(u->b, sizeof(u->b), hex);
    memcpy(out, UUID_PREFIX, strlen(UUID_PREFIX));
    for (size_t i = 0; i < 2 * sizeof(u->b); i++) {
        *o++ = hex[i];
        if (dash_after(i))
            *o++ = '-';
    }
    *o = '\0';
}

bool rdzv_gpu_set_has(const struct rdzv_gpu_set *s, const struct rdzv_gpu_uuid *u)
{
    for (unsigned i = 0; i < s->n && i < RDZV_GPU_UUIDS_MAX; i++)
        if (memcmp(&s->u[i], u, sizeof(*u)) == 0)
            return true;
    return false;
}

int rdzv_gpu_set_add(struct rdzv_gpu_set *s, const struct rdzv_gpu_uuid *u)
{
    if (rdzv_gpu_set_has(s, u))
        return 1;
    if (s->n >= RDZV_GPU_UUIDS_MAX)
        return -ENOSPC;
    s->u[s->n++] = *u;
    return 0;
}

bool rdzv_gpu_set_remove(struct rdzv_gpu_set *s, const struct rdzv_gpu_uuid *u)
{
    for (unsigned i = 0; i < s->n && i < RDZV_GPU_UUIDS_MAX; i++)
        if (memcmp(&s->u[i], u, sizeof(*u)) == 0) {
            memmove(&s->u[i], &s->u[i + 1], (s->n - i - 1) * sizeof(*u));
            s->n--;
            return true;
        }
    return false;
}

int rdzv_gpu_set_common(const struct rdzv_gpu_set *a, const struct rdzv_gpu_set *b)
{
    for (unsigned i = 0; i < a->n && i < RDZV_GPU_UUIDS_MAX; i++)
        if (rdzv_gpu_set_has(b, &a->u[i]))
            return (int)i;
    return -1;
}

bool rdzv_gpu_set_valid(const struct rdzv_gpu_set *s)
{
    if (s->n > RDZV_GPU_UUIDS_MAX)
        return false;
    for (unsigned i = 0; i < s->n; i++)
        for (unsigned k = 0; k < i; k++)
            if (memcmp(&s->u[i], &s->u[k], sizeof(s->u[i])) == 0)
                return false;
    return true;
}

json_t *rdzv_gpu_uuids_to_json(const struct rdzv_gpu_uuid *u, unsigned n)
{
    json_t *arr = json_array();
    char text[RDZV_GPU_UUID_LEN + 1];

    for (unsigned i = 0; arr && i < n; i++) {
        rdzv_gpu_uuid_format(&u[i], text);
        if (json_array_append_new(arr, json_string(text)) < 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

int rdzv_gpu_uuids_from_json(const json_t *arr, unsigned max, const char *what,
                             struct rdzv_gpu_uuid *u, unsigned *ret_n, char *err, size_t errlen)
{
    size_t i;

    if (!json_is_array(arr) || json_array_size(arr) > max) {
        snprintf(err, errlen, "%s must be an array of at most %u GPU UUIDs", what, max);
        return -EBADMSG;
    }
    for (i = 0; i < json_array_size(arr); i++) {
        const json_t *v = json_array_get(arr, i);

        if (!json_is_string(v) ||
            rdzv_gpu_uuid_parse(json_string_value(v), json_string_length(v), &u[i]) < 0) {
            snprintf(err, errlen,
                     "%s[%zu] is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-"
                     "xxxxxxxxxxxx)",
                     what, i);
            return -EBADMSG;
        }
        for (size_t k = 0; k < i; k++)
            if (memcmp(&u[k], &u[i], sizeof(u[i])) == 0) {
                snprintf(err, errlen, "%s[%zu] is given twice", what, i);
                return -EBADMSG;
            }
    }
    *ret_n = (unsigned)i;
    return 0;
}

json_t *rdzv_gpu_set_to_json(const struct rdzv_gpu_set *s)
{
    return rdzv_gpu_uuids_to_json(s->u, s->n < RDZV_GPU_UUIDS_MAX ? s->n : RDZV_GPU_UUIDS_MAX);
}

int rdzv_gpu_set_from_json(const json_t *arr, const char *what, struct rdzv_gpu_set *ret, char *err,
                           size_t errlen)
{
    return rdzv_gpu_uuids_from_json(arr, RDZV_GPU_UUIDS_MAX, what, ret->u, &ret->n, err, errlen);
}

int rdzv_gpu_set_parse_list(const char *list, struct rdzv_gpu_set *ret, char *err, size_t errlen)
{
    struct rdzv_gpu_set s = {.n = 0};
    const char *p = list;
    unsigned entry = 0;

    while (*p) {
        size_t len = strcspn(p, ",");
        const char *a = p, *z = p + len;
        struct rdzv_gpu_uuid u;

        while (a < z && (*a == ' ' || *a == '\t'))
            a++;
        while (z > a && (z[-1] == ' ' || z[-1] == '\t' || z[-1] == '\n'))
            z--;
        entry++;
        if (z > a && rdzv_gpu_uuid_parse(a, (size_t)(z - a), &u) < 0) {
            snprintf(err, errlen,
                     "entry %u, '%.*s', is not a GPU UUID (GPU-xxxxxxxx-xxxx-"
                     "xxxx-xxxx-xxxxxxxxxxxx)",
                     entry, (int)(z - a > 64 ? 64 : z - a), a);
            return -EINVAL;
        }
        if (z > a && rdzv_gpu_set_add(&s, &u) < 0) {
            snprintf(err, errlen, "more than %d GPU UUIDs", RDZV_GPU_UUIDS_MAX);
            return -EINVAL;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    *ret = s;
    return 0;
}
