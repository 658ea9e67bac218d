/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-secret.h: a member's secret, in one place. The first JOIN of a node id in a job gets
 * a random secret in JOINED, minted here; the job's table keeps only its hash (ADMITTED,
 * rdzvd-job-record.h), and a later JOIN that names the node id proves it by carrying the secret
 * (RENDEZVOUS.md, "Secrets"). The secret goes to no other connection: a JOIN that proved it is
 * given back its own. Loop thread only; errors are negative errnos. */
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
