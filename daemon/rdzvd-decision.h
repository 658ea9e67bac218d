/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-decision.h: a job's record in the job table: what a job must not forget across a daemon
 * restart or a change of leader (its identity, its last generation and restart count, whether
 * that generation's workers may still run, and who they are). A restarted rdzvd (or the next
 * leader) rebuilds the job from this record before it places anyone, so a spare that reconnects
 * before the members never starts the job over, and generation numbers and the restart count
 * never go backwards (issue 12, defect 3).
 *
 * The records live in the job table (rdzvd_server_job_table), key "job/<run_id>", a JSON object
 * that names the run id it belongs to. Below the job state machine (the store's layer): the
 * journal's replay and Raft's apply reach it without the job layer (rdzvd-job-record.h keeps what
 * only that layer uses).
 *
 * Ownership: the caller owns the record struct; these functions keep nothing but what get
 * allocates in it (rdzvd_job_record_clear). Loop thread only. Errors are negative errnos. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../proto/rdzv-msg.h"
#include "rdzvd-store.h"

/* A node of a running generation, at its node rank: what the generation formed (issue 18,
 * item 2), so that a new leader (or a restarted rdzvd) knows who holds each node rank, not only
 * how many there were. Its global ranks are rank_offset .. rank_offset + nproc - 1, rank_offset
 * the sum of the nproc of the node ranks below it (as rdzvd forms a round). */
struct rdzvd_job_record_node {
    char node_id[RDZV_ID_MAX + 1];
    int64_t nproc;
};

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
    /* The generation's nodes by node rank, nnodes of them (running only), or NULL: a record of
     * an rdzvd before membership was recorded, or one made from an agent's claim. put reads the
     * caller's; get allocates them (rdzvd_job_record_clear frees them). */
    struct rdzvd_job_record_node *nodes;
    /* The generation's NCCL unique ids, hex (running only): n_ids of them (0: none). Owned as
     * nodes is. */
    unsigned n_ids;
    char (*ids)[RDZV_NCCL_HEX_LEN + 1];
};

/* Free what rdzvd_job_record_get allocated in rec (nodes, ids), and set them NULL. */
void rdzvd_job_record_clear(struct rdzvd_job_record *rec);

/* The record of run_id in the job table t. A replica's put or del goes to the log with its
 * turn's other changes, and no reply of that turn leaves before it commits (a single rdzvd's,
 * to its journal before put returns): a decision an agent sees (a generation formed, a restart
 * charged, the job's end) is on a majority (on disk) first, and a new leader rebuilds the job
 * from it, not from what agents claim.
 * A record's nodes, when present, are exactly nnodes, their nproc 1..RDZV_NPROC_MAX summing to
 * world_size; its ids at most RDZV_MAX_NCCL_IDS hex strings of RDZV_NCCL_HEX_LEN digits: put
 * refuses anything else (-EINVAL), get reads it as not a record (-EBADMSG).
 * put: 0, -EINVAL, -ENOMEM or the store's error; get: 0, -ENOENT (none), -EBADMSG (not a record
 * of run_id), -ENOMEM;
 * del: 0 (also when there was none) or the store's error. */
int rdzvd_job_record_put(struct rdzvd_store *t, const struct rdzvd_job_record *rec);
int rdzvd_job_record_get(struct rdzvd_store *t, const char *run_id, struct rdzvd_job_record *rec);
int rdzvd_job_record_del(struct rdzvd_store *t, const char *run_id);
