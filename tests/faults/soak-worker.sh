#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# soak-worker.sh: the worker of the fault soak (soak.py). It runs under rdzv-agent, records its
# start, checks its generation's store holds no other generation's keys, trains with rdzv-train
# (arguments: the trainer, then its options) and, once the trainer has reached its last step,
# stays until SOAK_DIR/release exists, so the soak's faults keep hitting a running job.
#
# SOAK_DIR/events gets one line (one O_APPEND write) per start and per end:
#   start <realtime us> gen=<G> restart=<C> rank=<R> world=<W> pid=<P> agent=<PPID> starts=<N>
#         foreign=<keys of another worker incarnation, comma-separated, or ->, or
#         starts=0 foreign=unreachable (in place: the generation's store was gone already)
#   end <realtime us> gen=<G> rank=<R> pid=<P> rc=<trainer exit code>
# starts: the value of an ADD of 1 to soak/starts in the generation's store (a fresh store
# counts 1..WORLD_SIZE). foreign: keys soak/key/<gen>/<rank>/<pid> that are not this worker's
# and belong to another generation or to another start of this rank (old keys replayed).
# SOAK_DIR/train.<G>.<R>: the trainer's pid. RDZVCTL: the rdzvctl binary.
# Exit: the trainer's code; 90 when the store could not be reached (not in place).
set -u
d=$SOAK_DIR
gen=$RDZV_GENERATION
rank=$RANK
me="soak/key/$gen/$rank/$$"
ctl() { "$RDZVCTL" -e "$MASTER_ADDR:$MASTER_PORT" -t 30 "$@"; }
now() { date +%s%6N; }

# In place (RDZV_CONTROL_FD), the job may move on before a replacement reaches its store (the
# generation's store closes): the trainer then learns the next generation on its control channel,
# and the start is recorded with starts=0 foreign=unreachable. Otherwise that is a failure (90).
foreign=
if n=$(ctl add soak/starts 1) && ctl set "$me" "$gen" && keys=$(ctl list); then
    foreign=$(printf '%s\n' "$keys" | sed -n 's|^/\{0,1\}\(soak/key/.*\)|\1|p' | while read -r k; do
        [ "$k" = "$me" ] && continue
        case "$k" in
        "soak/key/$gen/$rank/"*) echo "$k" ;;       # this rank again: an earlier start's key
        "soak/key/$gen/"*) ;;                       # another rank of this generation
        *) echo "$k" ;;                             # another generation
        esac
    done | paste -sd, -)
elif [ -n "${RDZV_CONTROL_FD:-}" ]; then
    n=0
    foreign=unreachable
else
    exit 90
fi
printf 'start %s gen=%s restart=%s rank=%s world=%s pid=%s agent=%s starts=%s foreign=%s\n' \
    "$(now)" "$gen" "$TORCHELASTIC_RESTART_COUNT" "$rank" "$WORLD_SIZE" "$$" "$PPID" "$n" \
    "${foreign:--}" >>"$d/events"

"$@" &
tp=$!
echo "$tp" >"$d/train.$gen.$rank.tmp" && mv "$d/train.$gen.$rank.tmp" "$d/train.$gen.$rank"
wait "$tp"
rc=$?
printf 'end %s gen=%s rank=%s pid=%s rc=%s\n' "$(now)" "$gen" "$rank" "$$" "$rc" >>"$d/events"
[ "$rc" = 0 ] || exit "$rc"
while [ ! -e "$d/release" ]; do
    sleep 0.1
done
exit 0
