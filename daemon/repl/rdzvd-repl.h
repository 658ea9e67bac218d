/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-repl.h: a store replicated through Raft (canonical/raft, Debian's libraft-dev).
 * The state machine of each replica is its store; a Raft log entry is a u64 origin (the process
 * that made the changes in its own store before proposing them, or 0) and a run of store records
 * (rdzvd-record.h; then up to 7 zero bytes, as libraft wants entries a multiple of 8 bytes long),
 * the very records the journal appends (and records of the job table, RDZVD_TABLE_JOBS: its jobs'
 * decisions, rdzvd-job-record.h), and applying an entry is the journal's replay of them
 * (rdzvd_record_apply). A snapshot is the store's dump as records; restoring one
 * empties the store and applies it. Every replica applies the same entries in the same order, so
 * the stores stay equal; a write acknowledged by the leader (its raft_apply callback) is on a
 * majority and survives any minority of failures.
 *
 * Ownership: struct rdzvd_repl_fsm is the caller's (embedded or allocated), and so is the store,
 * which must outlive it. Threads: whichever thread drives the raft instance (rdzvd's loop).
 * Errors: negative errno, or libraft's RAFT_* codes where libraft asks for them (the fsm
 * callbacks). */
#pragma once
#include <raft.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/data/rdzvd-store.h"

struct rdzvd_repl_fsm {
    struct raft_fsm fsm; /* first: what raft_init / raft_fixture_grow take */
    struct rdzvd_store *store;
    /* The job table (RDZVD_TABLE_JOBS records: rdzvd-job-journals.h), or NULL: such records are
     * then refused (-ENOENT, counted in refused) as a full store refuses a SET. */
    struct rdzvd_store *jobs;
    /* The origin of the entries this process proposes after making their changes in its store
     * itself (a leader's rdzvd-replica.c; 0: none): they are not applied again. While local_ahead
     * (such an entry not applied yet), snapshots are refused (RAFT_BUSY). */
    uint64_t origin;
    bool local_ahead;
    bool applying;     /* true while an entry or a snapshot changes the store */
    uint64_t skipped;  /* entries of this origin, not applied again */
    uint64_t applied;  /* entries applied */
    uint64_t records;  /* records applied */
    uint64_t refused;  /* records the store refused (a limit): the same on every replica */
    uint64_t restores; /* snapshots installed */
};

/* Set up f as the state machine of store and of the job table jobs (may be NULL); the fsm field
 * goes to raft_init. A snapshot holds both. Cannot fail. */
void rdzvd_repl_fsm_init(struct rdzvd_repl_fsm *f, struct rdzvd_store *store,
                         struct rdzvd_store *jobs);

/* The result an entry's apply hands back to the leader's raft_apply callback: 0 when every
 * record applied, else the first store error (negative errno), as a pointer-sized integer. */
static inline int rdzvd_repl_result(void *result)
{
    return (int)(intptr_t)result;
}

#define RDZVD_REPL_ORIGIN_LEN 8u

/* Records (rdzvd-record.h, whole) records[0..n) of origin as a new log entry, padded: buf->base is
 * raft_malloc'd (raft_apply takes it over; raft_free it if raft_apply fails). 0 or -ENOMEM. */
int rdzvd_repl_batch(struct raft_buffer *buf, uint64_t origin, const void *records, size_t n);

/* One record of what, key and val as the payload of a new log entry (origin 0), zero-padded to a
 * multiple of 8 bytes as libraft requires: buf->base is raft_malloc'd (raft_apply takes it over;
 * raft_free it if raft_apply fails). 0, -ENOMEM, -EMSGSIZE. */
int rdzvd_repl_entry(struct raft_buffer *buf, enum rdzvd_change what, const void *key, size_t klen,
                     const void *val, size_t vlen);
