/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-identity.h: a member's identity, in one place: its node id, by which a job indexes
 * its members, and the secret that proves it.
 *
 * Secrets. The first JOIN of a node id in a job gets a random secret in JOINED, minted here; the
 * job's table keeps only its hash (ADMITTED, rdzvd-job-record.h), and a later JOIN that names the
 * node id proves it by carrying the secret (RENDEZVOUS.md, "Secrets"). The secret goes to no
 * other connection: a JOIN that proved it is given back its own.
 *
 * The index: a job's members by node id, a chained hash table with a random seed that doubles
 * past one member per bucket, so a JOIN's duplicate check stays O(1) at 10k agents. It owns its
 * bucket array, not the members (they are chained through their id_next field). The same table
 * by host name (by_host: chained through host_next) holds the first member of each host name
 * (the others not indexed: keys stay unique, so a crowd under one name costs O(1) a JOIN too),
 * to find the agents of one job on one host at a JOIN, each of which is told of the other.
 *
 * Loop thread only, from the job state machine; errors are negative errnos (-EIO, -ENOMEM). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-msg.h"
#include "daemon/job/rdzvd-job-record.h"

/* The public key that turns HMAC-SHA256 into the secrets' hash (v1 of ADMITTED's "hash"). */
#define RDZVD_SECRET_HASH_KEY "rdzv member secret v1"

/* A new member's secret: 32 random bytes as hex. 0 or -EIO (no random bytes). */
int rdzvd_member_secret_new(char out[RDZV_SECRET_HEX + 1]);

/* The hash the job's table keeps of secret (hex): 0 or -EIO (libcrypto missing). */
int rdzvd_member_secret_hash(const char *secret, char out[RDZVD_SECRET_HASH_HEX + 1]);

/* Whether given (a JOIN's, "" for none) hashes to hash (rdzvd_member_secret_hash). Constant time
 * in what it compares. */
bool rdzvd_member_secret_proves(const char *given, const char *hash);

/* Whether given (a JOIN's, "" for none) is secret. Constant time. */
bool rdzvd_member_secret_equal(const char *given, const char *secret);

struct rdzvd_member;

struct rdzvd_member_index {
    struct rdzvd_member **buckets;
    size_t nbuckets; /* power of two */
    size_t n;        /* members indexed */
    uint64_t seed;
    bool by_host;    /* keyed by join.host, not join.node_id */
};

/* 0 or -ENOMEM. */
int rdzvd_member_index_init(struct rdzvd_member_index *idx, bool by_host);
void rdzvd_member_index_free(struct rdzvd_member_index *idx);
/* The member with this node id (host name), or NULL. */
struct rdzvd_member *rdzvd_member_index_find(const struct rdzvd_member_index *idx,
                                             const char *key);
struct rdzvd_job;
/* A job's two indexes (by_id, by_host): 0 or -ENOMEM; freed (either may be unset). */
int rdzvd_job_index_init(struct rdzvd_job *j);
void rdzvd_job_index_free(struct rdzvd_job *j);
/* m into its job's indexes: by node id, and by host name when it is the first of its name. 0,
 * or -ENOMEM with m in neither. And out of them (not indexed by host: out of the first's
 * twin). */
int rdzvd_member_index(struct rdzvd_member *m);
void rdzvd_member_unindex(struct rdzvd_member *m);
/* Agents of one job on one host under one name are each told so: what m's agent is told of
 * o, another member with its host name, into buf (at most RDZV_WARNING_MAX bytes). */
void rdzvd_member_twin_text(const struct rdzvd_member *m, const struct rdzvd_member *o, char *buf,
                            size_t len);
/* Add m (its key must not be indexed yet). 0 or -ENOMEM (m is then not indexed). */
int rdzvd_member_index_add(struct rdzvd_member_index *idx, struct rdzvd_member *m);
/* Remove m if it is indexed. */
void rdzvd_member_index_del(struct rdzvd_member_index *idx, struct rdzvd_member *m);
