#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A real three-node Slurm on this machine, for tests.
#   local-slurm.sh start DIR   install if needed, write DIR/slurm.conf, start munged, slurmctld and
#                              three slurmd (n1..n3), wait until every node is idle
#   local-slurm.sh stop DIR    stop the daemons started by 'start DIR'
# Clients need SLURM_CONF=DIR/slurm.conf.
set -eu
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: local-slurm.sh start|stop DIR" >&2; exit 2; }

stop() {
  for f in "$dir"/slurmd.n1.pid "$dir"/slurmd.n2.pid "$dir"/slurmd.n3.pid "$dir"/slurmctld.pid; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    alive=0
    for f in "$dir"/slurmd.n1.pid "$dir"/slurmd.n2.pid "$dir"/slurmd.n3.pid "$dir"/slurmctld.pid; do
      [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1
    done
    [ $alive = 0 ] && break
    sleep 0.1
  done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: local-slurm.sh start|stop DIR" >&2; exit 2; }

need=()
for p in slurmctld slurmd slurm-client munge; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "local-slurm.sh: needs root to install ${need[*]}" >&2; exit 1; }
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" \
    >/dev/null
fi

mkdir -p "$dir/state" "$dir/spool"
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge
  chown munge:munge /run/munge 2>/dev/null || true
  [ -f /etc/munge/munge.key ] || /usr/sbin/mungekey --create 2>/dev/null || true
  munged --force 2>/dev/null || /usr/sbin/munged --force
fi
export SLURM_CONF="$dir/slurm.conf"
host=$(hostname -s)

# Four free ports (slurmctld, then three consecutive ones for the slurmd), below the kernel's
# ephemeral range (where its own choices, bind to port 0 and every outgoing connection, come
# from: a port found free there may be some connection's before the daemon binds it) and the
# tests' fixed ports (29400, 29500, ...), at random.
ports() {
  /usr/bin/python3 - <<'PY'
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    top = min(lo, 29000) - 3  # 29400, 29500...: the tests' fixed ports
    ctl, n1 = random.randrange(10000, top), random.randrange(10000, top)
    if abs(ctl - n1) > 2 and all(free(p) for p in (ctl, n1, n1 + 1, n1 + 2)):
        print(ctl, n1); break
PY
}

# Up to three tries: a daemon that cannot bind its port (another took it meanwhile) exits.
for try in 1 2 3; do
  read -r ctl n1 < <(ports)
  ports="[$n1-$((n1 + 2))]"
  cat > "$dir/slurm.conf" <<CONF
ClusterName=rdzvtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
ReturnToService=2
MpiDefault=none
KillWait=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
NodeName=n[1-3] NodeHostname=localhost NodeAddr=127.0.0.1 Port=$ports CPUs=$(nproc) RealMemory=4000
PartitionName=debug Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
  [ "$try" = 1 ] || stop
  rm -f "$dir"/*.pid "$dir"/*.log
  slurmctld -f "$SLURM_CONF" -c -i || true
  for n in n1 n2 n3; do slurmd -f "$SLURM_CONF" -N "$n" || true; done
  for _ in $(seq 150); do
    if [ "$(sinfo -h -N -o '%t' 2>/dev/null | grep -c -E '^idle')" = 3 ]; then exit 0; fi
    # a daemon whose port was taken meanwhile is not waited for: the next try
    if grep -q "Address already in use" "$dir"/*.log 2>/dev/null; then
      echo "local-slurm.sh: a port was taken (try $try): $(grep -h "already in use" \
        "$dir"/*.log | head -1)" >&2
      continue 2
    fi
    sleep 0.2
  done
  break
done
echo "local-slurm.sh: nodes did not become idle:" >&2
sinfo -N >&2 || true
tail -5 "$dir/slurmctld.log" >&2 || true
stop
exit 1
