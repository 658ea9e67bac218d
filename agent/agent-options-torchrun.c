/* SPDX-License-Identifier: Apache-2.0 */
/* agent-options-torchrun.c: torchrun's reading of rdzv-agent's options once the table is parsed
 * (the backend, the command, the hosting role, torchrun's defaults), and the names the agent's
 * messages give the endpoint and the run id (agent-options.h). */
#include "agent/agent-options.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-util.h"
#include "agent/session/agent-sched.h"

/* What names the endpoint and the run id in the agent's messages, as the user named them:
 * "--endpoint", "--rdzv_endpoint", "--master_addr/--master_port" (the pair in the spelling of
 * the one typed), an environment variable; rdzv's names for what was not given. */
void agent_opts_name_flags(struct agent_opts *o)
{
    const char *ma = o->typed[AGENT_TYPED_MASTER_ADDR], *mp = o->deferred_typed[D_MASTER_PORT],
               *be = o->deferred_typed[D_BACKEND];
    bool under = strchr(ma, '_') || strchr(mp, '_');

    if (o->endpoint && o->endpoint == o->rdzv_endpoint && o->typed[AGENT_TYPED_RDZV_ENDPOINT][0])
        snprintf(o->endpoint_flag, sizeof(o->endpoint_flag), "%s",
                 o->typed[AGENT_TYPED_RDZV_ENDPOINT]);
    else if (o->endpoint == o->endpoint_buf) /* static: each as named, the other in its style */
        snprintf(o->endpoint_flag, sizeof(o->endpoint_flag), "%s/%s",
                 ma[0] ? ma : under ? "--master_addr" : "--master-addr",
                 mp[0] ? mp : under ? "--master_port" : "--master-port");
    else if (o->typed[AGENT_TYPED_ENDPOINT][0])
        snprintf(o->endpoint_flag, sizeof(o->endpoint_flag), "%s", o->typed[AGENT_TYPED_ENDPOINT]);
    else if (o->backend_given) /* torchrun's c10d default: its flag, in the user's style */
        snprintf(o->endpoint_flag, sizeof(o->endpoint_flag), "%s",
                 strchr(be, '_') ? "--rdzv_endpoint" : "--rdzv-endpoint");
    else
        snprintf(o->endpoint_flag, sizeof(o->endpoint_flag), "--endpoint");
    o->run_id_flag = o->deferred_typed[D_RUN_ID][0] ? o->deferred_typed[D_RUN_ID] : "--rdzv-id";
}

/* HOST:PORT or [V6]:PORT, as torchrun's parse_rendezvous_endpoint splits it. */
static bool endpoint_has_port(const char *ep)
{
    const char *rb = ep[0] == '[' ? strchr(ep, ']') : NULL;

    if (ep[0] == '[')
        return rb && rb[1] == ':';
    return strchr(ep, ':') != NULL;
}

/* Is ep one HOST:0 (not a list of replicas)? */
bool agent_opts_port_is_zero(const char *ep)
{
    char host[256];
    uint16_t port = 1;

    return ep && !strchr(ep, ',') && endpoint_has_port(ep) &&
           rdzv_parse_hostport(ep, host, sizeof(host), &port) == 0 && port == 0;
}

