#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A real Grid Engine (Debian's Son of Grid Engine 8.1.9) of three hosts on this machine, for tests.
#   local-sge.sh start DIR   install it if needed (debconf preseeded: no question asked), make the
#                            hosts ge1, ge2 and ge3 (a network namespace each, on a bridge of its
#                            own, 10.243.5.1-3, with its own host name and hosts file), start
#                            sge_qmaster on ge1 and an sge_execd on each, set up the queue all.q
#                            and the parallel environment rdzv (one slot a host, qrsh -inherit
#                            allowed), wait until every queue instance takes jobs
#   local-sge.sh stop DIR    stop the daemons, remove the hosts
# DIR/on HOST CMD...  runs CMD on a host (its namespaces, its name, SGE_ROOT and SGE_CELL set):
# the clients too (qsub, qstat, qmod, qdel), as the hosts' names resolve there only.
# Grid Engine is one cluster a machine (SGE_ROOT=/var/lib/gridengine): its test runs in one build
# only (tests/meson.build), and 'stop' ends any qmaster and execd here. Its settings here, for a
# test machine: root may run jobs (min_uid 0), the scheduler runs every second, the load (a busy
# 2-CPU machine) never closes a queue. Needs root and iproute2.
set -eu
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: local-sge.sh start|stop DIR" >&2; exit 2; }
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
NET=10.243.5.
hosts=(ge1 ge2 ge3)
sw=rdzv-ge-sw

