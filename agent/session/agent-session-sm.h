/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-sm.h: the agent's session as a step machine (docs/design/agent-policy.md). The
 * adapter (agent-session.c and its files) turns what happens into inputs: rdzvd's ROUND and
 * EVENT, a worker's exit and the end of its stderr, all of them gone, a health check's verdict,
 * a timer due. Each step decides, then hands back a Ready: what to do, in order (messages to
 * rdzvd, workers to start or stop, timers to arm as due times, the session to end with its exit
 * code), and the lines to log. The adapter carries it out (agent_session_apply); the machine
 * itself has no libuv, no system call, no clock and no log: its time is the step's argument,
 * and what it must know of the workers (how many run, which follow the control channel) comes
 * with the input. A simulator drives it the same way.
 *
 * Threads: the caller's; a machine is never shared. Ownership: failed[], late[] and done[] are
 * the caller's arrays of nproc entries. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "common/rdzv-log.h"
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
/* Any other failure of a worker whose stderr is still open at its exit waits for the end of its
 * stderr (AGENT_IN_OUTPUT_CLOSED), this long at most, so that its report has its last line. */
#define AGENT_EXIT_HOLD_MS 200
/* Signalled from outside with rdzvd connected: CANCEL went out, and the agent waits up to this
 * long for rdzvd's word (EVENT left: this node left and the job goes on; or cancelled: the job
 * ends) before it ends, so that its last line says which. */
#define AGENT_VERDICT_MS 2000

/* The machine's timers: each is one due time, armed or cancelled through the Ready. */
enum agent_timer {
    AGENT_TIMER_HOLD,  /* a failed worker's report held: AGENT_SIGNAL_HOLD_MS, _EXIT_HOLD_MS */
    AGENT_TIMER_GRACE, /* an EVENT restart's startup_grace_ms */
    AGENT_TIMER_VERDICT, /* AGENT_VERDICT_MS for rdzvd's word on a CANCEL */
    /* With replicas: from a lost connection until the next JOINED, --heartbeat-timeout; when
     * it is due no leader could be reached, and the workers stop. */
    AGENT_TIMER_LEADERLESS,
    /* The job succeeded while this node's workers run (a newcomer beside in-place survivors
     * that are done, R17a): RDZV_NEWCOMER_WAIT_MS for them to end on their own (A19a). */
    AGENT_TIMER_OWN_END,
    AGENT_TIMERS,
};

enum agent_input_kind {
    AGENT_IN_ROUND,        /* rdzvd's ROUND: round */
    AGENT_IN_START_FAILED, /* the ROUND's workers could not be started: err */
    AGENT_IN_EVENT,        /* rdzvd's EVENT: event (restart, or the job's outcome) */
    AGENT_IN_WORKER_EXIT,  /* a worker exited: local_rank, status, sig, output_open
                            * (replace_failed) */
    AGENT_IN_HUNG,         /* a worker made no progress (--progress-timeout): local_rank, gen
                            * (AGENT_DO_STACKS's), text: where it was stuck */
    AGENT_IN_ALL_EXITED,   /* every worker of the group is gone */
    AGENT_IN_HEALTH_OK,    /* a health check passed, or could not run (unchecked) */
    AGENT_IN_TIMER,        /* a timer of the machine is due: timer */
    AGENT_IN_SIGNAL,       /* the agent received sig from outside */
    AGENT_IN_SCHEDULER,    /* AGENT_DO_ASK_SCHEDULER's answer: ended, the scheduler ends the
                            * whole job (text: how it knows) */
    AGENT_IN_CANCEL_SENT,  /* the CANCEL that AGENT_DO_CANCEL asked for went out (ok) or not */
    AGENT_IN_UNHEALTHY,    /* a health check failed while the node takes part: text */
    AGENT_IN_UNHEALTHY_UNSENT, /* the UNHEALTHY that AGENT_DO_UNHEALTHY asked for did not go out */
    AGENT_IN_ERROR,        /* fatal: rdzvd refused, or could not be reached in time: text;
                            * status: the exit code if none was set yet; renewable: a new
                            * node id may answer it (AGENT_DO_RENEW) */
    AGENT_IN_LOST,         /* the connection to rdzvd broke (the adapter closed it): text */
    AGENT_IN_JOINED,       /* JOINED: spare, resumed */
    AGENT_IN_START_CHECKED, /* the check before the first JOIN: ok, or failed with text */
    AGENT_IN_UNCONNECTED,  /* the first connection could not start */
    AGENT_IN_OUTPUT_CLOSED, /* the stderr of an exited worker was read to its end: local_rank,
                             * its exit's status and sig */
    AGENT_IN_HEALTH_DUE,   /* the periodic health check (--health-interval) is due */
    AGENT_IN_SILENT,       /* a worker made no progress for --progress-timeout: local_rank */
};

