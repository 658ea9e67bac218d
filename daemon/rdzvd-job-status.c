/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-status.c: the status document (rdzvd_status_json in rdzvd-job.h): the daemon's
 * counters and, per job, its state, generation, restarts, nodes and recent events. Reads the
 * job state machine's structs; changes nothing. */
#include "rdzvd-job.h"

#include <jansson.h>

#include "../common/rdzv-util.h"
#include "rdzvd-job-impl.h"
#include "rdzvd-server.h"
#include "rdzvd-store.h"

static json_t *job_status(const struct rdzvd_job *j, uint64_t now)
{
    json_t *nodes = json_array(), *events = json_array(), *o;
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    unsigned first = j->nevents > JOB_EVENTS ? j->nevents - JOB_EVENTS : 0;

    for_each_member(j, m, pos, tmp)
    {
        json_array_append_new(
            nodes,
            json_pack("{s:s, s:s, s:I, s:I, s:f, s:f, s:I, s:b, s:b, s:s}", "host", m->join.host,
                      "node_id", m->join.node_id, "node_rank", (json_int_t)m->node_rank, "workers",
                      (json_int_t)m->join.nproc, "last_heartbeat_age_s",
                      (double)(now - m->last_seen_ms) / 1000, "age_s",
                      (double)(now - m->joined_ms) / 1000, "failures", (json_int_t)m->failures,
                      "spare", m->node_rank < 0 && m->ready, "connected", m->peer != NULL, "state",
                      m->node_rank >= 0 ? (m->ready ? "stopped" : "running")
                      : m->ready        ? "spare"
                                        : "stopping"));
    }
    for (unsigned i = first; i < j->nevents; i++)
        json_array_append_new(events,
                              json_pack("{s:f, s:s}", "time", j->events[i % JOB_EVENTS].time,
                                        "text", j->events[i % JOB_EVENTS].text));
    o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:i, s:o, s:o}", "run_id",
                  j->run_id, "state", job_state_names[j->state], "generation",
                  (json_int_t)j->generation, "restart_count", (json_int_t)j->restart_count,
                  "max_restarts", (json_int_t)j->max_restarts, "min_nodes", (json_int_t)j->min,
                  "max_nodes", (json_int_t)j->max, "nodes_in_generation", (json_int_t)j->nin_round,
                  "world_size", (json_int_t)j->round.world_size, "age_s",
                  (double)(now - j->created_ms) / 1000, "store_port",
                  j->store ? (int)j->store_port : 0, "nodes", nodes, "events", events);
    if (o && j->state == JOB_ENDED)
        json_object_set_new(o, "outcome",
                            json_pack("{s:s, s:I, s:s}", "type", j->outcome.type, "exit_code",
                                      (json_int_t)j->outcome.exit_code, "summary",
                                      j->outcome.summary));
    return o;
}

json_t *rdzvd_status_json(struct rdzvd_server *srv)
{
    uint64_t now = rdzv_now_ms();
    json_t *jobs = json_array();
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &srv->jobs) json_array_append_new(
        jobs, job_status(rdzv_container_of(pos, struct rdzvd_job, node), now));
    return json_pack("{s:s, s:s, s:I, s:f, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:o}", "daemon",
                     "rdzvd", "version", RDZV_VERSION, "port", (json_int_t)srv->bound_port,
                     "uptime_s", (double)(now - srv->start_ms) / 1000, "stats", "connections",
                     (json_int_t)srv->nconns, "accepted", (json_int_t)srv->stats.accepted,
                     "rejected", (json_int_t)srv->stats.rejected, "protocol_errors",
                     (json_int_t)srv->stats.closed_proto, "requests",
                     (json_int_t)srv->stats.requests, "main_store_keys",
                     (json_int_t)rdzvd_store_num_keys(srv->main.store), "jobs", jobs);
}