on() { # on HOST CMD...: CMD in HOST's network namespace, under its name
  local h=$1
  shift
  ip netns exec "rdzv-$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

stop() {
  if command -v qconf >/dev/null && ip netns list 2>/dev/null | grep -q "^rdzv-ge1\b"; then
    on ge1 qdel -f -u '*' >/dev/null 2>&1 || true # an execd shut down leaves its jobs running
    for h in "${hosts[@]}"; do on ge1 qconf -ke "$h" >/dev/null 2>&1 || true; done
    on ge1 qconf -km >/dev/null 2>&1 || true
  fi
  for _ in $(seq 100); do
    if ! pgrep -x sge_qmaster >/dev/null && ! pgrep -x sge_execd >/dev/null; then break; fi
    sleep 0.1
  done
  pkill -9 -x sge_execd || true
  pkill -9 -x sge_qmaster || true
  for _ in $(seq 50); do
    if ! pgrep -x sge_qmaster >/dev/null && ! pgrep -x sge_execd >/dev/null; then break; fi
    sleep 0.1
  done
  for h in "${hosts[@]}"; do
    # whatever still runs on the host (a job whose execd was killed)
    pids=$(ip netns pids "rdzv-$h" 2>/dev/null || true)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    ip netns del "rdzv-$h" 2>/dev/null || true
    rm -rf "/etc/netns/rdzv-$h"
  done
  ip netns del "$sw" 2>/dev/null || true # the hosts' veth ends go with it
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: local-sge.sh start|stop DIR" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "local-sge.sh: needs root (network namespaces as hosts)" >&2; exit 1; }
command -v ip >/dev/null || { echo "local-sge.sh: needs iproute2 (ip netns)" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
chmod 755 "$dir" # the daemons make TMPDIRs in it as their admin user

need=()
for p in gridengine-master gridengine-exec gridengine-client; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  for p in gridengine-common gridengine-master gridengine-exec gridengine-client; do
    printf '%s shared/gridenginemaster string %s\n' "$p" "$(hostname)"
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
stop # what an earlier run left

# The hosts: a namespace each on a bridge in a namespace of its own (this one's network is not
# touched), named in every host's hosts file (ip netns exec mounts /etc/netns/NS/hosts there).
ip netns add "$sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
i=0
for h in "${hosts[@]}"; do
  i=$((i + 1))
  ip netns add "rdzv-$h"
  ip -n "rdzv-$h" link set lo up
  ip link add "eth-$h" netns "rdzv-$h" type veth peer name "p$i" netns "$sw"
  ip -n "rdzv-$h" addr add "$NET$i/24" dev "eth-$h"
  ip -n "rdzv-$h" link set "eth-$h" up
  ip -n "$sw" link set "p$i" master br0
  ip -n "$sw" link set "p$i" up
  mkdir -p "/etc/netns/rdzv-$h"
  { echo "127.0.0.1 localhost"; j=0; for g in "${hosts[@]}"; do j=$((j + 1)); echo "$NET$j $g"; done
  } >"/etc/netns/rdzv-$h/hosts"
done
cat >"$dir/on" <<ON
#!/bin/sh
# on HOST CMD...: CMD on the test Grid Engine's host HOST (local-sge.sh)
h=\$1
shift
export SGE_ROOT=$SGE_ROOT SGE_CELL=$SGE_CELL
exec ip netns exec "rdzv-\$h" unshare --uts sh -c 'hostname "\$0" && exec "\$@"' "\$h" "\$@"
ON
chmod 755 "$dir/on"

echo ge1 >"$common/act_qmaster"
rm -f "$common/host_aliases" # an older run's: each host has one name now
on ge1 /usr/sbin/sge_qmaster
for _ in $(seq 100); do on ge1 qconf -sh >/dev/null 2>&1 && break; sleep 0.1; done
on ge1 qconf -sh >/dev/null 2>&1 || { echo "local-sge.sh: sge_qmaster does not answer" >&2
  exit 1; }
on ge1 qdel -f -u '*' >/dev/null 2>&1 || true # an earlier run's jobs, kept in the spool

# The cluster's settings, each set whatever was there before.
on ge1 qconf -sconf global | tail -n +2 |
  sed -e 's/^min_uid .*/min_uid 0/' -e 's/^min_gid .*/min_gid 0/' >"$dir/global"
(cd "$dir" && on ge1 qconf -Mconf global >/dev/null 2>&1)
on ge1 qconf -ssconf | sed -e 's/^schedule_interval .*/schedule_interval 0:0:1/' \
  -e 's/^flush_submit_sec .*/flush_submit_sec 1/' -e 's/^flush_finish_sec .*/flush_finish_sec 1/' \
  >"$dir/sconf"
on ge1 qconf -Msconf "$dir/sconf" >/dev/null 2>&1
for h in "${hosts[@]}"; do
  on ge1 qconf -ah "$h" >/dev/null 2>&1 || true
  on ge1 qconf -as "$h" >/dev/null 2>&1 || true
  if ! on ge1 qconf -se "$h" >/dev/null 2>&1; then
    { printf 'hostname %s\nload_scaling NONE\ncomplex_values NONE\nuser_lists NONE\n' "$h"
      printf 'xuser_lists NONE\nprojects NONE\nxprojects NONE\nusage_scaling NONE\n'
      printf 'report_variables NONE\n'; } >"$dir/exechost"
    on ge1 qconf -Ae "$dir/exechost" >/dev/null
  fi
done
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
on ge1 qconf -sp rdzv >/dev/null 2>&1 && on ge1 qconf -Mp "$dir/pe" >/dev/null 2>&1 ||
  on ge1 qconf -Ap "$dir/pe" >/dev/null
# The hosts share this machine's /tmp, where each execd makes a job's TMPDIR and removes it when
# the job's task there ends (under the same name on every host): one a host.
tmpdirs=
for h in "${hosts[@]}"; do
  mkdir -p "$dir/tmp/$h"
  chmod 1777 "$dir/tmp/$h"
  tmpdirs+="${tmpdirs:+,}[$h=$dir/tmp/$h]"
done
on ge1 qconf -sq 2>/dev/null | sed -e 's/^qname .*/qname all.q/' \
  -e "s/^hostlist .*/hostlist ${hosts[*]}/" -e 's/^pe_list .*/pe_list rdzv/' \
  -e "s/^slots .*/slots $(nproc)/" -e 's/^load_thresholds .*/load_thresholds NONE/' \
  -e 's|^shell .*|shell /bin/bash|' -e "s|^tmpdir .*|tmpdir /tmp,$tmpdirs|" >"$dir/queue"
on ge1 qconf -sq all.q >/dev/null 2>&1 && on ge1 qconf -Mq "$dir/queue" >/dev/null 2>&1 ||
  on ge1 qconf -Aq "$dir/queue" >/dev/null
# An older run's single host (this machine's own name) is no exec host now.
for h in $(on ge1 qconf -sel 2>/dev/null); do
  case " ${hosts[*]} " in *" $h "*) ;; *) on ge1 qconf -de "$h" >/dev/null 2>&1 || true ;; esac
done

for h in "${hosts[@]}"; do on "$h" /usr/sbin/sge_execd; done
# Open for jobs: not unknown (u: no execd yet), disabled (d) or in error (E, from an old run).
for h in "${hosts[@]}"; do
  on ge1 qmod -e "all.q@$h" >/dev/null 2>&1 || true
  on ge1 qmod -c "all.q@$h" >/dev/null 2>&1 || true
done
for _ in $(seq 150); do
  # qstat -f: a queue instance's line has a sixth field when it has a state
  n=$(on ge1 qstat -f -q all.q 2>/dev/null | awk '/^all\.q@/ && NF == 5' | wc -l)
  if [ "$n" = ${#hosts[@]} ]; then
    exit 0
  fi
  sleep 0.2
done
echo "local-sge.sh: the queue instances do not all take jobs:" >&2
on ge1 qstat -f >&2 || true
stop
exit 1
