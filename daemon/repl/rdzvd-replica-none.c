/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-replica-none.c: rdzvd built without libraft (libraft-dev missing at build time): --peers
 * is refused with what to install; nothing else changes. See rdzvd-replica.h. */
#include <errno.h>
#include <stdio.h>

#include "common/rdzv-log.h"
#include "daemon/repl/rdzvd-replica.h"

int rdzvd_peers_parse(const char *list, unsigned self_id, uint16_t port, struct rdzvd_peers *out,
                      char *err, size_t errlen)
{
    (void)list, (void)self_id, (void)port, (void)out;
    snprintf(err, errlen,
             "--peers: this rdzvd was built without libraft; install libraft-dev "
             "and rebuild to run replicas");
    return -ENOTSUP;
}

int rdzvd_replica_new(uv_loop_t *loop, const struct rdzvd_peers *peers, const char *dir,
                      const struct rdzv_token *token, struct rdzvd_store *store,
                      struct rdzvd_store *jobs, const struct rdzvd_replica_hooks *hooks, void *ud,
                      struct rdzvd_replica **ret)
{
    (void)loop, (void)peers, (void)dir, (void)token, (void)store, (void)jobs, (void)hooks, (void)ud;
    *ret = NULL;
    return log_error_errno(-ENOTSUP, "replication: built without libraft");
}

int rdzvd_replica_start(struct rdzvd_replica *r)
{
    (void)r;
    return -ENOTSUP;
}

enum rdzvd_role rdzvd_replica_role(struct rdzvd_replica *r)
{
    (void)r;
    return RDZVD_ROLE_STOPPED;
}

const char *rdzvd_replica_leader(struct rdzvd_replica *r)
{
    (void)r;
    return NULL;
}

unsigned rdzvd_replica_id(const struct rdzvd_replica *r)
{
    (void)r;
    return 0;
}

unsigned rdzvd_replica_count(const struct rdzvd_replica *r)
{
    (void)r;
    return 0;
}

unsigned rdzvd_replica_voters(struct rdzvd_replica *r, struct rdzvd_voter *out, unsigned max)
{
    (void)r, (void)out, (void)max;
    return 0;
}

int rdzvd_replica_change(struct rdzvd_replica *r, enum rdzvd_change_kind kind, unsigned id,
                         const char *raft, rdzvd_replica_change_cb cb, void *ud)
{
    (void)r, (void)kind, (void)id, (void)raft, (void)cb, (void)ud;
    return -ENOTSUP;
}

bool rdzvd_replica_responsive(struct rdzvd_replica *r, unsigned id)
{
    (void)r, (void)id;
    return true;
}

int rdzvd_replica_shutdown(struct rdzvd_replica *r)
{
    (void)r;
    return -ENOTSUP;
}

int rdzvd_replica_endpoint_of(const char *raft, char *out, size_t len)
{
    (void)raft, (void)out, (void)len;
    return -ENOTSUP;
}

void rdzvd_replica_bound(struct rdzvd_replica *r, struct rdzvd_disk *disk)
{
    (void)r, (void)disk;
}

bool rdzvd_replica_busy(const struct rdzvd_replica *r)
{
    (void)r;
    return false;
}

int rdzvd_replica_flush(struct rdzvd_replica *r)
{
    (void)r;
    return -ENOTSUP;
}

void rdzvd_replica_close(struct rdzvd_replica *r)
{
    (void)r;
}

void rdzvd_replica_free(struct rdzvd_replica *r)
{
    (void)r;
}
