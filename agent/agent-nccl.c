/* SPDX-License-Identifier: Apache-2.0 */
/* agent-nccl.c: ncclGetUniqueId through dlopen, so agents of non-NCCL jobs run without NCCL. */
#include "agent-nccl.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>

#include "../common/rdzv-util.h"

typedef struct {
    char internal[RDZV_NCCL_ID_BYTES];
} nccl_unique_id;
typedef int (*nccl_get_unique_id_fn)(nccl_unique_id *id);
typedef const char *(*nccl_error_string_fn)(int result);

int agent_nccl_ids(unsigned n, char (*hex)[RDZV_NCCL_HEX_LEN + 1], char *err, size_t errlen)
{
    static void *lib; /* kept loaded: the bootstrap root threads live in it */
    nccl_get_unique_id_fn get_id;
    nccl_error_string_fn errstr;

    if (!lib)
        lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(err, errlen, "cannot load libnccl.so.2 (%s); install NCCL or add its directory "
                              "to LD_LIBRARY_PATH",
                 dlerror());
        return -ENOENT;
    }
    get_id = (nccl_get_unique_id_fn)dlsym(lib, "ncclGetUniqueId");
    errstr = (nccl_error_string_fn)dlsym(lib, "ncclGetErrorString");
    if (!get_id) {
        snprintf(err, errlen, "libnccl.so.2 has no ncclGetUniqueId");
        return -ENOENT;
    }
    for (unsigned i = 0; i < n; i++) {
        nccl_unique_id id;
        int r = get_id(&id);

        if (r != 0) {
            snprintf(err, errlen, "ncclGetUniqueId failed: %s (NCCL error %d)",
                     errstr ? errstr(r) : "?", r);
            return -EIO;
        }
        rdzv_hex((const uint8_t *)id.internal, sizeof(id.internal), hex[i]);
    }
    return 0;
}
