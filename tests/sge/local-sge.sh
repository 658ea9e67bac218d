#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A real Grid Engine (Debian's Son of Grid Engine 8.1.9) on this machine, for tests.
#   local-sge.sh start DIR   install it if needed (debconf preseeded: no question asked), start
#                            sge_qmaster and one sge_execd (this host), set up the queue all.q
#                            and the parallel environment rdzv (one slot a host, qrsh -inherit
#                            allowed), wait until the queue takes jobs; DIR/env holds what the
#                            clients need (SGE_ROOT, SGE_CELL): source it
#   local-sge.sh stop DIR    stop the daemons started by 'start DIR'
# Grid Engine is one cluster a machine (SGE_ROOT=/var/lib/gridengine): its test runs in one build
# only (tests/meson.build), and 'stop' ends any qmaster and execd here. Its settings here, for a
# test machine: root may run jobs (min_uid 0), the scheduler runs every second, the load (a busy
# 2-CPU machine) never closes the queue, and the host's names (vm, localhost: 127.0.0.1 has both)
# are one host (host_aliases; else qmaster refuses its own host's clients as "localhost").
set -eu
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: local-sge.sh start|stop DIR" >&2; exit 2; }
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
host=$(hostname)

stop() {
  command -v qconf >/dev/null || return 0
  qconf -ke "$host" >/dev/null 2>&1 || true
  qconf -km >/dev/null 2>&1 || true
  for _ in $(seq 100); do
    if ! pgrep -x sge_qmaster >/dev/null && ! pgrep -x sge_execd >/dev/null; then return 0; fi
    sleep 0.1
  done
  pkill -9 -x sge_execd || true
  pkill -9 -x sge_qmaster || true
  for _ in $(seq 50); do
    if ! pgrep -x sge_qmaster >/dev/null && ! pgrep -x sge_execd >/dev/null; then return 0; fi
    sleep 0.1
  done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: local-sge.sh start|stop DIR" >&2; exit 2; }
mkdir -p "$dir"

need=()
for p in gridengine-master gridengine-exec gridengine-client; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "local-sge.sh: needs root to install ${need[*]}" >&2; exit 1; }
  for p in gridengine-common gridengine-master gridengine-exec gridengine-client; do
    printf '%s shared/gridenginemaster string %s\n' "$p" "$host"
    printf '%s shared/gridenginecell string default\n' "$p"
    printf '%s shared/gridengineconfig boolean true\n' "$p"
  done | debconf-set-selections
  apt-get update -qq >/dev/null
  # Not as services (a machine with systemd would start them at every boot): this script
  # starts and stops them.
  policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    trap 'rm -f "$policy"' EXIT
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
  fi
  status=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" \
    >"$dir/install.log" 2>&1 || status=$?
  [ -n "$policy" ] && rm -f "$policy"
  trap - EXIT
  [ $status = 0 ] || { cat "$dir/install.log" >&2; exit 1; }
  # Nor at the next boot, where systemd runs.
  if [ -d /run/systemd/system ]; then
    systemctl disable --now gridengine-master gridengine-exec >/dev/null 2>&1 || true
  fi
fi
common=$SGE_ROOT/$SGE_CELL/common
[ -s "$common/act_qmaster" ] || { echo "local-sge.sh: $common/act_qmaster missing: the package" \
  "did not make the cell (debconf shared/gridengineconfig)" >&2; exit 1; }
echo "$host" >"$common/act_qmaster"
# Every name this host has (getent hosts 127.0.0.1 may answer localhost first).
echo "$host localhost $(awk '$1 == "127.0.0.1" { for (i = 2; i <= NF; i++) print $i }' \
  /etc/hosts | grep -v -x -e "$host" -e localhost | sort -u | tr '\n' ' ')" >"$common/host_aliases"
printf 'export SGE_ROOT=%s SGE_CELL=%s\n' "$SGE_ROOT" "$SGE_CELL" >"$dir/env"

pgrep -x sge_qmaster >/dev/null || /usr/sbin/sge_qmaster
for _ in $(seq 100); do qconf -sh >/dev/null 2>&1 && break; sleep 0.1; done
qconf -sh >/dev/null 2>&1 || { echo "local-sge.sh: sge_qmaster does not answer" >&2; exit 1; }

# The cluster's settings, each set whatever was there before.
qconf -sconf global | tail -n +2 | sed -e 's/^min_uid .*/min_uid 0/' -e 's/^min_gid .*/min_gid 0/' \
  >"$dir/global"
(cd "$dir" && qconf -Mconf global >/dev/null 2>&1)
qconf -ssconf | sed -e 's/^schedule_interval .*/schedule_interval 0:0:1/' \
  -e 's/^flush_submit_sec .*/flush_submit_sec 1/' -e 's/^flush_finish_sec .*/flush_finish_sec 1/' \
  >"$dir/sconf"
qconf -Msconf "$dir/sconf" >/dev/null 2>&1
qconf -as "$host" >/dev/null 2>&1 || true
qconf -ah "$host" >/dev/null 2>&1 || true
if ! qconf -se "$host" >/dev/null 2>&1; then
  printf 'hostname %s\nload_scaling NONE\ncomplex_values NONE\nuser_lists NONE\n' "$host" \
    >"$dir/exechost"
  printf 'xuser_lists NONE\nprojects NONE\nxprojects NONE\nusage_scaling NONE\n' >>"$dir/exechost"
  printf 'report_variables NONE\n' >>"$dir/exechost"
  qconf -Ae "$dir/exechost" >/dev/null
fi
cat >"$dir/pe" <<PE
pe_name            rdzv
slots              999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    1
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
PE
qconf -sp rdzv >/dev/null 2>&1 && qconf -Mp "$dir/pe" >/dev/null 2>&1 ||
  qconf -Ap "$dir/pe" >/dev/null
qconf -sq 2>/dev/null | sed -e 's/^qname .*/qname all.q/' -e "s/^hostlist .*/hostlist $host/" \
  -e 's/^pe_list .*/pe_list rdzv/' -e "s/^slots .*/slots $(nproc)/" \
  -e 's/^load_thresholds .*/load_thresholds NONE/' -e 's|^shell .*|shell /bin/bash|' >"$dir/queue"
qconf -sq all.q >/dev/null 2>&1 && qconf -Mq "$dir/queue" >/dev/null 2>&1 ||
  qconf -Aq "$dir/queue" >/dev/null

pgrep -x sge_execd >/dev/null || /usr/sbin/sge_execd
# Open for jobs: not unknown (u: no execd yet), disabled (d) or in error (E, from an old run).
qmod -e "all.q@$host" >/dev/null 2>&1 || true
qmod -c "all.q@$host" >/dev/null 2>&1 || true
for _ in $(seq 150); do
  state=$(qstat -f -q "all.q@$host" 2>/dev/null | awk -v q="all.q@$host" '$1 == q { print $6 }')
  if qstat -f -q "all.q@$host" 2>/dev/null | grep -q "^all.q@$host" && [ -z "$state" ]; then
    exit 0
  fi
  sleep 0.2
done
echo "local-sge.sh: queue all.q@$host does not take jobs:" >&2
qstat -f >&2 || true
stop
exit 1
