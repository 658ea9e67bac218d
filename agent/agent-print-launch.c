/* SPDX-License-Identifier: Apache-2.0 */
/* agent-print-launch.c: --print-launch, the resolved launch as one JSON line
 * (agent_opts_print_launch in agent-options.h), which tests/rendezvous/torchrun_diff.py compares
 * with torchrun's. */
#include "agent/agent-options.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>

#include "common/rdzv-util.h"

int agent_opts_print_launch(const struct agent_opts *o, const char *endpoint, char *const *argv,
                            FILE *f)
{
    json_t *j, *av = json_array();
    const char *ep = o->standalone ? "127.0.0.1:0" : endpoint;
    int r = -EIO;

    for (size_t i = 0; av && argv && argv[i]; i++)
        json_array_append_new(av, json_string(argv[i]));
    j = json_pack("{sI sI sI ss sb ss ss so sb sI sb so}", "nnodes_min", (json_int_t)o->min_nodes,
                  "nnodes_max", (json_int_t)o->max_nodes, "nproc", (json_int_t)o->nproc,
                  "backend", o->backend == AGENT_BACKEND_STATIC ? "static" : "c10d",
                  "standalone", o->standalone, "endpoint", ep, "run_id", o->run_id,
                  "node_rank",
                  o->node_rank >= 0 ? json_integer(o->node_rank) : json_null(),
                  "node_rank_hint", o->rank_hint, "max_restarts", (json_int_t)o->max_restarts,
                  "raw_cmd", o->raw_cmd, "argv", av);
    if (j && json_dumpf(j, f, JSON_COMPACT | JSON_ENSURE_ASCII) == 0 && fputc('\n', f) != EOF &&
        fflush(f) == 0)
        r = 0;
    json_decref(j);
    return r;
}
