/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-replica-ops.c: rdzvd_replica_ops, the table of this build's replica functions
 * (rdzvd-replica.c on libraft, or rdzvd-replica-none.c). See rdzvd-replica.h. */
#include "daemon/repl/rdzvd-replica.h"

const struct rdzvd_replica_ops rdzvd_replica_ops = {
    .create = rdzvd_replica_new,
    .start = rdzvd_replica_start,
    .role = rdzvd_replica_role,
    .leader = rdzvd_replica_leader,
    .id = rdzvd_replica_id,
    .count = rdzvd_replica_count,
    .voters = rdzvd_replica_voters,
    .change = rdzvd_replica_change,
    .responsive = rdzvd_replica_responsive,
    .shutdown = rdzvd_replica_shutdown,
    .bound = rdzvd_replica_bound,
    .busy = rdzvd_replica_busy,
    .flush = rdzvd_replica_flush,
    .close = rdzvd_replica_close,
    .destroy = rdzvd_replica_free,
};