/* torchrun's reading of what was given: the backend, the command, the hosting role. */
int agent_opts_torchrun(struct agent_opts *o, int argc, char **argv, int first_arg)
{
    /* rdzv's "-- COMMAND" runs COMMAND as given; where that collides with a line torchrun
     * accepts (`torchrun -- train.py`), torchrun's meaning wins: for a Python script (a name
     * ending in .py, or any name with -m or --run-path) and with --no-python. */
    if (first_arg < argc && first_arg > 1 && strcmp(argv[first_arg - 1], "--") == 0) {
        size_t n = strlen(argv[first_arg]);

        o->raw_cmd = !o->module && !o->run_path && !o->no_python &&
                     !(n >= 3 && strcmp(argv[first_arg] + n - 3, ".py") == 0);
    }
    o->python_exec = getenv("PYTHON_EXEC");
    if (o->python_exec && !*o->python_exec)
        o->python_exec = NULL;
    if (o->use_env)
        o->pass_local_rank = AGENT_LOCAL_RANK_NONE;
    if (o->module && o->no_python && !o->run_path) {
        fprintf(stderr, "rdzv-agent: -m/--module and --no-python cannot be used together\n");
        return -EINVAL;
    }
    if (o->logs_specs || o->numa_binding || o->virtual_local_rank)
        fprintf(stderr, "rdzv-agent: warning: %s is not supported here and is ignored\n",
                o->logs_specs ? "--logs-specs" : o->numa_binding ? "--numa-binding"
                                                                 : "--virtual-local-rank");
    if (o->local_addr && !o->host)
        o->host = o->local_addr;
    if (o->rdzv_endpoint && !*o->rdzv_endpoint)
        o->rdzv_endpoint = NULL; /* torchrun: "" is no endpoint */
    if (o->standalone) {
        o->backend = AGENT_BACKEND_STANDALONE;
        o->node_rank = -1; /* torchrun's --standalone is c10d: it ignores --node-rank */
        return 0;
    }
    /* torchrun's default backend is static, with --rdzv-endpoint too; rdzv's own --endpoint
     * (rdzvd started by hand), its "-- COMMAND" form and no command at all (the built-in
     * trainer) mean c10d, and ask for --endpoint. */
    if (!o->backend_given)
        o->backend = !o->endpoint && (o->rdzv_endpoint || o->master_addr ||
                                      o->master_port >= 0 || (o->argv && !o->raw_cmd))
                         ? AGENT_BACKEND_STATIC
                         : AGENT_BACKEND_C10D;
    if (!o->endpoint)
        o->endpoint = o->rdzv_endpoint;
    /* torchrun's default run id, unless rdzvd was started by hand (--endpoint): one daemon
     * serves many jobs there, and the scheduler's job id (or --rdzv-id) tells them apart */
    if (!o->run_id && !agent_sched_job_id() && o->endpoint != NULL &&
        o->endpoint == o->rdzv_endpoint)
        o->run_id = "none";
    if (!o->run_id && !o->endpoint && !agent_sched_job_id())
        o->run_id = "none";
    if (o->backend == AGENT_BACKEND_STATIC) {
        if (!o->endpoint && o->master_port > 65535) {
            fprintf(stderr, "rdzv-agent: invalid %s '%" PRId64 "': expected a whole "
                            "number from 0 to 65535 (see rdzv-agent --help)\n",
                    o->deferred_typed[D_MASTER_PORT], o->master_port);
            return -EINVAL;
        }
        if (!o->endpoint) {
            snprintf(o->endpoint_buf, sizeof(o->endpoint_buf), "%s:%" PRId64,
                     o->master_addr ? o->master_addr : "127.0.0.1",
                     o->master_port >= 0 ? o->master_port : 29500);
            o->endpoint = o->endpoint_buf;
        } else if (!endpoint_has_port(o->endpoint)) {
            fprintf(stderr, "rdzv-agent: static rendezvous at '%s' needs a port (as in torchrun): "
                            "HOST:PORT, or --master-addr/--master-port\n",
                    o->endpoint);
            return -EINVAL;
        }
        if (o->node_rank < 0 && !getenv("SLURM_NODEID") && !getenv("OMPI_COMM_WORLD_RANK") &&
            !(agent_sge_job() && getenv("PE_HOSTFILE")))
            o->node_rank = 0; /* torchrun's default */
        o->may_host = o->is_host != 0;
        return 0;
    }
    if (!o->endpoint && o->backend_given)
        o->endpoint = "localhost:29400"; /* torchrun's c10d: parse_rendezvous_endpoint("") */
    o->may_host = o->backend_given && o->is_host != 0;
    o->must_host = o->is_host == 1;
    return 0;
}
