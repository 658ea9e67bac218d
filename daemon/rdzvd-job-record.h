/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-record.h: what a job must not forget across a daemon restart (--state-dir): its
 * identity, its last generation and restart count, and whether that generation's workers may
 * still run. A restarted rdzvd rebuilds the job from this record before it places anyone, so a
 * spare that reconnects before the members never starts the job over, and generation numbers
 * and the restart count never go backwards (issue 12, defect 3).
 *
 * File DIR/job-<64 hex digits>.state, a JSON object, replaced atomically (written to .tmp,
 * fsynced unless told not to, renamed, directory fsynced). The hex digits are SHA-256 of the run
 * id (as HMAC-SHA256 under the fixed key RDZVD_STATE_NAME_KEY, through libcrypto: rdzv-auth.h),
 * so no two run ids share a file, however they are chosen (issue 20, finding 4: the 64-bit hash
 * used before was collided in a second). The record holds its run_id and every save, load and
 * delete checks it: a file that holds another run id is never overwritten, deleted or read.
 *
 * Records and journals of rdzvd before this scheme (job-<16 hex digits>...) are ignored: a
 * restarted rdzvd does not rebuild the jobs of a pre-upgrade --state-dir (load logs a line
 * saying so when it finds one for the run id).
 *
 * Ownership: the caller owns the record struct; these functions keep nothing. Loop thread only
 * (they do blocking file I/O, once per generation, never per JOIN). Errors are negative errnos;
 * only load logs (the pre-upgrade line above, and a warning for a record of another run id). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../proto/rdzv-msg.h"
#include "rdzvd-store.h"

struct rdzvd_job_record {
    char run_id[RDZV_ID_MAX + 1];
    int64_t min, max, max_restarts; /* the job's --nnodes MIN:MAX and --max-restarts */
    uint64_t generation;            /* the last generation sent to agents (0: none yet) */
    int64_t restart_count;          /* restarts used so far */
    bool running;                   /* generation's workers may still run: wait for them */
    int64_t nnodes, world_size;     /* of generation (running only) */
    uint16_t store_port;            /* generation's store port (running only) */
    /* Where node rank 0's agent hosts that store (a replicated rdzvd); "": rdzvd's own. */
    char store_addr[RDZV_STORE_ADDR_MAX + 1];
};

/* The HMAC key that turns HMAC-SHA256 into the file names' hash (public: not a secret). */
#define RDZVD_STATE_NAME_KEY "rdzvd state file name v2"
/* Length of the longest name below, with its NUL. */
#define RDZVD_JOB_NAME_MAX 96

/* The record's file name for run_id into buf (RDZVD_JOB_NAME_MAX bytes): "job-<sha>.state".
 * 0, or -EIO when libcrypto cannot be loaded (buf is then ""). */
int rdzvd_job_record_name(const char *run_id, char *buf, size_t len);

/* The state name (rdzvd-journal.h) of generation gen's store of run_id into buf
 * (RDZVD_JOB_NAME_MAX bytes): "job-<sha>-gen-<gen>". 0 or -EIO (buf is then ""). */
int rdzvd_job_state_name(const char *run_id, uint64_t gen, char *buf, size_t len);

/* Replace the record of rec->run_id in directory dirfd; sync: fsync the file and the directory
 * (false with --fsync no: it still survives a crash of rdzvd, not of the machine).
 * 0, -EEXIST when the file holds the record of another run id (left as it is), or another
 * negative errno. */
int rdzvd_job_record_save(int dirfd, const struct rdzvd_job_record *rec, bool sync);

/* Read the record of run_id from dirfd into *rec. 0; -ENOENT when there is none (or it belongs
 * to another run_id: logged); -EBADMSG when it cannot be read as a record; another negative errno.
 */
int rdzvd_job_record_load(int dirfd, const char *run_id, struct rdzvd_job_record *rec);

/* Delete the record of run_id, if any. 0, -EEXIST when the file holds the record of another run
 * id (left as it is), or another negative errno (never -ENOENT). */
int rdzvd_job_record_drop(int dirfd, const char *run_id);

/* Delete DIR/<state_name>.journal if it exists: a new generation's store must not replay what
 * an earlier store of that name (a generation number used before a restart) left behind.
 * 0, -EEXIST when the file is another store's journal (rdzvd_journal_unlink: left as it is), or
 * a negative errno (never -ENOENT). */
int rdzvd_job_record_drop_journal(int dirfd, const char *state_name);

/* A replicated rdzvd (--peers) keeps the same records in its job table (rdzvd_server_job_table),
 * replicated through Raft with its main store: key "job/<run_id>", the same JSON text as a
 * file's, which names the run id it belongs to. A leader's put or del goes to the log with its
 * turn's other changes, and no reply of that turn leaves before it commits: a decision an agent
 * sees (a generation formed, a restart charged, the job's end) is on a majority first, and a new
 * leader rebuilds the job from it, not from what agents claim.
 * put: 0 or the store's error; get: 0, -ENOENT (none), -EBADMSG (not a record of run_id);
 * del: 0 (also when there was none) or the store's error. */
int rdzvd_job_record_put(struct rdzvd_store *t, const struct rdzvd_job_record *rec);
int rdzvd_job_record_get(struct rdzvd_store *t, const char *run_id, struct rdzvd_job_record *rec);
int rdzvd_job_record_del(struct rdzvd_store *t, const char *run_id);

/* The key members' secrets derive from (rdzvd-job-sm.h) when rdzvd has no token: kept in the job
 * table, so that the next leader knows the secrets the last one gave; made (random, and
 * replicated like a record) by the first leader that needs it. *key points into the table and
 * stays valid (the key never changes). 0 or a negative errno. */
int rdzvd_job_table_member_key(struct rdzvd_store *t, const uint8_t **key, size_t *len);
