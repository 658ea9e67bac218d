/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-record.h: what a job must not forget across a daemon restart (--state-dir): its
 * identity, its last generation and restart count, and whether that generation's workers may
 * still run. A restarted rdzvd rebuilds the job from this record before it places anyone, so a
 * spare that reconnects before the members never starts the job over, and generation numbers
 * and the restart count never go backwards (issue 12, defect 3).
 *
 * File DIR/job-<16 hex digits of a hash of run_id>.state, a JSON object, replaced atomically
 * (written to .tmp, fsynced unless told not to, renamed, directory fsynced). A record whose run_id
 * differs (a hash collision) is treated as absent.
 *
 * Ownership: the caller owns the record struct; these functions keep nothing. Loop thread only
 * (they do blocking file I/O, once per generation, never per JOIN). Errors are negative errnos;
 * none is logged here. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../proto/rdzv-msg.h"

struct rdzvd_job_record {
    char run_id[RDZV_ID_MAX + 1];
    int64_t min, max, max_restarts; /* the job's --nnodes MIN:MAX and --max-restarts */
    uint64_t generation;            /* the last generation sent to agents (0: none yet) */
    int64_t restart_count;          /* restarts used so far */
    bool running;                   /* generation's workers may still run: wait for them */
    int64_t nnodes, world_size;     /* of generation (running only) */
    uint16_t store_port;            /* generation's store port (running only) */
};

/* The record's file name for run_id into buf (at least 40 bytes). */
void rdzvd_job_record_name(const char *run_id, char *buf, size_t len);

/* Replace the record of rec->run_id in directory dirfd; sync: fsync the file and the directory
 * (false with --fsync no: it still survives a crash of rdzvd, not of the machine).
 * 0 or a negative errno. */
int rdzvd_job_record_save(int dirfd, const struct rdzvd_job_record *rec, bool sync);

/* Read the record of run_id from dirfd into *rec. 0; -ENOENT when there is none (or it belongs
 * to another run_id); -EBADMSG when it cannot be read as a record; another negative errno. */
int rdzvd_job_record_load(int dirfd, const char *run_id, struct rdzvd_job_record *rec);

/* Delete the record of run_id, if any. 0 or a negative errno (never -ENOENT). */
int rdzvd_job_record_drop(int dirfd, const char *run_id);

/* Delete DIR/<state_name>.journal if it exists: a new generation's store must not replay what
 * an earlier store of that name (a generation number used before a restart) left behind.
 * 0 or a negative errno (never -ENOENT). */
int rdzvd_job_record_drop_journal(int dirfd, const char *state_name);
