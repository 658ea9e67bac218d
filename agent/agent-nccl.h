/* SPDX-License-Identifier: Apache-2.0 */
/* agent-nccl.h: make NCCL unique ids, loading libnccl at run time (no build-time dependency). */
#pragma once
#include <stddef.h>

#include "../proto/rdzv-msg.h"

/* Fill hex[0..n) with fresh ids from ncclGetUniqueId(). The calling process then hosts each id's
 * bootstrap root and must stay alive until every rank has joined. Returns 0, -ENOENT when
 * libnccl.so.2 cannot be loaded, or -EIO when NCCL fails; err says what happened. */
int agent_nccl_ids(unsigned n, char (*hex)[RDZV_NCCL_HEX_LEN + 1], char *err, size_t errlen);
