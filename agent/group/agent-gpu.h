/* SPDX-License-Identifier: Apache-2.0 */
/* agent-gpu.h: GPU discovery for --nproc gpu|auto and --isolate-gpus: which devices this node's
 * workers may use, without CUDA (the agent never loads a GPU library); and their UUIDs, which
 * the agent reports at JOIN (a job refuses a node sharing a GPU with a node it put aside).
 *
 * Ownership: the list returned is the caller's, freed with agent_gpu_list_free(). Errors:
 * negative errno. Threads: any; reads the file system synchronously, so the agent calls it once,
 * in main() before its loop runs. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-gpu.h"

#define AGENT_GPU_DRIVER_DIR "/proc/driver/nvidia/gpus" /* one entry per GPU the driver sees */

/* The visible GPUs: the non-empty comma-separated entries of cvd (CUDA_VISIBLE_DEVICES, as given:
 * indexes or UUIDs) when cvd is not NULL, else "0", "1", ... for each entry of driver_dir (none if
 * it cannot be read). Returns their number and the list in *ret (NULL when there are none), or
 * -ENOMEM (then *ret is untouched and nothing is left allocated). */
int agent_gpu_list(const char *cvd, const char *driver_dir, char ***ret);

/* Free a list of n entries from agent_gpu_list(); NULL is fine. */
void agent_gpu_list_free(char **list, int n);

/* nvidia-smi, when it is asked (below): at most this long, and this much output. */
#define AGENT_GPU_SMI_TIMEOUT_MS 5000
#define AGENT_GPU_SMI_OUT_MAX (16u << 10)

struct agent_gpu_uuids_cfg {
    const char *override;          /* RDZV_GPU_UUIDS, or NULL */
    const char *cvd;               /* CUDA_VISIBLE_DEVICES, or NULL */
    const char *const *visible;    /* agent_gpu_list's, nvisible of them */
    int nvisible;
    int64_t nproc;                 /* the workers: local ranks 0..nproc-1 use the first GPUs */
    const char *driver_dir;        /* AGENT_GPU_DRIVER_DIR */
    const char *smi;               /* "nvidia-smi" (found in PATH), or NULL: never run */
};

/* The UUIDs of the GPUs this node's workers use, into *ret:
 *   - override set: exactly those (comma-separated; "" reports none), for tests and for sites
 *     that know better; a malformed one is -EINVAL with err saying which (nothing reported);
 *   - else the first nproc visible GPUs (local rank i uses visible GPU i, as --isolate-gpus
 *     gives it and cuda:LOCAL_RANK picks it): an entry of cvd that is a GPU UUID is itself; an
 *     index (or a UUID prefix) is looked up in the driver's list, in PCI order as nvidia-smi
 *     numbers GPUs: each driver_dir entry's "information" file, its "GPU UUID:" line; when
 *     driver_dir cannot be read, "smi --query-gpu=uuid --format=csv,noheader" (given up, with
 *     none, past AGENT_GPU_SMI_TIMEOUT_MS or AGENT_GPU_SMI_OUT_MAX bytes, or on a non-zero
 *     exit). A GPU it cannot name (a MIG device, an index past the list, a malformed line) is
 *     logged and left out.
 * 0 or -EINVAL. Synchronous (nvidia-smi runs on a loop of its own): call it before the loop. */
int agent_gpu_uuids(const struct agent_gpu_uuids_cfg *cfg, struct rdzv_gpu_set *ret, char *err,
                    size_t errlen);
