/* SPDX-License-Identifier: Apache-2.0 */
/* agent-health.h: the node's health checks (rdzv-agent --health-*): before the agent joins,
 * before it rejoins after one of its own workers failed, and every --health-interval while the
 * job runs. A node that fails one is put aside by its job (UNHEALTHY, proto/RENDEZVOUS.md).
 *
 * The checks, in order (the first that fails gives the reason):
 *   - paths (--log-dir, --health-path): each a directory where a file can be written, with at
 *     least AGENT_HEALTH_MIN_FREE bytes free;
 *   - RDMA ports (sysfs: $RDZV_SYSFS_ROOT, default "/sys", class/infiniband/DEV/ports/N/state):
 *     the ports --health-nic names (DEV or DEV:PORT, comma-separated), else every port present,
 *     must be ACTIVE; a node with none passes;
 *   - GPUs through NVML, loaded at run time (dlopen "libnvidia-ml.so.1", or $RDZV_NVML_LIB): at
 *     least the GPUs the node should have, none with uncorrectable ECC errors or retired pages
 *     pending, and no critical XID event (79 "fallen off the bus", 48, 63, 64, 74, 92, 94, 95,
 *     119, 120) since the last check. Skipped when the node should have none;
 *   - the site's own check (--health-check CMD, run by /bin/sh -c with --health-timeout): a
 *     non-zero exit, or running past the timeout (then SIGKILLed), is unhealthy, its first line
 *     of output the reason.
 * A check that cannot run at all (NVML missing, the command not found: exit 126 or 127) says so
 * once in the log and passes: a node is not called broken for what it lacks.
 *
 * Ownership: agent_health_new copies cfg's numbers and borrows its strings (they must outlive
 * the checker). One thread: the loop's. Errors: negative errnos. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define AGENT_HEALTH_MIN_FREE (64ull << 20) /* bytes a checked path must have free */
#define AGENT_HEALTH_REASON_MAX 255
#define AGENT_HEALTH_PATHS_MAX 4

struct agent_health_cfg {
    uv_loop_t *loop;
    const char *cmd;                         /* --health-check, or NULL */
    double timeout_s;                        /* --health-timeout: > 0 */
    const char *paths[AGENT_HEALTH_PATHS_MAX]; /* NULL-terminated when fewer */
    const char *nics;                        /* --health-nic, or NULL: every port present */
    int64_t gpus;                            /* GPUs the node should have; 0: no GPU check */
};

struct agent_health;

/* The verdict of one run: healthy, or reason (one line) says why not. */
typedef void (*agent_health_cb)(void *ud, bool healthy, const char *reason);

/* A checker (nothing runs yet). 0 or -ENOMEM. */
int agent_health_new(const struct agent_health_cfg *cfg, struct agent_health **ret);

/* Run every check; cb(ud, ...) is called once, from the loop (never from inside this call).
 * 0, -EBUSY while a run is in progress (its cb still comes), or a negative errno (nothing runs,
 * no cb). */
int agent_health_run(struct agent_health *h, agent_health_cb cb, void *ud);

/* Kill a check that runs (its cb never comes) and free h once its handles are closed. NULL is
 * fine. */
void agent_health_free(struct agent_health *h);
