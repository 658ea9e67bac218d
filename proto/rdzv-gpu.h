/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-gpu.h: GPU UUIDs, as an agent reports its node's at JOIN (proto/RENDEZVOUS.md, 1.8) and
 * rdzvd keeps them for a node put aside: "GPU-" and 32 hex digits grouped 8-4-4-4-12, the form
 * nvidia-smi and /proc/driver/nvidia print. Held as their 16 bytes (either case reads the same;
 * they print in lowercase), at most RDZV_GPU_UUIDS_MAX per node, each once.
 *
 * No I/O, no logging, no state: any thread may call these. Errors are negative errnos. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_GPU_UUID_LEN 40  /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
#define RDZV_GPU_UUIDS_MAX 64 /* per node: JOIN gpu_uuids, a node put aside */

struct rdzv_gpu_uuid {
    uint8_t b[16];
};

/* A node's GPUs: n distinct UUIDs. */
struct rdzv_gpu_set {
    unsigned n;
    struct rdzv_gpu_uuid u[RDZV_GPU_UUIDS_MAX];
};

/* s[0..len) is one GPU UUID (exactly its shape, hex of either case): 0 and *ret, or -EINVAL
 * (*ret untouched). */
int rdzv_gpu_uuid_parse(const char *s, size_t len, struct rdzv_gpu_uuid *ret);
/* u as "GPU-..." (lowercase) into out, NUL-terminated. */
void rdzv_gpu_uuid_format(const struct rdzv_gpu_uuid *u, char out[RDZV_GPU_UUID_LEN + 1]);

/* Whether s holds u. */
bool rdzv_gpu_set_has(const struct rdzv_gpu_set *s, const struct rdzv_gpu_uuid *u);
/* Add u to s: 0 (added), 1 (s held it already) or -ENOSPC (s is full; unchanged). */
int rdzv_gpu_set_add(struct rdzv_gpu_set *s, const struct rdzv_gpu_uuid *u);
/* Take u out of s: whether it was there. */
bool rdzv_gpu_set_remove(struct rdzv_gpu_set *s, const struct rdzv_gpu_uuid *u);
/* The index in a of the first UUID b holds too, or -1 when they share none. */
int rdzv_gpu_set_common(const struct rdzv_gpu_set *a, const struct rdzv_gpu_set *b);
/* s is what the functions here make: n <= RDZV_GPU_UUIDS_MAX, no UUID twice. */
bool rdzv_gpu_set_valid(const struct rdzv_gpu_set *s);

/* u[0..n) as a JSON array of strings, or NULL when out of memory. */
json_t *rdzv_gpu_uuids_to_json(const struct rdzv_gpu_uuid *u, unsigned n);
/* The JSON array arr (of what, for err) into u[0..*ret_n): 0, or -EBADMSG with a one-line reason
 * in err[0..errlen) when arr is not an array of at most max distinct GPU UUIDs (then u and
 * *ret_n are undefined). */
int rdzv_gpu_uuids_from_json(const json_t *arr, unsigned max, const char *what,
                             struct rdzv_gpu_uuid *u, unsigned *ret_n, char *err, size_t errlen);
/* The same for a set of at most RDZV_GPU_UUIDS_MAX. */
json_t *rdzv_gpu_set_to_json(const struct rdzv_gpu_set *s);
int rdzv_gpu_set_from_json(const json_t *arr, const char *what, struct rdzv_gpu_set *ret, char *err,
                           size_t errlen);
/* A comma-separated list (RDZV_GPU_UUIDS; blanks around entries and empty entries are skipped,
 * a UUID given twice counts once) into *ret: 0, or -EINVAL with err saying which entry is not a
 * GPU UUID, or that there are more than RDZV_GPU_UUIDS_MAX. */
int rdzv_gpu_set_parse_list(const char *list, struct rdzv_gpu_set *ret, char *err, size_t errlen);
