/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-secret.h: a member's secret, in one place. JOINED gives each member of a job a
 * secret; a resume or a takeover of that member must carry it (RENDEZVOUS.md, "Secrets"). It is
 * HMAC-SHA256 of the run id and the node id under the member key, so that a restarted rdzvd, or
 * the next leader, knows the secrets it gave:
 *   - the token, when rdzvd has one;
 *   - else a key kept in --state-dir (RDZVD_MEMBER_KEY_FILE), made the first time;
 *   - else the key kept in the job table (a replicated rdzvd's), made by the first leader that
 *     needs it and replicated like a record;
 *   - with none, each member's secret is random and goes with the member.
 * Loop thread only; errors are negative errnos. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-msg.h"
#include "daemon/data/rdzvd-store.h"

/* Where a job's member secrets derive from (rdzvd_job_host's member key and record table). */
struct rdzvd_member_keys {
    const uint8_t *key; /* the token's or --state-dir's; NULL: the table's, if any */
    size_t len;
    struct rdzvd_store *table; /* the job table; NULL: none */
};

#define RDZVD_MEMBER_KEY_FILE "member.key" /* in --state-dir */
#define RDZVD_MEMBER_KEY_BYTES 32

/* The member key in --state-dir dirfd: read, or made (random, mode 0600, fsynced) the first
 * time. 0, -EBADMSG (a file of another length) or a negative errno. */
int rdzvd_member_key_load(int dirfd, uint8_t key[RDZVD_MEMBER_KEY_BYTES]);

/* The member key kept in job table t: *key points into the table and stays valid (the key never
 * changes). 0, -EBADMSG (an entry of another length) or a negative errno of the table. */
int rdzvd_job_table_member_key(struct rdzvd_store *t, const uint8_t **key, size_t *len);

/* The secret of node_id in run_id when it derives from a member key (k's own, else its job
 * table's), into out (hex): 0; -ENOKEY when there is no key, -EIO when HMAC failed. */
int rdzvd_member_secret_derive(const struct rdzvd_member_keys *k, const char *run_id,
                               const char *node_id, char out[RDZV_SECRET_HEX + 1]);

/* A new member's secret: derived, or random when there is no key. 0 or -EIO (no random bytes). */
int rdzvd_member_secret_new(const struct rdzvd_member_keys *k, const char *run_id,
                            const char *node_id, char out[RDZV_SECRET_HEX + 1]);

/* Whether given (a JOIN's, "" for none) is secret. Constant time. */
bool rdzvd_member_secret_equal(const char *given, const char *secret);
