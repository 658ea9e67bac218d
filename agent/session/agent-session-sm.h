/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-sm.h: the agent's session as a step machine (docs/design/agent-policy.md). The
 * adapter (agent-session.c and its files) turns what happens into inputs: rdzvd's ROUND and
 * EVENT, a worker's exit, all of them gone, a health check's verdict, a timer due. Each step
 * decides, then hands back a Ready: what to do, in order (messages to rdzvd, workers to start
 * or stop, timers to arm as due times, the session to end with its exit code). The adapter
 * carries it out (agent_session_apply); the machine itself has no libuv, no system call and no
 * clock: its time is the step's argument, and what it must know of the workers (how many run,
 * which follow the control channel) comes with the input. A simulator drives it the same way.
 *
 * Threads: the caller's; a machine is never shared. Ownership: failed[] and late[] are the
 * caller's arrays of nproc entries. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "proto/rdzv-msg.h"

/* JOINING: waiting for a ROUND (no workers; with --recovery inplace, maybe survivors of the last
 * generation, which the ROUND re-forms). RUNNING: this generation's workers run. LEFT: they
 * all exited 0, LEAVE sent, waiting for the job's outcome. RESTARTING: stopping them for a new
 * generation (after EVENT restart, or after one failed here). STOPPING: stopping them for good. */
enum agent_state {
    AG_JOINING,
    AG_RUNNING,
    AG_LEFT,
    AG_RESTARTING,
    AG_STOPPING,
    AG_DONE,
    _AG_STATE_MAX,
};

/* A worker killed by a signal that a scheduler or a terminal sends to a whole job step (SIGTERM,
 * SIGINT, SIGHUP, SIGQUIT: scancel, a time limit, a Ctrl-C), not sent by the agent: its report
 * waits this long for the agent's own copy, which comes in either order. When that comes, the
 * agent's signal is what happened: SIGTERM and SIGINT make the node leave (CANCEL: no restart
 * begins, none is charged), SIGHUP and SIGQUIT end the agent as before. Otherwise the worker's
 * failure is reported, this much later (SIGKILL, the OOM killer's, is not held). */
#define AGENT_SIGNAL_HOLD_MS 500

/* The machine's timers: each is one due time, armed or cancelled through the Ready. */
enum agent_timer {
    AGENT_TIMER_HOLD,  /* AGENT_SIGNAL_HOLD_MS after a worker's death by a step-wide signal */
    AGENT_TIMER_GRACE, /* an EVENT restart's startup_grace_ms */
    AGENT_TIMERS,
};

enum agent_input_kind {
    AGENT_IN_ROUND,        /* rdzvd's ROUND: round */
    AGENT_IN_START_FAILED, /* the ROUND's workers could not be started: err */
    AGENT_IN_EVENT,        /* rdzvd's EVENT: event (restart, or the job's outcome) */
    AGENT_IN_WORKER_EXIT,  /* a worker exited: local_rank, status, sig (replace_failed) */
    AGENT_IN_FAIL_LOCAL,   /* a worker failed here and rdzvd was told (a hang): local_rank */
    AGENT_IN_ALL_EXITED,   /* every worker of the group is gone */
    AGENT_IN_HEALTH_OK,    /* a health check passed, or could not run (unchecked) */
    AGENT_IN_TIMER,        /* a timer of the machine is due: timer */
};

/* What the machine must know of the workers at each step (the adapter's group, a simulator's). */
struct agent_facts {
    unsigned running;           /* workers running */
    unsigned following;         /* of them, those that said they follow the control channel */
    bool stepped;               /* one of them reported a step (past its start) */
    const bool *rank_running;   /* [nproc]: whether each local rank runs; NULL: none does */
};

struct agent_input {
    enum agent_input_kind kind;
    struct agent_facts facts;
    const struct rdzv_round *round;
    const struct rdzv_event *event;
    unsigned local_rank;
    int64_t status;
    int sig;
    int err;
    bool replace_failed; /* WORKER_EXIT: its replacement in the generation could not start */
    bool unchecked;      /* HEALTH_OK: the check could not run */
    enum agent_timer timer;
};