/* What the machine must know of the world at each step (the adapter's group and client, or a
 * simulator's). */
struct agent_facts {
    bool connected;             /* a connection to rdzvd is open (maybe not joined yet) */
    unsigned endpoints;         /* rdzvd's endpoints known (replicas: several) */
    bool pending_exit;          /* a WORKER_EXIT could not be sent (kept for the next one) */
    uint64_t exit_gen;          /* the generation of the last WORKER_EXIT made */
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
    bool output_open;    /* WORKER_EXIT: its stderr is still open (OUTPUT_CLOSED follows) */
    bool renewable;      /* ERROR: rdzvd refused a JOIN on its connection */
    uint64_t gen;        /* HUNG: the generation it hung in */
    bool unchecked;      /* HEALTH_OK: the check could not run */
    bool ok;             /* CANCEL_SENT */
    bool ended;          /* SCHEDULER */
    bool spare, resumed; /* JOINED */
    const char *text;    /* SCHEDULER, UNHEALTHY, ERROR, LOST, HUNG, START_CHECKED */
    enum agent_timer timer;
};

enum agent_effect_kind {
    AGENT_DO_HEARTBEAT,   /* a HEARTBEAT now; with gen, the workers' progress in gen (their
                           * last steps before a stop, whatever the state is by then) */
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
    AGENT_DO_FINISH,      /* the session is over (the adapter says why and ends it) */
    AGENT_DO_SIGNAL,      /* pass sig on to every worker (they keep running) */
    AGENT_DO_ASK_SCHEDULER, /* whether the scheduler ends the whole job (AGENT_IN_SCHEDULER) */
    AGENT_DO_CANCEL,      /* CANCEL of sig (AGENT_IN_CANCEL_SENT says whether it went out) */
    AGENT_DO_UNHEALTHY,   /* UNHEALTHY with text (AGENT_IN_UNHEALTHY_UNSENT if it did not go) */
    AGENT_DO_NEXT_ENDPOINT, /* the replica lost is the last to try again */
    AGENT_DO_JOIN,        /* connect to rdzvd the first time (AGENT_IN_UNCONNECTED if that
                           * cannot start) */
    AGENT_DO_CONNECT,     /* connect to rdzvd again (AGENT_IN_ERROR if that cannot start) */
    AGENT_DO_KILL,        /* SIGKILL local_rank's process group (a hung worker) */
    AGENT_DO_RESEND_EXIT, /* the last WORKER_EXIT again */
    AGENT_DO_REPLICA_JOINED, /* the replica hosted here hears that the agent joined */
    AGENT_DO_CHECK,       /* run the periodic health check (its verdict: AGENT_IN_HEALTH_OK or
                           * AGENT_IN_UNHEALTHY) */
    AGENT_DO_STACKS,      /* ask for local_rank's stacks, hung in gen (then AGENT_IN_HUNG) */
    AGENT_DO_RENEW,       /* join again as a new node id after rdzvd's refusal text (its JOINED
                           * was lost); if the identity cannot be renewed, AGENT_IN_ERROR again
                           * with the same text and status code, not renewable */
};

enum agent_start_mode {
    AGENT_START_ALL,      /* a fresh group */
    AGENT_START_RANKS,    /* --recovery inplace: every rank not done[], each once its old
                           * handles closed */
    AGENT_START_IN_PLACE, /* the survivors told the generation, the missing ranks not done[]
                           * started */
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
    const char *text; /* WORKER_EXIT's reason (NULL: the worker's own error), UNHEALTHY's */
};

