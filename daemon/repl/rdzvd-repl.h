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
    /* The log on disk, as this replica wrote it: the bytes of the entries applied since the last
     * snapshot (taken or installed), and that snapshot's size. */
    uint64_t log_bytes, snap_bytes;
    /* With raft set (rdzvd_repl_fsm_snapshots), a snapshot is taken at the first entry applied
     * once log_bytes passes the larger of RDZVD_REPL_SNAPSHOT_BYTES and twice snap_bytes,
     * besides every RDZVD_REPL_SNAPSHOT_ENTRIES entries; and with want_snapshot, at entry
     * want_index, the first that leaves the command entries of the time it was asked (the last
     * at index last_cmd then) out of the trailing ones: libraft then deletes the log's closed
     * segments up to them. */
    struct raft *raft;
    bool want_snapshot;
    uint64_t last_cmd, want_index;
};

/* A snapshot after this many entries at most (libraft's default), and after this many bytes of
 * them (a segment of libraft's log: snapshots more often would free no file). */
#define RDZVD_REPL_SNAPSHOT_ENTRIES 1024u
#define RDZVD_REPL_SNAPSHOT_BYTES (8u << 20)
/* The entries kept behind a snapshot for a follower that lags (libraft's default is 2048, up to
 * 2048 entries of --max-value-len each on disk): one further behind gets the snapshot. */
#define RDZVD_REPL_SNAPSHOT_TRAILING 8u

/* Set up f as the state machine of store and of the job table jobs (may be NULL); the fsm field
 * goes to raft_init. A snapshot holds both. Cannot fail. */
void rdzvd_repl_fsm_init(struct rdzvd_repl_fsm *f, struct rdzvd_store *store,
                         struct rdzvd_store *jobs);

/* Take snapshots by bytes as well as by entries (see want_snapshot), on raft (raft_init done). */
void rdzvd_repl_fsm_snapshots(struct rdzvd_repl_fsm *f, struct raft *raft);
/* Ask for a snapshot that leaves no command entry of now behind it (a change was refused for
 * want of room): false when the last snapshot already did (none would free anything), else
 * true, and the log needs entries (barriers will do) up to want_index. */
bool rdzvd_repl_fsm_want_snapshot(struct rdzvd_repl_fsm *f);

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