enum agent_effect_kind {
    AGENT_DO_HEARTBEAT,   /* a HEARTBEAT with the workers' progress, now */
    AGENT_DO_BARE_BEAT,   /* a HEARTBEAT of gen alone (the ROUND's start is over) */
    AGENT_DO_WORKER_EXIT, /* WORKER_EXIT of local_rank: code, sig */
    AGENT_DO_READY,       /* READY for gen */
    AGENT_DO_LEAVE,       /* LEAVE of gen, succeeded */
    AGENT_DO_ROUND_BEGIN, /* the ROUND is taken: its log context, front, store (adapter's) */
    AGENT_DO_ROUND_ACK,   /* ROUND_ACK of gen */
    AGENT_DO_START,       /* start the ROUND's workers: mode */
    AGENT_DO_REPLACE,     /* start local_rank again in the generation (it could not be told);
                           * its exit's code and sig, to step again if that fails */
    AGENT_DO_STOP,        /* stop every worker with sig (TERM, then KILL after the grace) */
    AGENT_DO_HEALTH,      /* run a health check before the READY of gen */
    AGENT_DO_TIMER,       /* arm timer at due_ms (or cancel it: due_ms < 0) */
    AGENT_DO_CANCEL_VERDICT, /* the job's word came: the verdict's wait is over */
    AGENT_DO_FINISH,      /* the session is over (the adapter says why and ends it) */
};

enum agent_start_mode {
    AGENT_START_ALL,      /* a fresh group */
    AGENT_START_RANKS,    /* --recovery inplace: every rank, each once its old handles closed */
    AGENT_START_IN_PLACE, /* the survivors told the generation, the missing ranks started */
};

struct agent_effect {
    enum agent_effect_kind kind;
    uint64_t gen;
    unsigned local_rank;
    int64_t code;
    int sig;
    enum agent_start_mode mode;
    enum agent_timer timer;
    int64_t due_ms;
};

#define AGENT_READY_MAX 16
struct agent_ready {
    struct agent_effect fx[AGENT_READY_MAX];
    unsigned n;
};

/* The session's decisions' state. The adapter reads it (and, for the paths it still decides
 * itself, writes it: agent-session.c). */
struct agent_sm {
    /* Set once by the caller. */
    const char *run_id; /* for logs (borrowed) */
    int64_t nproc;
    bool inplace;
    bool has_health;
    bool *failed; /* [nproc]: failed here this generation (a hung one until reaped) */
    bool *late;   /* [nproc]: could not be told this generation: replaced when its exit comes */

    enum agent_state state;
    struct rdzv_round round; /* the current (or last) generation's assignment */
    int exit_code;
    bool local_failure; /* one of our workers failed */
    bool have_outcome;
    bool put_aside; /* the outcome is EVENT put_aside: this node takes no further part */
    bool workers_gone;
    bool awaiting_verdict; /* CANCEL went out: rdzvd's word on it is awaited */
    struct rdzv_event outcome;
    uint64_t stopping_gen; /* RESTARTING: the generation being stopped */
    bool restart_pending;  /* EVENT restart for stopping_gen received: READY once stopped */
    uint64_t health_ready_gen; /* the READY after our own failure, checked first: for it */
    uint64_t ready_waiting;    /* that READY's generation while its check runs, 0: none */
    /* AGENT_SIGNAL_HOLD_MS: a worker's death by a step-wide signal, not reported yet (the
     * other workers' deaths meanwhile are of the same signal: not reported either). */
    struct {
        bool on;
        unsigned local_rank;
        int64_t status;
        int sig;
    } held;
    /* The job went on without this node (JOINED as a spare after a resume of a generation that
     * is over): its workers are stopped even in place; cleared by the next ROUND. */
    bool dropped;
    /* follows: a worker of this agent said "control". plain: a failure came before any did:
     * this generation's workers here all restart, as without in place; cleared by the next
     * ROUND. plain_said: that was said (once an agent's life). */
    bool follows, plain, plain_said;
    bool grace_on; /* an EVENT restart's start-up grace holds the stop (AGENT_TIMER_GRACE) */
};

/* Take one input at now_ms (any monotonic clock of the caller's). ready is emptied first, then
 * filled with what to do, in order. Returns 0, or -EINVAL for an input it does not know. */
int agent_session_step(struct agent_sm *sm, const struct agent_input *in, int64_t now_ms,
                       struct agent_ready *ready);
/* The one place the state changes (the adapter's own paths call it too): leaving RUNNING drops a
 * held report and a start-up grace, whose timers ready then cancels. */
void agent_sm_set_state(struct agent_sm *sm, enum agent_state st, struct agent_ready *ready);
/* --recovery inplace, and this generation's workers here stay to re-form in place. */
bool agent_sm_in_place(const struct agent_sm *sm);
/* JOINING with workers of the last generation still running (--recovery inplace). */
bool agent_sm_has_survivors(const struct agent_sm *sm, unsigned running);
/* Whether the start-up grace was on; it is over now (its timer cancelled in ready). */
bool agent_sm_grace_end(struct agent_sm *sm, struct agent_ready *ready);
const char *agent_sm_state_name(enum agent_state st);
