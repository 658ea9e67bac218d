/* SPDX-License-Identifier: Apache-2.0 */
/* agent-gpu.c: the GPUs visible to this node's workers (agent-gpu.h). */
#include "agent-gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

int agent_gpu_list(const char *cvd, const char *driver_dir, char ***ret)
{
    char **list = NULL;
    int n = 0;

    if (cvd) {
        char *copy = strdup(cvd), *save = NULL, *tok;

        for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (!*tok)
                continue;
            list = realloc(list, sizeof(*list) * (size_t)(n + 1));
            list[n++] = strdup(tok);
        }
        free(copy);
    } else {
        uv_dirent_t ent;
        uv_fs_t req;

        if (uv_fs_scandir(NULL, &req, driver_dir, 0, NULL) > 0) {
            while (uv_fs_scandir_next(&req, &ent) != UV_EOF) {
                char idx[16];

                snprintf(idx, sizeof(idx), "%d", n);
                list = realloc(list, sizeof(*list) * (size_t)(n + 1));
                list[n++] = strdup(idx);
            }
        }
        uv_fs_req_cleanup(&req);
    }
    *ret = list;
    return n;
}

void agent_gpu_list_free(char **list, int n)
{
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
}
