/* SPDX-License-Identifier: Apache-2.0 */
/* agent-gpu.c: the GPUs visible to this node's workers (agent-gpu.h). */
#include "agent/group/agent-gpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* Append a copy of s to *list (*n entries). Returns 0 or -ENOMEM (then *list is unchanged). */
static int list_add(char ***list, int *n, const char *s)
{
    char **v = realloc(*list, sizeof(*v) * (size_t)(*n + 1));

    if (!v)
        return -ENOMEM;
    *list = v;
    v[*n] = strdup(s);
    if (!v[*n])
        return -ENOMEM;
    (*n)++;
    return 0;
}

int agent_gpu_list(const char *cvd, const char *driver_dir, char ***ret)
{
    char **list = NULL;
    int n = 0, r = 0;

    if (cvd) {
        char *copy = strdup(cvd), *save = NULL, *tok;

        if (!copy)
            return -ENOMEM;
        for (tok = strtok_r(copy, ",", &save); tok && r == 0; tok = strtok_r(NULL, ",", &save))
            if (*tok)
                r = list_add(&list, &n, tok);
        free(copy);
    } else {
        uv_dirent_t ent;
        uv_fs_t req;

        if (uv_fs_scandir(NULL, &req, driver_dir, 0, NULL) > 0) {
            while (r == 0 && uv_fs_scandir_next(&req, &ent) != UV_EOF) {
                char idx[16];

                snprintf(idx, sizeof(idx), "%d", n);
                r = list_add(&list, &n, idx);
            }
        }
        uv_fs_req_cleanup(&req);
    }
    if (r < 0) {
        agent_gpu_list_free(list, n);
        return r;
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
