/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-status.h: the daemon's status (struct rdzv_status, proto/rdzv-status.h) made from the
 * server's counters and the job state machine's jobs: what rdzvctl status, the STATUS reply,
 * /status.json, the status page and /metrics show (through rdzvd_jobs_status(), rdzvd-job.h).
 * Reads the job state machine's structs; changes nothing but the ended jobs it keeps. Reads no
 * clock: the time is its caller's (struct rdzvd_job_now), or the step's that adds a job.
 *
 * Ownership: the caller owns what it gets (rdzv_status_free). Threads: the loop thread (a
 * connection's read callback, an HTTP request). Errors: -ENOMEM. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-list.h"
#include "proto/rdzv-msg.h"
#include "daemon/job/rdzvd-job-world.h"

struct rdzvd_server_info;
struct rdzvd_job;
struct rdzvd_job_counts;
struct rdzv_status;

/* Jobs that ended: each one's status as it was when its last member left (outcome, exit code, root
 * cause in its events, generation, restarts, how long it ran), kept for keep_ms (--keep-ended) and
 * at most max of them (--keep-ended-max), the oldest dropped first. Expired ones are left out of
 * the status, and freed when the next one is added: no timer. Embedded by its owner (struct
 * rdzvd_jobs). */
struct rdzvd_ended_jobs {
    struct rdzv_list list; /* oldest first */
    uint64_t n, max;       /* max 0: none kept */
    uint64_t keep_ms;
    uint64_t n_ended; /* jobs that ended here since the start, kept or not */
    /* Jobs whose last member left before they ended, and the records a restarted rdzvd or a
     * new leader found and did not rebuild: their record stays (a job's record lives until the
     * job ends), and status lists them as waiting for their nodes since then, until the job is in
     * memory again (rdzvd_waiting_jobs_take) or ends as abandoned abandon_after_ms later
     * (--abandon-after; 0: never). Oldest first, one entry a job: at most --max-jobs of them,
     * since a job is made only below it (rdzvd_jobs_held). */
    struct rdzv_list waiting;
    uint64_t n_waiting;
    uint64_t abandon_after_ms;
    /* Records still to be rebuilt after a start or an election (a batch a loop turn): held
     * too. */
    uint64_t n_pending;
};

void rdzvd_ended_jobs_init(struct rdzvd_ended_jobs *e, uint64_t keep_ms, uint64_t max);
void rdzvd_ended_jobs_free(struct rdzvd_ended_jobs *e);
/* j ended, and its last member is gone: keep its status (its nodes left out). Out of memory:
 * logged, not kept. */
void rdzvd_ended_jobs_add(struct rdzvd_ended_jobs *e, const struct rdzvd_job *j);
struct rdzvd_job_end;
/* A job's end as its job table kept it (rdzvd-job-ends.h), read by a restarted rdzvd or a new
 * leader at now: kept as rdzvd_ended_jobs_add keeps an ended job (its outcome, generation and
 * restarts; no events, no timeline), unless it expired, or e holds it already. */
void rdzvd_ended_jobs_add_recorded(struct rdzvd_ended_jobs *e, const struct rdzvd_job_end *end,
                                   struct rdzvd_job_now now);
/* A new agent's JOIN to run_id, whose job has ended: when the newest job of run_id kept in e (not
 * expired) failed or succeeded (cancelled and abandoned are not: a scheduler requeues a job under
 * the same id, a new job), err gets the one line its agent is refused with (rdzvd_job_ended_line)
 * and -EBUSY is returned; else 0. age_ms > 0: the agent started that long ago (its JOIN's
 * age_ms, by its own clock, against how long ago the job ended by rdzvd's: no two clocks are
 * compared), and one that started after the job ended is a new run of the same line (0, and err
 * says which job it follows); one that started before (a late node of that
 * run) is refused; 0: not said (an agent before 1.12: refused). resume: the agent's workers ran
 * a job of run_id; one that ended before the agent started was an earlier run, the same as for a
 * JOIN; else it is refused whatever its outcome, cancelled and abandoned too. A scan of the kept
 * jobs: a new job's first JOIN only, at now (its step's). */
int rdzvd_ended_jobs_refuse(const struct rdzvd_ended_jobs *e, const char *run_id, int64_t age_ms,
                            bool resume, struct rdzvd_job_now now, char *err, size_t errlen,
                            struct rdzv_event *told);
/* The line for a JOIN to job run_id that ended as type (exit code, at ended_s unix seconds, root
 * cause summary): its outcome, when, and what to do (a new --rdzv-id), into err. told (NULL:
 * none): the EVENT its agent is told, of the job's outcome (type and exit code), the line its
 * summary. */
void rdzvd_job_ended_line(char *err, size_t errlen, const char *run_id, const char *type,
                          int64_t exit_code, double ended_s, const char *summary,
                          struct rdzv_event *told);
/* The line for a resume of generation gen of job run_id (0: a plain JOIN of an agent whose
 * workers ran one), which this very rdzvd (the agent names its incarnation) holds neither in
 * memory nor in a record: the job ended here and its outcome is no longer kept. Into err;
 * returns -ESTALE. */
int rdzvd_job_gone_line(char *err, size_t errlen, const char *run_id, uint64_t gen);
/* Job run_id left memory before it ended, its record kept: note that it waits for its nodes
 * since since_ms (rdzv_now_ms's clock), replacing what run_id had; port: its running
 * generation's store port, which its workers reconnect to (0: none), kept from other jobs'
 * stores (rdzvd_waiting_jobs_port). Out of memory: logged, not noted (its record lists as
 * waiting since rdzvd started, and is not abandoned). */
void rdzvd_waiting_jobs_add(struct rdzvd_ended_jobs *e, const char *run_id, uint64_t since_ms,
                            uint16_t port);
/* Whether a job waiting in its record has its workers' store on port (a linear scan). */
bool rdzvd_waiting_jobs_port(const struct rdzvd_ended_jobs *e, uint16_t port);
/* Job run_id is in memory again: its note goes. Returns its since_ms, 0 when it had none. */
uint64_t rdzvd_waiting_jobs_take(struct rdzvd_ended_jobs *e, const char *run_id);
/* run_id's note, read only: its since_ms, 0 when it has none (what a JOIN's or REBUILD's input
 * carries into the machine's step). */
uint64_t rdzvd_waiting_jobs_peek(const struct rdzvd_ended_jobs *e, const char *run_id);
/* The job that has waited longest: its run id into run_id and its since into *since_ms; false
 * when none waits. */
bool rdzvd_waiting_jobs_first(const struct rdzvd_ended_jobs *e, char run_id[RDZV_ID_MAX + 1],
                              uint64_t *since_ms);
/* Forget every note (a deposed leader: the next one abandons). */
void rdzvd_waiting_jobs_clear(struct rdzvd_ended_jobs *e);

struct rdzvd_store;
/* The jobs recorded in the job table t that are not in memory (no member connected since an
 * rdzvd restart or a leader change, or all of them gone), appended to st as state "waiting",
 * with their record's generation and restarts and one event: "waiting for its nodes since ...".
 * start_ms: rdzvd's start (the since of a record this rdzvd never held in memory); now: the
 * time to show them at. 0 or -ENOMEM (st unchanged). */
int rdzvd_status_add_waiting(struct rdzv_status *st, struct rdzvd_store *t,
                             const struct rdzv_list *jobs, const struct rdzvd_ended_jobs *e,
                             uint64_t start_ms, struct rdzvd_job_now now);
/* The run ids of the job table t's records whose job is not in jobs: *ids (free it; NULL when
 * none) and *n. 0 or -ENOMEM. */
int rdzvd_job_records_unloaded(struct rdzvd_store *t, const struct rdzv_list *jobs,
                               char (**ids)[RDZV_ID_MAX + 1], size_t *n);

/* What one reader is shown (the status page, a job's page): NULL is every job in full. */
struct rdzvd_status_sel {
    const char *run_id; /* non-NULL: only the jobs of this run id */
    size_t max_live;    /* live jobs listed, in order (the first ones) */
    size_t full;        /* of those, the first ones with their nodes, ranks and timeline */
    size_t max_ended;   /* jobs that ended listed, the newest first (brief unless run_id) */
    size_t n_live, n_ended; /* out: how many there are in all (of run_id) */
};

/* The server's counters (info), the machine's (counts: nodes put aside, recoveries; NULL:
 * none), and per job of jobs (struct rdzvd_job nodes) its state,
 * generation, restarts, nodes (host, node rank, heartbeat age, workers, failures) and recent
 * events, then the ended jobs of ended (NULL: none) not expired yet; only those sel selects (its
 * counts set) when sel is not NULL; ages and rates as of now. On success *ret owns its arrays
 * (rdzv_status_free); -ENOMEM leaves it untouched. */
int rdzvd_status_fill(const struct rdzvd_server_info *info, const struct rdzv_list *jobs,
                      const struct rdzvd_job_counts *counts,
                      const struct rdzvd_ended_jobs *ended, struct rdzvd_status_sel *sel,
                      struct rdzvd_job_now now, struct rdzv_status *ret);
