/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-journals.h: the generation stores' journals as the job layer names them (and drops
 * a stale one), and where the jobs' records live (the record itself, its codec and its key in
 * the job table and the hashes of nodes' secrets kept there: rdzvd-job-record.h).
 *
 * The records live in the job table (rdzvd_server_job_table), key "job/<run_id>". One path for
 * both ways of keeping it:
 *   - a single rdzvd with --state-dir journals the table there (DIR/jobs.journal, written and
 *     fsynced as each change is made, unless --fsync no), and replays it when it starts;
 *   - a replicated rdzvd (--peers) commits the table's changes through Raft with the main
 *     store's; every replica applies them.
 * Either way a change is a record of rdzvd-record.h applied by rdzvd_record_apply: the journal's
 * replay and Raft's apply are one path. Job records of an rdzvd before the journal (files
 * job-<hex>.state in --state-dir) are not read: rdzvd says so once when it starts.
 *
 * Ownership: the caller owns the record struct; these functions keep nothing. Loop thread only
 * (a single rdzvd's journal writes synchronously, once per generation, never per JOIN). Errors
 * are negative errnos. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-msg.h"
#include "daemon/job/rdzvd-job-record.h"
#include "daemon/data/rdzvd-store.h"

/* The HMAC key that turns HMAC-SHA256 into the journal names' hash (public: not a secret). */
#define RDZVD_STATE_NAME_KEY "rdzvd state file name v2"
/* Length of the longest name below, with its NUL. */
#define RDZVD_JOB_NAME_MAX 96

/* The state name (rdzvd-journal.h) of generation gen's store of run_id into buf
 * (RDZVD_JOB_NAME_MAX bytes): "job-<64 hex digits>-gen-<gen>", the digits SHA-256 of the run id
 * (as HMAC-SHA256 under RDZVD_STATE_NAME_KEY, through libcrypto: rdzv-auth.h), so no two run ids
 * share a journal however they are chosen. 0 or -EIO (buf is then ""). */
int rdzvd_job_state_name(const char *run_id, uint64_t gen, char *buf, size_t len);

/* Delete DIR/<state_name>.journal if it exists: a new generation's store must not replay what
 * an earlier store of that name (a generation number used before a restart) left behind. The
 * adapter's, as it carries out a Ready's JOURNAL_DROP (rdzvd-job-effects.c).
 * 0, -EEXIST when the file is another store's journal (rdzvd_journal_unlink: left as it is), or
 * a negative errno (never -ENOENT). */
int rdzvd_job_record_drop_journal(int dirfd, const char *state_name);
