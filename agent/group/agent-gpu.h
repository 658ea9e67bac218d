/* SPDX-License-Identifier: Apache-2.0 */
/* agent-gpu.h: GPU discovery for --nproc gpu|auto and --isolate-gpus: which devices this node's
 * workers may use, without CUDA (the agent never loads a GPU library).
 *
 * Ownership: the list returned is the caller's, freed with agent_gpu_list_free(). Errors:
 * negative errno. Threads: any; reads the file system synchronously, so the agent calls it once,
 * in main() before its loop runs. */
#pragma once

#define AGENT_GPU_DRIVER_DIR "/proc/driver/nvidia/gpus" /* one entry per GPU the driver sees */

/* The visible GPUs: the non-empty comma-separated entries of cvd (CUDA_VISIBLE_DEVICES, as given:
 * indexes or UUIDs) when cvd is not NULL, else "0", "1", ... for each entry of driver_dir (none if
 * it cannot be read). Returns their number and the list in *ret (NULL when there are none), or
 * -ENOMEM (then *ret is untouched and nothing is left allocated). */
int agent_gpu_list(const char *cvd, const char *driver_dir, char ***ret);

/* Free a list of n entries from agent_gpu_list(); NULL is fine. */
void agent_gpu_list_free(char **list, int n);