#define AGENT_READY_MAX 16
#define AGENT_READY_LOGS 8   /* lines to log in one step; more are counted as lost */
#define AGENT_LOG_LINE 1024  /* a line to log, cut past this many bytes (its NUL included) */

/* A line the adapter writes to the agent's log (the machine writes none itself). */
struct agent_log {
    enum rdzv_log_level level;
    char text[AGENT_LOG_LINE];
};

/* The effects in order; the lines to log in order, which go before the effects. */
struct agent_ready {
    struct agent_effect fx[AGENT_READY_MAX];
    unsigned n;
    struct agent_log log[AGENT_READY_LOGS];
    unsigned nlog, lost;
};

/* The session's decisions' state: the step changes it; the adapter reads it, and sets the
 * first group of fields once. */
struct agent_sm {
    /* Set once by the caller. */
    const char *run_id; /* for logs (borrowed) */
    const char *host;   /* this node's, in its outcome's summary (borrowed) */
    double grace_s, connect_timeout_s, heartbeat_timeout_s; /* for logs and the leaderless timer */
    int64_t nproc;
    bool inplace;
    bool has_health;
    bool *failed; /* [nproc]: failed here this generation (a hung one until reaped) */
    bool *late;   /* [nproc]: could not be told this generation: replaced if it fails */
    /* [nproc]: in place, it exited 0 unasked (not stopped by the agent): its script is done,
     * and it is never started again in place (A3a); cleared when every rank starts again. */
    bool *done;

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
    /* A worker's failure, not reported yet (AGENT_TIMER_HOLD). for_signal: its death by a
     * step-wide signal, AGENT_SIGNAL_HOLD_MS (the other workers' deaths meanwhile are of the
     * same signal: not reported either); else its stderr still open, AGENT_EXIT_HOLD_MS. */
    struct {
        bool on, for_signal;
        unsigned local_rank;
        int64_t status;
        int sig;
    } held;
    /* The job went on without this node (JOINED as a spare after a resume of a generation that
     * is over): its workers are stopped even in place; cleared by the next ROUND. */
    bool dropped;
    /* A ROUND that came while this node's last workers stopped (RESTARTING): it is taken once
     * they are all gone, instead of a READY for the generation they stopped; dropped when the
     * connection is lost (rdzvd places the node again). */
    bool round_pending;
    struct rdzv_round next_round;
    /* follows: a worker of this agent said "control". plain: a failure came before any did:
     * this generation's workers here all restart, as without in place; cleared by the next
     * ROUND. plain_said: that was said (once an agent's life). */
    bool follows, plain, plain_said;
    bool grace_on; /* an EVENT restart's start-up grace holds the stop (AGENT_TIMER_GRACE) */
    bool stop_sent; /* AGENT_DO_STOP went out since the last ROUND: an exit 0 is its doing */
    bool unhealthy; /* a check failed: UNHEALTHY sent, waiting to be let go */
    int signal;     /* the last signal from outside (AGENT_IN_SCHEDULER, _CANCEL_SENT) */
    int64_t now_ms; /* the time of the step under way (its argument) */
    bool timer_on[AGENT_TIMERS]; /* armed (VERDICT, LEADERLESS, OWN_END: the others have
                                  * their flags) */
    char reason[RDZV_REASON_MAX + 1]; /* a WORKER_EXIT's reason or UNHEALTHY's, while it goes */
};

/* Take one input at now_ms (any monotonic clock of the caller's). ready is emptied first, then
 * filled with what to do, in order. Returns 0, or -EINVAL for an input it does not know. */
int agent_session_step(struct agent_sm *sm, const struct agent_input *in, int64_t now_ms,
                       struct agent_ready *ready);
/* The resume a JOIN carries (agent_connect, after a loss): the generation the workers run, as
 * its ROUND said, and incarnation, the rdzvd that JOINED the agent last; zeroed when none runs. */
void agent_sm_resume(const struct agent_sm *sm, uint64_t incarnation, struct rdzv_resume *rs);
/* JOINING with workers of the last generation still running (--recovery inplace). */
bool agent_sm_has_survivors(const struct agent_sm *sm, unsigned running);
