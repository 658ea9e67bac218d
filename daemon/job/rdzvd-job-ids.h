/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-ids.h: a job's node ids in the job table, and the hashes of their secrets
 * (rdzvd-job-record.h, "A node's identity"): what the decisions ADMITTED, FORGOTTEN and ENDED do
 * to them, and how ADMITTED and FORGOTTEN are written. Below the job state machine, as the record
 * is: rdzvd_decision_apply (rdzvd-job-records.c) calls it, wherever a decision is applied.
 *
 * Keys: "sec/" run_id NUL node_id: the hash (hex); "ids/" run_id: the job's node ids, each
 * NUL-terminated, oldest first, at most the job table's ids_bytes_max bytes (struct
 * rdzvd_job_bounds, rdzvd-job-record.h).
 * Loop thread only. Errors are negative errnos. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "proto/rdzv-msg.h"
#include "daemon/data/rdzvd-store.h"

/* What ADMITTED records of a node: its node id and the hash of its secret (hex). */
#define RDZVD_SECRET_HASH_HEX 64
#define RDZVD_JOB_IDS_BYTES_MAX (256u << 10)
struct rdzvd_job_record_admitted {
    char node_id[RDZV_ID_MAX + 1];
    char hash[RDZVD_SECRET_HASH_HEX + 1];
};

/* The hash (hex) ADMITTED recorded for node_id of run_id in t, into hash: 0 or -ENOENT. */
int rdzvd_job_secret_hash_get(struct rdzvd_store *t, const char *run_id, const char *node_id,
                              char hash[RDZVD_SECRET_HASH_HEX + 1]);

/* ADMITTED: keep the hash of a's secret in t. 0, -EEXIST (the node id has one: a node's secret
 * is never replaced), -ENOSPC (the job's node ids would pass ids_max bytes) or the store's
 * error. */
int rdzvd_job_ids_admit(struct rdzvd_store *t, const char *run_id,
                        const struct rdzvd_job_record_admitted *a, size_t ids_max);

/* The hashes of run_id's nodes go (ENDED: only NULL), or only node id only's with its place in
 * the list (FORGOTTEN), the others kept in their order: 1 when there were none, else 0 or the
 * store's error. */
int rdzvd_job_ids_forget(struct rdzvd_store *t, const char *run_id, const char *only);

/* run_id's node ids in t, oldest first, each NUL-terminated: a copy into *ids (malloc'd, with a
 * NUL past its end; NULL: none), its length into *len (0: none). 0 or -ENOMEM. */
int rdzvd_job_ids_get(struct rdzvd_store *t, const char *run_id, char **ids, size_t *len);
/* Their length alone (what a JOIN reads while they fit: not the whole list). */
size_t rdzvd_job_ids_len(struct rdzvd_store *t, const char *run_id);

/* a is what ADMITTED (admitted) or FORGOTTEN (!admitted, the node id only) takes? */
bool rdzvd_job_admitted_valid(const struct rdzvd_job_record_admitted *a, bool admitted);

/* ADMITTED's or FORGOTTEN's JSON, without "decision" (NULL: out of memory); and a back from it:
 * 0 or -EBADMSG. */
json_t *rdzvd_job_admitted_json(const char *run_id, const struct rdzvd_job_record_admitted *a,
                                bool admitted);
int rdzvd_job_admitted_from_json(json_t *o, bool admitted, struct rdzvd_job_record_admitted *a);
