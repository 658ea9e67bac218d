/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-index.h: a job's members by node id: a chained hash table with a random seed that
 * doubles past one member per bucket, so a JOIN's duplicate check stays O(1) at 10k agents.
 *
 * Ownership: the index owns its bucket array, not the members (they are chained through their
 * id_next field). Threads: the loop thread, from the job state machine only.
 * Errors: negative errnos (-ENOMEM). */
#pragma once
#include <stddef.h>
#include <stdint.h>

struct rdzvd_member;

struct rdzvd_member_index {
    struct rdzvd_member **buckets;
    size_t nbuckets; /* power of two */
    size_t n;        /* members indexed */
    uint64_t seed;
};

/* 0 or -ENOMEM. */
int rdzvd_member_index_init(struct rdzvd_member_index *idx);
void rdzvd_member_index_free(struct rdzvd_member_index *idx);
/* The member with this node id, or NULL. */
struct rdzvd_member *rdzvd_member_index_find(const struct rdzvd_member_index *idx,
                                             const char *node_id);
/* Add m (its join.node_id must not be indexed yet). 0 or -ENOMEM (m is then not indexed). */
int rdzvd_member_index_add(struct rdzvd_member_index *idx, struct rdzvd_member *m);
/* Remove m if it is indexed. */
void rdzvd_member_index_del(struct rdzvd_member_index *idx, struct rdzvd_member *m);
