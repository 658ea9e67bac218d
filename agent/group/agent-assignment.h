/* SPDX-License-Identifier: Apache-2.0 */
/* agent-assignment.h: what one rendezvous round gives a node (a plain struct, no code), shared by
 * the worker group (agent-workers.h), which starts workers for it, and the worker environment
 * (agent-env.h), which turns it into torchrun's variables. Strings are borrowed from the caller:
 * agent_group_start() copies what it keeps. */
#pragma once
#include <stdint.h>

/* What the rendezvous round gave this node. Strings are copied by agent_group_start(). */
struct agent_assignment {
    uint64_t generation;     /* RDZV_GENERATION */
    unsigned node_rank;      /* GROUP_RANK */
    unsigned nnodes;         /* GROUP_WORLD_SIZE */
    unsigned rank_offset;    /* global rank of local rank 0 */
    unsigned world_size;     /* WORLD_SIZE (sum of nproc over nodes) */
    const char *master_addr; /* MASTER_ADDR: the job's per-generation store */
    unsigned master_port;    /* MASTER_PORT */
    const char *nccl_id_hex; /* RDZV_NCCL_UNIQUE_ID: 256 lowercase hex chars, or NULL */
    unsigned restart_count;  /* TORCHELASTIC_RESTART_COUNT (job-wide, from the daemon) */
};
